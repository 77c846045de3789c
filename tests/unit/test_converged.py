"""The deploy's path choice (issue 48, rigkit.deploy.converged): the stamps a generation carries, the
probe's findings that send a host to the full run, the one line per host, and the restamp on the
host (rigkit.host.generations.restamp) that lets the next deploy take the probe path."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit import build, paths
from rigkit.deploy import converged, transaction
from rigkit.render import generations as gen
from rigkit.drift.compare import Finding
from rigkit.drift.severity import KINDS
from rigkit.host import generations as hostgen
from rigkit.render.files import render

from .test_generations import _files, _manifest, host, spec  # noqa: F401 - host is a fixture

#: pyinfra's per-host summary (rigkit.cli.deployout.print_results): the probe path's line must never read as one.
PYINFRA_SUMMARY = re.compile(r"^(?P<host>\S+): (?P<total>\d+) operations: (?P<changed>\d+) changed", re.M)
SECRET = "hf_SECRETsecretSECRETsecret1234"


def _want(lock: str | None = '{"models": {}}'):
    s = spec()
    return gen.manifest(s, render(s), lock)


def _record(want: dict) -> dict:
    """A record as ``rigkit-agent generation show`` returns it for a generation ``want`` recorded."""
    return {**want, "n": 3, "files": {p: {**m} for p, m in want["files"].items()}}


def test_a_generation_recorded_by_this_build_from_this_spec_and_lock_has_no_stamp_reason():
    want = _want()
    assert converged.stamp_reasons(3, _record(want), want) == []
    assert want["rigkit_version"] == build.rigkit_build() and re.fullmatch(r"0\.1\.0\+src\.[0-9a-f]{12}",
                                                                          want["rigkit_version"])


STAMPS = ("rigkit_version", "spec_hash", "lock", "key")


@settings(max_examples=60, deadline=None)
@given(changed=st.sets(st.sampled_from(STAMPS)))
def test_every_stamp_that_differs_is_named_and_none_is_a_probe(changed):
    """For every subset of {build, spec hash, model lock, key} that differs from what this deploy would
    record: the reasons are empty exactly when the subset is, and each differing one is named."""
    want = _want()
    rec = _record(want)
    if "rigkit_version" in changed:
        rec["rigkit_version"] = "0.1.0+src.000000000000"
    if "spec_hash" in changed:
        rec["spec_hash"] = "0" * 64
    if "lock" in changed:
        rec["files"][paths.MODELS_LOCK] = {**rec["files"][paths.MODELS_LOCK], "sha256": "1" * 64}
    if "key" in changed:
        rec["key"] = "2" * 64
    reasons = converged.stamp_reasons(3, rec, want)
    assert bool(reasons) == bool(changed)
    text = "; ".join(reasons)
    assert ("recorded by rigkit 0.1.0+src.000000000000" in text) == ("rigkit_version" in changed)
    assert ("the spec changed since generation 3" in text) == ("spec_hash" in changed)
    assert ("the model lock changed since generation 3" in text) == ("lock" in changed)
    if changed == {"key"}:
        assert text.startswith("what the deploy declares is not generation 3's")


def test_no_generation_or_no_agent_is_a_full_run():
    want = _want()
    assert converged.stamp_reasons(None, None, want) == ["no generation is recorded on the host"]
    assert converged.stamp_reasons(None, None, want, agent=False) == ["the host agent is not installed (a first deploy)"]
    # a generation recorded before builds were recorded
    old = {k: v for k, v in _record(want).items() if k != "rigkit_version"}
    assert converged.stamp_reasons(3, old, want) == [f"generation 3 was recorded by rigkit of unknown build, this is "
                                                     f"{want['rigkit_version']}"]


def _finding(kind: str, item: str) -> Finding:
    return Finding("h", kind, item, "declared", f"actual {item}")


OWN = {"rig_lock": {"held": True, "holder": {"what": "rigkit deploy", "lease": "L1"}}}


@settings(max_examples=200, deadline=None)
@given(found=st.lists(st.tuples(st.sampled_from(sorted(KINDS)), st.sampled_from(["/etc/a", "x.service", SECRET])),
                      max_size=12),
       own_lock=st.booleans())
def test_the_probe_path_is_taken_exactly_when_nothing_but_harmless_findings_stand(found, own_lock):
    """For any findings drift can make (every kind of the severity table): no reason exactly when every
    finding is the healer's note or the host lock held by this deploy's own lease; a hold, a window, a
    pending reboot and another lock holder each named; every difference the deploy repairs counted;
    no secret in any reason."""
    findings = [_finding(k, i) for k, i in found]
    facts = OWN if own_lock else {"rig_lock": {"held": True, "holder": {"what": "rigkit window", "lease": "L2"}}}
    reasons = converged.state_reasons(findings, "L1", facts, [SECRET])
    harmless = all(f.kind in converged.HARMLESS or (f.kind == "lock" and own_lock) for f in findings)
    assert (reasons == []) == harmless
    text = "; ".join(reasons)
    assert SECRET not in text
    kinds = {f.kind for f in findings}
    assert ("a hold stands" in text) == ("hold" in kinds)
    assert ("a window is open" in text) == ("window" in kinds)
    assert ("a reboot is pending" in text) == ("reboot" in kinds)
    assert ("the host lock is not this deploy's" in text) == ("lock" in kinds and not own_lock)
    drift = [f for f in findings if KINDS[f.kind] == "drift" and f.kind not in ("reboot",)]
    if drift:
        assert f"the probe found {len(drift)} difference(s) the deploy repairs" in text


def test_a_dead_holders_lock_record_is_no_reason_a_live_holder_is():
    """The deploy's own take reclaims a dead holder's record (the lock free): no reason; another
    live holder is one."""
    stale = Finding("h", "lock", paths.RIG_LOCK, "free", "free, but test (pid 1) died holding it (…)")
    held = Finding("h", "lock", paths.RIG_LOCK, "free", "held by rigkit window (pid 2)")
    assert converged.state_reasons([stale], None) == []
    assert converged.state_reasons([held], None) == [f"the host lock is not this deploy's ({paths.RIG_LOCK})"]
    assert converged.state_reasons([stale], "L1", {"rig_lock": {"held": False, "stale": {"pid": 1}}}) == []


def test_findings_an_open_window_explains_are_its_reason_not_differences():
    f = _finding("unit", "llama-swap.service")
    f.severity = "expected"
    reasons = converged.state_reasons([f, _finding("window", "window w1")], "L1", OWN)
    assert reasons == ["a window is open (window w1)"]


def test_the_probe_line_never_reads_as_pyinfra_counts():
    probe = converged.say(converged.Choice("r48-a", True, [], 4))
    assert probe.startswith("r48-a: converged (probe): 0 changed; generation 4 stays current")
    assert not PYINFRA_SUMMARY.search(probe)
    full = converged.say(converged.Choice("r48-a", False, ["a reboot is pending (x)", "the probe found 1 difference(s) "
                                                           "the deploy repairs: file /etc/a"], 4))
    assert full == ("r48-a: full run: a reboot is pending (x); the probe found 1 difference(s) the deploy repairs: "
                    "file /etc/a")


def test_the_build_changes_with_any_file_of_the_code_roles_or_templates(tmp_path, monkeypatch):
    """rigkit_build hashes deploy.py, roles/, rigkit/, templates/ under the project root."""
    root = tmp_path / "p"
    (root / "rigkit" / "deploy").mkdir(parents=True)
    (root / "roles").mkdir()
    (root / "templates").mkdir()
    (root / "deploy.py").write_text("x")
    (root / "roles" / "a.py").write_text("a")
    (root / "templates" / "t.j2").write_text("t")
    fake = root / "rigkit" / "build.py"
    fake.write_text("g")
    monkeypatch.setattr(build, "__file__", str(fake))
    build.rigkit_build.cache_clear()
    try:
        first = build.rigkit_build()
        (root / "roles" / "__pycache__").mkdir()
        (root / "roles" / "__pycache__" / "a.cpython-312.pyc").write_bytes(b"\0")
        build.rigkit_build.cache_clear()
        assert build.rigkit_build() == first  # caches are not the code
        (root / "templates" / "t.j2").write_text("t2")
        build.rigkit_build.cache_clear()
        assert build.rigkit_build() != first
    finally:
        monkeypatch.undo()
        build.rigkit_build.cache_clear()


# ------------------------------------------------------------------------------ on the host
def test_a_deploy_by_another_build_stamps_the_current_generation_again(host):  # noqa: F811
    root = host.root
    texts = _files(root)
    log: list[str] = []
    first = hostgen.record(host, _manifest(texts, root, rigkit_version="0.1.0+src.aaaaaaaaaaaa", spec_hash="s1",
                                           spec={"a": 1}), "rig", log.append)
    assert first["recorded"] and first["rigkit_version"] == "0.1.0+src.aaaaaaaaaaaa"
    newer = _manifest(texts, root, rigkit_version="0.1.0+src.bbbbbbbbbbbb", spec_hash="s2", spec={"a": 2})
    again = hostgen.record(host, newer, "rig", log.append)  # pyinfra's record: the same key, nothing recorded
    assert again["recorded"] is False and again["rigkit_version"] == "0.1.0+src.aaaaaaaaaaaa"
    stamped = hostgen.restamp(host, newer, log.append)  # then the deploy's restamp
    assert stamped["restamped"] is True and stamped["n"] == 1
    index = hostgen.read_index(root / "gen")
    assert index["current"] == 1 and len(index["generations"]) == 1
    assert (index["generations"][0]["rigkit_version"], index["generations"][0]["spec_hash"]) == (
        "0.1.0+src.bbbbbbbbbbbb", "s2")
    rec = hostgen.read_record(root / "gen", 1)
    assert (rec["rigkit_version"], rec["spec_hash"], rec["spec"]) == ("0.1.0+src.bbbbbbbbbbbb", "s2", {"a": 2})
    assert [(r["rigkit_version"], r["spec_hash"]) for r in rec["restamped"]] == [("0.1.0+src.aaaaaaaaaaaa", "s1")]
    assert "stamped as made by rigkit 0.1.0+src.bbbbbbbbbbbb" in log[-1]
    assert hostgen.restamp(host, newer, log.append) == {"restamped": False, "why": "already stamped so", "n": 1}
    other_key = {**newer, "key": "another"}
    assert hostgen.restamp(host, other_key, log.append)["restamped"] is False
    assert hostgen.restamp(host, {**newer, "rigkit_version": "x", "hold": {"g": 1}}, log.append)["restamped"] is False


def test_every_host_begins_at_once_and_one_refusal_releases_the_others():
    """transaction.begin_all (under the change context, transaction.held): results in order; when one host refuses, every lock taken is released and the first
    refusal (in the hosts' order) is raised."""
    import threading

    ended: list[str] = []
    barrier = threading.Barrier(3, timeout=10)  # all three begin at once, or this times out

    def begin(name):
        barrier.wait()
        if name.startswith("refuse"):
            raise RuntimeError(f"{name} refused")
        return name

    assert transaction.begin_all(["a", "b", "c"], begin, ended.append) == ["a", "b", "c"] and ended == []
    barrier.reset()
    try:
        transaction.begin_all(["a", "refuse-1", "refuse-2"], begin, ended.append)
    except RuntimeError as exc:
        assert str(exc) == "refuse-1 refused"
    else:
        raise AssertionError("a refusal was not raised")
    assert ended == ["a"]


def test_every_breakage_of_the_coverage_table_sends_the_deploy_to_the_full_run():
    """For every row of the coverage table that has a breakage, the findings the probe reports for it
    (its declared ``(kind, item)`` patterns, one finding each, with the severity its kind has) alone
    send the deploy to the full run (rigkit.deploy.converged.path_agreement); on the converged host
    (no findings, the lock this deploy's) it takes the probe path. The sandbox's real walk:
    tests/harness/drift_agreement.py (a batch in the suite, the whole table in benchmarks/drift_coverage.py)."""
    from rigkit.drift import coverage

    rows = [c for c in coverage.COVERAGE if c.breakage]
    assert len(rows) >= 40
    for c in rows:
        findings = [(k, i.replace("*", "x"), KINDS.get(k, "drift")) for k, i in c.findings]
        assert findings, f"{c.role}: {c.op}: a breakage with no finding"
        assert converged.path_agreement([c], findings, "L1") == [], (c.role, c.op)
    assert converged.path_agreement([], [("lock", paths.RIG_LOCK, "warn")], "L1") == []
    assert converged.path_agreement([], [("lock", paths.RIG_LOCK, "warn")]) != []


def test_the_deploy_remembers_passing_verdicts_only_and_never_for_other_files(tmp_path, monkeypatch):
    """run_checks(remember=True): passing verdicts are given back for the same files, spec and
    validators without running them; another file content is another key; a rejection is never
    remembered (judged afresh each time)."""
    from rigkit.render import checks

    s = spec()
    files = render(s)
    calls: list[str] = []
    verdict = {"status": "pass"}

    def fake(name):
        def run(*args, **kwargs):
            calls.append(name)
            return [checks.CheckResult(name, "/x", verdict["status"], "")]
        return run

    for name in ("check_units", "check_compose", "check_llama_swap"):
        monkeypatch.setattr(checks, name, fake(name))
    first = checks.run_checks(files, s, cache=tmp_path, remember=True)
    again = checks.run_checks(files, s, cache=tmp_path, remember=True)
    assert first == again and len(calls) == 3
    other = dict(files)
    path = sorted(other)[0]
    other[path] = type(other[path])(other[path].text + "# changed\n", other[path].mode, other[path].owner)
    assert checks.verdict_key(other, s) != checks.verdict_key(files, s)
    checks.run_checks(other, s, cache=tmp_path, remember=True)
    assert len(calls) == 6
    verdict["status"] = "fail"
    refused = dict(files)
    refused[path] = type(files[path])(files[path].text + "# refused\n", files[path].mode, files[path].owner)
    for _ in range(2):
        assert checks.verdict_code(checks.run_checks(refused, s, cache=tmp_path, remember=True)) == 2
    assert len(calls) == 12
    checks.run_checks(files, s, cache=tmp_path)  # rigkit check: always runs them
    assert len(calls) == 15


def test_the_deploy_reads_the_current_generation_in_one_call_and_falls_back_for_an_older_agent():
    """transaction._read_current: ``generation current`` once; an agent without it (exit 2, argparse)
    is asked ``list`` then ``show N``; no agent at all reads as no index."""
    import subprocess

    from rigkit.deploy import transaction

    class Remote:
        def __init__(self, answers):
            self.answers, self.asked = answers, []

        def agent(self, *args, **kwargs):
            self.asked.append(args[1])
            rc, out = self.answers.get(args[1], (127, ""))
            return subprocess.CompletedProcess(args, rc, out, "" if rc == 0 else "error")

    index = {"current": 2, "generations": [{"n": 2}]}
    new = Remote({"current": (0, '{"index": {"current": 2, "generations": [{"n": 2}]}, "current": 2, "record": {"n": 2}, '
                                 '"live_sha256": "ab"}')})
    assert transaction._read_current(new) == (index, 2, {"n": 2}, "ab") and new.asked == ["current"]
    old = Remote({"current": (2, ""), "list": (0, '{"current": 2, "generations": [{"n": 2}]}'),
                  "show": (0, '{"record": {"n": 2}}')})
    assert transaction._read_current(old) == (index, 2, {"n": 2}, None) and old.asked == ["current", "list", "show"]
    none = Remote({})
    assert transaction._read_current(none) == (None, None, None, None)


def test_the_spec_hash_ignores_where_the_lock_file_lies():
    """A held or rolled-back generation is deployed with its lock written to a temporary file: the same
    spec hash, so the deploy neither restamps nor leaves the probe path for the path alone."""
    a, b = spec(lockfile="/tmp/a/generation-3.lock.json"), spec(lockfile="/tmp/b/generation-3.lock.json")
    assert gen.spec_hash(a) == gen.spec_hash(b) and gen.spec_hash(a) != gen.spec_hash(spec(generations_keep=9))


def test_the_path_choice_reads_each_hosts_one_locked_round_trip(monkeypatch):
    """choose_paths over what probe_under_lock gives back, one host per shape: a host not reached, no
    agent, an agent that predates the locked probe, a generation recorded from another spec — each a
    named full-run reason, what the host said masked; the lock's warnings go to ``warn``; a host whose
    lock is refused refuses the whole deploy (ChangeRefused, the first in the hosts' order)."""
    from types import SimpleNamespace

    import pytest

    from rigkit.deploy.transaction import ChangeRefused

    s = spec()
    want = gen.manifest(s, render(s), gen.lock_text(s))
    other = {**_record(want), "spec_hash": "0" * 64}
    held = {"held": True, "index": {"current": 3}, "current": 3, "record": other, "warnings": ["reclaimed the rig lock"]}
    answers = {
        "gone": (None, "unreachable: Connection refused"),
        "fresh": ({"lock": None, "facts": None, "said": ["sh: 1: /opt/rigkit/venv/bin/rigkit-agent: not found"]}, ""),
        "old": ({"lock": None, "facts": None, "said": [f"rigkit-agent lock: error: unrecognized arguments: {SECRET}"]}, ""),
        "moved": ({"lock": held, "facts": None, "said": []}, ""),
    }
    asked = []

    def fake(decls, connections, what, lease, connect_timeout=10):
        asked.append((sorted(d.host for d in decls), what, lease))
        return {d.host: answers[d.host] for d in decls}

    monkeypatch.setattr(converged, "probe_under_lock", fake)  # the probe, as the path choice imports it
    hosts = [SimpleNamespace(name=n, spec=s, connection={}) for n in answers]
    declared = {n: SimpleNamespace(host=n, files=render(s), secret_values=[SECRET]) for n in answers}
    warned: list[str] = []
    chosen = converged.choose_paths(hosts, declared, "L1", warn=warned.append)
    assert asked == [(sorted(answers), "rigkit deploy", "L1")]  # every host in one call: at once
    assert not any(c.probe for c in chosen.values())
    assert chosen["gone"].reasons == ["the host was not probed (unreachable: Connection refused)"]
    assert chosen["fresh"].reasons == ["the host agent is not installed (a first deploy)"]
    assert chosen["old"].reasons == ["the host agent could not take the lock and probe (rigkit-agent lock: error: "
                                     "unrecognized arguments: ***)"]
    assert chosen["moved"].generation == 3 and "the spec changed since generation 3" in chosen["moved"].reasons[0]
    assert warned == ["moved: warning: reclaimed the rig lock"]

    answers["moved"] = ({"lock": {"held": False, "refused": "window w1 is open", "warnings": []}, "facts": None,
                         "said": []}, "")
    answers["old"] = ({"lock": {"held": False, "refused": "held by rollback", "warnings": []}, "facts": None,
                       "said": []}, "")
    with pytest.raises(ChangeRefused, match=r"^old: the deploy refused, nothing touched: held by rollback$"):
        converged.choose_paths(hosts, declared, "L1")
