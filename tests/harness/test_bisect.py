"""``rigkit bisect`` on a converged sandbox host (issue 68; nspawn lane, real SSH + sudo, docker, llama-swap,
pacman with the sandbox archive, the bench through llama-swap against HyperQwen's paced stand-in engine).

One golden copy for the module: generation 1 is the golden deploy; generation 2 (A, the good one) wires HyperQwen
into llama-swap as the resident (``staged: false``, preloaded) so the bench measures it; generation 3 (B, the bad one) differs from A in six
cheap, no-reboot entries, one of them a regression planted large: HyperQwen's image at the ``sandbox-slow`` tag
(tests/harness/images.py: its own digest, whose config makes the stand-in's verify step 5 times longer — the pace
comes from the image the deploy pulls, stubs/openai_stub.py ``CHUNK_S``), beside llama.cpp's image under another
digest that runs the same, a member argument, a member's ttl and description and a HyperQwen spec value. The
stand-in paces its answers on absolute deadlines (CV ~0.2 % on 2 shared cores), so the bench's verdicts are
reliable here where real llama.cpp's were not (notes/bisect.md). The tests, in file order: ``--dry`` lists the
suspects and the bound; the walk names the planted image in at most ⌈log2 6⌉ + 1 = 4 deploys and ends with the
host back at generation 3, the journal gone, no hold, drift clean and its steps in ``rigkit generations``; a
bisect killed with SIGKILL in the middle of a step leaves its journal, and ``rigkit bisect --abort`` puts the host
back; the next deploy ends a journal left behind; last, generation C mixes llama.cpp's image from before
ggml-org/llama.cpp#15434 with arguments that leave out ``--flash-attn on``: a bisect 2..4 meets a step whose deploy
fails (the old image with A's arguments cannot start), stops, says so and ends at C, drift clean. The planted pair has a module
of its own, tests/harness/test_bisect_pair.py (a lane of its own: this one is the suite's longest).
"""

from __future__ import annotations

import functools
import json
import math
import os
import queue
import re
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
import images  # noqa: E402

#: A: HyperQwen wired in and the resident (the bench measures a running member through llama-swap, never one it
#: would swap the resident out for), with a context below the DFlash guard's 16384
#: (rigkit.spec.model.UNSAFE_SPEC_CONTEXT) so that a draft of 8 tokens is a valid spec value on its own (the
#: pair's walk, E); everything else the golden deploy's. B and C keep that context.
A_DATA = {"hyperqwen": {"max_model_len": 12288},
          "llama_swap": {"preload": ["hyperqwen"], "members": {"hyperqwen": {"staged": False, "ttl": 0}}}}
#: B: A with six suspects, the planted one HyperQwen's slower image (its tag resolved to a digest by `rigkit lock`)
B_DATA = ["--data", f'hyperqwen={{"max_model_len": 12288, "image": {{"ref": "{images.SLOW_TAG}"}}, "stop_timeout_s": 20}}',
          "--data", 'llama_swap={"preload": ["hyperqwen"], "members": {"hyperqwen": {"staged": false, "ttl": 0, '
                    '"description": "HyperQwen (bisect B)"}, '
                    '"gguf-baseline": {"ttl": 300}}}',
          "--data", f'gguf_baseline={{"image": {{"ref": "{images.OTHER_LLAMA_TAG}"}}, '
                    '"args": ["--n-gpu-layers", "99", "--flash-attn", "on", "--threads", "1"]}']
#: C (the last test's generation): A with the planted image and llama.cpp's image from before
#: ggml-org/llama.cpp#15434 (images.OLD_LLAMA_TAG: ``-fa`` a switch), whose GGUF-baseline arguments leave out A's
#: ``--flash-attn on`` accordingly. C deploys and is slow, A deploys; the old image with A's arguments cannot start
#: (``error: invalid argument: on``): the search's first probe, {image gguf_baseline}, is a step whose deploy fails.
C_DATA = ["--data", f'hyperqwen={{"max_model_len": 12288, "image": {{"ref": "{images.SLOW_TAG}"}}}}',
          "--data", f'llama_swap={json.dumps(A_DATA["llama_swap"])}',
          "--data", f'gguf_baseline={{"image": {{"ref": "{images.OLD_LLAMA_TAG}"}}, "args": ["--n-gpu-layers", "99"]}}']
#: E (the pair's bad one, against A): A with HyperQwen's image at the ``sandbox-draft`` tag (tuned for drafts of at most 7
#: tokens: 5 times slower with a longer one), ``dflash_tokens`` 8 and a new description — slow only with the
#: image and the draft length together (images.DRAFT_TAG)
E_DATA = ["--data", f'hyperqwen={{"max_model_len": 12288, "dflash_tokens": 8, "image": {{"ref": "{images.DRAFT_TAG}"}}}}',
          "--data", 'llama_swap={"preload": ["hyperqwen"], "members": {"hyperqwen": {"staged": false, "ttl": 0, '
                    '"description": "HyperQwen (bisect E)"}}}']
