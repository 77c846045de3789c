"""Shared test settings: the llama-swap schema URL points at the copy beside the checkout
(DESIGN.md "Testing with real parts"; the sha256 is still checked), and the cache is per run."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("RIGKIT_SHARED", ROOT.parent / "shared"))
SCHEMA_COPY = SHARED / "data" / "llama-swap" / "config-schema.json"


@pytest.fixture(scope="session", autouse=True)
def _schema_url_and_cache(tmp_path_factory):
    if not os.environ.get("RIGKIT_LLAMA_SWAP_SCHEMA_URL") and SCHEMA_COPY.is_file():
        os.environ["RIGKIT_LLAMA_SWAP_SCHEMA_URL"] = SCHEMA_COPY.as_uri()
    os.environ.setdefault("RIGKIT_CACHE", str(tmp_path_factory.mktemp("rigkit-cache")))
    # the control side's state (rigkit.deploy.outcomes.state_dir: the outcome records of every deploy the
    # suite runs, the harness' included, which inherit this environment) goes to this run's temporary
    # folder, never the real ~/.local/state/rigkit — always, even when the caller's RIGKIT_STATE is set
    os.environ["RIGKIT_STATE"] = str(tmp_path_factory.mktemp("rigkit-state"))
    yield


@pytest.fixture(autouse=True)
def _leaves_the_process_unpatched(request):
    """A test outside the harness must not gevent-patch the test process (importing ``pyinfra_cli`` does, as
    ``rigkit``'s ``main()`` does on purpose): a pytest-xdist worker so patched dies waiting for its next test
    (``gevent.exceptions.LoopExit: This operation would block forever`` — an INTERNALERROR that ends the whole
    run without its summary). Such a test fails here, naming itself; run what patches in a process of its own."""
    import sys

    def patched() -> bool:
        monkey = sys.modules.get("gevent.monkey")
        return bool(monkey and monkey.is_module_patched("threading"))

    before = patched()
    yield
    if not before and patched() and request.node.get_closest_marker("harness") is None:
        pytest.fail("this test gevent-patched the test process (it imported pyinfra_cli, or called rigkit's main()); "
                    "run that part in a subprocess")


# ------------------------------------------------------------------------ the order modules start in
# `make test` hands whole modules to its lanes (`--dist loadfile --no-loadscope-reorder`) in collection
# order, each lane taking the next module when its current one has two tests left. Longest first keeps the
# lanes even (the last module to start is a short one). The run's converged host (golden.py, ~90 s to
# build) is built in the background from the start (the Makefile's `test`), so the lanes start with the
# modules that need no golden host (~100 s of each lane: test_deploy's fresh host, the bare-host modules,
# the longest unit modules) and the first one that needs it finds it built or nearly. The order is by
# hand: those golden-free modules first, then the rest by their seconds in a 2-core run (each module's
# figure in its comment; the "lanes" section prints every module's); a module not listed starts after
# these, in its own order.
MODULE_ORDER = (
    "tests/harness/test_deploy.py",            # 188 s loaded; its fresh host first (~80 s): beside the golden build
    "tests/unit/test_cli_output.py",           # 45-57 s loaded (issue 61): ~80 CLI error paths, each in a pty and a pipe
    "tests/unit/test_owner_corpus.py",         # 30-50 s (issue 57: real files byte for byte, presets' -c loading, files without a final newline)
    "tests/harness/test_standins.py",          # 17 s; fresh, bare hosts and unit modules: beside the build too
    "tests/harness/test_host.py",              # 21 s
    "tests/harness/test_engine.py",            # 13 s; + one test of six host commands (issue 58: the real nvidia-ctk; test_standins lost its one)
    "tests/unit/test_cli.py",                  # 23 s
    "tests/unit/test_llama_swap_upstream.py",  # 20 s
    "tests/unit/test_hints.py",                # 17 s; beside the golden build: it needs no host up
    "tests/bench/test_spec_metrics.py",        # 17 s (issue 65): the stand-in engine as local processes, the rig's 20k-token long workload
    "tests/harness/test_wirein.py",            # 405 s loaded with the golden build in it (88 s), which the background build takes out
    "tests/harness/test_bisect.py",            # 640-720 s in a 5-lane run with the pair (issue 68), ~500 s without it: a golden copy + deploys A, B ~45 s, the planted walk 140-205 s (5 deploys, 5 benches), a killed one put back 19 s, a left journal ended 10 s, a step whose deploy fails 96-140 s
    "tests/harness/test_bisect_pair.py",       # ~165 s alone, ~220 s in lanes (issue 68): a golden copy, deploys A and E, the pair's walk (6 deploys, 5 benches): a lane of its own, beside test_bisect
    "tests/harness/test_fleet.py",             # ~260 s (issue 67): three golden copies, a canary put back, two batches, a retry, three benches
    "tests/harness/test_lock.py",              # 232 s loaded; alone 196 -> 135 s (speed6: the races' holders gated, not 8-15 s boots waited out; the SIGKILL after the follower is up; its power test waits 0-30 s for the timer's phase)
    "tests/harness/test_window.py",            # 229 s loaded
    "tests/harness/test_generations.py",       # 181 s loaded
    "tests/harness/test_drift.py",             # 173 s loaded (issue 48: the deploy's path choice, seven deploys); alone 155 -> 139 s (speed6: the healer's unit started, not its timer awaited)
    "tests/harness/test_sweep.py",             # 122 s loaded
    "tests/harness/test_safety.py",            # 114 s loaded
    "tests/harness/test_lived_in.py",          # 92 s loaded (issue 63: a lived-in copy's journey: two deploys, wire-in, a window, a rollback, drift)
    "tests/harness/test_report.py",            # 60 s (niced, beside other checkouts' runs): three benches
    "tests/harness/test_operator_files.py",    # 40-67 s (issue 42: two deploys, drift, two refusals)
    "tests/harness/test_pin_bump.py",          # 36 s
    "tests/harness/test_lockfile.py",          # 58 s: a package file and an image not the locked ones, refused
    "tests/harness/test_metrics.py",           # 44 s (issue 47): two drifts, a failed deploy put back, a bench; +21 s (issue 66: a drift with node_exporter stopped, a render, the targets scraped); + ~1 s (issue 65: a scrape that must not load a member)
    "tests/unit/test_llama_swap_differential.py",  # 12 s: 231 upstream configs, 600 generated
    "tests/unit/test_spec_types.py",           # 6 s: hypothesis (raw-data fuzz, claims, co-load oracle), one rigkit check
    "tests/bench/test_cli_replay.py",          # 10 s: replays paced by sleeps (a FAIL measured again)
    "tests/bench/test_verdicts.py",            # 9 s: CLI runs paced by sleeps, hypothesis over spreads
    "tests/bench/test_failure_kinds.py",       # 5 s: hypothesis, the client before the split (from git) beside today's
    "tests/report/test_spec_report.py",        # 15 s (issue 65): four benches of the stand-in, the report in Chromium
    "tests/unit/test_lock_cli.py",             # 12 s: rigkit lock against a built archive, registry, release
    "tests/unit/test_lock_sources.py",         # 9 s: the archive built with repo-add, vercmp against pacman's
    "tests/unit/test_gguf_header.py",          # 8-13 s (issue 62): 550 generated headers read by llama.cpp's own reader
    "tests/unit/test_nvml.py",                 # 11 s; the stand-in NVML built with gcc, both methods measured
    "tests/unit/test_dashboard.py",            # 13 s (issue 66): one rigkit render in a subprocess, promql-parser over every query
    "tests/unit/test_promfile.py",             # 8-13 s (issue 47): promtool on 40 generated files, the agent run thrice
    "tests/unit/test_textfile_writers.py",     # 10 s (issue 57): the real node_exporter over every pair of rigkit's writers
    "tests/unit/test_daemon_json.py",          # 7 s (issue 57): the real nvidia-ctk (built once, cached) over generated daemon.json
    "tests/models/test_check_vram.py",         # 6 s: two `rigkit check` runs (issue 46)
)


def pytest_collection_modifyitems(config, items):
    """Modules in :data:`MODULE_ORDER`'s order first (its comment), the rest after, in their order."""
    rank = {m: i for i, m in enumerate(MODULE_ORDER)}
    items.sort(key=lambda it: rank.get(it.nodeid.split("::", 1)[0], len(rank)))  # stable: tests keep their order


# ------------------------------------------------------------------------ lanes (pytest-xdist workers)
# Each lane writes when it started and ended and which modules it ran to a folder the controller
# names before the workers start; the controller prints one line per lane at the end, so a run's
# output (CI's too) shows how the lanes are balanced.
_LANE_T0 = time.time()
_LANE_FILES: dict[str, float] = {}


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER") and getattr(config.option, "numprocesses", None):
        os.environ["RIGKIT_LANES_DIR"] = tempfile.mkdtemp(prefix="rigkit-lanes-")


def pytest_runtest_logreport(report):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        f = report.nodeid.split("::", 1)[0]
        _LANE_FILES[f] = _LANE_FILES.get(f, 0.0) + report.duration


def pytest_sessionfinish(session):
    lane, where = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("RIGKIT_LANES_DIR")
    if lane and where and os.path.isdir(where):
        rec = {"lane": lane, "wall_s": round(time.time() - _LANE_T0, 1), "files": _LANE_FILES}
        Path(where, f"{lane}.json").write_text(json.dumps(rec))


def pytest_terminal_summary(terminalreporter):
    where = os.environ.get("RIGKIT_LANES_DIR")
    if os.environ.get("PYTEST_XDIST_WORKER") or not where or not os.path.isdir(where):
        return
    recs = sorted((json.loads(p.read_text()) for p in Path(where).glob("*.json")), key=lambda r: r["lane"])
    if not recs:
        return
    terminalreporter.section("lanes")
    for r in recs:
        top = sorted(r["files"].items(), key=lambda kv: -kv[1])[:4]
        terminalreporter.write_line(f"{r['lane']}: {r['wall_s']:7.1f} s wall, {len(r['files'])} modules; longest: "
                                    + ", ".join(f"{Path(f).name} {s:.0f} s" for f, s in top))
    every = sorted(((f, s, r["lane"]) for r in recs for f, s in r["files"].items()), key=lambda x: -x[1])
    terminalreporter.write_line("every module over 5 s, longest first (the figures for MODULE_ORDER):")
    for f, s, lane in every:
        if s > 5:
            terminalreporter.write_line(f"  {s:7.1f} s  {lane}  {f}")
    shutil.rmtree(where, ignore_errors=True)
