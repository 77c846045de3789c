"""Generations and ``rigkit rollback`` on a deployed sandbox host (nspawn lane, real SSH + sudo, the
real docker engine, llama-swap, pacman with the sandbox archive).

One host for the module; the tests run in file order on it, as an operator would: deploy A (and a
re-run that records nothing), deploy B (HyperQwen's ``dflash_tokens``, a member's ttl and the ``cuda``
pin moved to 13.3.1-1 from 13.3.2-1, the newest of the series, both archive-only packages of the sandbox mirror), list and diff the two, a rollback
refused while another actor holds the lock, the rollback to 1 (under the lock: other actors refused and
the keeper standing down meanwhile), drift against the held generation, a deploy that keeps the hold, the
release and B again (the rollback with its post-deploy smoke through :8080, every request answered, and
llama-swap's journal free of the GPU monitor's gpuCh error), and a rollback whose activation fails (a member that no longer starts: its port
taken) that puts the host back where it started.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
RIGKIT = str(Path(sys.executable).parent / "rigkit")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden  # noqa: E402
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402
from test_wirein import SUMMARY, changed, complete, running  # noqa: E402

PROJECT = sandbox_project.cwd()
TOKEN = hostctl.hub_token()
AGENT = "/opt/rigkit/venv/bin/rigkit-agent"
B_DATA = ["--data", 'hyperqwen={"dflash_tokens": 5}', "--data", 'llama_swap={"members": {"gguf-baseline": {"ttl": 300}}}',
          "--data", 'pacman_pins={"cuda": "13.3.1-1"}']


@functools.cache
def b() -> list[str]:
    """B's ``--data`` arguments with its own lock (golden.variant_lock): the deploy uses only a lock that
    resolves what it is told, and B pins cuda at another version than the sandbox's series resolves to."""
    return golden.variant_lock("generations-b", *B_DATA)


ACTIVATE_STEP = "llama-swap | Activate the declared live llama-swap config (on the host)"


rigkit = sandbox_project.rigkit  # rigkit(host, *args, timeout=…)


