"""The wire-in, the watchdog and the keeper on a deployed sandbox host (nspawn lane, real SSH + sudo,
llama-swap 250, the real engine running the HyperQwen stand-in image and llama.cpp's server for Strata).

One host is deployed for the module (through the activation path: a first activation), then the tests
run in file order on it: show, activate, the keeper after a swap's ttl, rollback + hold + release, a
broken member rolled back by itself, the watchdog (unload, answer again, back off, idle in a window),
a failed first activation, and the deploy's smoke (passing, then failing on a FAIL verdict).
HyperQwen's stand-in engine is told to fail through ``hostctl.HQ_CONTROL`` (``answer500``; tests/harness/stubs/openai_stub.py).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[2]
RIGKIT = str(Path(sys.executable).parent / "rigkit")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402

PROJECT = sandbox_project.cwd()  # the tests' own group_data, never the operator's (sandbox_project.py)

from rigkit.agentcmd import activate_command  # noqa: E402
from rigkit.common.holds import read_holds  # noqa: E402

TOKEN = hostctl.hub_token()
SUMMARY = re.compile(r"^(?P<host>\S+): (?P<total>\d+) operations: (?P<changed>\d+) changed, (?P<unchanged>\d+) unchanged, "
                     r"(?P<failed>\d+) failed$", re.M)
AGENT = "/opt/rigkit/venv/bin/rigkit-agent"
LIVE = "/etc/llama-swap/config.yaml"
HQ_CONTROL = hostctl.HQ_CONTROL
FLIP_TTL4 = 'llama_swap={"members": {"hyperqwen": {"staged": false, "ttl": 4}}}'
FLIP = 'llama_swap={"members": {"hyperqwen": {"staged": false}}}'
KEY_HEADER = "-H \"Authorization: Bearer $(sed -n 's/^VLLM_API_KEY=//p' /etc/rigkit/secrets/hyperqwen.env)\""


rigkit = sandbox_project.rigkit  # rigkit(host, *args, timeout=…)


def deploy(host, *args, smoke: bool = False):
    return rigkit(host, "deploy", "-i", "inventory/sandbox.py", "--full", *([] if smoke else ["--no-smoke"]), *args)


def wire_in(host, *args):
    return rigkit(host, "wire-in", "-i", "inventory/sandbox.py", "--host", host.name, *args)


def changed(proc) -> int:
    m = SUMMARY.search(proc.stderr)
    assert m, proc.stderr[-3000:]
    return int(m["changed"])


def running(host) -> dict[str, str]:
    return {m["model"]: m["state"] for m in json.loads(host.run("curl -fsS 127.0.0.1:8080/running").stdout)["running"]}


def complete(host, model: str, check: bool = True) -> subprocess.CompletedProcess:
    body = json.dumps({"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    return host.run(f"curl -sS -m 120 -o /dev/null -w '%{{http_code}}' 127.0.0.1:8080/v1/chat/completions {KEY_HEADER} "
                    f"-H 'Content-Type: application/json' -d {shlex.quote(body)}", check=check)


def wait_for(pred, timeout: float = 30.0, every: float = 0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        val = pred()
        if val:
            return val
        time.sleep(every)
    return pred()


def agent(host, *args, check: bool = False) -> subprocess.CompletedProcess:
    return host.run(f"{AGENT} {' '.join(shlex.quote(a) for a in args)}", check=check)


@pytest.fixture(scope="module")
def host(make_module_host):
    """A copy of the run's converged host: its two deploys (the first activation, then nothing to do)
    are the golden host's, and so is its activation log."""
    h = make_module_host("w1", converged=True)
    h.first, h.second = h.golden.deploys()
    h.key = h.run("sed -n 's/^VLLM_API_KEY=//p' /etc/rigkit/secrets/hyperqwen.env").stdout.strip()
    return h


def test_first_deploy_activates_every_member_then_strata_and_a_second_changes_nothing(host):
    assert host.first.returncode == 0, host.first.stderr[-4000:]
    assert host.second.returncode == 0, host.second.stderr[-4000:]
    assert changed(host.second) == 0, host.second.stderr[-4000:]
    log = host.run("cat /var/lib/rigkit/activate.log").stdout
    assert "first activation: /etc/llama-swap/config.yaml does not exist yet" in log
    assert log.index("completion to gguf-baseline (its definition changed)") < log.index(
        "completion to strata (the resident, so it stays loaded)")
    assert running(host) == {"strata": "ready"}


