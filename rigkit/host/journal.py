"""The window's journalled steps (:class:`Journal`) and how a step ends (refused, failed,
interrupted); the journal's format as both sides read it is :mod:`rigkit.common.journal`."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from rigkit.common.jsonfile import write_atomic
from rigkit.common.journal import CLOSED_STATES



class Refused(Exception):
    """Preflight said no; nothing was touched. The message names every reason."""


class StepFailed(Exception):
    """A window step failed; the message says which and why. Restore follows."""


class Interrupted(BaseException):
    """SIGTERM/SIGINT/SIGHUP reached the window (``rigkit window --abort``, Ctrl-C on the
    control side, ``systemctl stop``). A BaseException so no ``except Exception`` swallows it."""



def now_iso() -> str:
    """UTC now, ISO 8601 with seconds (``2026-10-20T10:15:00+00:00``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Journal:
    """The journal file plus the in-memory dict; every change is saved atomically
    (temp file, fsync, rename)."""

    def __init__(self, data: dict, path: Path) -> None:
        self.data = data
        self.path = path

    def save(self) -> None:
        write_atomic(self.path, self.data, indent=1, sort_keys=False)
        if self.data.get("state") in CLOSED_STATES + ("restore-failed",) and self.data.get("results_dir"):
            write_atomic(Path(self.data["results_dir"]) / "journal.json", self.data, indent=1, sort_keys=False)

    def set(self, **kw: Any) -> None:
        self.data.update(kw)
        self.save()

    def note(self, text: str) -> None:
        self.data.setdefault("notes", []).append(f"{now_iso()} {text}")
        self.save()

    def step(self, name: str, fn: Callable[[], str | None], phase: str = "window",
             fatal: bool = True) -> str | None:
        """Run ``fn`` as step ``name``: journalled ``running`` first, then ``ok`` (``fn``'s
        return value is the detail) or ``failed`` with the error. Re-raises when ``fatal``
        (:class:`Interrupted` always)."""
        rec = {"name": name, "phase": phase, "started": now_iso(), "duration_s": None,
               "status": "running", "detail": ""}
        self.data.setdefault("steps", []).append(rec)
        self.save()
        t0 = time.monotonic()
        try:
            detail = fn()
        except Interrupted:
            rec.update(status="failed", detail="interrupted (abort requested)",
                       duration_s=round(time.monotonic() - t0, 3))
            self.save()
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is journalled
            msg = str(exc) if isinstance(exc, (StepFailed, Refused)) else f"{type(exc).__name__}: {exc}"
            rec.update(status="failed", detail=msg, duration_s=round(time.monotonic() - t0, 3))
            self.save()
            if fatal:
                raise
            return None
        rec.update(status="ok", detail=detail or "", duration_s=round(time.monotonic() - t0, 3))
        self.save()
        return detail
