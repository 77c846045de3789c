"""Preflight: refuse before anything is touched (DESIGN.md "Disruption and reboots"). The role reads
the facts; the decisions are :mod:`rigkit.deploy.preflight`'s."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import DeployError, deploy
from pyinfra.facts.files import FileContents, Sha256File
from pyinfra.facts.systemd import SystemdStatus

from rigkit import agentcmd, paths
from rigkit.common import mkinitcpio
from rigkit.operations.facts.files import JsonFile
from rigkit.operations.facts.mkinitcpio import MkinitcpioHooks
from rigkit.operations.facts.nvidia import NvidiaSmi
from rigkit.operations.facts.pacman import PacmanIgnorePkg, PacmanVersions
from rigkit.operations.facts.rig import Holds, RigBusy, RigLockState
from rigkit.deploy.preflight import changed_models, disruptive_steps, refusals
from rigkit.common.holds import LLAMA_SWAP
from rigkit.operations.pacman import missing_packages
from rigkit.render.declared_state import REPO_PACKAGES, cgroup_driver_problem
from rigkit.render.files import own_units
from rigkit.spec.model import RigSpec


@deploy("Preflight")
def preflight(spec: RigSpec, rendered: dict, lock_text: str | None = None) -> None:
    """Raise ``DeployError`` with every refusal before any operation is added. ``lock_text``: the model lock
    this run installs (:attr:`rigkit.render.generations.Source.lock_text`; None: none, the models role refuses)."""
    window = host.get_fact(JsonFile, path=paths.WINDOW_JOURNAL)
    smi = host.get_fact(NvidiaSmi)
    sha256 = {p: host.get_fact(Sha256File, path=p) for p in (paths.LLAMA_SWAP_CONFIG, f"{paths.UNIT_DIR}/llama-swap.service")}
    running = bool(host.get_fact(SystemdStatus, services=["llama-swap.service"]).get("llama-swap.service"))
    holds = host.get_fact(Holds, path=paths.HOLDS_FILE)
    if holds["error"]:
        raise DeployError(f"refusing to deploy:\n  {holds['error']}")
    held = LLAMA_SWAP in holds["data"]
    marker = host.get_fact(FileContents, path=paths.LLAMA_SWAP_MARKER)
    disruptive = disruptive_steps(spec, rendered, sha256, host.get_fact(JsonFile, path=paths.DOCKER_DAEMON_JSON), running,
                                  held, "\n".join(marker) if marker else None,
                                  missing_packages(host.get_fact(PacmanVersions, packages=sorted(REPO_PACKAGES)),
                                                   list(REPO_PACKAGES)),
                                  changed_models(host.get_fact(JsonFile, path=paths.MODELS_LOCK).get("data"),
                                                 _parsed(lock_text)))
    busy = (host.get_fact(RigBusy, port=spec.llama_swap.port, own_units=own_units(rendered),
                          lock_files=spec.lock_files or []) if disruptive else None)
    rig_lock = host.get_fact(RigLockState, path=paths.RIG_LOCK)
    problems = refusals(spec, window, smi, disruptive, busy, rig_lock, agentcmd.lease())
    # pacman cannot read its configuration (an Include target missing): every pacman step would fail;
    # rigkit's own pins file missing is what the pins role puts back
    pacman_conf = host.get_fact(PacmanIgnorePkg)
    if pacman_conf["error"] and not any(p in pacman_conf["error"] for p in (paths.PINS_CONF, paths.LEGACY_PINS_CONF)):
        problems.append(f"pacman cannot read its configuration (pacman-conf IgnorePkg: {pacman_conf['error']}); "
                        "fix that file, then deploy again")
    # the boot role's drop-in could not take kms out (a preset naming its own config with kms): nothing touched yet
    kms = mkinitcpio.refusal(host.get_fact(MkinitcpioHooks))
    if kms:
        problems.append(kms)
    # an operator's other native.cgroupdriver: rigkit's mitigation would not take effect (dockerd reads a
    # repeated exec-opt by version); refused, never rewritten
    driver = cgroup_driver_problem(host.get_fact(JsonFile, path=paths.DOCKER_DAEMON_JSON).get("data"))
    if driver:
        problems.append(driver)
    if problems:
        raise DeployError("refusing to deploy:\n  " + "\n  ".join(problems))


def _parsed(lock_text: str | None) -> dict | None:
    """The lock's JSON, None when there is none or it is not JSON (the models role refuses that, naming the file)."""
    import json

    try:
        return json.loads(lock_text) if lock_text else None
    except ValueError:
        return None
