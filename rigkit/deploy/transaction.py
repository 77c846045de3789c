"""A change to what serves, confirmed by inference or put back (DESIGN.md "Confirmed, or put back"):
the one confirmation and the one revert of ``rigkit deploy``, ``rigkit rollback`` and ``rigkit
wire-in --activate``.

Each command takes the host lock for its whole run (:class:`LockHold`, one lease that its own
commands join) in the one change context, :func:`held` (every host's :func:`begin` at once, each
:func:`end` on the way out whatever raises), applies its change (the deploy through pyinfra), and
then, on each host it changed:

- **confirm** the generation the host should now be at (``rigkit-agent confirm``,
  :mod:`rigkit.host.confirm`: the declared services active, the power limit read back, the
  declared files as declared, a real completion through llama-swap to each live member the change
  touched and to the resident, within the members' declared cold boots plus a margin, or
  ``--confirm-budget``);
- **put back** when the change failed or its confirmation did: the failed attempt is recorded as a
  *failed* generation (a number, never current; ``rollback --to`` it is refused), the host is
  deployed back to the generation it started from (files, units, pins only when the change touched
  them, llama-swap's config through the activation path) under the same lock, that one is
  confirmed, and the command exits 1 naming what failed, that it reverted and to which generation.
  ``--no-revert`` leaves the host as the change left it and says so (``rigkit drift`` then shows it).
  A revert that itself fails stops there, holds the host at the generation it started from
  (``rigkit rollback --release`` ends the hold) and says what state the host is in.

A host with nothing recorded yet (the first deploy) has no generation to go back to: a failed first
deploy is said to be unrevertable. A deploy that changed nothing asks nothing. A run that failed
while declaring exactly what its start generation declares (same key: the hub refused the token, a
mirror was down) is not put back — deploying that generation again would be the same run — but the
start generation is confirmed and the command says whether the host still serves.

The transaction prints nothing: what it says goes to the :class:`rigkit.deploy.run.Output` the
command hands :func:`begin` (the CLI's :class:`rigkit.cli.deployout.Console`). The host is reached
through :class:`rigkit.remote.Remote`: a host lost during :func:`settle` (:class:`rigkit.remote.HostUnreachable`)
is said — nothing can be confirmed or put back — never read as "nothing recorded"; :func:`begin`
lets it through (the command refuses, nothing touched).
"""

from __future__ import annotations

import json
import secrets as pysecrets
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from rigkit import exitcodes, hints, paths
from rigkit.deploy import run
from rigkit.remote import RemoteError, RemoteTimeout


#: Appended to a failed generation's reason when ``--no-revert`` left the host as the change left it.
LEFT = " (left as it failed: --no-revert)"