def deploy(host, *args):
    return rigkit(host, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--full", *args)


def rollback(host, *args):
    return rigkit(host, "rollback", "-i", "inventory/sandbox.py", "--host", host.name, *args)


def index(host) -> dict:
    proc = rigkit(host, "generations", "-i", "inventory/sandbox.py", "--host", host.name, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def state(host) -> dict:
    """What the tests read back on the host: the cuda package, HyperQwen's draft length, the ttl of
    gguf-baseline in the live config."""
    cuda = host.run("pacman -Q cuda").stdout.split()[1]
    dflash = host.run("sed -n 's/^DFLASH_TOKENS=//p' /opt/rigkit/hyperqwen/.env").stdout.strip()
    live = host.run("cat /etc/llama-swap/config.yaml").stdout
    ttl = live.split('"gguf-baseline":', 1)[1].split("ttl: ", 1)[1].split("\n", 1)[0]
    return {"cuda": cuda, "dflash_tokens": dflash, "gguf_ttl": ttl}


A_STATE = {"cuda": "13.3.2-1", "dflash_tokens": "7", "gguf_ttl": "600"}  # cuda: the newest of the 13.3 series
B_STATE = {"cuda": "13.3.1-1", "dflash_tokens": "5", "gguf_ttl": "300"}  # B pins cuda exactly (its own lock)


@pytest.fixture(scope="module")
def host(make_module_host):
    h = make_module_host("g1", converged=True)  # generation 1 is the golden host's first deploy
    h.first, h.second = h.golden.deploys()
    h.quiet_automatic_jobs()  # the tests run the keeper themselves
    return h


def test_a_deploy_records_generation_1_and_a_converged_rerun_records_nothing(host):
    assert host.first.returncode == 0, host.first.stderr[-4000:]
    assert "no generation recorded yet: this deploy records generation 1 (deploy)" in host.first.stderr
    assert host.second.returncode == 0 and changed(host.second) == 0, host.second.stderr[-3000:]
    assert "generation 1 (" in host.second.stderr and "stays current" in host.second.stderr
    idx = index(host)
    assert idx["current"] == 1 and [g["n"] for g in idx["generations"]] == [1] and idx["hold"] is None
    assert idx["generations"][0]["operator"] == "rig" and idx["generations"][0]["reason"] == "deploy"
    assert state(host) == A_STATE
    # on the host: root-only, the HF token in none of it
    assert host.run("stat -c '%a %U' /var/lib/rigkit/generations").stdout.split() == ["700", "root"]
    assert host.run(f"grep -rl {shlex.quote(TOKEN)} /var/lib/rigkit/generations", check=False).stdout == ""


def test_deploy_b_is_generation_2_and_the_diff_shows_exactly_what_changed(host):
    dry = deploy(host, "--dry", *b())
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "generation 1 (" in dry.stderr and "is replaced by generation 2 (deploy)" in dry.stderr
    proc = deploy(host, *b())
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert state(host) == B_STATE
    # issue 61: each conditional row of the dry run says whether it will run, and the run then did as it said
    said = {}
    for line in dry.stdout.splitlines():
        if line.startswith("  conditional  "):
            name, _, verdict = line[len("  conditional  "):].partition(" — ")
            assert verdict in ("will run: what it waits on changes in this plan",
                               "will not run: nothing it waits on changes in this plan"), line
            said[name] = verdict.startswith("will run")
    ran, current = set(), None  # the run's own log: a block that changed the host says "[host] Success"
    for line in proc.stderr.splitlines():
        if line.startswith("--> Starting operation: "):
            current = line[len("--> Starting operation: "):].strip()
        elif current and line.strip().endswith("] Success"):
            ran.add(current)
    assert said and {n: n in ran for n in said} == said, (said, sorted(ran))
    print(f"\ndeploy B --dry: {sum(said.values())} of {len(said)} conditional rows will run, as the run did")
    # and one that waits on a change in the plan: a new power limit rewrites gpu-power-limit.service
    dry = deploy(host, "--dry", *b(), "--data", "gpu_power_limit_w=400")
    assert dry.returncode == 0, dry.stderr[-3000:]
    rows = {line[len("  conditional  "):].partition(" — ")[0]: "— will run:" in line
            for line in dry.stdout.splitlines() if line.startswith("  conditional  ")}
    assert rows.pop("Power limit | Reload systemd for gpu-power-limit.service") is True, dry.stdout
    assert rows and not any(rows.values()), dry.stdout
    listing = rigkit(host, "generations", "-i", "inventory/sandbox.py", "--host", host.name)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[0] == f"{host.name}: 2 generation(s); * current"
    assert lines[1].split()[0] == "1" and lines[1].endswith("rig  deploy: first generation")
    assert lines[2].startswith("*    2 ") and lines[2].endswith(
        "rig  deploy: files: /etc/llama-swap/config.staged.yaml, /etc/llama-swap/config.yaml, "
        "/opt/rigkit/hyperqwen/.env, /var/lib/rigkit/models.lock.json; pins: cuda 13.3.2-1 -> 13.3.1-1; "
        "members: changed gguf-baseline")  # B's lock (its own pins.cuda entry) is the host's lock too
    d = rigkit(host, "generations", "-i", "inventory/sandbox.py", "--host", host.name, "--diff", "1", "2", "--json")
    assert d.returncode == 0, d.stderr
    diff = json.loads(d.stdout)
    assert set(diff) == {"a", "b", "spec", "pins", "members", "files"}, diff.keys()
    assert diff["spec"] == {"hyperqwen.dflash_tokens": [7, 5], "llama_swap.members.gguf-baseline.ttl": [600, 300],
                            "pacman_pins.cuda": ["13.3.2-1", "13.3.1-1"]}
    assert diff["pins"] == {"cuda": ["13.3.2-1", "13.3.1-1"]} and diff["members"] == {"gguf-baseline.ttl": [600, 300]}
    assert [f["path"] for f in diff["files"]] == ["/etc/llama-swap/config.staged.yaml", "/etc/llama-swap/config.yaml",
                                                  "/opt/rigkit/hyperqwen/.env", "/var/lib/rigkit/models.lock.json"]
    env = diff["files"][2]["diff"]
    assert [ln for ln in env.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))] == \
        ["-DFLASH_TOKENS=7", "+DFLASH_TOKENS=5"]
    text = rigkit(host, "generations", "-i", "inventory/sandbox.py", "--host", host.name, "--diff", "1", "2").stdout
    assert "-    ttl: 600" in text and "+    ttl: 300" in text and host.run(
        "sed -n 's/^VLLM_API_KEY=//p' /etc/rigkit/secrets/hyperqwen.env").stdout.strip() not in text


