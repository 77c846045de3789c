"""Proof that the formerly flaky tests no longer depend on this machine's speed ("a suite that never
flips"): each test node runs ``--runs`` times while every core is kept busy.

What it does: starts ``os.cpu_count()`` busy-loop processes (a CPU load on every core, so every
wait, sleep and subprocess in the tests runs late), then runs pytest ``--runs`` times, each time on
all the listed test nodes at once (``-p no:cacheprovider``, so no run reorders or skips by the last
one's outcome; ``-rA`` names each test's outcome), and counts per node the runs in which every test
of that node passed (a parametrised node counts as passed only when all its cases did). Prints
``NODE: 20/20 passed`` per node and a final summary; exits 1 if any run of any node failed.

The default nodes are the tests that used to compare elapsed time or sleep to land mid-way (see each
test's docstring or comment for what it now waits on), and the harness's end-to-end window
(``tests/harness/test_window.py``: it needs root and a sandbox host; ``--no-harness`` leaves it out).
Harness nodes run in one pytest session, repeated ``--runs`` times by pytest-repeat (``--count``), so
the module's sandbox host is built once and each repetition is a new window on it. Nodes given on the
command line replace the defaults.

usage: .venv/bin/python benchmarks/flaky_loop.py [--runs 20] [--no-harness] [--timeout 1800] [NODE ...]
(--timeout: seconds one pytest run may take; the harness session gets --runs times that)
(from the project root)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

UNIT = [
    "tests/unit/test_vram_idle.py::test_a_live_holder_times_out_with_a_message_naming_the_memory_the_ceiling_the_wait_and_the_holder",
    "tests/unit/test_vram_idle.py::test_a_killed_holders_memory_counts_until_the_boards_release_time_then_the_wait_returns",
    "tests/unit/test_vram_idle.py::test_with_no_release_time_a_dead_or_zombie_holder_is_released_at_the_first_reading",
    "tests/unit/test_vram_idle.py::test_a_driver_that_cannot_answer_fails_at_once_naming_nvidia_smis_state",
    "tests/unit/test_vram_idle.py::test_the_windows_vram_free_step_waits_for_idle_first_and_journals_what_it_saw",
    "tests/unit/test_host_side.py::test_a_holder_killed_with_sigkill_is_reclaimed_with_a_warning",
    "tests/unit/test_host_side.py::test_two_takers_at_once_have_exactly_one_winner",
    "tests/unit/test_host_side.py::test_a_change_waits_for_the_keepers_one_action_and_never_for_a_window",
    "tests/unit/test_generations.py::test_commands_with_the_holders_lease_join_it_and_no_one_else_does",
    "tests/unit/test_fake_gpu_power.py::test_the_engines_load_drives_the_draw_and_the_counter_and_the_limit_its_speed",
    "tests/unit/test_fake_gpu_power.py::test_the_energy_counter_field_is_refused_as_the_real_tool_does_and_the_meter_samples_the_draw",
    "tests/unit/test_power_sweep.py::test_the_runner_measures_each_limit_the_healer_stands_down_throughout_and_restore_puts_420_back",
    "tests/unit/test_llama_swap_upstream.py::test_completion_and_stream_pass_through_with_use_model_name",
    "tests/unit/test_llama_swap_upstream.py::test_member_whose_cmd_exits_fails_its_start_at_once",
    "tests/unit/test_llama_swap_upstream.py::test_ttl_unloads_idle_member",
    "tests/unit/test_llama_swap_upstream.py::test_unload_frees_member_port_and_vram",
    "tests/unit/test_llama_swap_upstream.py::test_requests_queue_while_member_starts_and_share_one_start",
    "tests/unit/test_llama_swap_upstream.py::test_busy_member_is_not_evicted_mid_request",
    "tests/unit/test_llama_swap_upstream.py::test_member_exiting_after_ready_is_marked_stopped_and_restarted_by_next_request",
    "tests/unit/test_llama_swap_upstream.py::test_sighup_reloads_config_stops_the_running_members_and_preloads_again",
    "tests/unit/test_llama_swap_upstream.py::test_idle_conn_below_the_members_keep_alive_means_a_post_after_idle_never_meets_a_closing_connection",
    "tests/bench/test_client_replay.py::test_usage_chunk_with_empty_choices_sets_counts_without_moving_e2e",
    "tests/bench/test_client_replay.py::test_vllm_delta_reasoning_is_thinking_and_answer_ttft_comes_later",
    "tests/bench/test_client_replay.py::test_stalled_stream_stops_after_the_stall_timeout",
    "tests/bench/test_cli_replay.py::test_stalled_stream_fails_the_workload_with_exit_1",
    "tests/bench/test_stream_kinds.py::test_a_connection_reset_mid_stream_is_cut_and_says_reset",
    "tests/bench/test_stream_kinds.py::test_a_model_still_loading_is_waited_for_and_named",
    "tests/bench/test_stream_kinds.py::test_loading_past_the_health_budget_fails_as_loading_never_as_dead",
    "tests/bench/test_stream_kinds.py::test_a_429_with_retry_after_is_honoured_within_the_budget",
    "tests/bench/test_stream_kinds.py::test_a_429_asking_longer_than_the_budget_is_named",
    "tests/bench/test_energy.py::test_without_a_counter_power_draw_is_sampled_and_integrated",
    "tests/bench/test_llama_server.py::test_reasoning_content_is_split_from_the_answer",
    "tests/models/test_fetch.py::test_killed_agent_fetch_resumes_on_the_next_run",
]
HARNESS = [
    "tests/harness/test_window.py::test_a_clean_window_runs_end_to_end_journals_each_step_and_copies_the_results",
]
OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)")


def start_load() -> list[subprocess.Popen]:
    """One busy-loop process per core."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]