class LockHold:
    """The host lock held over SSH for a whole command (``rigkit-agent lock hold --lease ID``): taken
    by :meth:`take`, ended by :meth:`release` (closing stdin) or by the session dying (a reboot)."""

    def __init__(self, remote, what: str, lease: str | None = None, current: bool = False) -> None:
        from rigkit import paths

        self.remote, self.what = remote, what
        self.lease = lease or pysecrets.token_hex(8)
        self.command = (f"{paths.AGENT_BIN} lock hold --what {json.dumps(what)} --lease {self.lease}"
                        + (" --current" if current else ""))
        self.proc: subprocess.Popen | None = None
        self.stderr: list[str] = []
        #: With ``current``: what ``generation current`` printed under the lock (None when it printed
        #: nothing readable).
        self.reading: dict[str, Any] | None = None
        self._current = current

    def take(self, timeout_s: float | None = None) -> str | None:
        """Take it; None when held, else why not (the holder named). ``timeout_s``: how long the agent's
        answer is waited for (default :data:`rigkit.common.lock.ANSWER_S`: past the host's own wait for an
        automatic job that holds the lock — it was 60 s against the host's 180 s, and a deploy waiting on a
        keeper or watchdog gave up saying only "the host lock could not be taken"). Raises
        :class:`rigkit.remote.HostUnreachable` when ssh failed (the lock was not asked)."""
        from rigkit.common.lock import ANSWER_S

        timeout_s = ANSWER_S if timeout_s is None else timeout_s
        self.proc = self.remote.popen(self.command, as_root=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
        errors = threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True)
        errors.start()
        line: list[str] = []
        want = 2 if self._current else 1

        def read() -> None:
            for _ in range(want):
                line.append(self.proc.stdout.readline())
                if line[0].strip() != "held":
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        if line and line[0].strip() == "held":
            if self._current and len(line) > 1:
                try:
                    reading = json.loads(line[1])
                except ValueError:
                    reading = None
                self.reading = reading if isinstance(reading, dict) and isinstance(reading.get("index"), dict) else None
            return None
        self.proc.kill()
        self.proc.wait()
        reader.join(2)
        errors.join(2)
        lost = self.remote.lost(self.proc.returncode, "".join(self.stderr))
        if lost is not None:
            raise lost
        return ("; ".join(s.strip() for s in self.stderr if s.strip())
                or f"the host lock was not taken within {timeout_s:.0f} s and the agent said nothing (a job "
                   f"holding it past the host's own wait, or a host too slow to answer)")

    def answered(self) -> bool:
        """After a refused :meth:`take`: the agent itself refused (its lines start with the holder's
        ``what:`` prefix: the lock is held elsewhere or a window is open), rather than an agent that
        is missing or predates the command's flags (``usage:``, ``command not found``)."""
        return any(s.startswith(f"{self.what}: ") for s in self.stderr)

    def alive(self) -> bool:
        """The SSH session holding the lock is still up."""
        return self.proc is not None and self.proc.poll() is None

    def release(self) -> None:
        """End the hold (close the session's stdin); idempotent."""
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.proc = None


@dataclass
class Change:
    """One host's part of a change: ``hs`` (:class:`rigkit.spec.inventory.HostSpec`), its ``remote``,
    the generation it started from (``start``, None on a host with none) and that generation's
    record (``start_record``), the lock (``hold``, its record naming ``lock_what``), what the
    change is called in messages (``what``: ``"the deploy"``, ``"the rollback to 3"``) and where
    they go (``out``, :class:`rigkit.deploy.run.Output`)."""

    hs: Any
    remote: Any
    what: str
    start: int | None = None
    start_record: dict[str, Any] | None = None
    hold: LockHold | None = None
    lock_what: str = ""
    out: run.Output = field(kw_only=True)
    #: the sha256 of the live llama-swap config the host served from when the change began (read under the
    #: lock: ``live_sha256`` of ``rigkit-agent lock hold --current``); None when unknown (an older agent,
    #: no config yet). What serves can differ from ``start_record`` (a wire-in activation records none).
    start_live: str | None = None
    #: set by :func:`settle`: the change only staged (:func:`staged_only`), so nothing that serves is asked
    #: (no completion, no smoke: either would swap out the member serving a request)
    staged_only: bool = False
    #: the generation current before *this* pyinfra run, when one change runs several (a bisect's steps, each
    #: recorded as a generation): a run that failed before recording its own is then told from the step before it,
    #: which :func:`settle` must not mark failed (None: ``start``, the one run of a deploy or rollback)
    before: int | None = None

    @property
    def name(self) -> str:
        return self.hs.name

    def say(self, text: str, error: bool = False) -> None:
        """One line to ``out``, prefixed with the host's name."""
        self.out.note(f"{self.name}: {text}", error=error)


def agent_json(remote, *args: str, stdin: str | None = None, lease: str | None = None,
               timeout: float = 120) -> tuple[dict[str, Any] | None, str]:
    """``rigkit-agent ARGS`` → ``(its last stdout line as JSON, "")``, or ``(None, why)`` (the agent's
    last error line, or that it printed no JSON)."""
    proc = remote.agent(*args, stdin=stdin, timeout=timeout, lease=lease)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode not in (0, 1) or not lines:
        why = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[-1]
        return None, why
    try:
        return json.loads(lines[-1]), ""
    except ValueError:
        return None, f"not JSON: {lines[-1][:200]!r}"