def test_show_diffs_live_with_declared(host):
    same = wire_in(host, "--show")
    assert same.returncode == 0, same.stderr
    assert f"{host.name}: the live config is the declared one; no differences" in same.stdout
    flip = wire_in(host, "--show", "--data", FLIP_TTL4)
    assert flip.returncode == 3, flip.stderr
    assert f"--- {host.name}:/etc/llama-swap/config.yaml (live)" in flip.stdout
    assert '+  "hyperqwen":' in flip.stdout and '+            - "hyperqwen"' in flip.stdout
    # the hint carries the --data this look was given: as printed, it activates what was shown
    assert (f"{host.name}: members added: hyperqwen; `rigkit wire-in -i inventory/sandbox.py --host {host.name} "
            f"--activate --data {shlex.quote(FLIP_TTL4)}` activates this config (the --data given here included)") in flip.stdout
    assert host.key and host.key not in flip.stdout + flip.stderr


def test_activate_wires_hyperqwen_in_on_demand_and_leaves_strata_loaded(host):
    before = host.run(f"cat {LIVE}").stdout
    proc = wire_in(host, "--activate", "--data", FLIP_TTL4)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "completion to hyperqwen (its definition changed) ..." in proc.stdout
    assert proc.stdout.index("hyperqwen: HTTP 200") < proc.stdout.index("strata: HTTP 200")
    assert host.key not in proc.stdout + proc.stderr
    assert running(host) == {"strata": "ready"}
    assert '"hyperqwen":' in host.run(f"cat {LIVE}").stdout
    newest = host.run(f"ls {LIVE}.bak-* | tail -1").stdout.strip()
    assert host.run(f"cat {newest}").stdout == before
    assert wire_in(host, "--show", "--data", FLIP_TTL4).returncode == 0
    assert complete(host, "hyperqwen").stdout == "200"  # on demand: swaps Strata out
    assert running(host) == {"hyperqwen": "ready"}


def test_keeper_brings_strata_back_after_a_swaps_ttl_ran_out(host):
    host.quiet_automatic_jobs()
    if "hyperqwen" not in running(host):
        assert complete(host, "hyperqwen").stdout == "200"
    assert wait_for(lambda: running(host) == {}, timeout=30), running(host)  # ttl 4 s
    proc = agent(host, "keeper")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "keeper: no member loaded (a ttl ran out after a swap?); bringing strata back" in proc.stdout
    assert "keeper: strata is back" in proc.stdout
    assert running(host) == {"strata": "ready"}
    again = agent(host, "keeper")
    assert again.returncode == 0 and again.stdout.strip() == "keeper: loaded: strata"


def test_rollback_records_a_hold_the_deploy_reports_and_respects_until_released(host, tmp_path):
    wired = host.run(f"cat {LIVE}").stdout
    proc = wire_in(host, "--rollback")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    try:  # the hold is released whatever fails below: this module's later tests share the host
        live = host.run(f"cat {LIVE}").stdout
        assert '"hyperqwen":' not in live and running(host) == {"strata": "ready"}
        (tmp_path / "holds.json").write_text(host.run("cat /var/lib/rigkit/holds.json").stdout)
        hold = read_holds(tmp_path / "holds.json")["llama-swap"]
        assert hold["by"] == "rigkit wire-in --rollback" and hold["held_back_members"] == {
            "added": ["hyperqwen"], "removed": [], "changed": []}
        assert host.run(f"cat {hold['held_back_copy']}").stdout == wired
        assert "hold recorded in /var/lib/rigkit/holds.json" in proc.stdout

        shown = wire_in(host, "--show", "--data", FLIP_TTL4)
        assert shown.returncode == 3 and f"{host.name}: hold since {hold['since']} (rigkit wire-in --rollback)" in shown.stdout
        # a hold is a warning, as a rollback's is: drift reports it, with the command that releases it, and it
        # counts for nothing (this module's host has its keeper and watchdog timers stopped: those are drift)
        rc, records, out = drift_records(host, "--no-plan")
        row = next(r for r in records if r["kind"] == "hold")
        others = [r for r in records if r.get("host") and r["kind"] not in ("hold", "status", "run")]
        assert (rc, row["severity"]) == (3 if any(r["severity"] == "drift" for r in others) else 0, "warn"), out
        (status,) = [r for r in records if r["kind"] == "status"]
        assert status["findings"] == sum(r["severity"] in ("drift", "error") for r in others), out
        assert "; rolled back from a config that added: hyperqwen (against the one restored; copy: " in row["actual"]
        assert row["actual"].endswith(f"until `rigkit wire-in -i inventory/sandbox.py --host {host.name} --release`")

        held = deploy(host, "--data", FLIP_TTL4, "-v")  # -v: the operations with no changes listed too
        assert held.returncode == 0, held.stderr[-4000:]
        assert f"llama-swap: HELD since {hold['since']}" in held.stderr and "is NOT activated" in held.stderr
        assert host.run(f"cat {LIVE}").stdout == live  # not re-activated
        assert re.search(r"Activate the declared live llama-swap config \(on the host\) \n(?:\s+\[\S+\] .*\n)*?\s+\[\S+\] No changes",
                         held.stderr)

        refused = wire_in(host, "--activate", "--data", FLIP_TTL4)
        assert refused.returncode == 1 and "held: /etc/llama-swap/config.yaml was rolled back" in refused.stdout

        released = wire_in(host, "--release")
        assert released.returncode == 0 and "released the hold" in released.stdout
        assert host.run("cat /var/lib/rigkit/holds.json").stdout.strip() == "{}"
    finally:
        if host.run("cat /var/lib/rigkit/holds.json").stdout.strip() not in ("", "{}"):
            wire_in(host, "--release")