def node_of(test_id: str, nodes: list[str]) -> str | None:
    """The listed node (a file, a test, a parametrised test) a test id (``file::name[param]``) belongs to."""
    for n in nodes:
        if test_id == n or test_id.startswith((n + "[", n + "::")):
            return n
    return None


def one_run(nodes: list[str], timeout_s: float) -> tuple[dict[str, bool], str]:
    """One pytest run over ``nodes``: ``({node: every test of it passed}, pytest's output)``."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:randomly", "-p", "no:cacheprovider", *nodes]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        out = p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:
        out = f"(pytest ran past {timeout_s:g} s and was stopped)\n{exc.stdout or ''}"
    seen: dict[str, list[str]] = {n: [] for n in nodes}
    for line in out.splitlines():
        m = OUTCOME.match(line)
        if m and (n := node_of(m.group(2), nodes)) is not None:
            seen[n].append(m.group(1))
    # a node with no outcome at all (not collected, or the run was stopped) failed
    return {n: bool(o) and all(x == "PASSED" for x in o) for n, o in seen.items()}, out


def repeated_run(nodes: list[str], runs: int, timeout_s: float) -> tuple[dict[str, int], str]:
    """One pytest session over ``nodes``, each test repeated ``runs`` times (pytest-repeat's ``--count``;
    test ids ``name[1-20]``…): ``({node: repetitions in which every test of it passed}, pytest's output)``."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:randomly", "-p", "no:cacheprovider",
           "--count", str(runs), *nodes]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        out = p.stdout + p.stderr
    except subprocess.TimeoutExpired as exc:
        out = f"(pytest ran past {timeout_s:g} s and was stopped)\n{exc.stdout or ''}"
    return count_repetitions(out, nodes), out


def count_repetitions(out: str, nodes: list[str]) -> dict[str, int]:
    """``{node: repetitions in which every outcome of it was PASSED}`` from pytest's ``-rA`` lines
    (pytest-repeat's ids end ``[3-20]``: repetition 3 of 20; a setup or teardown ERROR of a
    repetition that PASSED still fails it)."""
    rep = re.compile(r"-?(\d+)-\d+\]$")
    by: dict[str, dict[str, bool]] = {n: {} for n in nodes}
    for line in out.splitlines():
        m = OUTCOME.match(line)
        if m and (n := node_of(m.group(2), nodes)) is not None and (r := rep.search(m.group(2))):
            by[n][r.group(1)] = by[n].get(r.group(1), True) and m.group(1) == "PASSED"
    return {n: sum(ok for ok in reps.values()) for n, reps in by.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--no-harness", action="store_true", help="leave out the nodes under tests/harness/")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds one pytest run may take")
    ap.add_argument("nodes", nargs="*", help="test nodes (default: the formerly flaky ones)")
    a = ap.parse_args(argv)
    nodes = a.nodes or UNIT + HARNESS
    if a.no_harness:
        nodes = [n for n in nodes if not n.startswith("tests/harness/")]
    harness = [n for n in nodes if n.startswith("tests/harness/")]
    nodes = [n for n in nodes if n not in harness] + harness
    passed = {n: 0 for n in nodes}
    load = start_load()
    print(f"CPU load: {len(load)} busy processes on {os.cpu_count()} cores; {a.runs} runs of {len(nodes)} nodes",
          flush=True)
    t0 = time.monotonic()
    try:
        if harness:
            got_n, out = repeated_run(harness, a.runs, a.timeout * a.runs)
            passed.update(got_n)
            print(f"harness: {sum(got_n.values())}/{a.runs * len(harness)} repetitions passed"
                  f" ({time.monotonic() - t0:.0f} s)", flush=True)
            if sum(got_n.values()) < a.runs * len(harness):
                print("\n".join("  | " + ln for ln in out.splitlines()[-80:]), flush=True)
        unit = [n for n in nodes if n not in harness]
        for i in range(1, (a.runs + 1) if unit else 1):
            got, out = one_run(unit, a.timeout)
            failed = [n for n, ok in got.items() if not ok]
            for n, ok in got.items():
                passed[n] += ok
            print(f"run {i}/{a.runs}: {len(unit) - len(failed)}/{len(unit)} nodes passed"
                  f" ({time.monotonic() - t0:.0f} s)", flush=True)
            if failed:
                print("  failed: " + ", ".join(failed) + "\n" + "\n".join("  | " + ln for ln in out.splitlines()[-60:]),
                      flush=True)
    finally:
        for p in load:
            p.kill()
        for p in load:
            p.wait()
    print()
    for n in nodes:
        print(f"{n}: {passed[n]}/{a.runs} passed")
    bad = [n for n in nodes if passed[n] < a.runs]
    print(f"\nsummary: {len(nodes) - len(bad)}/{len(nodes)} nodes passed all {a.runs} runs under a CPU load on every "
          f"core ({time.monotonic() - t0:.0f} s)" + (f"; {len(bad)} flipped" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
