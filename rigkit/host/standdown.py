"""Why a recurring job (keeper, watchdog, power-limit healer) stands down now — an open window, or the host lock held by
someone else (an activation, a rollback, a deploy's disruptive step) — and the one way a command that
changes the serving state takes the lock (:func:`lock_for_change`): refused while it is held or a
window is open."""

from __future__ import annotations

from rigkit.common import lock as lock_record
from rigkit.common.lock import describe
from rigkit.host import lock as host_lock
from rigkit.host.config import HostConfig
from rigkit.common.journal import is_open, read_journal


class WindowOpen(RuntimeError):
    """A change of the serving state refused: a window is open (or its journal is unreadable); the
    message says which."""


def _journal_problem(cfg: HostConfig) -> tuple[str, str] | None:
    """``("open", "window <id> is open (<path>: state 'open')")``, ``("unreadable", <error>)`` or None."""
    path = cfg.path("window_journal")
    try:
        journal = read_journal(path)
    except ValueError as exc:
        return "unreadable", str(exc)
    if is_open(journal):
        return "open", f"window {journal.get('id')} is open ({path}: state {journal.get('state')!r})"
    return None


def window_reason(cfg: HostConfig, job: str) -> str | None:
    """``"<job>: window <id> is open (...); standing down ..."`` or None."""
    problem = _journal_problem(cfg)
    if problem is None:
        return None
    kind, text = problem
    return f"{job}: {text}; standing down " + ("until a human looks" if kind == "unreadable"
                                                else "(the window watches its own tenant)")


# The jobs that only ever hold the lock for one bounded action of their own (the keeper bringing the
# resident back, the watchdog unloading a member, the healer re-applying the power limit) and stand down otherwise. A change asked for by an
# operator waits for that action instead of failing on it: the deploy's docker restart takes Strata's
# container down, the keeper's next period brings Strata back under the lock, and the deploy's
# llama-swap restart, one step later, would otherwise be refused naming the keeper.
AUTOMATIC_JOBS = ("keeper", "watchdog", "power")
AUTOMATIC_YIELD_S = lock_record.AUTOMATIC_YIELD_S  # the keeper's one completion to the resident waits out its cold boot


def lock_for_change(cfg: HostConfig, what: str, log, command: str | None = None,
                    lease: str | None = None) -> host_lock.RigLock:
    """The host lock for ``what`` (an activation, a rollback, a deploy's step), held by the caller
    until it releases it (``lease``: the id commands run on its behalf join it with, see
    :mod:`rigkit.host.lock`); a dead holder's reclaim warning goes to ``log``. A keeper or watchdog
    holding it is waited for (:data:`AUTOMATIC_JOBS`, up to :data:`AUTOMATIC_YIELD_S` s, said in the
    log); anyone else is refused at once. Raises :class:`rigkit.host.lock.LockHeld` (naming the
    holder) or :class:`WindowOpen`."""
    lock = host_lock.RigLock(cfg.path("lock"), what, command, lease=lease)
    lock.acquire(yield_to=AUTOMATIC_JOBS, yield_s=AUTOMATIC_YIELD_S)
    for w in lock.warnings:
        log(f"warning: {w}")
    problem = _journal_problem(cfg)
    if problem:
        lock.release()
        raise WindowOpen(f"{problem[1]}: refused (the window restores steady state itself; run again once it has)")
    return lock


def lock_reason(cfg: HostConfig, job: str) -> str | None:
    """``"<job>: the rig is locked by ...; standing down"`` when the host lock is held, else None."""
    st = host_lock.state(cfg.path("lock"))
    if st["held"]:
        return f"{job}: the rig is locked by {describe(st['holder'])}; standing down"
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
