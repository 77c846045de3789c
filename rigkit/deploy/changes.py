"""``rigkit deploy`` and ``rigkit rollback`` as functions: parsed arguments in, an exit code out
(DESIGN.md's codes, :mod:`rigkit.exitcodes`), everything said through an :class:`rigkit.deploy.run.Output`
(the CLI's :class:`rigkit.cli.deployout.Console`; nothing here prints). Each runs its change under the
one change context (:func:`rigkit.deploy.transaction.held`): the lease, every host's lock, released on
the way out whatever raises; then the change confirmed or put back (:func:`rigkit.deploy.transaction.settle`).

- :func:`deploy`: each host's path chosen first (:mod:`rigkit.deploy.converged`: the probe under the
  lock, unless ``full``), then pyinfra on the hosts that take the full run, each settled, restamped
  and smoke-benched under the lock (DESIGN.md job 1, "Generations", "Confirmed, or put back");
- :func:`plan`: pyinfra's ``--dry`` plan and rigkit's record of it (``rigkit deploy --dry``);
- :func:`rollback`: a recorded generation deployed back and held (``rigkit rollback --to N``);
  :func:`release` ends the hold (``rigkit rollback --release``).

What the input must be (the spec valid, operator values set, the validators passed, the lock
resolved) the CLI checks before calling these, touching no host (exit 2).
"""

from __future__ import annotations

import os
import secrets as pysecrets
import tempfile
from typing import Any, Callable

from rigkit import exitcodes, hints
from rigkit.agentcmd import NO_REVERT_ENV
from rigkit.common.lock import LEASE_ENV
from rigkit.deploy import planned
from rigkit.deploy.converged import choose_paths, declare, restamp_after, say
from rigkit.deploy.run import Output, run_pyinfra, smoke
from rigkit.deploy.source import GENERATION_ENV, REASON_ENV
from rigkit.deploy.transaction import ChangeRefused, agent_json, held, settle
from rigkit.remote import Remote, RemoteError
from rigkit.render.files import render
from rigkit.render.generations import lock_text, manifest, manifest_of_record


def plan(inventory: str, hosts: tuple[str, ...] | list[str], names: list[str], overrides: dict[str, Any],
         verbose: int, out: Output) -> tuple[Any, dict[str, Any]]:
    """``rigkit deploy --dry``: pyinfra's plan for ``hosts`` (the ``--host`` names given, none: every
    host) with rigkit's own record of each conditional row (:mod:`rigkit.deploy.planned`, read for
    ``names``). Returns ``(the finished pyinfra process: its plan JSON in stdout, {host: planned rows}``);
    changes nothing."""
    with tempfile.TemporaryDirectory(prefix="rigkit-plan-") as folder:
        proc, _ = run_pyinfra(inventory, hosts, overrides, True, verbose, extra_env={planned.PLAN_ENV: folder}, out=out)
        return proc, planned.read(folder, names)


def deploy(host_specs: list[Any], inventory: str, overrides: dict[str, Any], rendered: dict[str, dict[str, Any]],
           out: Output, token: Any = None, *, full: bool = False, smoke_asked: bool = False, no_smoke: bool = False,
           no_revert: bool = False, confirm_budget: float | None = None, verbose: int = 0,
           ended: Callable[[str, str, str], None] | None = None) -> int:
    """``rigkit deploy`` on ``host_specs`` (:class:`rigkit.spec.inventory.HostSpec`, already checked)
    of ``inventory`` with ``overrides`` (``--data`` and the run's switches), ``rendered`` their
    ``{host: {remote path: RenderedFile}}`` (what the validators passed), ``token`` the command's HF token
    (:func:`rigkit.spec.secrets.hf_token`, read once by the command, or None). Unless ``full``, each host's
    lock is taken, where it starts read and drift's probe run under it in one round trip
    (:func:`rigkit.deploy.converged.choose_paths`); a converged host is left alone (``smoke_asked``:
    its smoke, under its lock), every other one takes the full run under the change context: pyinfra,
    then each host settled (confirmed or put back; ``no_revert``, ``confirm_budget`` seconds),
    restamped when that is all that differs, and smoke-benched (not with ``no_smoke``, nor when the
    run only staged). Returns 0 done, 1 failed (a lock refused or a host not reached: nothing touched;
    a change that failed: said).

    ``ended(host, outcome, why)`` (issue 67's rollout, :mod:`rigkit.deploy.fleet`): called as each host's
    part ends, ``outcome`` one of :data:`rigkit.deploy.outcomes.OUTCOMES`; with it, a host the probe did
    not reach is recorded ``unreachable`` and the others go on without it (without it: as before)."""
    lease = pysecrets.token_hex(8)
    chosen = {}
    if not full:  # issue 48: each host's lock taken, where it starts read and its state probed: one round trip
        try:
            chosen = choose_paths(host_specs, declare(host_specs, inventory, token, rendered), lease, warn=out.note)
        except ChangeRefused as exc:  # a lock held or a window open: nothing touched on any host
            out.note(str(exc), error=True)
            _refused(host_specs, str(exc), ended)
            return exitcodes.FAILED
        for choice in chosen.values():
            out.note(say(choice))
    converged_names = {name for name, choice in chosen.items() if choice.probe}
    unreached = {name for name, choice in chosen.items() if choice.unreached} if ended else set()
    for name in sorted(unreached):
        out.note(f"{name}: not reached; nothing touched there, the other hosts go on (the deploy's "
                 "--retry-failed takes it again)", error=True)
        ended(name, "unreachable", say(chosen[name]))
    if ended and not smoke_asked:
        for name in converged_names:
            ended(name, "converged", say(chosen[name]))
    # a converged host is left alone; only --smoke locks it again, for its smoke
    to_begin = [hs for hs in host_specs if (hs.name not in converged_names or smoke_asked) and hs.name not in unreached]
    if not to_begin:
        return exitcodes.FAILED if unreached else exitcodes.OK
    try:
        with held(to_begin, "the deploy", "rigkit deploy", out, lease) as changes:  # every host at once
            codes = []
            for ch in changes:  # only with --smoke
                if ch.name in converged_names:
                    codes.append(smoke(ch.hs, inventory, dict(os.environ), out))
                    if ended:
                        ended(ch.name, "failed" if codes[-1] else "converged",
                              "its smoke failed" if codes[-1] else say(chosen[ch.name]))
            full_run = [ch for ch in changes if ch.name not in converged_names]
            if full_run:
                codes += _full_run(full_run, inventory, overrides, lease, out, no_smoke=no_smoke, no_revert=no_revert,
                                   confirm_budget=confirm_budget, verbose=verbose, ended=ended)
            return exitcodes.combine(*codes, *([exitcodes.FAILED] if unreached else []))
    except (ChangeRefused, RemoteError) as exc:  # a lock held, or a host not reached (the locks taken released)
        out.note(str(exc), error=True)
        _refused(to_begin, str(exc), ended, "unreachable" if isinstance(exc, RemoteError) else "refused")
        return exitcodes.FAILED