def drift_records(host, *args) -> tuple[int, list[dict], str]:
    proc = rigkit(host, "drift", "-i", "inventory/sandbox.py", "--json", *args)
    return proc.returncode, [json.loads(ln) for ln in proc.stdout.splitlines() if ln.strip()], proc.stdout + proc.stderr


def test_a_wire_in_round_trip_leaves_drift_clean_without_another_deploy(host):
    """activate (--data: HyperQwen wired in), rollback, release, the declared data unchanged: the live
    config, the staging copy the deploy compares with, the review copy and the host config are the
    declared ones again, so drift (the plan included) is clean with no deploy in between."""
    on = wire_in(host, "--activate", "--data", FLIP)
    assert on.returncode == 0, on.stdout + on.stderr
    assert '"hyperqwen":' in host.run("cat /var/lib/rigkit/llama-swap/config.next.yaml").stdout
    back = wire_in(host, "--rollback")
    assert back.returncode == 0, back.stdout + back.stderr
    assert "staging copy /var/lib/rigkit/llama-swap/config.next.yaml now holds the live config" in back.stdout
    assert host.run("cat /var/lib/rigkit/llama-swap/config.next.yaml").stdout == host.run(f"cat {LIVE}").stdout
    assert wire_in(host, "--release").returncode == 0
    rc, records, out = drift_records(host)
    findings = [r for r in records if r["severity"] != "status"]  # the document's status/run records aside
    assert (rc, findings) == (0, []), out


def _docs_member(staged: bool) -> dict:
    """The member of the operator's own exactly as docs/operating.md "A member of your own" declares it
    (its group_data lines exec'd as printed: tests/unit/test_own_member.py runs the same lines)."""
    import importlib.util

    where = importlib.util.spec_from_file_location("own_member_example", ROOT / "tests" / "unit" / "test_own_member.py")
    mod = importlib.util.module_from_spec(where)
    where.loader.exec_module(mod)
    return mod.example(staged=staged)


def _serving(host) -> str:
    """llama-swap's main PID and start time (systemd's own record): the same after a change means no restart."""
    return host.run("systemctl show -p MainPID -p ExecMainStartTimestampMonotonic llama-swap.service").stdout


def _stream(host) -> str:
    """What the held stream has received so far (curl writes its file at the first byte of the body)."""
    return host.run("cat /tmp/stream.out 2>/dev/null || true").stdout


def _backups(host) -> list[str]:
    return host.run("ls -1 /etc/rigkit/*.rigkit-bak-* /etc/llama-swap/*.rigkit-bak-* /etc/llama-swap/config.yaml.bak-* "
                    "2>/dev/null || true").stdout.split()


