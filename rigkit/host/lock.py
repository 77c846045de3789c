"""The one host lock (DESIGN.md "One host lock"): whatever changes the serving state — a window, an
activation, a rollback, the deploy's disruptive steps — holds it for its whole duration; the
watchdog and the keeper only try it and stand down when it is held.

The lock is ``flock(2)`` on one file (the host config's ``paths.lock``, ``/var/lib/rigkit/rig.lock``
on the rig), and the same file holds the record of its holder as JSON: ``{"what", "pid", "since"
(UTC ISO 8601), "command", "boot_id"}``, written in place after the flock is taken and emptied on
release. Because the kernel drops a flock when its holder dies, a record left behind in an
unlocked file is a dead holder's: the next taker reclaims the lock and says so. ``flock -n``
(util-linux) on the same file sees the same lock, which is how the deploy's facts read it.

A *lease* lets one change that runs as several commands hold the lock once: ``rigkit rollback``
keeps the lock for its whole run with ``rigkit-agent lock hold --lease ID`` (the record carries
``lease``), and the commands it runs meanwhile (the deploy's activation, its docker restart, the
generation record) run with ``RIGKIT_LOCK_LEASE=ID`` in their environment: they *join* the
holder instead of being refused by it. Anyone else is refused as usual.

The record's format and the lease variable are :mod:`rigkit.common.lock` (the control side reads them
too); this module takes, holds and releases the lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rigkit.common.jsonfile import iso_utc

from rigkit.common.lock import LEASE_ENV, describe, parse_record, parse_state


class LockHeld(RuntimeError):
    """Someone else holds the host lock; ``holder`` is its record (may be ``{}`` when unreadable)."""

    def __init__(self, path: Path, holder: dict[str, Any]) -> None:
        self.path, self.holder = path, holder
        super().__init__(f"the rig is locked by {describe(holder)} ({path}); refused")


def pid_alive(pid: Any) -> bool:
    """True when a process with ``pid`` exists on this host."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, TypeError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def state(path: str | os.PathLike) -> dict[str, Any]:
    """The lock's state now (:func:`parse_state`), without taking it for long: a non-blocking shared
    flock that fails means it is held."""
    p = Path(path)
    try:
        fh = open(p)
    except FileNotFoundError:
        return parse_state(False, "")
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return parse_state(True, p.read_text())
        text = fh.read()
        fcntl.flock(fh, fcntl.LOCK_UN)
    return parse_state(False, text)


class RigLock:
    """The host lock, taken by ``what`` (``"window <id>"``, ``"activation"``, ``"deploy: restart
    docker"`` ...). Use as a context manager or with :meth:`acquire`/:meth:`release`.

    :meth:`acquire` raises :class:`LockHeld` naming the holder; a dead holder's record is reclaimed
    and the warning returned (and kept in :attr:`warnings`) so the caller can journal it.
    """

    def __init__(self, path: str | os.PathLike, what: str, command: str | None = None,
                 lease: str | None = None) -> None:
        self.path = Path(path)
        self.what = what
        self.command = command if command is not None else " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:])
        self.lease = lease
        self.fh = None
        self.joined: dict[str, Any] | None = None
        self.warnings: list[str] = []

    def acquire(self, wait_s: float = 0.0, yield_to: tuple[str, ...] = (), yield_s: float = 0.0) -> list[str]:
        """Take the lock, waiting up to ``wait_s`` s for a holder to let go (0: refuse at once), and up
        to ``yield_s`` s for a holder whose job (its record's ``what`` before the first ``:``) is one
        of ``yield_to``. Returns the warnings (a reclaimed dead holder, a wait for a yielded-to job).
        Raises LockHeld.

        When the holder's record carries the lease named by ``$RIGKIT_LOCK_LEASE`` and its process
        lives, this command is part of that holder's change: it *joins* (``joined`` is the holder's
        record) without taking the flock, and :meth:`release` leaves the holder's lock alone."""
        joining = os.environ.get(LEASE_ENV) or None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        os.chmod(self.path, 0o644)
        t0 = time.monotonic()
        yielded: list[str] = []
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if yielded:
                    self.warnings.append(f"waited {time.monotonic() - t0:.1f} s for {yielded[0]} to finish")
                break
            except BlockingIOError:
                fh.seek(0)
                holder = parse_record(fh.read())
                if joining and holder and holder.get("lease") == joining and pid_alive(holder.get("pid")):
                    fh.close()
                    self.joined = holder
                    return self.warnings
                waited = time.monotonic() - t0
                job = str((holder or {}).get("what", "")).split(":", 1)[0]
                if holder and job in yield_to and waited < yield_s:
                    if not yielded:
                        yielded.append(describe(holder))
                    time.sleep(0.2)
                    continue
                # no record yet: a reader's brief shared flock (lock.state, `flock -n -s`) or a taker
                # between its flock and its record; give it a moment before refusing
                if waited >= wait_s and (holder or waited >= 1.0):
                    fh.close()
                    raise LockHeld(self.path, holder or {}) from None
                time.sleep(0.1)
        fh.seek(0)
        stale = parse_record(fh.read())
        if stale:
            gone = "its pid is gone" if not pid_alive(stale.get("pid")) else "it no longer holds it"
            self.warnings.append(f"reclaimed the rig lock from {describe(stale)}: {gone} (it died without "
                                 "releasing it; check what it left half done)")
        record = {"what": self.what, "pid": os.getpid(), "command": self.command, "boot_id": _boot_id(),
                  "since": iso_utc()}
        if self.lease:
            record["lease"] = self.lease
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps(record, sort_keys=True) + "\n")
        fh.flush()
        self.fh = fh
        return self.warnings

    def release(self) -> None:
        """Empty the record and let go (idempotent; a joined holder's lock is left to it)."""
        self.joined = None
        if self.fh is None:
            return
        try:
            self.fh.seek(0)
            self.fh.truncate()
            self.fh.flush()
        finally:
            fcntl.flock(self.fh, fcntl.LOCK_UN)
            self.fh.close()
            self.fh = None

    def __enter__(self) -> "RigLock":
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def try_lock(path: str | os.PathLike, what: str) -> RigLock | None:
    """The lock when it is free (the keeper's and the watchdog's way: they stand down otherwise),
    else None."""
    lock = RigLock(path, what)
    try:
        lock.acquire()
    except LockHeld:
        return None
    return lock