def _refused(host_specs: list[Any], why: str, ended: Callable[[str, str, str], None] | None,
             outcome: str = "refused") -> None:
    """Every host of a deploy refused before anything was touched, ended (when ``ended`` is given): the
    hosts ``why`` names (``NAME: …``, the refusal's own lines) as ``outcome``, the others ``not-reached``
    (their locks let go, untouched, because of another host)."""
    if not ended:
        return
    for hs in host_specs:
        named = any(line.startswith(f"{hs.name}:") for line in why.splitlines())
        ended(hs.name, outcome if named else "not-reached", why if named else f"untouched: the batch was refused ({why})")


def _full_run(changes: list[Any], inventory: str, overrides: dict[str, Any], lease: str, out: Output, *,
              no_smoke: bool, no_revert: bool, confirm_budget: float | None, verbose: int,
              ended: Callable[[str, str, str], None] | None = None) -> list[int]:
    """pyinfra on ``changes``' hosts (:class:`rigkit.deploy.transaction.Change`, locked under
    ``lease``), then each host settled, restamped and smoke-benched: one exit code per host, each
    host's end told to ``ended`` (``ok`` or ``failed``) as it comes."""
    proc, env = run_pyinfra(inventory, [ch.name for ch in changes], overrides, False, verbose,
                            extra_env={LEASE_ENV: lease, **({NO_REVERT_ENV: "1"} if no_revert else {})}, out=out)
    codes = []
    for ch in changes:
        attempt = manifest(ch.hs.spec, render(ch.hs.spec), lock_text(ch.hs.spec))
        code = settle(ch, proc, inventory, overrides, verbose, lease, attempt, no_revert, confirm_budget)
        settled = code
        if code == exitcodes.OK and (line := restamp_after(ch, attempt, lease)):  # issue 48
            out.note(line)
        if code == exitcodes.OK and not no_smoke and ch.staged_only:
            out.note(f"{ch.name}: no smoke: the deploy only staged (nothing that serves changed; `--smoke` on a "
                     "later run benches it)")
        elif code == exitcodes.OK and not no_smoke:
            code = smoke(ch.hs, inventory, env, out)  # still under the lock: nothing changes the rig in between
        if ended:
            ended(ch.name, "failed" if code else "ok",
                  "its change or confirmation failed (the run's lines say what, and whether it was put back)"
                  if settled else "changed and confirmed, but its post-deploy smoke failed" if code
                  else "changed and confirmed")
        codes.append(code)
    return codes


class _Stop(Exception):
    """A rollback stops with ``code`` after saying ``message`` (an error line)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _ask(remote: Any, *args: str) -> dict[str, Any]:
    """``rigkit-agent ARGS`` → its JSON (:func:`rigkit.deploy.transaction.agent_json`); raises
    :class:`_Stop` (exit 1) naming the host and the agent's error."""
    data, why = agent_json(remote, *args, timeout=60)
    if data is None:
        raise _Stop(exitcodes.FAILED, f"{remote.name}: rigkit-agent {' '.join(args)}: {why}")
    return data