def test_staging_a_member_never_touches_what_serves_and_every_way_back_leaves_the_rig_clean(host):
    """Issue 61's journey on one host: first for HyperQwen (staged as declared; no stream can be held
    through a staged member), then for the member the docs declare (strata-8k) while HyperQwen (wired
    in) streams a request held by its stand-in engine (``chunk_s`` a FIFO: the stream waits on the test,
    never on the machine's speed): staging the member changes nothing that serves (the stream completes
    after the deploy, llama-swap's PID and start time unchanged, no completion sent); show, activate,
    roll back (drift exit 0, the hold a warning), release, and the deploy changes nothing and keeps no
    backup. Then the same member flipped in the declared data: after rollback the files the hold keeps
    are ``hold`` rows (exit 0), and the deploy after the release takes the wire-in's writes for rigkit's."""
    from rigkit.spec.layers import merge_layers

    wired = {"llama_swap": {"members": {"hyperqwen": {"staged": False}}}}
    staged = merge_layers(wired, _docs_member(staged=True))
    live = merge_layers(wired, _docs_member(staged=False))
    flip = 'llama_swap={"members": {"strata-8k": {"staged": false}}}'

    def run(*args, data=staged):
        return rigkit(host, *args, data=data)

    # HyperQwen, staged as declared by default: a change to it while staged changes nothing that serves,
    # and its show / activate / rollback / release end with a deploy that changes nothing
    hq = {"llama_swap": {"members": {"hyperqwen": {"description": "HyperQwen, changed while staged"}}}}
    # the premise: the host's current generation is the declared state (an earlier test's held deploy
    # recorded one with HyperQwen wired in; the change below is judged against the current generation)
    declared = run("deploy", "-i", "inventory/sandbox.py", "--full", "--no-smoke", data=None)
    assert declared.returncode == 0, declared.stderr[-4000:]
    before, backups = _serving(host), _backups(host)
    stage = run("deploy", "-i", "inventory/sandbox.py", "--full", "--no-smoke", data=hq)
    assert stage.returncode == 0 and changed(stage) > 0, stage.stderr[-4000:]
    assert "changes only what is staged (members: staged hyperqwen)" in stage.stderr, stage.stderr[-3000:]
    assert _serving(host) == before and _backups(host) == backups
    assert run("wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--show", "--data", FLIP, data=hq).returncode == 3
    for step in ("--activate", "--rollback"):
        done = run("wire-in", "-i", "inventory/sandbox.py", "--host", host.name, step, *(["--data", FLIP] * (step == "--activate")),
                   data=hq)
        assert done.returncode == 0, done.stdout + done.stderr
    rc, records, out = drift_records_with(host, hq)
    assert rc == 0 and {r["severity"] for r in records if r["kind"] not in ("status", "run")} == {"warn"}, out
    assert run("wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--release", data=hq).returncode == 0
    backups = _backups(host)
    again = run("deploy", "-i", "inventory/sandbox.py", "--full", "--no-smoke", data=hq)
    assert again.returncode == 0 and changed(again) == 0, again.stderr[-4000:]
    assert "edited by hand?" not in again.stderr and _backups(host) == backups

    first = run("deploy", "-i", "inventory/sandbox.py", "--full", "--no-smoke", data=wired)
    assert first.returncode == 0, first.stderr[-4000:]
    fifo = f"{HQ_CONTROL}/chunk_s"
    host.run(f"mkdir -p {HQ_CONTROL} && rm -f {fifo} /tmp/stream.* && mkfifo {fifo}")
    body = json.dumps({"model": "hyperqwen", "max_tokens": 8, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]})
    try:
        host.run(f"setsid nohup curl -sS -N -m 900 -D /tmp/stream.hdr -o /tmp/stream.out 127.0.0.1:8080/v1/chat/completions "
                 f"{KEY_HEADER} -H 'Content-Type: application/json' -d {shlex.quote(body)} "
                 "</dev/null >/dev/null 2>/tmp/stream.err &")
        # the premise: the stream is in flight (its headers came; the engine waits on the FIFO)
        assert wait_for(lambda: " 200" in host.run("cat /tmp/stream.hdr 2>/dev/null || true").stdout, timeout=300), \
            host.run("cat /tmp/stream.err; journalctl -u llama-swap -n 30 --no-pager", check=False).stdout
        before, backups = _serving(host), _backups(host)
        stage = run("deploy", "-i", "inventory/sandbox.py", "--full")  # the smoke too, as an operator runs it
        assert stage.returncode == 0, stage.stderr[-4000:]
        assert "changes only what is staged (members: staged strata-8k)" in stage.stderr, stage.stderr[-3000:]
        assert f"{host.name}: no smoke: the deploy only staged" in stage.stderr, stage.stderr[-3000:]
        assert "[DONE]" not in _stream(host)  # still streaming through the deploy
        assert _serving(host) == before
        host.run(f"echo 0.01 > {fifo}")  # let the engine go on: the stream completes
        assert wait_for(lambda: "[DONE]" in _stream(host), timeout=120), \
            host.run("cat /tmp/stream.out /tmp/stream.err", check=False).stdout
    finally:
        host.run(f"rm -f {fifo}", check=False)
    assert _serving(host) == before and _backups(host) == backups

    shown = run("wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--show", "--data", flip)
    assert shown.returncode == 3 and '+  "strata-8k":' in shown.stdout, shown.stdout + shown.stderr
    on = run("wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--activate", "--data", flip)
    assert on.returncode == 0, on.stdout + on.stderr
    assert "completion to strata-8k (its definition changed)" in on.stdout
    back = run("wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--rollback")
    assert back.returncode == 0, back.stdout + back.stderr
    rc, records, out = drift_records_with(host, staged)
    rows = [r for r in records if r["kind"] not in ("status", "run")]
    assert rc == 0 and {r["severity"] for r in rows} <= {"warn", "hold"} and any(r["kind"] == "hold" for r in rows), out
    assert run("wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--release").returncode == 0
    backups = _backups(host)  # the activation path's own backups (activate, rollback) are by design
    again = run("deploy", "-i", "inventory/sandbox.py", "--full", "--no-smoke")
    assert again.returncode == 0 and changed(again) == 0, again.stderr[-4000:]
    assert "edited by hand?" not in again.stderr, [ln for ln in again.stderr.splitlines() if "edited by hand" in ln]
    assert _backups(host) == backups

    # the member flipped in the declared data itself: the wire-in writes the review copy and host config
    on = run("wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--activate", data=live)
    assert on.returncode == 0, on.stdout + on.stderr
    back = run("wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--rollback", data=live)
    assert back.returncode == 0, back.stdout + back.stderr
    rc, records, out = drift_records_with(host, live)
    kept = [r for r in records if r.get("item") in (LIVE, "/var/lib/rigkit/llama-swap/config.next.yaml")]
    assert rc == 0 and kept and {r["severity"] for r in kept} == {"hold"}, out
    assert not [r for r in records if r["severity"] == "drift"], out
    assert "to repair" not in out
    assert run("wire-in", "-i", "inventory/sandbox.py", "--host", host.name, "--release", data=live).returncode == 0
    after = run("deploy", "-i", "inventory/sandbox.py", "--full", "--no-smoke")  # the member staged again
    assert after.returncode == 0, after.stderr[-4000:]
    assert "edited by hand?" not in after.stderr, [ln for ln in after.stderr.splitlines() if "edited by hand" in ln]
    assert not [b for b in _backups(host) if b not in backups and ".rigkit-bak-" in b], _backups(host)


