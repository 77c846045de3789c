"""A deploy across a lab of rigs (issue 67): the batches (rigkit.deploy.fleet.batches), the stop rule and
the rollout's bookkeeping (rigkit.deploy.fleet.rollout, against a stand-in for one batch's deploy), and the
control side's outcome record with what --retry-failed takes from it (rigkit.deploy.outcomes)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit import exitcodes
from rigkit.deploy import fleet, outcomes

NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,6}", fullmatch=True), min_size=1, max_size=12, unique=True)


@given(NAMES, st.data())
def test_the_batches_are_the_hosts_in_order_canary_first_then_k_at_a_time(names, data):
    canary = data.draw(st.integers(0, len(names)))
    batch = data.draw(st.integers(0, len(names) + 2))
    plan = fleet.batches(names, canary, batch)
    assert [n for g in plan for n in g] == names  # every host once, in the order given
    assert all(plan)  # no empty batch
    if canary:
        assert plan[0] == names[:canary]
    after = plan[1:] if canary else plan
    if batch:
        assert all(len(g) <= batch for g in after) and all(len(g) == batch for g in after[:-1])
    else:
        assert len(after) <= 1  # the rest at once


@pytest.mark.parametrize("canary, batch, said", [(4, 0, "--canary 4: allowed 1 to 3"), (-1, 0, "--canary -1"),
                                                  (1, -2, "--batch -2: allowed 1 or more")])
def test_a_batch_plan_that_cannot_be_is_refused_naming_the_option_and_what_is_allowed(canary, batch, said):
    with pytest.raises(ValueError, match=said):
        fleet.batches(["a", "b", "c"], canary, batch)


OUTCOME = st.sampled_from([o for o in outcomes.OUTCOMES if o != "not-reached"])


class _Out:
    def __init__(self):
        self.lines = []

    def note(self, text, error=False):
        self.lines.append((text, error))


@settings(max_examples=200, deadline=None)
@given(NAMES, st.data())
def test_the_rollout_stops_after_the_first_failing_batch_and_never_touches_a_later_host(names, data):
    canary = data.draw(st.integers(0, len(names)), label="canary")
    plan = fleet.batches(names, canary, data.draw(st.integers(0, 4), label="batch"))
    result = {n: data.draw(OUTCOME, label=n) for n in names}
    asked, recorded = [], {}

    def deploy_batch(group, end, watch):
        asked.append(list(group))
        for n in group:
            end(n, result[n], "why")
        return exitcodes.FAILED if any(result[n] not in fleet.GOOD for n in group) else exitcodes.OK

    def ended(host, outcome, why):
        assert host not in recorded  # each host recorded once
        recorded[host] = outcome

    out = _Out()
    code = fleet.rollout(names, plan, deploy_batch, ended, out, canary=canary > 0)
    assert set(recorded) == set(names)
    said = [t for t, _ in out.lines if t.startswith("batch ")]  # batch 1 is a canary only when --canary made it
    assert said == ([] if len(plan) == 1 else [f"batch {i}/{len(plan)}{' (canary)' if canary and i == 1 else ''}: "
                                                  f"{', '.join(g)}" for i, g in enumerate(plan[:len(said)], 1)])
    assert len(said) == (0 if len(plan) == 1 else len(asked))
    stopped = next((i for i, g in enumerate(plan) if fleet.stops({n: result[n] for n in g})), None)
    want_asked = plan if stopped is None else plan[:stopped + 1]
    assert asked == want_asked  # batches in order; none after the one that stopped
    for g in plan[len(want_asked):]:
        assert all(recorded[n] == "not-reached" for n in g)
    assert code == (exitcodes.OK if all(o in fleet.GOOD for o in recorded.values()) else exitcodes.FAILED)
    # a lab run of several batches ends with one line: the stop's, or (not stopped) the closing summary
    closing = [t for t, _ in out.lines if t.startswith(("the rollout stopped after", "the rollout ended after"))]
    if len(plan) == 1:
        assert not closing
    elif stopped is not None and stopped + 1 < len(plan):
        assert len(closing) == 1 and closing[0].startswith(f"the rollout stopped after batch {stopped + 1}/")
    else:
        assert closing == [fleet.ended_line(len(plan), recorded)], out.lines
        for o in set(recorded.values()):
            assert f"{sum(v == o for v in recorded.values())} {o} (" in closing[0]


def test_a_host_the_batch_did_not_end_is_recorded_failed_with_its_last_error_never_good():
    recorded = {}

    def deploy_batch(group, end, watch):
        watch.note("b: the confirmation failed: chat through :8080 answered 500", error=True)
        end("a", "ok", "changed and confirmed")
        return exitcodes.FAILED

    out = _Out()
    code = fleet.rollout(["a", "b", "c"], [["a", "b"], ["c"]], deploy_batch,
                         lambda h, o, w: recorded.__setitem__(h, (o, w)), out)
    assert code == exitcodes.FAILED
    assert recorded["b"][0] == "failed" and "answered 500" in recorded["b"][1]
    assert recorded["c"] == ("not-reached", recorded["c"][1]) and "b failed" in recorded["c"][1]
    assert any("stopped after batch 1/2" in t and "c" in t and e for t, e in out.lines)


def test_a_lab_run_that_ends_well_closes_with_a_summary_in_the_stops_format():
    """The operator's report: a lab run (canary, then batches) that ended well printed no closing line."""
    out = _Out()
    got = {"a": "ok", "b": "converged", "c": "ok"}

    def deploy_batch(group, end, watch):
        for n in group:
            end(n, got[n], "why")
        return exitcodes.OK

    assert fleet.rollout(["a", "b", "c"], [["a"], ["b", "c"]], deploy_batch, lambda *a: None, out) == exitcodes.OK
    assert out.lines[-1] == ("the rollout ended after batch 2/2: 2 ok (a, c), 1 converged (b)", False)


