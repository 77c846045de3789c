"""The one revert's decisions (rigkit.deploy.transaction.settle), against a host whose agent answers
as a test sets and a pyinfra whose runs a test scripts: a converged run asks nothing; a run that
failed before any operation leaves the host; a failed run or a failed confirmation is recorded as a
failed generation, the start generation is deployed back and confirmed; --no-revert leaves it; a
revert that fails holds the host; a host with nothing recorded cannot go back."""

from __future__ import annotations

import json
import subprocess

import pytest

from rigkit.cli.deployout import Console
from rigkit.deploy import run as deployrun
from rigkit.deploy import transaction as cr

SPEC_A = {"llama_swap": {"preload": ["strata"], "members": {"strata": {"args": ["a"]}}}}
SPEC_B = {"llama_swap": {"preload": ["strata"], "members": {"strata": {"args": ["b"]}}}}


class FakeRemote:
    """The host's agent: a generations index, records, and confirm answers (a list, in turn)."""

    name = "demo"

    def __init__(self, current=2, confirms=(True,), live=None):
        self.index = {"current": current, "generations": [{"n": n} for n in range(1, (current or 0) + 1)]}
        self.records = {n: {"n": n, "spec": SPEC_A} for n in range(1, (current or 0) + 1)}
        self.confirms = list(confirms)
        self.calls: list[tuple] = []
        self.requests: list[dict] = []
        #: the sha256 of the live config the host serves (``generation current``'s ``live_sha256``);
        #: None: an agent that predates ``generation current`` (the caller falls back to list/show)
        self.live = live

    def agent(self, *args, stdin=None, timeout=60, lease=None):
        self.calls.append(args)
        out, rc = "", 0
        if args[:2] == ("generation", "current"):
            if self.live is None:
                return subprocess.CompletedProcess(args, 2, "", "usage: rigkit-agent generation")
            n = self.index["current"]
            out = json.dumps({"index": self.index, "current": n, "record": self.records.get(n), "live_sha256": self.live})
        elif args[:2] == ("generation", "list"):
            out = json.dumps(self.index)
        elif args[:2] == ("generation", "show"):
            out = json.dumps({"record": self.records[int(args[2])]})
        elif args[:2] == ("generation", "record"):
            n = max(g["n"] for g in self.index["generations"]) + 1
            self.index["generations"].append({"n": n, "failed": args[3]})
            out = json.dumps({"n": n})
        elif args[:2] == ("generation", "fail"):
            n = int(args[2])
            self.index["current"] = n - 1
            out = json.dumps({"n": n, "failed": args[4]})
        elif args[:2] == ("generation", "hold"):
            out = json.dumps({"generation": int(args[2])})
        elif args[0] == "confirm":
            ok = self.confirms.pop(0)
            req = json.loads(stdin)
            self.requests.append(req)
            out = json.dumps({"generation": req["generation"], "confirmed": ok, "members": ["strata"],
                              "failed": [] if ok else ["strata: HTTP 502 through llama-swap"]})
            rc = 0 if ok else 1
        return subprocess.CompletedProcess(args, rc, out + "\n", "")


def pyinfra_run(rc=0, changed=0, failed=None, ran=True):
    ops = [{"name": "Activate", "success": ["demo"] * bool(changed), "error": ["demo"] if failed else []}]
    ops += [{"name": f"op{i}", "success": ["demo"]} for i in range(max(0, changed - 1))]
    stderr = "--> Beginning operation run\n" if ran else ""
    return subprocess.CompletedProcess([], rc, json.dumps({"results": {"operations": ops, "failed_hosts": []}}), stderr)


@pytest.fixture
def world(monkeypatch):
    """The change of one host and the pyinfra runs its revert makes (scripted by ``reverts``)."""
    class W:
        reverts: list = []
        runs: list = []

    def fake_run(inv, hosts, overrides, dry=False, verbose=0, extra_env=None, *, out):
        W.runs.append(dict(extra_env or {}))
        return W.reverts.pop(0), {}

    monkeypatch.setattr(deployrun, "run_pyinfra", fake_run)
    return W


def change(remote, start=2, live=None):
    hs = type("HS", (), {"name": "demo"})()
    return cr.Change(hs, remote, "the deploy", start=start, start_record=remote.records.get(start), lock_what="x",
                     out=Console(), start_live=live)


def settle(ch, proc, no_revert=False):
    return cr.settle(ch, proc, "inv.py", {}, 0, "lease", {"spec": SPEC_B}, no_revert, None)


def test_a_converged_run_asks_nothing(world):
    remote = FakeRemote()
    assert settle(change(remote), pyinfra_run(changed=0)) == 0
    assert remote.calls == [] and world.runs == []


def test_a_change_that_confirms_is_done(world, capsys):
    remote = FakeRemote()
    remote.records[3] = {"n": 3, "spec": SPEC_B}
    remote.index = {"current": 3, "generations": [{"n": 1}, {"n": 2}, {"n": 3}]}
    assert settle(change(remote), pyinfra_run(changed=3)) == 0
    req = [c for c in remote.calls if c[0] == "confirm"]
    assert len(req) == 1 and world.runs == []
    assert "generation 3 confirmed" in capsys.readouterr().err