def release(hs: Any, out: Output) -> int:
    """``rigkit rollback --release``: remove the hold a rollback left on ``hs``'s host (``rigkit-agent
    generation release``), each line the agent said to ``out``; 0 done, 1 failed. Raises
    :class:`rigkit.remote.RemoteError` when the host is not reached."""
    proc = Remote(hs.name, hs.connection).agent("generation", "release", timeout=60)
    for line in (proc.stderr + proc.stdout).splitlines():
        out.note(f"{hs.name}: {hints.complete(line, host=hs.name)}")
    return exitcodes.OK if proc.returncode == 0 else exitcodes.FAILED


def rollback(hs: Any, inventory: str, to: int, overrides: dict[str, Any], out: Output, *, no_smoke: bool = False,
             no_revert: bool = False, confirm_budget: float | None = None, verbose: int = 0) -> int:
    """``rigkit rollback --to N``: generation ``to`` deployed back on ``hs``'s host under the change
    context (pyinfra with the generation as its source, ``overrides`` the run's switches), settled
    (confirmed or put back), held, then smoke-benched under the lock (not with ``no_smoke``). Returns
    0 done (also: ``to`` is already current), 1 failed or refused (the lock held, ``to`` needs a model
    the host has not verified: nothing touched), 2 for a generation that is not kept or is a failed
    one. Raises :class:`rigkit.remote.RemoteError` when the host is lost before the lock is asked."""
    remote = Remote(hs.name, hs.connection)
    try:
        return _rollback(hs, remote, inventory, to, overrides, out, no_smoke=no_smoke, no_revert=no_revert,
                         confirm_budget=confirm_budget, verbose=verbose)
    except _Stop as stop:
        out.note(str(stop), error=True)
        return stop.code


def _rollback(hs: Any, remote: Any, inventory: str, to: int, overrides: dict[str, Any], out: Output, *,
              no_smoke: bool, no_revert: bool, confirm_budget: float | None, verbose: int) -> int:
    """:func:`rollback`, stopping with :class:`_Stop`."""
    index = _ask(remote, "generation", "list")
    known = [g["n"] for g in index.get("generations", [])]
    start = index.get("current")
    if to not in known:
        raise _Stop(exitcodes.INVALID, f"--to {to}: {hs.name} has no generation {to} (kept: "
                                       f"{', '.join(map(str, known)) or 'none'})")
    if (next(g for g in index["generations"] if g["n"] == to) or {}).get("failed"):
        raise _Stop(exitcodes.INVALID,
                    f"--to {to}: generation {to} on {hs.name} is a failed change that was put back "
                    f"(`{hints.command('generations', host=hs.name)}` lists it as failed); it was never current and "
                    "cannot be brought back")
    step = (next(g for g in index["generations"] if g["n"] == to) or {}).get("bisect")
    if step and step.get("step"):
        raise _Stop(exitcodes.INVALID,
                    f"--to {to}: generation {to} on {hs.name} is step {step.get('step')} of bisect {step.get('id')}, a "
                    "trial mix of two generations that nobody declared; roll back to one of the generations it was "
                    f"between (`{hints.command('generations', host=hs.name)}`)")
    if to == start:
        out.note(f"{hs.name}: generation {to} is already the current one; nothing to roll back")
        return exitcodes.OK
    missing = _ask(remote, "generation", "check", str(to)).get("missing") or []
    if missing:
        out.note(f"{hs.name}: generation {to} needs what this host has not verified; refused, nothing "
                 "touched (deploy a spec with those models, or fetch them, first):", error=True)
        for m in missing:
            out.note(f"  {m}")
        return exitcodes.FAILED
    what, lease = f"rollback to generation {to}", pysecrets.token_hex(8)
    try:
        with held([hs], what, what, out, lease, remote=lambda _: remote) as (ch,):
            out.note(f"{hs.name}: holding the host lock for the rollback to generation {to} (from generation {start})")
            env = {GENERATION_ENV: str(to), REASON_ENV: f"rollback to {to}", LEASE_ENV: lease}
            proc, run_env = run_pyinfra(inventory, [hs.name], overrides, verbose=verbose, extra_env=env, out=out)
            attempt = manifest_of_record(_ask(remote, "generation", "show", str(to))["record"], f"rollback to {to}")
            code = settle(ch, proc, inventory, overrides, verbose, lease, attempt, no_revert, confirm_budget)
            if code != exitcodes.OK:
                return code
            after = _ask(remote, "generation", "list")
            release_hint = hints.command("rollback", "--release", host=hs.name)
            out.note(f"{hs.name}: rolled back to generation {to}, recorded as generation {after.get('current')}; "
                     f"held: the next deploy keeps this host there until `{release_hint}`")
            # the smoke while the lock is still held: nothing else changes the rig between the rollback and it
            code = exitcodes.OK if no_smoke else smoke(hs, inventory, run_env, out)
            if code:
                out.note(f"{hs.name}: the rollback to generation {to} is done, confirmed and "
                         f"recorded (generation {after.get('current')}, held), but its post-deploy smoke FAILED "
                         f"(above); the host stays at generation {after.get('current')}", error=True)
            return code
    except ChangeRefused as exc:
        raise _Stop(exitcodes.FAILED, str(exc)) from None