def drift_records_with(host, data: dict) -> tuple[int, list[dict], str]:
    proc = rigkit(host, "drift", "-i", "inventory/sandbox.py", "--json", "--no-plan", data=data)
    return proc.returncode, [json.loads(ln) for ln in proc.stdout.splitlines() if ln.strip()], proc.stdout + proc.stderr


def test_a_repair_deploy_names_the_backup_of_a_hand_edited_live_config_and_drift_says_it_will(host):
    with host.hand_edit(LIVE, "# edited by hand"):  # put back if the deploy did not replace it
        rc, records, out = drift_records(host, "--no-plan")
        assert rc == 3, out
        row = next(r for r in records if r["kind"] == "file" and r["item"] == LIVE)
        assert row["actual"].endswith("the deploy replaces it, keeping this one as /etc/llama-swap/config.yaml.bak-<UTC stamp> "
                                      f"(`rigkit wire-in -i inventory/sandbox.py --host {host.name} --show` diffs them)"), row
        proc = deploy(host)
        assert proc.returncode == 0, proc.stderr[-4000:]
    m = re.search(r"llama-swap: replaced the live /etc/llama-swap/config\.yaml \(any edits by hand included\); "
                  r"the previous config is kept as (/etc/llama-swap/config\.yaml\.bak-\S+)", proc.stderr)
    assert m, proc.stderr[-4000:]
    assert host.run(f"cat {m[1]}").stdout.endswith("# edited by hand\n")
    assert "# edited by hand" not in host.run(f"cat {LIVE}").stdout
    assert drift_records(host, "--no-plan")[0] == 0