def test_a_rollback_is_refused_touching_nothing_while_another_actor_holds_the_lock(host):
    host.run(f"systemd-run --unit=rigkit-test-holder {AGENT} lock run --what 'window test-7' -- sleep 60")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not json.loads(host.run(f"{AGENT} lock status").stdout)["held"]:
            time.sleep(0.3)
        proc = rollback(host, "--to", "1")
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert "rollback to generation 1 refused, nothing touched" in proc.stderr and "window test-7" in proc.stderr
        assert "$ pyinfra" not in proc.stderr
    finally:
        host.run("systemctl stop rigkit-test-holder", check=False)
    assert state(host) == B_STATE and index(host)["current"] == 2
    bad = rollback(host, "--to", "9")
    assert bad.returncode == 2 and f"--to 9: {host.name} has no generation 9 (kept: 1, 2)" in bad.stderr


def test_rollback_to_1_restores_a_under_the_lock_and_holds_it(host):
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=host.name, HF_TOKEN=TOKEN)
    # with its smoke, as an operator runs it: every request through llama-swap after the restart answers
    # (issue #25: llama-swap drops idle member connections at 2 s, before the member's 5 s keep-alive does)
    since = host.run("date '+%Y-%m-%d %H:%M:%S'").stdout.strip()
    proc = subprocess.Popen([RIGKIT, "rollback", "-i", "inventory/sandbox.py", "--host", host.name, "--to", "1"],
                            cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # while it runs, it is the one authority: another change is refused naming it, the keeper stands down
    seen = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        holder = json.loads(host.run(f"{AGENT} lock status").stdout).get("holder") or {}
        if holder.get("what") == "rollback to generation 1":
            seen = holder
            other = host.run(f"{AGENT} lock run --what 'deploy: restart docker' -- true", check=False)
            keeper = host.run(f"{AGENT} keeper", check=False)
            break
        time.sleep(0.3)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:] + err[-5000:]
    assert seen and seen.get("lease"), "the rollback never held the host lock"
    assert other.returncode == 1 and "the rig is locked by rollback to generation 1" in other.stderr
    assert "standing down" in keeper.stdout + keeper.stderr
    assert state(host) == A_STATE
    assert f"{host.name}: rolled back to generation 1, recorded as generation 3" in err
    assert f"post-deploy smoke: {host.name}/strata: passed" in err and "HTTP 502" not in out + err, err[-4000:]
    journal = host.run(f"journalctl -u llama-swap --no-pager -o cat --since '{since}'").stdout
    # (an empty 502 that rigkit's client sent once more may still be logged there: llama.cpp closes its
    # connection after every stream; notes/issue-25-swap-502.md)
    # the GPU monitor's one `nvidia-smi ... --loop 5` keeps answering (perf/monitor_unix.go:136-179)
    assert "using nvidia-smi for GPU monitoring" in journal and "failed reading from gpuCh" not in journal
    assert running(host) == {"strata": "ready"} and complete(host, "strata").stdout == "200"
    idx = index(host)
    assert idx["current"] == 3 and idx["generations"][-1]["reason"] == "rollback to 1"
    assert idx["hold"]["generation"] == 3 and idx["hold"]["rolled_back_to"] == 1
    assert not json.loads(host.run(f"{AGENT} lock status").stdout)["held"]


def test_drift_reports_the_hold_and_no_drift_against_the_held_generation(host):
    proc = rigkit(host, "drift", "-i", "inventory/sandbox.py", "--host", host.name, "--json")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    records = [json.loads(ln) for ln in proc.stdout.splitlines()]
    findings = [r for r in records if r["kind"] not in ("status", "run")]
    assert [f for f in findings if f["severity"] in ("drift", "error")] == []
    hold = [f for f in findings if f["kind"] == "hold"]
    assert len(hold) == 1 and hold[0]["severity"] == "warn" and "held at generation 3 (rollback to 1" in hold[0]["actual"]
    status = next(r for r in records if r["kind"] == "status")
    assert status["state"]["generation"]["compared_with"] == "generation 3"
    text = rigkit(host, "drift", "-i", "inventory/sandbox.py", "--host", host.name)
    words = " ".join(text.stdout.split())  # the words, however the lines break
    assert f"{host.name}: generation 3 (" in words and "compared with generation 3" in words, text.stdout


