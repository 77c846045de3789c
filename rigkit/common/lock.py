"""The host lock's record (DESIGN.md "One host lock"), as both sides read it: the holder record
``{"what", "pid", "since" (UTC ISO 8601), "command", "boot_id"}`` that the lock file holds while the
lock is taken (:func:`parse_record`, :func:`parse_state`, worded by :func:`describe`), and the lease
variable (:data:`LEASE_ENV`) a command holding the lock hands to the commands it runs. The flock
itself is the host's: :mod:`rigkit.host.lock`.
"""

from __future__ import annotations

import json
from typing import Any


LEASE_ENV = "RIGKIT_LOCK_LEASE"

#: How long (s) a change's lock waits for an automatic job (the keeper, the watchdog, the power-limit
#: check) that holds it before it is refused: the keeper's one completion to the resident waits out its
#: cold boot. The host waits this long (:func:`rigkit.host.standdown.lock_for_change`), so the control
#: side waits longer for its answer (:data:`ANSWER_S`).
AUTOMATIC_YIELD_S = 180.0
#: How long (s) the control side waits for the agent's answer to a lock request (``held`` or its refusal):
#: past :data:`AUTOMATIC_YIELD_S`, so a wait the host is still in is never cut off and reported as silence.
ANSWER_S = AUTOMATIC_YIELD_S + 30.0


def describe(holder: dict[str, Any] | None) -> str:
    """``"window 2026…-ab12cd (pid 812, since 2026-12-01T10:00:00Z: rigkit-agent window run)"``."""
    if not holder:
        return "an unknown holder (no record)"
    cmd = holder.get("command")
    return (f"{holder.get('what', '?')} (pid {holder.get('pid', '?')}, since {holder.get('since', '?')}"
            + (f": {cmd}" if cmd else "") + ")")


def parse_record(text: str) -> dict[str, Any] | None:
    """The holder record in the lock file's text; None when empty or not a JSON object."""
    try:
        data = json.loads(text) if text.strip() else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def parse_state(held: bool, text: str) -> dict[str, Any]:
    """``{"held": bool, "holder": record|None, "stale": record|None}`` from whether the flock is
    taken and the file's text (a record in an unlocked file is ``stale``: its holder died)."""
    record = parse_record(text)
    return {"held": held, "holder": record if held else None, "stale": None if held else record}