def test_a_broken_new_member_is_rolled_back_by_itself_and_strata_still_answers(host):
    before = host.run(f"cat {LIVE}").stdout
    host.run(f"mkdir -p {HQ_CONTROL} && touch {HQ_CONTROL}/answer500")
    try:
        proc = wire_in(host, "--activate", "--data", FLIP)
    finally:
        host.run(f"rm -f {HQ_CONTROL}/answer500")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED: hyperqwen: HTTP 500 through llama-swap" in proc.stdout
    assert "rolled back: the previous config is live again and strata answers; the activation FAILED" in proc.stdout
    idx = generations(host)
    failed = idx["generations"][-1]
    assert failed["failed"].startswith("the wire-in activation failed: hyperqwen: HTTP 500") and \
        failed["reason"] == "wire-in --activate" and idx["current"] != failed["n"], idx
    assert f"reverted to generation {idx['current']} through the activation path, confirmed: strata answered" \
        in proc.stderr, proc.stderr[-3000:]
    assert host.run(f"cat {LIVE}").stdout == before
    assert running(host) == {"strata": "ready"}
    assert complete(host, "strata").stdout == "200"


def generations(host) -> dict:
    proc = agent(host, "generation", "list")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_deploy_that_breaks_strata_is_reverted_to_its_generation_and_no_revert_leaves_it_broken(host):
    """As on the rig: the sandbox's llama-server parses its command line as llama.cpp's does
    (tests/harness/stubs/llama_server.py), so a typo in ``strata.args`` makes Strata exit at start. The
    deploy fails naming the flag (what the server said, from llama-swap's log of the member), records
    the attempt as a failed generation, deploys the generation it started from back and confirms it:
    Strata answers through :8080 and drift is clean. With ``--no-revert`` the broken config stays live,
    the deploy says so, drift reports it, and the next deploy repairs it."""
    before = host.run(f"cat {LIVE}").stdout
    start = generations(host)["current"]
    bad = 'strata={"args": ["--threads", "1", "--no-such-flag"]}'
    proc = deploy(host, "--data", bad)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert "its server said: " in out and "error: invalid argument: --no-such-flag" in out, out[-4000:]
    assert f"reverted to generation {start}, confirmed: the host serves as before" in proc.stderr, out[-4000:]
    idx = generations(host)
    failed = idx["generations"][-1]
    assert idx["current"] == start and failed["failed"].startswith("the deploy failed at: "), idx
    listing = rigkit(host, "generations", "-i", "inventory/sandbox.py", "--host", host.name)
    assert f"deploy (FAILED, put back: the deploy failed at: " in listing.stdout.splitlines()[-1], listing.stdout
    refused = rigkit(host, "rollback", "-i", "inventory/sandbox.py", "--host", host.name, "--to", str(failed["n"]))
    assert refused.returncode == 2 and f"generation {failed['n']} on {host.name} is a failed change" in refused.stderr
    assert host.run(f"cat {LIVE}").stdout == before
    assert running(host) == {"strata": "ready"}
    assert complete(host, "strata").stdout == "200"
    assert drift_records(host, "--no-plan")[0] == 0
    # --no-revert: left as the change left it, and said
    kept = deploy(host, "--no-revert", "--data", bad)
    assert kept.returncode == 1, kept.stderr[-3000:]
    assert "--no-revert: the host is left as the change left it" in kept.stderr
    assert "--no-such-flag" in host.run(f"cat {LIVE}").stdout
    rc, records, out = drift_records(host, "--no-plan")
    assert rc == 3 and any(r["kind"] == "file" and r["item"] == LIVE for r in records), out[-3000:]
    fixed = deploy(host)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert host.run(f"cat {LIVE}").stdout == before and complete(host, "strata").stdout == "200"