def begin(hs, remote, what: str, lease: str, lock_what: str, out: run.Output) -> Change:
    """The host's :class:`Change` before anything is touched: the current generation and its record
    (none where the agent is not installed yet or nothing is recorded) and the host lock taken under
    ``lease`` where the agent can take it (``lock_what`` names the holder in the lock's record:
    ``"rigkit deploy"``); what the change says goes to ``out``. Raises ChangeRefused (nothing
    touched) when the lock is held by someone else or a window is open, and
    :class:`rigkit.remote.RemoteError` when the host is not reached (never read as "no agent yet")."""
    ch = Change(hs, remote, what, lock_what=lock_what, out=out)
    # One SSH session: the lock taken, then where the host starts read under it. The agent's own
    # refusal (held elsewhere, a window open) is final: asking again would lose what its answer said
    # (a dead holder's lock reclaimed). Only a host with no agent yet or an agent that predates
    # --current goes the two-step way below.
    hold = LockHold(remote, lock_what, lease, current=True)
    why = hold.take()
    if why is None:
        ch.hold = hold
        if hold.reading is not None:
            ch.start, ch.start_record = hold.reading.get("current"), hold.reading.get("record")
            ch.start_live = hold.reading.get("live_sha256")
        else:  # held, but the generations could not be read in that session: read them under it
            _, ch.start, ch.start_record, ch.start_live = _read_current(remote)
        return ch
    if hold.answered():
        raise ChangeRefused(f"{ch.name}: {what} refused, nothing touched: {why}")
    index, ch.start, ch.start_record, ch.start_live = _read_current(remote)
    if index is None:  # no agent yet: the deploy installs it; nothing to lock or go back to
        return ch
    ch.hold = LockHold(remote, lock_what, lease)
    why = ch.hold.take()
    if why:
        ch.hold = None
        raise ChangeRefused(f"{ch.name}: {what} refused, nothing touched: {why}")
    return ch


class ChangeRefused(RuntimeError):
    """The host lock could not be taken before a change: the message names the holder."""


@contextmanager
def held(host_specs: list[Any], what: str, lock_what: str, out: run.Output, lease: str | None = None,
         remote: Callable[[Any], Any] | None = None) -> Iterator[list[Change]]:
    """The one change context of ``rigkit deploy``, ``rigkit rollback`` and ``rigkit wire-in --activate``:
    every host of ``host_specs`` (:class:`rigkit.spec.inventory.HostSpec`) begun at once under
    ``lease`` (a new one when None) — :func:`begin`, the lock taken naming ``lock_what``, where it
    starts read, messages to ``out`` — yields their :class:`Change` s in ``host_specs``' order, and
    :func:`end` s every one on the way out, whatever raises. ``remote(hs)`` makes a host's
    :class:`rigkit.remote.Remote` (default: from ``hs.connection``).

    Raises (nothing touched, every lock already taken released): :class:`ChangeRefused` when a lock is
    held elsewhere or a window is open, :class:`rigkit.remote.RemoteError` when a host is not reached."""
    from rigkit.remote import Remote

    lease = lease or pysecrets.token_hex(8)
    make = remote or (lambda hs: Remote(hs.name, hs.connection))
    changes = begin_all(list(host_specs), lambda hs: begin(hs, make(hs), what, lease, lock_what, out), end)
    try:
        yield changes
    finally:
        for ch in changes:
            end(ch)


