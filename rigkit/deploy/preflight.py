"""The deploy's preflight decisions, pure (the role ``roles/preflight.py`` reads the facts and raises):
which steps of this run would interrupt service (:func:`disruptive_steps`) and why the deploy must
not start (:func:`refusals`; DESIGN.md "Disruption and reboots")."""

from __future__ import annotations

from rigkit import paths
from rigkit.common import busy as rig_busy
from rigkit.common.lock import describe
from rigkit.common.gpu import power_limit_problem
from rigkit.common.journal import is_open
from rigkit.common.swapconfig import holds_text
from rigkit.spec.model import RigSpec, unset_operator_values


def refusals(spec: RigSpec, window: dict, smi: dict, disruptive: list[str] | None = None,
             busy: dict | None = None, rig_lock: dict | None = None, lease: str | None = None) -> list[str]:
    """Why the deploy must not start, one line each (empty: go). Pure, for tests.

    + window: the ``JsonFile`` fact of ``/var/lib/rigkit/window.json``
    + smi: the ``NvidiaSmi`` fact (the power range is checked only when it is readable)
    + disruptive: steps of this run that will interrupt service (restart llama-swap or docker)
    + busy: the ``RigBusy`` fact (:func:`rigkit.common.busy.facts`): declared lock files present and
      client connections to llama-swap right now (rigkit's own left out)
    + rig_lock: the ``RigLockState`` fact: a disruptive run is refused while someone holds the host
      lock (a window, an activation, a rollback, another deploy's step), naming the holder —
      unless it holds ``lease``, the lease of the ``rigkit rollback`` this run is part of

    Interrupting steps pass the same preflight as a window: refused under traffic or a declared
    lock unless ``force`` (DESIGN.md "Disruption and reboots").
    """
    out = [f"{key} is unset (operator-supplied); set it in group_data or host data"
           for key in unset_operator_values(spec)]
    data = window.get("data") or {}
    if window.get("exists") and is_open(data):
        out.append(f"a window is open ({paths.WINDOW_JOURNAL}: state {data.get('state')!r}); "
                   "the deploy waits until the window has restored steady state")
    for gpu in smi.get("gpus", []) if smi.get("state") == "ok" else []:
        problem = power_limit_problem(spec.gpu_power_limit_w, gpu["power_min_w"], gpu["power_max_w"],
                                      f"GPU {gpu['index']}")
        if problem:
            out.append(problem)
    holder = (rig_lock or {}).get("holder") or {}
    ours = bool(lease and holder.get("lease") == lease)  # rigkit rollback's own lock: this run is part of it
    if disruptive and (rig_lock or {}).get("held") and not ours:
        out.append(f"this run would interrupt service ({'; '.join(disruptive)}) but the rig is locked by "
                   f"{describe(rig_lock.get('holder'))} ({paths.RIG_LOCK}); run again when it is released")
    refused = rig_busy.refusal(busy or {}, f"this run would interrupt service ({'; '.join(disruptive or [])})")
    if disruptive and not spec.force and refused:
        out.append(refused)
    return out


def changed_models(host_lock: dict | None, lock: dict | None) -> list[str]:
    """The models whose entry in ``lock`` (the lock this run installs) differs from ``host_lock`` (the one
    the host holds, ``/var/lib/rigkit/models.lock.json``; None: none yet — nothing runs on it to restart),
    sorted: their files are fetched anew."""
    if not host_lock or not lock:
        return []
    old, new = host_lock.get("models") or {}, lock.get("models") or {}
    return sorted(m for m in new if m in old and old[m] != new[m])


def disruptive_steps(spec: RigSpec, rendered: dict, sha256: dict, daemon_json: dict, proxy_running: bool,
                     held: bool = False, binary_sha256: str | None = None,
                     sync_missing: list[str] | None = None, models_changed: list[str] | None = None) -> list[str]:
    """The steps of this run that will restart a running service, from facts read before it
    (pure, for tests): a changed live llama-swap config or unit while llama-swap runs (not the
    config while a hold keeps it back: the deploy will not activate it) or a new llama-swap binary
    (``binary_sha256``: the tarball sha256 the installed binary came from, its marker file) while
    llama-swap runs, new weights for ``models_changed`` (the models whose lock entries differ from the lock
    on the host, :func:`changed_models`: the llama-swap role restarts it once they are fetched), a
    daemon.json that the docker step will change (docker restarts), and a ``pacman -Syu`` to install
    ``sync_missing`` packages on a serving host (it may upgrade the kernel, docker and what runs)."""
    from rigkit.render.declared_state import DAEMON_JSON_KEYS
    from rigkit.operations.config import merge_json

    out = []
    if proxy_running:
        for path in (paths.LLAMA_SWAP_CONFIG, f"{paths.UNIT_DIR}/llama-swap.service"):
            if held and path == paths.LLAMA_SWAP_CONFIG:
                continue
            if not holds_text(sha256.get(path), rendered[path].text):
                out.append(f"{path} changes: llama-swap restarts")
        wanted = spec.llama_swap.release_sha256
        if wanted and (binary_sha256 or "").strip() != wanted:
            out.append(f"llama-swap's binary changes (release tarball {wanted[:12]}): llama-swap restarts")
    if models_changed and proxy_running:
        out.append(f"new weights for {', '.join(models_changed)} (the lock changes them): llama-swap restarts once "
                   "they are fetched")
    if sync_missing and proxy_running:
        out.append(f"pacman -Syu (to install {', '.join(sync_missing)}) upgrades the host: the kernel, docker "
                   "and what runs may be replaced")
    data = daemon_json.get("data") or {}
    if daemon_json.get("exists") and merge_json(data, DAEMON_JSON_KEYS) != data:
        out.append("daemon.json changes: docker restarts")
    return out