def test_watchdog_unloads_a_member_answering_500_and_it_answers_again_then_backs_off(host):
    proc = wire_in(host, "--activate", "--data", FLIP)  # ttl 900: stays loaded between watchdog runs
    assert proc.returncode == 0, proc.stdout + proc.stderr
    host.quiet_automatic_jobs()
    host.run("rm -f /var/lib/rigkit/watchdog.json")
    wd = ("watchdog", "--failures", "2", "--backoff-after", "2", "--backoff-s", "600", "--timeout", "20")
    idle = agent(host, *wd)
    assert idle.returncode == 0 and "watchdog: hyperqwen is not running as a member (not listed); idle" in idle.stdout
    # the first completion of each HyperQwen process succeeds, every later one answers 500
    host.run(f"mkdir -p {HQ_CONTROL} && echo 1 > {HQ_CONTROL}/answer500")
    try:
        for round_ in (1, 2):
            assert complete(host, "hyperqwen").stdout == "200"
            assert running(host) == {"hyperqwen": "ready"}
            first = agent(host, *wd)
            assert first.returncode == 0, first.stdout + first.stderr
            assert "watchdog: hyperqwen failed a 1-token completion (HTTP 500: EngineDeadError" in first.stderr
            assert "1 of 2 in a row" in first.stderr and running(host) == {"hyperqwen": "ready"}
            second = agent(host, *wd)
            assert second.returncode == 0, second.stdout + second.stderr
            assert "watchdog: unloading hyperqwen through llama-swap after 2 failures in a row" in second.stderr
            assert "hyperqwen" not in running(host)
            state = json.loads(host.run("cat /var/lib/rigkit/watchdog.json").stdout)["hyperqwen"]
            assert state["unloads"] == round_
        assert "unloaded 2 times in a row without a healthy answer; backing off 600 s" in second.stderr
        # without a human: the next request starts it afresh and it answers
        assert complete(host, "hyperqwen").stdout == "200"
        agent(host, *wd)
        backing = agent(host, *wd)
        assert backing.returncode == 1
        assert "watchdog: backing off until" in backing.stderr and "leaving it alone" in backing.stderr
        assert running(host) == {"hyperqwen": "ready"}
        assert host.key not in first.stdout + first.stderr + second.stderr + backing.stderr
    finally:
        host.run(f"rm -f {HQ_CONTROL}/answer500")
    # a healthy answer resets the counters
    assert complete(host, "hyperqwen").stdout == "200"
    ok = agent(host, *wd)
    assert ok.returncode == 0 and "watchdog: hyperqwen answers again; counters reset" in ok.stdout


def test_watchdog_and_keeper_stand_down_while_a_window_is_open(host):
    host.quiet_automatic_jobs()
    host.run(f"mkdir -p {HQ_CONTROL} && touch {HQ_CONTROL}/answer500")
    host.write("/var/lib/rigkit/window.json", '{"id": "w-test", "state": "open", "tenant": "hyperqwen"}')
    try:
        before = host.run("cat /var/lib/rigkit/watchdog.json").stdout
        for _ in range(3):
            proc = agent(host, "watchdog", "--failures", "1")
            assert proc.returncode == 0
            assert proc.stdout.startswith("watchdog: window w-test is open (/var/lib/rigkit/window.json: state 'open'); "
                                          "standing down")
        assert host.run("cat /var/lib/rigkit/watchdog.json").stdout == before
        assert "hyperqwen" in running(host)
        keeper = agent(host, "keeper")
        assert keeper.returncode == 0 and "keeper: window w-test is open" in keeper.stdout
    finally:
        host.run(f"rm -f /var/lib/rigkit/window.json {HQ_CONTROL}/answer500")


def test_a_first_activation_that_fails_leaves_llama_swap_stopped_and_says_so(host):
    host.run(f"mkdir -p /root/saved && mv {LIVE} {LIVE}.bak-* /root/saved/ && systemctl stop llama-swap.service")
    host.run(f"mkdir -p {HQ_CONTROL} && touch {HQ_CONTROL}/answer500")
    try:
        cmd = activate_command(["--config", "/root/saved/config.yaml", "--live", LIVE])
        proc = host.run(cmd, check=False)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "FIRST ACTIVATION FAILED: there is no previous config to restore; llama-swap is left STOPPED" in proc.stdout
        assert host.run("systemctl is-active llama-swap.service", check=False).stdout.strip() in ("inactive", "failed")
        assert host.run(f"test -e {LIVE}", check=False).returncode != 0
        assert host.run(f"ls {LIVE}.failed-*").stdout.strip()
    finally:
        host.run(f"rm -f {HQ_CONTROL}/answer500 {LIVE}.failed-*; mv /root/saved/* /etc/llama-swap/; "
                 "systemctl reset-failed llama-swap.service; systemctl start llama-swap.service")
    assert wait_for(lambda: host.run("curl -fsS 127.0.0.1:8080/health", check=False).returncode == 0)