def test_a_deploy_under_the_hold_keeps_the_held_generation_until_released(host):
    held = deploy(host, *b())
    assert held.returncode == 0, held.stderr[-3000:]
    assert "held at generation 3 (rollback to 1" in held.stderr and "NOT the spec" in held.stderr
    assert changed(held) == 0 and state(host) == A_STATE and index(host)["current"] == 3
    rel = rollback(host, "--release")
    assert rel.returncode == 0 and "released the hold at generation 3" in rel.stderr
    again = deploy(host, *b())
    assert again.returncode == 0, again.stderr[-3000:]
    assert state(host) == B_STATE
    idx = index(host)
    assert idx["current"] == 4 and idx["generations"][-1]["reason"] == "deploy" and idx["hold"] is None
    rerun = deploy(host, *b())
    assert changed(rerun) == 0 and index(host)["current"] == 4


def test_a_rollback_whose_activation_fails_restores_the_generation_it_started_from(host):
    # gguf-baseline no longer starts: its port is taken, so its container cannot publish it. The taker answers
    # every request 503 at once: llama-swap v250 health-checks the port 250 ms after it starts the command and
    # notices the command's exit only between checks (internal/process/process_command.go doStart), with no
    # response-header timeout by default (timeouts.responseHeader 0) — a taker that accepted and never answered
    # held the check until the completion gave up (CI: 366 s where the test takes 37, whenever `docker run`
    # took over 250 ms to fail under load). http.server's HTTPServer binds with SO_REUSEADDR: past the
    # port's last connections' TIME_WAIT.
    host.run("systemd-run --unit=rigkit-test-port python3 -c 'import http.server as h; "
             "H = type(\"H\", (h.BaseHTTPRequestHandler,), {\"do_GET\": lambda s: s.send_error(503)}); "
             "h.HTTPServer((\"127.0.0.1\", 18040), H).serve_forever()'")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and ":18040 " not in host.run("ss -ltnH", check=False).stdout:
            time.sleep(0.2)
        assert ":18040 " in host.run("ss -ltnH", check=False).stdout, host.run("systemctl status rigkit-test-port",
                                                                               check=False).stdout
        # the port is freed once the rollback reverts: generation 4's gguf-baseline, which the revert's
        # confirmation asks (its ttl differs from generation 3's), starts again
        env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
        env.update(RIGKIT_SANDBOX_HOST=host.name, HF_TOKEN=TOKEN)
        run = subprocess.Popen([RIGKIT, "rollback", "-i", "inventory/sandbox.py", "--host", host.name, "--to", "3"],
                               cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        for line in run.stderr:
            lines.append(line)
            if "reverting to generation 4, where it started" in line:
                host.run("systemctl stop rigkit-test-port", check=False)
        run.wait(timeout=900)
        err = "".join(lines)
        assert run.returncode == 1, err[-4000:]
        assert f"rollback to generation 3 FAILED (failed at: {ACTIVATE_STEP}" in err, err[-8000:]
        assert "reverted to generation 4, confirmed: the host serves as before" in err, err[-4000:]
        assert "member gguf-baseline: HTTP 200" in err  # the revert asked the member it touched
    finally:
        host.run("systemctl stop rigkit-test-port", check=False)
    assert state(host) == B_STATE
    idx = index(host)
    assert idx["current"] == 4 and len(idx["generations"]) == 5 and idx["hold"] is None
    failed = idx["generations"][-1]
    assert failed["n"] == 5 and failed["reason"] == "rollback to 3" and "failed at:" in failed["failed"], failed
    refused = rollback(host, "--to", "5")
    assert refused.returncode == 2 and "is a failed change that was put back" in refused.stderr
    assert complete(host, "strata").stdout == "200"
    again = deploy(host, *b()).stderr
    assert SUMMARY.search(again)["changed"] == "0", again[-4000:]
