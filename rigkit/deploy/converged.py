"""A converged deploy in one round trip (issue 48): ``rigkit deploy`` probes first and runs pyinfra
only on the hosts where something differs.

These are the deploy's own decisions (which host takes the full run, the restamp), made from drift's
probe and comparison: they live with the deploy, above drift (the control side's folders import one
way: ``cli`` → ``deploy`` → ``drift``); :func:`rigkit.deploy.changes.deploy` calls them.

Each host's path is chosen (:func:`choose_paths`) from one command per host, every host at once over
pyinfra's connection (:func:`rigkit.drift.probe.probe_under_lock`): the agent takes the host lock for
the deploy (its lease), prints the current generation and its record, runs drift's probe under the
lock and lets go (``rigkit-agent lock run --current``). A lock refused anywhere stops the deploy,
nothing touched. The **probe path** — no pyinfra run, no confirmation, no smoke unless asked
(``--smoke``) — is taken only when every one of these holds; each one that does not is a named
reason, printed on the host's one line (:func:`say`):

- **the stamps** (:func:`stamp_reasons`, from the current generation's record read under the lock):
  a generation is
  recorded, by this rigkit build (:func:`rigkit.build.rigkit_build`: the version and a
  hash of the code, roles and templates), from this spec (its hash), with this model lock (its
  sha256), declaring what this deploy declares (the generation ``key``: every rendered file, pins,
  units, members, release — the declared state, not Python source);
- **no interrupted bisect** (:func:`bisect_reasons`): a ``rigkit bisect`` journal on the host is ended only by
  the full run, which puts the host back where the bisect started (issue 68);
- **the state** (:func:`state_reasons`, from drift's own probe and comparison,
  :func:`rigkit.drift.probe.probe_sections` and :func:`rigkit.drift.compare.compare_host`): no hold,
  no open window, no pending reboot, the host lock
  held by no one but this deploy, and no finding at all besides the power-limit healer's note — every
  ``drift`` finding is a change the deploy's plan would make (``notes/drift-coverage.md``: every
  operation of the deploy is in the probe's coverage, each breakage agreeing with ``pyinfra --dry``),
  and a finding drift could not check (``error``, ``not-compared``, ``model-lock``) is a reason too.

Otherwise the host takes the **full run**: its lock taken again for the whole run
(:func:`rigkit.deploy.transaction.held`), then the deploy exactly as before (pyinfra,
confirmation, put back, smoke), limited to those hosts. ``--full`` takes it on every host without
probing. A host whose stamps differ takes it whatever its probe found (its reasons are its stamps);
so does a host not reached or without an agent that can take the lock and probe (a first deploy).

A full run that ended well on a host whose current generation declares what the run declared but was
recorded by another rigkit build, or from a spec that differs only where nothing on the host depends
on it, stamps that generation again afterwards (:func:`restamp_after`, outside pyinfra's operations),
so the next deploy takes the probe path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from rigkit import paths
from rigkit.deploy.transaction import ChangeRefused
from rigkit.drift import coverage
from rigkit.drift.compare import compare_host
from rigkit.drift.declared import declared_for
from rigkit.drift.masking import mask
from rigkit.drift.probe import probe_under_lock
from rigkit.drift.run import wheelhouse_for
from rigkit.render.files import render
from rigkit.render.generations import lock_text, manifest

#: Finding kinds that never send a host to the full run: the power-limit healer's note (the limit is
#: back; a ``power`` finding says when it is not). The host lock held by this deploy's own lease is
#: the other exception (:func:`state_reasons`).
HARMLESS = frozenset({"power-healed"})
#: How many findings the reason line names before "and N more".
NAMED = 4


@dataclass
class Choice:
    """One host's path: ``probe`` True for ``converged (probe)``; ``reasons`` why not (empty exactly
    when ``probe``); ``generation`` the current generation (None: none recorded); ``findings`` the
    probe's findings (empty when not probed)."""

    host: str
    probe: bool
    reasons: list[str] = field(default_factory=list)
    generation: int | None = None
    findings: list[Any] = field(default_factory=list)
    #: the host was not reached (``reasons`` say why): nothing was asked of it (issue 67's rollout records it)
    unreached: bool = False