def test_deploy_runs_its_smoke_and_fails_on_a_fail_verdict(host, tmp_path):
    passing = deploy(host, smoke=True)  # back to the declared config (HyperQwen staged), then the smoke
    assert passing.returncode == 0, passing.stdout[-3000:] + passing.stderr[-3000:]
    assert "post-deploy smoke: $ rigkit bench -i inventory/sandbox.py --host " in passing.stderr
    assert f"post-deploy smoke: {host.name}/strata: passed" in passing.stderr
    assert '"hyperqwen":' not in host.run(f"cat {LIVE}").stdout and running(host) == {"strata": "ready"}
    summary_path = re.search(r"^wrote .*?, (\S+summary\.json), ", passing.stdout, re.M)[1]
    baseline = json.loads((PROJECT / summary_path).read_text())
    for wl in baseline["workloads"].values():
        decode = (wl.get("metrics") or {}).get("decode_tps") or {}
        for k in ("median", "min", "max"):
            if decode.get(k):
                decode[k] *= 10  # every request of the baseline ten times faster, and a steady baseline
        if decode:
            decode["cv"] = 0.0
    (tmp_path / "fast.json").write_text(json.dumps(baseline))
    failing = deploy(host, "--data", f'bench={{"baseline": "{tmp_path / "fast.json"}"}}', smoke=True)
    assert changed(failing) == 0  # the deploy itself had converged
    smoke_path = re.search(r"^wrote .*?, (\S+summary\.json), ", failing.stdout, re.M)[1]
    smoke = json.loads((PROJECT / smoke_path).read_text())["workloads"]["chat-greedy"]
    decode = (smoke.get("metrics") or {}).get("decode_tps")
    cv = decode["cv"] if decode else None
    print(f"the smoke against a 10x baseline: decode {decode} after {smoke['attempts']} attempt(s), exit {failing.returncode}")
    if not decode or decode.get("median") is None:
        # on a starved CPU every decode figure can be unmeasurable (a burst in one read): the smoke keeps none,
        # says why, and the bench never calls a run it could not measure a FAIL (results.verdict: "not comparable")
        assert failing.returncode == 0, failing.stdout[-3000:] + failing.stderr[-3000:]
        assert f"post-deploy smoke: {host.name}/strata: passed (with warnings: chat-greedy not comparable — " \
            in failing.stderr, failing.stderr[-3000:]
        assert "decode not compared: this run has no decode tok/s figure" in failing.stderr
    elif cv is not None and cv > 0.10:
        # Strata on the sandbox's CPU through llama-swap and an SSH forward is often too noisy to compare
        # (issue 39: CV 125.8%): after its repeats the smoke says WARN unstable with its figures and the
        # deploy passes, saying so — never a FAIL on a run the bench calls unstable
        assert failing.returncode == 0, failing.stdout[-3000:] + failing.stderr[-3000:]
        assert (f"post-deploy smoke: {host.name}/strata: passed (with warnings: chat-greedy WARN — decode "
                f"unstable after {smoke['attempts']} attempts: this run ") in failing.stderr, failing.stderr[-3000:]
    elif min(decode.get("n") or 1, (((baseline["workloads"].get("chat-greedy") or {}).get("metrics") or {})
                                    .get("decode_tps") or {}).get("n") or 1) < 3:
        # figures left out as impossible (late reads under load) left fewer than 3 in a run: its noise is not
        # known, so the slowdown is a WARN naming n, never a FAIL (results.compare_speed, docs/bench.md)
        assert failing.returncode == 0, failing.stdout[-3000:] + failing.stderr[-3000:]
        assert f"post-deploy smoke: {host.name}/strata: passed (with warnings: chat-greedy WARN — decode " \
            in failing.stderr and "too few figures to know the noise" in failing.stderr, failing.stderr[-3000:]
    else:  # a steady smoke ten times slower than every request of the baseline: a FAIL, the deploy fails
        assert failing.returncode == 1, failing.stdout[-3000:] + failing.stderr[-3000:]
        assert "beyond the noise of both runs" in failing.stdout
        assert f"post-deploy smoke: {host.name}/strata: FAILED (exit 1)" in failing.stderr