def test_an_unreachable_host_beside_good_ones_does_not_stop_the_rollout_but_a_batch_of_none_reached_does():
    assert fleet.stops({"a": "ok", "b": "unreachable"}) is None
    assert fleet.stops({"a": "converged"}) is None
    assert fleet.stops({"a": "unreachable"}) == "no host of the batch was reached"
    assert fleet.stops({"a": "ok", "b": "refused", "c": "failed"}) == "b refused"


def test_the_state_folder_is_rigkit_state_then_xdg_state_home_then_the_xdg_default(monkeypatch, tmp_path):
    monkeypatch.delenv(outcomes.STATE_ENV, raising=False)
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert outcomes.state_dir() == tmp_path / ".local" / "state" / "rigkit"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "x"))
    assert outcomes.state_dir() == tmp_path / "x" / "rigkit"
    monkeypatch.setenv(outcomes.STATE_ENV, str(tmp_path / "s"))
    assert outcomes.state_dir() == tmp_path / "s"


def test_two_inventories_named_alike_in_two_folders_keep_two_records(monkeypatch, tmp_path):
    monkeypatch.setenv(outcomes.STATE_ENV, str(tmp_path))
    assert outcomes.record_path("a/lab.py") != outcomes.record_path("b/lab.py")
    monkeypatch.chdir(tmp_path)
    assert outcomes.record_path("a/lab.py") == outcomes.record_path(str(tmp_path / "a" / "lab.py"))
    assert outcomes.record_path("lab.py").name.startswith("lab-")


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z]{1,5}", fullmatch=True), st.sampled_from(outcomes.OUTCOMES), min_size=1))
def test_each_end_is_on_disk_at_once_and_retry_takes_exactly_what_did_not_end_well(tmp_path_factory, ended):
    import os

    before = os.environ.get(outcomes.STATE_ENV)  # the suite's own (tests/conftest.py): put back after
    os.environ[outcomes.STATE_ENV] = str(tmp_path_factory.mktemp("state"))
    try:
        rec = outcomes.Record("inventory/lab.py", run="r1")
        for i, (host, outcome) in enumerate(ended.items()):
            rec.ended(host, outcome, f"because\n{i}")
            on_disk = json.loads(rec.path.read_text())["hosts"]  # written as the host ends: Ctrl-C keeps it
            assert on_disk[host]["outcome"] == outcome and on_disk[host]["why"] == f"because {i}"
            assert on_disk[host]["run"] == "r1"
        names = sorted(ended) + ["unrecorded"]
        take, said = outcomes.to_retry(rec.read(), names)
        assert take == [n for n in names if ended.get(n) in outcomes.RETRY]
        assert all(any(line.startswith(f"{n}: last run {ended[n]}") for line in said) for n in take)
        assert oct(rec.path.stat().st_mode & 0o777) == "0o600"
    finally:
        if before is None:
            del os.environ[outcomes.STATE_ENV]
        else:
            os.environ[outcomes.STATE_ENV] = before