def _lock_sha(files: dict[str, Any] | None) -> str | None:
    """The model lock's sha256 in a manifest's or record's ``files`` (a record's as found on disk)."""
    meta = (files or {}).get(paths.MODELS_LOCK) or {}
    return meta.get("sha256")


def stamp_reasons(n: int | None, record: dict[str, Any] | None, want: dict[str, Any], agent: bool = True) -> list[str]:
    """Why generation ``n`` (its ``record``: ``rigkit-agent generation show N``'s) is not what this
    deploy would record (``want``: :func:`rigkit.render.generations.manifest` of this run's spec,
    rendered files and lock): each of the rigkit build, the spec hash, the model lock's sha256 and
    the key that differs is one reason (``[]``: all four match). ``agent`` False: the host agent is
    not installed (a first deploy)."""
    if not agent:
        return ["the host agent is not installed (a first deploy)"]
    if n is None or not record:
        return ["no generation is recorded on the host"]
    out = []
    if record.get("rigkit_version") != want.get("rigkit_version"):
        out.append(f"generation {n} was recorded by rigkit {record.get('rigkit_version') or 'of unknown build'}, "
                   f"this is {want.get('rigkit_version')}")
    if record.get("spec_hash") != want.get("spec_hash"):
        out.append(f"the spec changed since generation {n} (spec hash {str(record.get('spec_hash'))[:12]} -> "
                   f"{str(want.get('spec_hash'))[:12]})")
    if _lock_sha(record.get("files")) != _lock_sha(want.get("files")):
        out.append(f"the model lock changed since generation {n} (sha256 {str(_lock_sha(record.get('files')))[:12]} "
                   f"-> {str(_lock_sha(want.get('files')))[:12]})")
    if record.get("key") != want.get("key") and not out:
        out.append(f"what the deploy declares is not generation {n}'s (key {str(record.get('key'))[:12]} -> "
                   f"{str(want.get('key'))[:12]})")
    elif record.get("key") != want.get("key"):
        out[-1] += "; the declared state differs"
    return out