def begin_all(items: list[Any], begin_one: Callable[[Any], Any], end_one: Callable[[Any], None]) -> list[Any]:
    """``begin_one(item)`` on every item at once (threads: each is a few SSH commands — :func:`begin`,
    taking a host's lock), results in ``items``' order. When one raises, ``end_one`` releases every
    one that began and the first exception (in ``items``' order) is raised again."""
    def one(item):
        try:
            return begin_one(item)
        except Exception as exc:  # noqa: BLE001 - re-raised below, after every other lock is released
            return _Raised(exc)

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(items)))) as pool:
        done = list(pool.map(one, items))
    raised = [r for r in done if isinstance(r, _Raised)]
    if raised:
        for began in done:
            if not isinstance(began, _Raised):
                end_one(began)
        raise raised[0].exc
    return done


@dataclass
class _Raised:
    exc: Exception


def relock(ch: Change, lease: str) -> None:
    """Take the host lock again when the SSH session holding it ended (a reboot of the change), so
    the confirmation and a revert run under it; said when it cannot."""
    if ch.hold is None or ch.hold.alive():
        return
    ch.hold.release()
    ch.say("the SSH session holding the host lock ended during the change (a reboot, or an interrupt that reached "
           "it); taking it again")
    hold = LockHold(ch.remote, ch.lock_what, lease)
    why = hold.take()
    if why:
        ch.say(f"could not take the host lock again ({why}); confirming without it", error=True)
        ch.hold = None
    else:
        ch.hold = hold


def end(ch: Change) -> None:
    """Release the host lock (idempotent)."""
    if ch.hold is not None:
        ch.hold.release()


def _read_current(remote) -> tuple[dict[str, Any] | None, int | None, dict[str, Any] | None, str | None]:
    """``(the generations index, or None when the agent cannot be asked; the current generation;
    its record; the sha256 of the live llama-swap config the host serves, None when unknown)`` —
    ``rigkit-agent generation current`` (one call), or, from an agent older than it, ``generation
    list`` then ``show N`` (the live config unknown)."""
    both, _ = agent_json(remote, "generation", "current", timeout=60)
    if isinstance(both, dict) and isinstance(both.get("index"), dict):
        return both["index"], both.get("current"), both.get("record"), both.get("live_sha256")
    index, _ = agent_json(remote, "generation", "list", timeout=60)
    n = (index or {}).get("current")
    if n is None:
        return index, None, None, None
    shown, _ = agent_json(remote, "generation", "show", str(n), timeout=60)
    return index, n, (shown or {}).get("record"), None


def current(ch: Change) -> tuple[int | None, dict[str, Any] | None, str | None]:
    """The host's current generation now, its record and the sha256 of the live llama-swap config it
    serves (``(None, None, None)`` when unreadable; the hash None when unknown)."""
    _, n, record, live = _read_current(ch.remote)
    return n, record, live


def confirm(ch: Change, n: int, touched: list[str], budget_s: float | None, lease: str | None,
            files: bool = True, changes: str = "") -> dict[str, Any]:
    """Run ``rigkit-agent confirm`` for generation ``n`` asking ``touched`` (the live members the change
    added or changed: :func:`rigkit.common.confirm.touched_members`; :mod:`rigkit.host.confirm`;
    ``files`` False leaves the files check out); says what changed among the members (``changes``,
    :func:`rigkit.common.confirm.describe`) and each check (``ch.out``); returns its result
    (``confirmed`` False with the reason when the agent could not be run)."""
    request = json.dumps({"generation": n, "members": touched, "budget_s": budget_s, "files": files})
    ch.say(f"confirming generation {n}" + (f" (members: {changes})" if changes else "") + ": "
           + (f"{', '.join(touched)}, the live member(s) it added or changed, then the resident,"
              if touched else "the resident") + " through llama-swap")
    timeout = float(budget_s or 0) + 900
    try:
        proc = ch.remote.agent("confirm", stdin=request, timeout=timeout, lease=lease)
    except RemoteTimeout:  # a confirmation that never ends is one that failed (the link was up)
        return {"confirmed": False, "failed": [f"rigkit-agent confirm did not answer within {timeout:g} s"],
                "generation": n}
    for line in proc.stderr.splitlines():
        if line.strip():
            ch.out.note(f"{ch.name}: {line.strip()}")
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result = {"confirmed": False, "failed": [f"rigkit-agent confirm did not answer (exit {proc.returncode})"],
                  "generation": n}
    return result


