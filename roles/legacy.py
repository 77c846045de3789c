"""Legacy and operator units: the units named in ``legacy_units`` (default ``strata.service``,
whose ``Requires=`` tied the proxy to Strata) backed up, stopped and disabled before llama-swap;
the operator's own units (``operator_units``, e.g. the agents' timers) installed, timers enabled."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.files import File
from pyinfra.operations import files, server, systemd

from pathlib import Path

from pyinfra.operations.util import any_changed

from rigkit import paths
from rigkit.operations.shell import argv
from rigkit.render.declared_state import LEGACY_BACKUP_DIR
from rigkit.render.files import RenderedFile
from rigkit.spec.model import RigSpec
from roles import put_rendered

BACKUP_DIR = LEGACY_BACKUP_DIR


@deploy("Legacy and operator units")
def legacy(spec: RigSpec, rendered: dict[str, RenderedFile]):
    """Back up each legacy unit file once to /var/lib/rigkit/legacy-units/, stop and disable it;
    install the operator's units and enable and start their timers."""
    for unit in spec.legacy_units:
        path = f"{paths.UNIT_DIR}/{unit}"
        if not host.get_fact(File, path=path):
            continue
        files.directory(name="Create the legacy-unit backup folder", path=BACKUP_DIR, mode="700")
        if not host.get_fact(File, path=f"{BACKUP_DIR}/{unit}"):
            server.shell(name=f"Back up {unit} to {BACKUP_DIR}", commands=[argv("cp", "-a", path, f"{BACKUP_DIR}/{unit}")])
        systemd.service(name=f"Stop and disable legacy {unit}", service=unit, running=False, enabled=False)
    installed = []
    for local in spec.operator_units:
        name = Path(local).name
        target = f"{paths.UNIT_DIR}/{name}"
        installed.append(put_rendered(rendered, target, name=f"Install the operator's {name}"))
    if installed:
        systemd.daemon_reload(name="Reload systemd for the operator's units", _if=any_changed(*installed))
    for local in spec.operator_units:
        if local.endswith(".timer"):
            name = Path(local).name
            systemd.service(name=f"Enable and start the operator's {name}", service=name, running=True, enabled=True)
