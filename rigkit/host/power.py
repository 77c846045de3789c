"""The power-limit healer (``rigkit-agent power``, timer ``rigkit-power.timer``): when the GPU's
enforced power limit differs from the declared one, re-apply the declared one with ``nvidia-smi
--id=N --power-limit=W`` and read it back. A driver reload, a GPU reset after an Xid or someone's
``nvidia-smi -pl`` leaves the card at another limit until the next boot (``gpu-power-limit.service``
sets it only then; DESIGN.md "Confirmed, or put back": the agent keeps the enforced limit at the
declared one).

One more actor on the host: it stands down while a window is open or the host lock is held (a
deploy's step, a rollback, an activation, a window, a sweep that sets the limit itself) and
re-applies under the host lock. The declared limit is the host config's ``power`` section (rendered
from ``gpu_power_limit_w``, so a rollback's held generation brings its own); each decision is printed
with its reason (the unit's journal) and recorded in ``paths.power_state``::

    {"declared_w": 420.0, "index": 0,
     "last_check": {"at": ISO time, "result": "as declared"|"re-applied"|"failed"|"stood down"|"unread",
                    "enforced_w": W|null, "message": str},
     "last_reapply": {"at", "from_w", "to_w", "enforced_w", "ok": bool, "message"} (absent until one),
     "reapplies": int}

``rigkit drift`` shows that record (its state's ``power_healer``) and ``rigkit report`` the last
re-application.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from rigkit.common import gpu, powerlimit
from rigkit.host import standdown
from rigkit.host.powerlimit import set_limit
from rigkit.host.config import HostConfig
from rigkit.common.jsonfile import iso_utc, read_object, write_atomic

JOB = "power"


def _w(value: float | None) -> str:
    return f"{value:g} W" if value is not None else "unknown"


def heal(cfg: HostConfig, query: Callable[[], dict[str, Any]] | None = None,
         apply: Callable[[int, float], tuple[bool, str]] | None = None,
         now: Callable[[], float] | None = None) -> int:
    """Keep GPU ``power.index``'s enforced limit at the host config's ``power.limit_w`` (W).

    + query: reads the GPUs (default :func:`rigkit.common.gpu.query`, ``nvidia-smi --query-gpu=...``)
    + apply: sets a limit (default :func:`rigkit.host.powerlimit.set_limit`)

    Nothing is done while both ``enforced.power.limit`` and ``power.limit`` are the declared limit
    (:func:`rigkit.common.powerlimit.limit_agrees`), while a window is open or the host lock is held
    (it says who holds it), or when nvidia-smi cannot be read (a driver/library mismatch until the reboot: drift reports
    it). Otherwise, under the host lock and after reading the GPU again (whoever held the lock may have
    set it meanwhile): set the declared limit and read back ``enforced.power.limit``.

    Returns 0 (as declared, re-applied, stood down, unread), 1 when the re-application failed or
    did not hold, or the declared limit lies outside the card's ``power.min_limit``..``power.max_limit``
    (the unit shows failed: a human should look). The record goes to ``paths.power_state``.
    """
    query = query or gpu.query
    apply = apply or set_limit
    now = now or time.time
    want = float(cfg.get("power", "limit_w"))
    index = int(cfg.get("power", "index"))
    state_path = cfg.path("power_state")

    def record(reapplied: bool = False, **fields: Any) -> None:
        """Merge ``fields`` into the record as it is now (another run may have written it since);
        ``reapplied`` counts one more re-application."""
        try:
            state = read_object(state_path) or {}
        except ValueError:
            state = {}
        if reapplied:
            try:
                fields["reapplies"] = int(state.get("reapplies") or 0) + 1
            except (ValueError, TypeError):
                fields["reapplies"] = 1
        state.update(declared_w=want, index=index, **fields)
        write_atomic(state_path, state)

    def done(result: str, message: str, enforced: float | None, rc: int, err: bool = False) -> int:
        print(message, file=sys.stderr if err else sys.stdout)
        record(last_check={"at": iso_utc(now()), "result": result, "enforced_w": enforced, "message": message})
        return rc

    why = standdown.reason(cfg, JOB)
    if why:
        return done("stood down", why, None, 0)
    card, why = gpu.card(query(), index)
    if card is None:
        return done("unread", f"{JOB}: {why}; cannot read GPU {index}'s limit (`rigkit drift` says why)", None, 0)
    enforced = card.get("power_enforced_w")
    if powerlimit.limit_agrees(enforced, want) and powerlimit.limit_agrees(card.get("power_limit_w"), want):
        return done("as declared", f"{JOB}: GPU {index} enforces {want:g} W as declared", enforced, 0)
    problem = gpu.power_limit_problem(want, card.get("power_min_w"), card.get("power_max_w"), f"GPU {index}")
    if problem:
        return done("failed", f"{JOB}: {problem}; not re-applying it (fix the spec and deploy)", enforced, 1, err=True)
    lock, why = standdown.take(cfg, JOB, f"re-applying {want:g} W to GPU {index} (enforced {_w(enforced)})")
    if lock is None:
        return done("stood down", why + f" (GPU {index} enforces {_w(enforced)}, declared {want:g} W)", enforced, 0)
    try:
        card, why = gpu.card(query(), index)  # again, under the lock
        if card is None:
            return done("unread", f"{JOB}: {why}; cannot read GPU {index}'s limit", None, 0)
        before = card.get("power_enforced_w")
        if powerlimit.limit_agrees(before, want) and powerlimit.limit_agrees(card.get("power_limit_w"), want):
            return done("as declared", f"{JOB}: GPU {index} enforces {want:g} W as declared (set meanwhile)", before, 0)
        t = now()
        ok, detail = apply(index, want)
        after = None
        if ok:
            card, why = gpu.card(query(), index)
            after = card.get("power_enforced_w") if card else None
            problem = powerlimit.read_back_problem(index, want, after, why)
            if problem:
                ok, detail = False, problem
        if ok:
            message = (f"{JOB}: GPU {index} enforced {_w(before)}, declared {want:g} W (a driver reload, an Xid "
                       f"reset or someone's nvidia-smi -pl); re-applied {want:g} W: enforced {_w(after)}")
        else:
            message = f"{JOB}: re-applying {want:g} W to GPU {index} (enforced {_w(before)}) failed: {detail}"
        record(reapplied=True, last_reapply={"at": iso_utc(t), "from_w": before, "to_w": want, "enforced_w": after,
                                                  "ok": ok, "message": message})  # still under the lock
    finally:
        lock.release()
    return done("re-applied" if ok else "failed", message, after if ok else before, 0 if ok else 1, err=not ok)


def main(cfg: HostConfig, argv: list[str]) -> int:
    """``rigkit-agent power`` (no options: the host config's ``power`` section says what to keep)."""
    if argv:
        print("usage: rigkit-agent power", file=sys.stderr)
        return 2
    return heal(cfg)
