"""The window journal (format: :mod:`rigkit.host.window`): reading it, the one "is a window open"
test (:func:`is_open`, which the keeper, the watchdog, the activation, the deploy's preflight and
drift all use), what an open window is expected to have changed, and the journalled steps."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from rigkit.common.jsonfile import read_object, write_atomic

CLOSED_STATES = ("closed", "restored")
JOURNAL_VERSION = 1


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


def read_journal(path: str | os.PathLike) -> dict | None:
    """The window journal at ``path`` as a dict (format: :mod:`rigkit.host.window`), or None when there
    is no such file (or it is empty). Raises ValueError (naming the path) when it is not a JSON object."""
    return read_object(path)


def is_open(journal: dict | None) -> bool:
    """True when ``journal`` describes an open window: any ``state`` but ``closed``/``restored``
    (the contract the keeper, the watchdog and the deploy's preflight read)."""
    return bool(journal) and journal.get("state") not in (None, *CLOSED_STATES)


def expected_deviations(journal: dict | None) -> list[str]:
    """What differs from *steady* because a window is open, and is not drift.

    One string per deviation, ``"<what> <observed state>: <why>"`` — the first word a unit
    name, or ``:PORT``: ``"hyperqwen.service active: ..."``, ``"llama-swap.service inactive: ..."``,
    ``":<proxy port> closed: ..."``, ``"<timer> inactive: ..."``, ``"<tenant .env path> changed: ..."``
    (a sweep installed one of its settings), ``"GPU <index> power limit: ..."`` (a power-limit sweep set
    one of its limits). Empty when no window is open. Derived
    from ``journal["changed"]`` (what the window did and restore has not undone yet) and the
    plan's unit names and ports.
    """
    if not is_open(journal):
        return []
    plan = journal.get("plan") or {}
    changed = journal.get("changed") or {}
    wid = journal.get("id", "?")
    tenant_unit = plan.get("tenant_unit", "hyperqwen.service")
    proxy_unit = plan.get("proxy_unit", "llama-swap.service")
    out: list[str] = []
    if changed.get("tenant_started"):
        out.append(f"{tenant_unit} active: window {wid} swapped the tenant in "
                   f"(:{plan.get('tenant_port', '?')} serves {plan.get('tenant', 'hyperqwen')})")
    if changed.get("proxy_stopped"):
        out.append(f"{proxy_unit} inactive: window {wid} stopped the proxy")
        out.append(f":{plan.get('proxy_port', '?')} closed: window {wid} stopped the proxy "
                   f"({plan.get('resident', 'the resident')} not loaded)")
    for timer in changed.get("timers") or []:
        out.append(f"{timer} inactive: window {wid} paused it")
    env = changed.get("tenant_env")
    if env:
        out.append(f"{env['path']} changed: window {wid} installed a sweep setting's .env "
                   f"(the restore puts the deployed one back from {env['backup']})")
    pl = changed.get("power_limit")
    if pl:
        out.append(f"GPU {pl.get('index', 0)} power limit: window {wid} is sweeping power limits "
                   f"(the restore puts the declared {pl.get('declared_w', '?'):g} W back)"
                   if isinstance(pl.get("declared_w"), (int, float)) else
                   f"GPU {pl.get('index', 0)} power limit: window {wid} is sweeping power limits")
    return out


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
