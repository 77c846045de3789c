"""``rigkit bisect`` on a converged sandbox host (issue 68; nspawn lane, real SSH + sudo, docker, llama-swap,
pacman with the sandbox archive, the bench through llama-swap against llama.cpp's own server).

One golden copy for the module: generation 1 is the golden deploy (A); B differs from it in cheap,
no-reboot entries (HyperQwen's draft length, a member's ttl, the ``cuda`` pin at another version of the
archive) and is generation 2. The tests, in file order: ``--dry`` lists the suspects and the bound; a walk
between 1 and 2 — B is not slower, so it says so after measuring both — ends with the host back at
generation 2, the journal gone, drift clean and its steps in ``rigkit generations``; a bisect killed with
SIGKILL in the middle of a step leaves its journal, and ``rigkit bisect --abort`` puts the host back.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden  # noqa: E402
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402

rigkit = sandbox_project.rigkit
AGENT = "/opt/rigkit/venv/bin/rigkit-agent"
JOURNAL = "/var/lib/rigkit/generations/bisect.json"
B_DATA = ["--data", 'hyperqwen={"dflash_tokens": 5}', "--data", 'llama_swap={"members": {"gguf-baseline": {"ttl": 300}}}',
          "--data", 'pacman_pins={"cuda": "13.3.1-1"}']


@functools.cache
def b() -> dict:
    """B's spec keys with its own lock (:func:`golden.variant_lock`), as the sandbox inventory's data
    (``RIGKIT_SANDBOX_DATA``): every command of the module sees B as the inventory's spec."""
    args = golden.variant_lock("bisect-b", *B_DATA)
    pairs = [a.split("=", 1) for a in args[1::2]]
    return {k: json.loads(v) for k, v in pairs}


@pytest.fixture(scope="module")
def host(make_module_host):
    h = make_module_host("bi", converged=True)  # generation 1: the golden deploy
    h.quiet_automatic_jobs()
    proc = rigkit(h, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--full", data=b())
    assert proc.returncode == 0, proc.stderr[-4000:]
    return h


def index(host) -> dict:
    proc = rigkit(host, "generations", "-i", "inventory/sandbox.py", "--host", host.name, "--json", data=b())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_back_at(host, n: int) -> None:
    """The host at generation ``n`` as the bisect found it: current, no journal, no hold, drift clean."""
    idx = index(host)
    assert idx["current"] == n and idx["hold"] is None, idx
    assert host.run(f"test -e {JOURNAL}", check=False).returncode == 1
    proc = rigkit(host, "drift", "-i", "inventory/sandbox.py", "--host", host.name, data=b())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def bisect(host, *args, **kw):
    return rigkit(host, "bisect", "-i", "inventory/sandbox.py", "--host", host.name, *args, data=b(), **kw)


def test_dry_lists_the_suspects_and_the_most_steps_touching_nothing(host):
    before = index(host)
    proc = bisect(host, "--good", "1", "--bad", "2", "--dry")
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert "bisect generation 1 (good) .. 2 (bad): 3 suspect(s)" in text, text
    for name in ("pin cuda", "member gguf-baseline: ttl", "spec hyperqwen.dflash_tokens"):
        assert name in text, text
    assert "at most " in text and "estimated at most" in text, text
    assert index(host) == before


def test_bad_input_is_refused_touching_nothing(host):
    proc = bisect(host, "--good", "1", "--bad", "9")
    assert proc.returncode == 2 and "--bad 9: " in proc.stderr and "has no generation 9" in proc.stderr, proc.stderr


def test_a_walk_between_two_equally_fast_generations_ends_where_it_started(host):
    """B is not slower than A (nothing it changes is on the resident's path). The bench's verdict on this
    shared 2-core machine is either PASS ("nothing to bisect", exit 0) or, when a run's CV is above 10%
    twice, undecided (exit 1, said): the bench's own rule, never a slowdown. Either way the host ends at
    generation 2 with its journal gone and drift clean."""
    t0 = time.monotonic()
    proc = bisect(host, "--good", "1", "--bad", "2", timeout=1200)
    took = time.monotonic() - t0
    if proc.returncode == 0:
        assert "is not slower than generation 1" in proc.stderr and "nothing to bisect" in proc.stderr, proc.stderr[-3000:]
    else:
        assert proc.returncode == 1 and "the bench cannot tell it from the good generation" in proc.stderr, \
            proc.stderr[-6000:]
    assert "FOUND" not in proc.stderr, proc.stderr[-3000:]
    assert "back at generation 2, where the bisect started" in proc.stderr, proc.stderr[-3000:]
    assert_back_at(host, 2)
    steps = [g for g in index(host)["generations"] if (g.get("bisect") or {}).get("step")]
    assert steps and all(g["reason"].startswith("bisect ") for g in steps), index(host)
    listing = rigkit(host, "generations", "-i", "inventory/sandbox.py", "--host", host.name, data=b()).stdout
    assert "[bisect step " in listing, listing
    refused = rigkit(host, "rollback", "-i", "inventory/sandbox.py", "--host", host.name, "--to", str(steps[0]["n"]),
                     data=b())
    assert refused.returncode == 2 and "a trial mix" in refused.stderr, refused.stderr
    print(f"\nbisect 1..2 (exit {proc.returncode}): {took:.0f} s")


def test_a_killed_bisect_is_put_back_by_abort(host):
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=host.name, HF_TOKEN=hostctl.hub_token(), RIGKIT_SANDBOX_DATA=json.dumps(b()))
    argv = [str(Path(sys.executable).parent / "rigkit"), "bisect", "-i", "inventory/sandbox.py", "--host", host.name,
            "--good", "1", "--bad", "2"]
    proc = subprocess.Popen(argv, cwd=sandbox_project.cwd(), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    said: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [said.put(line) for line in proc.stderr], daemon=True).start()
    seen = []
    try:  # the good generation's deploy under way (its pyinfra started): then the control machine is gone
        stage = "step 2: deploying"
        while True:
            line = said.get(timeout=600)  # bounded: a bisect that never gets there fails here
            seen.append(line)
            if stage == "$ pyinfra" and line.startswith("$ pyinfra"):
                break
            if stage in line:
                stage = "$ pyinfra"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # rigkit and the pyinfra it runs: SIGKILL, nothing runs after
        proc.wait()
    assert any("bisect-begin" in ln or "step 1:" in ln for ln in seen), "".join(seen)[-3000:]
    assert host.run(f"test -e {JOURNAL}", check=False).returncode == 0  # the journal stays
    aborted = bisect(host, "--abort", timeout=900)
    assert aborted.returncode == 0, aborted.stderr[-4000:]
    assert "was interrupted; putting the host back at generation 2" in aborted.stderr, aborted.stderr[-3000:]
    assert_back_at(host, 2)
    again = bisect(host, "--abort")
    assert again.returncode == 0 and "no interrupted bisect" in again.stderr, again.stderr