def test_the_suite_keeps_the_control_sides_state_out_of_the_real_home(tmp_path_factory):
    """The operator's report: the harness tests left 30+ outcome records in root's real
    ``~/.local/state/rigkit/outcomes``. tests/conftest.py points ``RIGKIT_STATE`` (which every ``rigkit``
    the suite runs inherits) at this run's temporary folder."""
    import os
    from pathlib import Path

    base = tmp_path_factory.getbasetemp().resolve()
    where = outcomes.state_dir().resolve()
    assert os.environ.get(outcomes.STATE_ENV) and base in where.parents, (where, base)
    assert outcomes.record_path("inventory/sandbox.py").resolve().is_relative_to(base)
    assert not where.is_relative_to((Path.home() / ".local" / "state").resolve())


def test_a_later_run_on_some_hosts_keeps_the_others_entries(monkeypatch, tmp_path):
    monkeypatch.setenv(outcomes.STATE_ENV, str(tmp_path))
    outcomes.Record("lab.py", "r1").ended("a", "unreachable", "ssh: no route")
    outcomes.Record("lab.py", "r1").ended("b", "ok", "changed and confirmed")
    outcomes.Record("lab.py", "r2").ended("a", "ok", "changed and confirmed")
    last = outcomes.Record("lab.py").read()
    assert {h: (v["outcome"], v["run"]) for h, v in last.items()} == {"a": ("ok", "r2"), "b": ("ok", "r1")}
    assert outcomes.to_retry(last, ["a", "b"]) == ([], [])


def test_an_outcome_not_known_and_a_file_that_is_not_a_record_are_refused_by_name(monkeypatch, tmp_path):
    monkeypatch.setenv(outcomes.STATE_ENV, str(tmp_path))
    rec = outcomes.Record("lab.py")
    with pytest.raises(ValueError, match="'fine' is not one of ok, converged"):
        rec.ended("a", "fine")
    rec.path.parent.mkdir(parents=True)
    rec.path.write_text('{"hosts": [1]}')
    with pytest.raises(ValueError, match="not an outcome record"):
        rec.read()


def test_the_cli_refuses_a_batch_plan_or_a_retry_it_cannot_do_before_any_host_is_touched(tmp_path, monkeypatch):
    """``rigkit deploy`` (a subprocess: pyinfra's CLI gevent-patches the process): each refusal exit 2, naming
    the option, its value and what is allowed, before pyinfra or a host is reached (the hosts listen nowhere)."""
    from .test_cli import FULL_DATA, project, run

    two = 'hosts = [("a", {"ssh_hostname": "127.0.0.1", "ssh_port": 1}), ("b", {"ssh_hostname": "127.0.0.2", "ssh_port": 1})]\n'
    proj = project(tmp_path, FULL_DATA, two)
    env = {outcomes.STATE_ENV: str(tmp_path / "state")}
    deploy = ["deploy", "-i", "inventory/lab.py", "--no-smoke"]
    too_many = run([*deploy, "--canary", "3"], cwd=proj, env_extra=env)
    assert too_many.returncode == 2 and "--canary 3: allowed 1 to 2" in too_many.stderr, too_many.stderr
    zero = run([*deploy, "--batch", "0"], cwd=proj, env_extra=env)
    assert zero.returncode == 2 and "--batch" in zero.stderr and "0" in zero.stderr, zero.stderr
    both = run([*deploy, "--retry-failed", "--host", "a"], cwd=proj, env_extra=env)
    assert both.returncode == 2 and "--retry-failed and --host: choose one" in both.stderr, both.stderr
    none = run([*deploy, "--retry-failed"], cwd=proj, env_extra=env)
    assert none.returncode == 2 and "no deploy of" in none.stderr and "is recorded" in none.stderr, none.stderr
    monkeypatch.setenv(outcomes.STATE_ENV, env[outcomes.STATE_ENV])  # the record the CLI reads, written here
    rec = outcomes.Record(str(proj / "inventory" / "lab.py"))
    rec.ended("a", "ok", "changed and confirmed")
    rec.ended("b", "converged", "converged (probe)")
    nothing = run([*deploy, "--retry-failed"], cwd=proj, env_extra=env)
    assert nothing.returncode == 0 and "left no host to retry" in nothing.stderr, nothing.stderr
    for proc in (too_many, zero, both, none, nothing):
        assert "$ pyinfra" not in proc.stderr