def test_a_change_that_only_staged_asks_nothing(world, capsys):
    """Issue 61: a new generation that differs from the start only in the review copy and the host
    config (a member staged) sends no completion and marks the change, so the deploy runs no smoke."""
    files = {"/etc/llama-swap/config.yaml": {"sha256": "a"}, "/etc/llama-swap/config.staged.yaml": {"sha256": "b"},
             "/etc/rigkit/host.json": {"sha256": "c"}}
    remote = FakeRemote(live="a")
    remote.records[2] = {"n": 2, "spec": SPEC_A, "files": files}
    remote.records[3] = {"n": 3, "spec": SPEC_A, "files": {**files, "/etc/llama-swap/config.staged.yaml": {"sha256": "B"},
                                                         "/etc/rigkit/host.json": {"sha256": "C"}}}
    remote.index = {"current": 3, "generations": [{"n": 1}, {"n": 2}, {"n": 3}]}
    ch = change(remote, live="a")
    assert settle(ch, pyinfra_run(changed=2)) == 0
    assert not [c for c in remote.calls if c[0] == "confirm"] and ch.staged_only
    assert "generation 3 changes only what is staged" in capsys.readouterr().err
    remote.records[3]["files"]["/etc/llama-swap/config.yaml"] = {"sha256": "A"}  # the live config too: confirmed
    remote.live = "A"
    ch = change(remote, live="a")
    assert settle(ch, pyinfra_run(changed=2)) == 0
    assert [c for c in remote.calls if c[0] == "confirm"] and not ch.staged_only


@pytest.mark.parametrize("served, after", [("w", "a"), (None, "a"), ("a", None)])
def test_a_staged_only_record_change_that_replaced_what_the_host_served_is_confirmed(world, capsys, served, after):
    """The operator's repro: generation 2 declares strata-8k staged, ``rigkit wire-in --activate`` (with it
    live) left the host serving another config (``w``) without recording a generation, and the deploy
    of the spec (strata-8k staged again) records generation 3, which differs from 2 only in what is
    staged — but the run put generation 3's live config in place of the one the host served: that
    changed what serves, so it is confirmed (and the smoke runs). A host whose served config is unknown
    before or after (``None``: an agent that does not read it) is confirmed too."""
    files = {"/etc/llama-swap/config.yaml": {"sha256": "a"}, "/etc/llama-swap/config.staged.yaml": {"sha256": "b"},
             "/etc/rigkit/host.json": {"sha256": "c"}}
    remote = FakeRemote(live=after)
    remote.records[2] = {"n": 2, "spec": SPEC_A, "files": files}
    remote.records[3] = {"n": 3, "spec": SPEC_A, "files": {**files, "/etc/rigkit/host.json": {"sha256": "C"}}}
    remote.index = {"current": 3, "generations": [{"n": 1}, {"n": 2}, {"n": 3}]}
    ch = change(remote, live=served)
    assert settle(ch, pyinfra_run(changed=2)) == 0
    assert [c for c in remote.calls if c[0] == "confirm"] and not ch.staged_only
    assert "changes only what is staged" not in capsys.readouterr().err


def test_a_held_host_whose_served_config_stayed_is_staged_only(world, capsys):
    """Under a wire-in hold the deploy does not activate: what the host serves (``h``) is neither record's
    live config, and it did not change — a generation that differs only in what is staged asks nothing."""
    files = {"/etc/llama-swap/config.yaml": {"sha256": "a"}, "/etc/llama-swap/config.staged.yaml": {"sha256": "b"}}
    remote = FakeRemote(live="h")
    remote.records[2] = {"n": 2, "spec": SPEC_A, "files": files}
    remote.records[3] = {"n": 3, "spec": SPEC_A, "files": {**files, "/etc/llama-swap/config.staged.yaml": {"sha256": "B"}}}
    remote.index = {"current": 3, "generations": [{"n": 1}, {"n": 2}, {"n": 3}]}
    ch = change(remote, live="h")
    assert settle(ch, pyinfra_run(changed=1)) == 0
    assert not [c for c in remote.calls if c[0] == "confirm"] and ch.staged_only


def test_begin_reads_what_the_host_serves_under_the_lock(monkeypatch):
    """:func:`begin` keeps the live config's hash the agent read under the lock (``live_sha256``)."""
    class Hold:
        def __init__(self, *a, **k):
            self.reading = {"index": {}, "current": 4, "record": {"n": 4}, "live_sha256": "f00"}

        def take(self):
            return None

    monkeypatch.setattr(cr, "LockHold", Hold)
    ch = cr.begin(type("HS", (), {"name": "demo"})(), object(), "the deploy", "l", "x", Console())
    assert (ch.start, ch.start_live) == (4, "f00")