PAIR_SUSPECTS = ["image hyperqwen", "member hyperqwen: description", "spec hyperqwen.dflash_tokens"]
SUSPECTS = ["image gguf_baseline", "image hyperqwen", "member gguf-baseline: ttl", "member hyperqwen: description",
            "spec gguf_baseline.args", "spec hyperqwen.stop_timeout_s"]


def _variant(tag: str, data: list[str]) -> dict:
    args = golden.variant_lock(tag, *data)
    pairs = [a.split("=", 1) for a in args[1::2]]
    return {k: json.loads(v) for k, v in pairs}


@functools.cache
def b() -> dict:
    """B's spec keys with its own lock (:func:`golden.variant_lock`), as the sandbox inventory's data
    (``RIGKIT_SANDBOX_DATA``): every command of the module sees B as the inventory's spec (C's test: C)."""
    return _variant("bisect-b", B_DATA)


@functools.cache
def c() -> dict:
    """C's spec keys with its own lock, as :func:`b`'s."""
    return _variant("bisect-c", C_DATA)


@functools.cache
def e() -> dict:
    """E's spec keys with its own lock, as :func:`b`'s."""
    return _variant("bisect-e", E_DATA)


@pytest.fixture(scope="module")
def host(make_module_host):
    h = make_module_host("bi", converged=True)  # generation 1: the golden deploy
    h.quiet_automatic_jobs()
    for data in (A_DATA, b()):  # generations 2 (A) and 3 (B)
        proc = rigkit(h, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--full", data=data)
        assert proc.returncode == 0, proc.stderr[-4000:]
    return h


def index(host, data: dict | None = None) -> dict:
    proc = rigkit(host, "generations", "-i", "inventory/sandbox.py", "--host", host.name, "--json", data=data or b())
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_back_at(host, n: int, data: dict | None = None) -> None:
    """The host at generation ``n`` as the bisect found it: current, no journal, no hold, drift clean (against
    ``data``, the inventory's spec: B unless given)."""
    idx = index(host, data)
    assert idx["current"] == n and idx["hold"] is None, idx
    assert host.run(f"test -e {JOURNAL}", check=False).returncode == 1
    proc = rigkit(host, "drift", "-i", "inventory/sandbox.py", "--host", host.name, data=data or b())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def bisect(host, *args, **kw):
    return rigkit(host, "bisect", "-i", "inventory/sandbox.py", "--host", host.name, *args, data=b(), **kw)



def test_dry_lists_the_suspects_and_the_most_steps_touching_nothing(host):
    before = index(host)
    proc = bisect(host, "--good", "2", "--bad", "3", "--dry")
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert "bisect generation 2 (good) .. 3 (bad): 6 suspect(s)" in text, text
    for i, name in enumerate(SUSPECTS):
        assert f"{i + 1:>2}. {name}: " in text, text
    assert "at most " in text and "estimated at most" in text, text
    assert index(host) == before


def test_bad_input_is_refused_touching_nothing(host):
    proc = bisect(host, "--good", "1", "--bad", "9")
    assert proc.returncode == 2 and "--bad 9: " in proc.stderr and "has no generation 9" in proc.stderr, proc.stderr


def test_a_planted_slowdown_is_named_and_the_host_ends_where_it_started(host):
    """B's slower HyperQwen image is named among six suspects in at most ⌈log2 6⌉ + 1 = 4 deploys (the good
    generation and the prefix search; the host starts at B, whose bench needs no deploy), and the walk ends at
    generation 3 as it found it. ``--no-pairs``: the culprit is not tried alone (one deploy fewer; the pair search
    is held by tests/unit/test_bisect.py's property)."""
    t0 = time.monotonic()
    proc = bisect(host, "--good", "2", "--bad", "3", "--member", "hyperqwen", "--no-pairs", timeout=1200)
    took = time.monotonic() - t0
    err = proc.stderr
    assert proc.returncode == 0, err[-6000:]
    found = [ln for ln in err.splitlines() if "FOUND: " in ln]
    assert len(found) == 1 and "FOUND: image hyperqwen (" in found[0], err[-6000:]
    named_after = int(found[0].split("named after ")[1].split(" ")[0])
    deploys_before = len(re.findall(r": step \d+: deploying ", err[:err.index("FOUND: ")]))
    assert named_after == deploys_before <= math.ceil(math.log2(len(SUSPECTS))) + 1, err[-6000:]
    assert "back at generation 3, where the bisect started" in err, err[-3000:]
    assert_back_at(host, 3)
    steps = [g for g in index(host)["generations"] if (g.get("bisect") or {}).get("step")]
    assert len(steps) == deploys_before and all(g["reason"].startswith("bisect ") for g in steps), index(host)
    listing = rigkit(host, "generations", "-i", "inventory/sandbox.py", "--host", host.name, data=b()).stdout
    assert "[bisect step " in listing, listing
    refused = rigkit(host, "rollback", "-i", "inventory/sandbox.py", "--host", host.name, "--to", str(steps[0]["n"]),
                     data=b())
    assert refused.returncode == 2 and "a trial mix" in refused.stderr, refused.stderr
    print(f"\nbisect 2..3: {took:.0f} s, named after {named_after} deploys\n" + "\n".join(
        ln for ln in err.splitlines() if ("step " in ln and "tok/s" in ln) or " deploy(s) (" in ln))


def test_a_killed_bisect_is_put_back_by_abort(host):
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=host.name, HF_TOKEN=hostctl.hub_token(), RIGKIT_SANDBOX_DATA=json.dumps(b()))
    argv = [str(Path(sys.executable).parent / "rigkit"), "bisect", "-i", "inventory/sandbox.py", "--host", host.name,
            "--good", "2", "--bad", "3", "--member", "hyperqwen"]
    proc = subprocess.Popen(argv, cwd=sandbox_project.cwd(), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    said: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [said.put(line) for line in proc.stderr] + [said.put(None)], daemon=True).start()
    seen = []
    try:  # the good generation's deploy under way (its pyinfra started): then the control machine is gone
        stage = "step 2: deploying"
        while True:
            line = said.get(timeout=600)  # bounded: a bisect that never gets there fails here
            assert line is not None, "the bisect ended before its step 2's pyinfra: " + "".join(seen)[-3000:]
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
    assert "was interrupted; putting the host back at generation 3" in aborted.stderr, aborted.stderr[-3000:]
    assert_back_at(host, 3)
    again = bisect(host, "--abort")
    assert again.returncode == 0 and "no interrupted bisect" in again.stderr, again.stderr