def record_failed(ch: Change, manifest: dict[str, Any], why: str, lease: str) -> int | None:
    """Record ``manifest`` (the attempt) as a failed generation; its number, or None (said)."""
    entry, problem = agent_json(ch.remote, "generation", "record", "--failed", why,
                                stdin=json.dumps(manifest, sort_keys=True), lease=lease)
    if entry is None:
        ch.say(f"could not record the failed attempt: {problem}", error=True)
        return None
    return entry.get("n")


def mark_failed(ch: Change, n: int, why: str, lease: str) -> bool:
    """Mark the current generation ``n`` failed (the one before it is current again)."""
    entry, problem = agent_json(ch.remote, "generation", "fail", str(n), "--why", why, lease=lease)
    if entry is None:
        ch.say(f"could not mark generation {n} failed: {problem}", error=True)
    return entry is not None


#: The rendered files that only follow the members' ``staged`` flags and serve nothing: the review copy
#: and the host config (the agent's, read by its timers; no server reads it).
STAGING_FILES = frozenset({paths.LLAMA_SWAP_STAGED, paths.HOST_CONFIG})


def staged_only(old: dict[str, Any] | None, new: dict[str, Any] | None, served_before: str | None,
                served_after: str | None) -> bool:
    """Whether moving the host from generation record ``old`` to ``new`` changed only what is staged,
    judged against what the host serves: the live llama-swap config it served from before the change
    (``served_before``, :attr:`Change.start_live`) and after it (``served_after``; sha256 of each, read by
    the agent: :func:`rigkit.host.generations.live_sha256`) are the same, and the records have the same
    pins, units, release, daemon.json keys, models and secrets, and no rendered file but
    :data:`STAGING_FILES` and the live config differs (sha256, mode, owner; the live config's content is
    judged by what is served, since a ``rigkit wire-in --activate`` changes it without recording a
    generation and a hold keeps it from the record's). False without either record, its files or
    either hash (unknown is not "unchanged")."""
    if not old or not new or not old.get("files") or not new.get("files"):
        return False
    if not served_before or served_before != served_after:
        return False
    fo, fn = old["files"], new["files"]
    lo_file, ln_file = fo.get(paths.LLAMA_SWAP_CONFIG) or {}, fn.get(paths.LLAMA_SWAP_CONFIG) or {}
    if (lo_file.get("mode"), lo_file.get("owner")) != (ln_file.get("mode"), ln_file.get("owner")):
        return False
    files = {p for p in set(fo) | set(fn) if fo.get(p) != fn.get(p)} - {paths.LLAMA_SWAP_CONFIG}
    same = all(old.get(k) == new.get(k) for k in ("pins", "units", "daemon_json", "models", "secrets"))
    lo, ln = old.get("llama_swap") or {}, new.get("llama_swap") or {}
    return same and files <= STAGING_FILES and lo.get("release") == ln.get("release")


