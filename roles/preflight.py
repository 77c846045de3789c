"""Preflight: refuse before anything is touched (DESIGN.md "Disruption and reboots")."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import DeployError, deploy
from pyinfra.facts.files import File

from rigkit import paths
from rigkit.facts import JsonFile, NvidiaSmi
from rigkit.spec import RigSpec, unset_operator_values


def refusals(spec: RigSpec, window: dict, smi: dict, present_locks: list[str]) -> list[str]:
    """Why the deploy must not start, one line each (empty: go). Pure, for tests.

    + window: the ``JsonFile`` fact of ``/var/lib/rigkit/window.json``
    + smi: the ``NvidiaSmi`` fact (the power range is checked only when it is readable)
    + present_locks: declared lock files that exist on the host
    """
    out = [f"{key} is unset (operator-supplied); set it in group_data or host data"
           for key in unset_operator_values(spec)]
    data = window.get("data") or {}
    if window.get("exists") and data.get("state") not in (None, "closed", "restored"):
        out.append(f"a window is open ({paths.WINDOW_JOURNAL}: state {data.get('state')!r}); "
                   "the deploy waits until the window has restored steady state")
    for gpu in smi.get("gpus", []) if smi.get("state") == "ok" else []:
        lo, hi = gpu["power_min_w"], gpu["power_max_w"]
        if lo is not None and hi is not None and not lo <= spec.gpu_power_limit_w <= hi:
            out.append(f"gpu_power_limit_w {spec.gpu_power_limit_w} W is outside GPU {gpu['index']}'s limits "
                       f"{lo:g}–{hi:g} W (nvidia-smi power.min_limit/power.max_limit)")
    if present_locks and not spec.force:
        out.append(f"lock file(s) present: {', '.join(present_locks)} — a session holds the GPU; "
                   "run again when it is released, or pass force=true")
    return out


@deploy("Preflight")
def preflight(spec: RigSpec) -> None:
    """Raise ``DeployError`` with every refusal before any operation is added."""
    window = host.get_fact(JsonFile, path=paths.WINDOW_JOURNAL)
    smi = host.get_fact(NvidiaSmi)
    locks = [p for p in (spec.lock_files or []) if host.get_fact(File, path=p)]
    problems = refusals(spec, window, smi, locks)
    if problems:
        raise DeployError("refusing to deploy:\n  " + "\n  ".join(problems))