def test_the_next_deploy_ends_a_journal_left_at_the_spec(host):
    """A bisect killed at a step that declares exactly the spec leaves a host the probe would call converged,
    with its journal standing (planted here as the agent writes it: ``bisect-begin``'s fields, started at the
    current generation 3, which is B = the inventory's spec). The next plain ``rigkit deploy`` must not take the
    probe path: it names the journal as its reason, deploys the start back and ends the journal."""
    journal = json.dumps({"id": "planted", "good": 2, "bad": 3, "start": 3, "since": "2026-01-01T00:00:00Z",
                          "command": "bisect (killed)"})
    host.run(f"umask 077 && printf '%s' '{journal}' > {JOURNAL}")
    proc = rigkit(host, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", data=b(), timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "an interrupted bisect (planted, " in proc.stderr, proc.stderr[-4000:]  # the full run's reason
    assert_back_at(host, 3)


def test_a_step_whose_deploy_fails_stops_the_walk_and_the_host_ends_where_it_started(host):
    """C (the next generation: the planted image, llama.cpp's build from before ggml-org/llama.cpp#15434 and arguments
    without ``--flash-attn on``) deploys and is slow; the search's first probe, A with C's llama.cpp image, cannot
    start the GGUF baseline (the old parser: ``error: invalid argument: on``), so that step's deploy fails and is
    put back by its own transaction. The walk stops and says so (exit 1, no culprit named: a step it could not
    measure leaves the search without an answer), and the host ends at C as it found it."""
    proc = rigkit(host, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--full", data=c())
    assert proc.returncode == 0, proc.stderr[-4000:]
    start = index(host, c())["current"]  # after the walks' steps: a number of its own
    assert start > 3, index(host, c())
    t0 = time.monotonic()
    proc = rigkit(host, "bisect", "-i", "inventory/sandbox.py", "--host", host.name, "--good", "2", "--bad", str(start),
                  "--member", "hyperqwen", "--no-pairs", data=c(), timeout=1200)
    took = time.monotonic() - t0
    err = proc.stderr
    assert proc.returncode == 1, err[-6000:]
    assert "step 2: " in err and ": SLOW" in err, err[-6000:]  # C measured slow against A: the search began
    assert ("bisect stopped: step 3 (generation 2 + image gguf_baseline) did not deploy or confirm (above); the host "
            f"was put back to generation {start}") in err, err[-6000:]
    assert "FOUND" not in err, err[-6000:]
    assert f"back at generation {start}, where the bisect started" in err, err[-3000:]
    assert_back_at(host, start, c())
    after = [g for g in index(host, c())["generations"] if g["n"] > start]
    failed = [g for g in after if g.get("failed")]  # the failed mix recorded as its own attempt, failed
    assert len(failed) == 1 and " step 3: generation 2 + image gguf_baseline" in failed[0]["reason"], after
    assert [g["n"] for g in after if (g.get("bisect") or {}).get("step") == 2 and not g.get("failed")], after
    print(f"\nbisect 2..{start} (a step whose deploy fails): {took:.0f} s\n" + "\n".join(
        ln for ln in err.splitlines() if "step " in ln or "invalid argument" in ln or "failed" in ln)[-4000:])