def test_a_run_that_failed_before_any_operation_touched_nothing(world, capsys):
    remote = FakeRemote()
    assert settle(change(remote), pyinfra_run(rc=1, failed=True, ran=False)) == 1
    assert world.runs == [] and "failed before it changed anything" in capsys.readouterr().err


def test_a_failed_run_is_recorded_failed_and_the_start_generation_deployed_back_and_confirmed(world, capsys):
    remote = FakeRemote()
    world.reverts = [pyinfra_run(changed=2)]
    assert settle(change(remote), pyinfra_run(rc=1, changed=1, failed=True)) == 1
    assert remote.index["generations"][-1]["failed"].startswith("the deploy failed at: Activate")
    assert world.runs == [{"RIGKIT_DEPLOY_GENERATION": "2", "RIGKIT_LOCK_LEASE": "lease"}]
    err = capsys.readouterr().err
    assert "the failed attempt is generation 3, recorded as failed" in err
    assert "reverted to generation 2, confirmed: the host serves as before" in err
    # the start generation is confirmed asking the member the attempt touched (strata's args differ)
    assert remote.requests == [{"generation": 2, "members": ["strata"], "budget_s": None, "files": True}]


def test_a_change_whose_confirmation_fails_is_marked_failed_and_put_back(world, capsys):
    remote = FakeRemote(confirms=(False, True))
    remote.records[3] = {"n": 3, "spec": SPEC_B}
    remote.index = {"current": 3, "generations": [{"n": 1}, {"n": 2}, {"n": 3}]}
    world.reverts = [pyinfra_run(changed=2)]
    assert settle(change(remote), pyinfra_run(changed=4)) == 1
    assert ("generation", "fail", "3", "--why",
            "its confirmation failed: strata: HTTP 502 through llama-swap") in remote.calls
    assert world.runs[0]["RIGKIT_DEPLOY_GENERATION"] == "2"
    assert "reverted to generation 2, confirmed" in capsys.readouterr().err


def test_no_revert_leaves_the_host_as_the_change_left_it_and_says_so(world, capsys):
    remote = FakeRemote()
    assert settle(change(remote), pyinfra_run(rc=1, changed=1, failed=True), no_revert=True) == 1
    assert world.runs == []
    assert "--no-revert: the host is left as the change left it" in capsys.readouterr().err


def test_a_revert_that_fails_holds_the_host_at_its_start_and_says_where_it_is(world, capsys):
    remote = FakeRemote(confirms=(False,))
    world.reverts = [pyinfra_run(changed=2)]
    assert settle(change(remote), pyinfra_run(rc=1, changed=1, failed=True)) == 1
    assert any(c[:3] == ("generation", "hold", "2") for c in remote.calls)
    err = " ".join(capsys.readouterr().err.split())
    assert "and so did the revert to generation 2: generation 2 does not confirm either" in err
    assert "it is held at generation 2" in err and "rigkit rollback -i inv.py --host demo --release" in err


def test_a_failed_first_deploy_has_nothing_to_go_back_to(world, capsys):
    remote = FakeRemote(current=None)
    assert settle(change(remote, start=None), pyinfra_run(rc=1, changed=1, failed=True)) == 1
    assert world.runs == [] and not any(c[:2] == ("generation", "record") for c in remote.calls)
    assert "there is no earlier generation to go back to" in capsys.readouterr().err


def test_a_failed_run_that_declared_what_the_start_declares_is_not_put_back_but_confirmed(world, capsys):
    remote = FakeRemote()
    remote.records[2]["key"] = "same"
    ch = change(remote)
    code = cr.settle(ch, pyinfra_run(rc=1, changed=1, failed=True), "inv.py", {}, 0, "lease",
                     {"spec": SPEC_A, "key": "same"}, False, None)
    assert code == 1 and world.runs == []  # no revert deploy
    assert remote.requests == [{"generation": 2, "members": [], "budget_s": None, "files": True}]
    err = " ".join(capsys.readouterr().err.split())
    assert "the failed attempt is generation 3, recorded as failed" in err
    assert "it declared what generation 2 declares, so there is nothing to put back: it still serves" in err


def test_the_list_says_whether_a_failed_change_was_put_back_or_left(world):
    from rigkit.cli.generations import list_lines

    remote = FakeRemote()
    settle(change(remote), pyinfra_run(rc=1, changed=1, failed=True), no_revert=True)
    why = remote.index["generations"][-1]["failed"]
    assert why.endswith(cr.LEFT)
    index = {"current": 2, "generations": [{"n": 2, "reason": "deploy", "changed": ["x"]},
                                           {"n": 3, "reason": "deploy", "failed": why, "changed": ["x"]},
                                           {"n": 4, "reason": "deploy", "failed": "the deploy failed at: A",
                                            "changed": ["x"]}]}
    lines = list_lines(index, None)
    assert "deploy (FAILED, left as it failed: the deploy failed at: Activate): x" in lines[1]
    assert "deploy (FAILED, put back: the deploy failed at: A): x" in lines[2]
