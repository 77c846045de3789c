"""Legacy units: the units named in ``legacy_units`` (default ``strata.service``, whose
``Requires=`` tied the proxy to Strata) backed up, stopped and disabled before llama-swap."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.files import File
from pyinfra.operations import files, server, systemd

from rigkit import paths
from rigkit.spec import RigSpec

BACKUP_DIR = f"{paths.STATE_DIR}/legacy-units"


@deploy("Legacy units")
def legacy(spec: RigSpec):
    """Back up each legacy unit file once to /var/lib/rigkit/legacy-units/, stop and disable it."""
    for unit in spec.legacy_units:
        path = f"{paths.UNIT_DIR}/{unit}"
        if not host.get_fact(File, path=path):
            continue
        files.directory(name="Create the legacy-unit backup folder", path=BACKUP_DIR, mode="700")
        if not host.get_fact(File, path=f"{BACKUP_DIR}/{unit}"):
            server.shell(name=f"Back up {unit} to {BACKUP_DIR}", commands=[f"cp -a {path} {BACKUP_DIR}/{unit}"])
        systemd.service(name=f"Stop and disable legacy {unit}", service=unit, running=False, enabled=False)
