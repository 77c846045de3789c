"""Why a recurring job (keeper, watchdog) stands down now: an open window, or the host lock held by
someone else (an activation, a rollback, a deploy's disruptive step). One test for both jobs."""

from __future__ import annotations

from rigkit.host import lock as host_lock
from rigkit.host.config import HostConfig
from rigkit.host.window.journal import is_open, read_journal


def window_reason(cfg: HostConfig, job: str) -> str | None:
    """``"<job>: a window is open (...); standing down"`` or None."""
    path = cfg.path("window_journal")
    try:
        journal = read_journal(path)
    except ValueError as exc:
        return f"{job}: {exc}; standing down until a human looks"
    if is_open(journal):
        return (f"{job}: window {journal.get('id')} is open ({path}: state {journal.get('state')!r}); standing down "
                "(the window watches its own tenant)")
    return None


def lock_reason(cfg: HostConfig, job: str) -> str | None:
    """``"<job>: the rig is locked by ...; standing down"`` when the host lock is held, else None."""
    st = host_lock.state(cfg.path("lock"))
    if st["held"]:
        return f"{job}: the rig is locked by {host_lock.describe(st['holder'])}; standing down"
    return None


def reason(cfg: HostConfig, job: str) -> str | None:
    """The first of :func:`window_reason` and :func:`lock_reason` that applies, or None."""
    return window_reason(cfg, job) or lock_reason(cfg, job)


def take(cfg: HostConfig, job: str, why: str) -> tuple[host_lock.RigLock | None, str | None]:
    """Try the host lock for ``job`` (``why`` goes into the record): ``(lock, None)`` when taken — with
    no window open — else ``(None, reason to stand down)``."""
    lock = host_lock.try_lock(cfg.path("lock"), f"{job}: {why}")
    if lock is None:
        return None, lock_reason(cfg, job) or f"{job}: the rig lock is held; standing down"
    win = window_reason(cfg, job)
    if win:
        lock.release()
        return None, win
    for w in lock.warnings:
        print(f"{job}: warning: {w}")
    return lock, None