def members_of(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """A record's spec snapshot (None without a record)."""
    return (record or {}).get("spec")


def put_back(ch: Change, inventory: str, overrides: dict, verbose: int, lease: str, why: str, touched: list[str],
             budget_s: float | None) -> int:
    """Deploy the host back to ``ch.start`` under the lease, confirm it, and say where the host is;
    returns 1 (the change failed either way). On a failed revert the host is held at ``ch.start``."""
    from rigkit.deploy.source import GENERATION_ENV
    from rigkit.common.lock import LEASE_ENV

    if ch.start is None:
        ch.say(f"{ch.what} FAILED ({why}) and there is no earlier generation to go back to (nothing was "
               "recorded before it); the host is left as the change left it", error=True)
        return exitcodes.FAILED
    ch.say(f"{ch.what} FAILED ({why}); reverting to generation {ch.start}, where it started")
    from rigkit.render.generations import RUN_KEYS

    run_only = {k: v for k, v in overrides.items() if k in RUN_KEYS}  # the generation's spec, this run's flags
    back, _ = run.run_pyinfra(inventory, [ch.name], run_only, verbose=verbose,
                              extra_env={GENERATION_ENV: str(ch.start), LEASE_ENV: lease}, out=ch.out)
    relock(ch, lease)
    if back.returncode != 0:
        state = f"the revert's deploy failed at: {'; '.join(run.failed_operations(back)) or 'its start'}"
    else:
        result = confirm(ch, ch.start, touched, budget_s, lease)
        state = None if result.get("confirmed") else \
            "generation {} does not confirm either: {}".format(ch.start, "; ".join(result.get("failed") or []))
    if state is None:
        ch.say(f"{ch.what} FAILED ({why}); reverted to generation {ch.start}, confirmed: the host serves as "
               f"before (`{hints.command('generations', host=ch.name, inventory_path=inventory)}` lists the failed attempt)", error=True)
        return exitcodes.FAILED
    held, problem = agent_json(ch.remote, "generation", "hold", str(ch.start), "--why",
                               f"{ch.what} failed ({why}) and its revert failed ({state})", lease=lease)
    ch.say(f"{ch.what} FAILED ({why}) and so did the revert to generation {ch.start}: {state}. STOPPED there: "
           "the host has the revert's files and units as far as its deploy got; "
           + ("it is held at generation {} (the next deploy applies that generation, not the spec, until "
              "`{}`); a human should look (`{}`)".format(
                  ch.start, hints.command("rollback", "--release", host=ch.name, inventory_path=inventory),
                  hints.command("drift", host=ch.name, inventory_path=inventory))
              if held else f"holding it failed too ({problem})"),
           error=True)
    return exitcodes.FAILED


def settle(ch: Change, proc, inventory: str, overrides: dict, verbose: int, lease: str, attempt: dict[str, Any],
           no_revert: bool, budget_s: float | None) -> int:
    """After the change's pyinfra run ``proc``: confirm what this host now is, or put it back
    (module docstring). ``attempt`` is the manifest of what the change declared (recorded as the
    failed generation when the run failed before recording one). Returns 0 confirmed (or nothing
    changed), 1 failed (reverted, left by ``--no-revert``, not revertable, or the host lost: said)."""
    try:
        return _settle(ch, proc, inventory, overrides, verbose, lease, attempt, no_revert, budget_s)
    except RemoteError as exc:
        ch.say(f"{ch.what}: the host was lost ({exc}); nothing could be confirmed or put back, the host is as "
               f"the change left it (`{hints.command('drift', host=ch.name, inventory_path=inventory)}` shows how "
               "it differs once it answers)", error=True)
        return exitcodes.FAILED


def _settle(ch: Change, proc, inventory: str, overrides: dict, verbose: int, lease: str, attempt: dict[str, Any],
            no_revert: bool, budget_s: float | None) -> int:
    """:func:`settle` on a host that answers (a lost one raises :class:`rigkit.remote.RemoteError`)."""
    from rigkit.common.confirm import describe, member_changes, touched_members

    failed_ops, changed, ran = run.host_result(proc, ch.name)
    host_failed = proc.returncode != 0 and failed_ops is not None
    if not host_failed and not changed:
        return exitcodes.OK  # a converged host: nothing changed, nothing to confirm
    relock(ch, lease)
    now_n, now_rec, now_live = current(ch)
    since = ch.before if ch.before is not None else ch.start
    new = now_n if now_n is not None and now_n != since else None
    target_spec = members_of(now_rec) if new is not None else attempt.get("spec")
    touched = touched_members(members_of(ch.start_record), target_spec or {})
    changes = describe(member_changes(members_of(ch.start_record), target_spec or {}))
    # going back, the members to ask are those the revert touches: live at the start, changed since
    back = touched_members(target_spec or {}, members_of(ch.start_record) or {})
    if host_failed:
        if not ran:
            ch.say(f"{ch.what} failed before it changed anything; the host stays at generation {ch.start}", error=True)
            return exitcodes.FAILED
        why = f"failed at: {'; '.join(failed_ops) or 'an operation (see pyinfra above)'}"
        n = new
        if n is not None:
            mark_failed(ch, n, why + LEFT * no_revert, lease)
        elif ch.start is not None:
            n = record_failed(ch, attempt, f"{ch.what} {why}" + LEFT * no_revert, lease)
        if new is None and ch.start_record and attempt.get("key") and attempt["key"] == ch.start_record.get("key"):
            return _unchanged_failure(ch, n, why, budget_s, lease)
        return _failed(ch, n, why, no_revert, inventory, lambda: put_back(ch, inventory, overrides, verbose, lease, why,
                                                                          back, budget_s))
    target = new if new is not None else now_n
    if target is None:
        ch.say("changed, but no generation is recorded to confirm against", error=True)
        return exitcodes.FAILED
    if new is not None and not touched and staged_only(ch.start_record, now_rec, ch.start_live, now_live):
        # a completion to the resident would swap out whatever member is serving (a swap group) and wait
        # for its requests: staging must not touch what serves (issue 61)
        ch.say(f"generation {target} changes only what is staged (members: {changes or 'none'}): nothing that "
               "serves changed, so no completion is sent")
        ch.staged_only = True
        return exitcodes.OK
    result = confirm(ch, target, touched, budget_s, lease, changes=changes)
    if result.get("confirmed"):
        ch.say(f"generation {target} confirmed in {result.get('took_s')} s (budget {result.get('budget_s')} s): "
               + ", ".join(f"{m} answered" for m in result.get("members") or []))
        return exitcodes.OK
    why = "its confirmation failed: " + "; ".join(result.get("failed") or ["?"])
    if new is None:
        ch.say(f"{ch.what} left generation {target}'s declared state, but {why}; nothing to go back to",
               error=True)
        return exitcodes.FAILED
    mark_failed(ch, new, why + LEFT * no_revert, lease)
    return _failed(ch, new, why, no_revert, inventory, lambda: put_back(ch, inventory, overrides, verbose, lease, why,
                                                                        back, budget_s))


def _unchanged_failure(ch: Change, n: int | None, why: str, budget_s: float | None, lease: str) -> int:
    """A run that failed while declaring exactly what the start generation declares (its key: a hub
    that refused the token, a mirror down): deploying that generation again is the same run, so
    nothing is put back; the start generation is confirmed to say whether the host still serves.
    Returns 1."""
    if n is not None:
        ch.say(f"the failed attempt is generation {n}, recorded as failed")
    result = confirm(ch, ch.start, [], budget_s, lease)
    state = ("it still serves as generation {} declares (confirmed)".format(ch.start) if result.get("confirmed")
             else "generation {} does not confirm: {}".format(ch.start, "; ".join(result.get("failed") or [])))
    ch.say(f"{ch.what} {why}; it declared what generation {ch.start} declares, so there is nothing to put back: "
           f"{state}; fix what failed and deploy again", error=True)
    return exitcodes.FAILED


def _failed(ch: Change, n: int | None, why: str, no_revert: bool, inventory: str, revert) -> int:
    """Say which generation the failed attempt is, then leave the host (``no_revert``, said) or
    ``revert()``; returns 1 either way."""
    if n is not None:
        ch.say(f"the failed attempt is generation {n}, recorded as failed")
    if no_revert:
        ch.say(f"{ch.what}: {why}; --no-revert: the host is left as the change left it (`{hints.command('drift', host=ch.name, inventory_path=inventory)}` "
               "shows how it differs)", error=True)
        return exitcodes.FAILED
    return revert()