def state_reasons(findings: list[Any], lease: str | None, facts: dict[str, Any] | None = None,
                  secrets: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Why the probe's ``findings`` (:class:`rigkit.drift.compare.Finding`, of
    :func:`~rigkit.drift.compare.compare_host`, or anything with its ``kind``, ``item``, ``severity``
    and ``actual``) send the host to the full run, one reason each for a
    hold, an open window, a pending reboot and the host lock held by another than ``lease``, then one
    for the differences the deploy would repair (``drift``) and one for what could not be checked —
    named by kind and item (masked with ``secrets``), :data:`NAMED` at most. ``[]``: none (only
    :data:`HARMLESS` findings, the lock held by this deploy, a dead holder's record that taking the
    lock reclaims). ``facts`` (the parsed probe) tells whose lease holds the lock; without it a
    ``lock`` finding whose ``actual`` says the lock is free (a dead holder's record) is no reason, any
    other is."""
    state = (facts or {}).get("rig_lock") or {}
    holder = state.get("holder") or {}
    own_lock = bool(lease) and state.get("held") and holder.get("lease") == lease
    out: list[str] = []
    named: dict[str, list[str]] = {"hold": [], "window": [], "reboot": [], "lock": [], "drift": [], "other": []}
    for f in findings:
        if f.kind in HARMLESS or (f.kind == "lock" and own_lock):
            continue
        # a dead holder's record (the lock free): the deploy's own take reclaims it (rigkit.host.lock)
        if f.kind == "lock" and (not state.get("held") if facts else str(f.actual).startswith("free")):
            continue
        text = mask(f"{f.kind} {f.item}", list(secrets)) or f.kind
        if f.kind in ("hold", "window", "reboot", "lock"):
            named[f.kind].append(mask(f.item if f.kind != "reboot" else str(f.actual), list(secrets)) or f.kind)
        elif f.severity == "drift":
            named["drift"].append(text)
        elif f.severity in ("expected", "hold"):
            continue  # explained by an open window or kept by a hold, each its own reason
        else:
            named["other"].append(text)

    def some(items: list[str]) -> str:
        return "; ".join(items[:NAMED]) + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")

    out += [said.format(some(named[kind])) for kind, said in (
        ("hold", "a hold stands ({})"), ("window", "a window is open ({})"), ("reboot", "a reboot is pending ({})"),
        ("lock", "the host lock is not this deploy's ({})")) if named[kind]]
    if named["drift"]:
        out.append(f"the probe found {len(named['drift'])} difference(s) the deploy repairs: {some(named['drift'])}")
    if named["other"]:
        out.append(f"the probe could not check {len(named['other'])} thing(s): {some(named['other'])}")
    return out


def say(choice: Choice) -> str:
    """The host's one line: ``NAME: converged (probe): …`` on the probe path, ``NAME: full run: REASON;
    REASON`` otherwise."""
    if choice.probe:
        return (f"{choice.host}: converged (probe): 0 changed; generation {choice.generation} stays current — every "
                "operation's state probed in one round trip, no pyinfra run (--full runs it)")
    return f"{choice.host}: full run: " + "; ".join(choice.reasons)


def declare(host_specs: list[Any], inventory: str, token: Any,
            rendered: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``{host: its drift declaration}`` (:class:`rigkit.drift.declared.Declared`) for ``host_specs``
    (:class:`rigkit.spec.inventory.HostSpec`); ``token``: the command's HF token
    (:func:`rigkit.spec.secrets.hf_token`, or None); ``rendered``: ``{host: its rendered files}`` when the
    caller has them (the deploy's validators rendered them), else rendered here."""
    return {hs.name: declared_for(hs.name, hs.spec, inventory, token, files=(rendered or {}).get(hs.name) or render(hs.spec))
            for hs in host_specs}


def bisect_reasons(journal: dict[str, Any] | None) -> list[str]:
    """Why an interrupted ``rigkit bisect``'s journal (``rigkit-agent lock run --current``'s ``bisect``:
    :func:`rigkit.host.generations.current`; ``{"id", "start", "since", ...}`` or None) sends the host to the
    full run: the full run deploys the bisect's start generation and ends the journal
    (:func:`rigkit.deploy.source.source_for`), which the probe path would leave standing even when the step it
    stopped at declares exactly the spec. ``[]`` without a journal."""
    if not journal:
        return []
    return [f"an interrupted bisect ({journal.get('id')}, {journal.get('since')}) left its journal: the full run "
            f"puts the host back at generation {journal.get('start')}, where it started, and ends it"]


def choose_paths(host_specs: list[Any], declared: dict[str, Any], lease: str, what: str = "rigkit deploy",
                 connect_timeout: int = 10, warn: Callable[[str], None] | None = None) -> dict[str, Choice]:
    """Every host's :class:`Choice`, from one round trip per host, all at once
    (:func:`rigkit.drift.probe.probe_under_lock`): the host lock taken for ``what`` under ``lease``,
    the current generation read and drift's probe run under it, the lock let go. The stamps first,
    then the state (``declared``: :func:`declare`'s). Nothing is changed on any host; a host that
    takes the full run is locked again for it (:func:`rigkit.deploy.transaction.begin`). ``warn``
    gets each host's warnings of taking the lock (a dead holder's record reclaimed).

    Raises :class:`rigkit.deploy.transaction.ChangeRefused` when a host's lock is refused (held by
    another, a window open: nothing touched anywhere). A host not reached, or whose agent is missing
    or predates the locked probe (a first deploy), takes the full run, which says why it cannot."""
    reads = probe_under_lock([declared[hs.name] for hs in host_specs], {hs.name: hs.connection for hs in host_specs},
                             what, lease, connect_timeout=connect_timeout)
    refused = []
    choices: dict[str, Choice] = {}
    for hs in host_specs:
        decl = declared[hs.name]
        read, why = reads.get(hs.name, (None, "not probed"))
        c = choices[hs.name] = Choice(hs.name, False)
        lock = (read or {}).get("lock")
        if read is None:
            c.reasons = [f"the host was not probed ({why})"]
            c.unreached = str(why).startswith("unreachable")
        elif lock is None:  # no agent, or one that predates the locked probe: the full run installs it
            said = "; ".join(read["said"])[-200:]
            missing = not said or "not found" in said or "No such file" in said
            c.reasons = stamp_reasons(None, None, {}, agent=False) if missing else [
                f"the host agent could not take the lock and probe ({said})"]
        elif not lock["held"]:
            refused.append(f"{hs.name}: the deploy refused, nothing touched: {lock.get('refused')}")
        else:
            c.generation = lock.get("current")
            want = manifest(hs.spec, decl.files, lock_text(hs.spec))
            c.reasons = (bisect_reasons(lock.get("bisect")) + stamp_reasons(c.generation, lock.get("record"), want)
                         if "error" not in lock else [f"the generations could not be read: {lock['error']}"])
            if not c.reasons:
                try:
                    if read["facts"] is None:
                        raise RuntimeError("its output is not the probe's")
                    c.findings = compare_host(decl, read["facts"],
                                              wheelhouse=wheelhouse_for(read["facts"]))
                    c.reasons = state_reasons(c.findings, lease, read["facts"], decl.secret_values)
                except Exception as exc:  # noqa: BLE001 - a probe that cannot be read is a reason, never a crash
                    c.findings, c.reasons = [], [f"the probe failed: {exc}"]
            c.probe = not c.reasons
        for w in (lock or {}).get("warnings") or []:
            if warn is not None:
                warn(f"{hs.name}: warning: {w}")
        # what the host said travels in the reasons: masked once, here
        c.reasons = [mask(r, decl.secret_values) for r in c.reasons]
    if refused:
        raise ChangeRefused(refused[0])
    return choices


def restamp_after(ch: Any, attempt: dict[str, Any], lease: str) -> str | None:
    """After a full run that ended well on ``ch``'s host (:class:`rigkit.deploy.transaction.Change`): stamp
    its current generation with ``attempt``'s build and spec hash (``attempt``:
    :func:`rigkit.render.generations.manifest` of this run) when it has ``attempt``'s key and other
    stamps (``rigkit-agent generation restamp`` under ``lease``, :func:`rigkit.host.generations.restamp`),
    so the next deploy can take the probe path. Outside pyinfra's operations: their counts stay the
    deploy's own. Returns the line to print, or None when nothing was stamped (or the agent could not
    be asked: the next deploy then takes the full run again and says why)."""
    proc = ch.remote.agent("generation", "restamp", stdin=json.dumps(attempt, sort_keys=True), lease=lease,
                           timeout=60)
    try:
        entry = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    if not isinstance(entry, dict) or not entry.get("restamped"):
        return None
    return (f"{ch.name}: generation {entry.get('n')} stamped again as made by rigkit {attempt.get('rigkit_version')} "
            f"from spec {str(attempt.get('spec_hash'))[:12]} (nothing else changed): the next deploy can take the "
            "probe path")


def path_agreement(rows: list[Any], findings: list[tuple[str, str, str]], lease: str | None = None) -> list[str]:
    """What breaks "the deploy takes the full run exactly when a breakage stands" (issue 48) for one
    batch (``rows``, :class:`rigkit.drift.coverage.Coverage` rows applied together; none: the converged host), judged by the deploy's own choice
    (:func:`state_reasons`) over the probe's ``(kind, item, severity)``
    ``findings`` (drift's ``--plan`` rows left out: the deploy does not plan). ``lease``: the host
    lock's holder during the probe stands for the deploy's own (its lock is not a reason).

    Returns one line per problem (empty: they agree): on the converged host, any reason for the full
    run; with breakages, a row whose own findings alone would leave the deploy on the probe path."""
    from types import SimpleNamespace

    # the findings as drift's document gave them (kind, item, severity: an open window's "expected" kept)
    found = [SimpleNamespace(kind=kind, item=item, severity=sev, actual="") for kind, item, sev in findings
             if not kind.startswith("plan") and item != "pyinfra --dry --json"]
    facts = {"rig_lock": {"held": True, "holder": {"lease": lease}}} if lease else None
    if not rows:
        reasons = state_reasons(found, lease, facts)
        return [f"on the converged host the deploy would take the full run: {'; '.join(reasons)}"] if reasons else []
    problems = []
    for c in rows:
        mine = [f for f in found if coverage.matches(c.findings, f.kind, f.item)]
        if not state_reasons(mine, lease, facts):
            problems.append(f"{c.role}: {c.op}: the deploy would take the probe path with it broken")
    return problems
