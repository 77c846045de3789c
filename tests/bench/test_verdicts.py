"""Issue 39: a verdict that follows from the evidence — proven over synthetic runs (hypothesis over
rates and spreads), never by timing: two runs of the same member never disagree as FAIL and
PASS, an unstable run is never FAIL (nor PASS) on speed, a FAIL is a regression beyond both runs'
noise; the default baseline is the last steady comparable run in the results folder, named (an
unstable run is never one: issue 60)."""

from __future__ import annotations

import json
import os

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.cli.bench import bench
from rigkit.bench.results import FASTER, MAX_CV, MIN_STEADY_N, SLOWER, compare_speed, find_baselines, stats, unsteady, verdict
from rigkit.report.chart import samples_from_jsonl

from .replay import Script, vllm_stream

CTX = {"gpu": "NVIDIA GeForce RTX 3090", "driver": "610.57", "power_limit_w": 420.0,
       "engine": "vllm", "engine_version": "0.19.1", "model": "qwen3.8-27b",
       "quantization": "W4A16", "speculative": "dflash2 (DFLASH_TOKENS=7)",
       "host": "rig", "member": "hyperqwen"}


@st.composite
def run_samples(draw):
    """One run's per-request decode tok/s: a true rate, a spread (0 to 150%: from a quiet card
    to the sandbox's 125.8% CV), n requests drawn inside it."""
    rate = draw(st.floats(1.0, 5000.0))
    spread = draw(st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.3, 0.8, 1.5]))
    n = draw(st.integers(1, 12))
    eps = draw(st.lists(st.floats(-1.0, 1.0), min_size=n, max_size=n))
    return [max(rate * (1 + spread * e), 0.01) for e in eps]


@settings(max_examples=500, deadline=None)
@given(a=run_samples(), b=run_samples())
def test_two_runs_never_disagree_as_fail_and_pass_and_an_unstable_run_is_never_fail(a, b):
    sa, sb = stats(a), stats(b)
    ab, why_ab = compare_speed(sa, sb)
    ba, why_ba = compare_speed(sb, sa)
    assert {ab, ba} != {"FAIL", "PASS"}, (why_ab, why_ba)
    for (label, why), (cur, base) in (((ab, why_ab), (sa, sb)), ((ba, why_ba), (sb, sa))):
        unstable = any(s["cv"] is not None and s["cv"] > MAX_CV for s in (cur, base))
        if unstable:
            assert label == "WARN" and ("unstable" in why or "not judged" in why)
        few = min(cur["n"], base["n"]) < MIN_STEADY_N
        if label == "FAIL":  # certain: stable, >15% below, every request slower than every one of the baseline
            assert not unstable and not few  # each run's noise known: n >= 3 in both
            assert cur["median"] < SLOWER * base["median"] and cur["max"] < base["min"]
            assert "beyond the noise of both runs" in why
        if not unstable and few and cur["median"] < SLOWER * base["median"] and cur["max"] < base["min"]:
            assert label == "WARN" and "too few figures to know the noise" in why and "a FAIL needs at least 3" in why
        if label == "PASS":
            assert SLOWER <= cur["median"] / base["median"] <= FASTER and why is None
    if ab == "FAIL":  # the mirror image is the faster-beyond-the-noise WARN
        assert ba == "WARN" and "above baseline" in why_ba and "beyond the noise" in why_ba


@settings(max_examples=200, deadline=None)
@given(a=run_samples())
def test_a_run_against_itself_is_pass_or_warn_unstable_never_fail(a):
    label, why = compare_speed(stats(a), stats(a))
    assert label in ("PASS", "WARN")
    if label == "WARN":
        assert "unstable" in why


@settings(max_examples=200, deadline=None)
@given(rate=st.floats(10.0, 5000.0), drop=st.floats(0.0, 0.8),
       eps=st.lists(st.floats(-0.02, 0.02), min_size=3, max_size=8))
def test_a_stable_slowdown_beyond_the_noise_fails_and_names_both_spreads(rate, drop, eps):
    base = stats([rate * (1 + e) for e in eps])
    cur = stats([rate * (1 - drop) * (1 + e) for e in eps])
    label, why = compare_speed(cur, base)
    if cur["median"] < SLOWER * base["median"] and cur["max"] < base["min"]:
        assert label == "FAIL" and f"baseline's slowest {base['min']:.1f}" in why
    else:
        assert label != "FAIL"


def test_the_issues_runs_warn_unstable_with_their_figures():
    """Two identical back-to-back runs on the sandbox gave FAIL (30% below, CV 21.5%) and then a
    20% above WARN; the post-deploy smoke with CV 125.8% ended passed."""
    first = {"median": 1831.1, "min": 1200.0, "max": 2300.0, "n": 3, "cv": 0.2}
    second = {"median": 1274.7, "min": 900.0, "max": 1600.0, "n": 3, "cv": 0.215}
    label, why = compare_speed(second, first, attempts=3)
    assert label == "WARN"
    assert why.startswith("decode unstable after 3 attempts: this run 1274.7 tok/s (min 900.0, "
                          "max 1600.0, n 3, CV 21.5%) has CV above 10%")
    smoke = {"median": 2235.3, "min": 1015.3, "max": 13931.6, "n": 4, "cv": 1.258}
    v = verdict("chat-greedy", {"status": "ok", "metrics": {"decode_tps": smoke}}, CTX, [])
    assert v["verdict"] == "WARN" and "decode_tps CV 125.8% > 10%: unstable, rerun" in v["reasons"]


def summary(ts, decode, *, max_tokens=256, preset="small", status="ok", host="rig", folder="x",
            power=420.0):
    return {"timestamp": ts, "run_id": folder, "preset": preset,
            "context": {**CTX, "host": host, "power_limit_w": power},
            "workloads": {"chat-greedy": {"status": status, "max_tokens": max_tokens,
                                          "counts": "counted",
                                          "metrics": {"decode_tps": stats(decode)}}}}


def write(root, name, obj):
    os.makedirs(root / name, exist_ok=True)
    (root / name / "summary.json").write_text(json.dumps(obj))
    return str(root / name / "summary.json")


def test_the_default_baseline_is_the_last_comparable_run_of_the_member(tmp_path):
    res = tmp_path / "results"
    old = write(res, "a", summary("2026-12-03T20:00:00+00:00", [100, 101, 102]))
    last = write(res, "b", summary("2026-12-03T21:00:00+00:00", [110, 111, 112]))
    write(res, "c", summary("2026-12-03T22:00:00+00:00", [50, 51, 52], max_tokens=48))
    write(res, "d", summary("2026-12-03T22:10:00+00:00", [50, 51, 52], preset="rig"))
    write(res, "e", summary("2026-12-03T22:20:00+00:00", [50, 51, 52], power=350.0))
    write(res, "f", summary("2026-12-03T22:30:00+00:00", [50, 51, 52], host="other"))
    write(res, "g", summary("2026-12-03T22:40:00+00:00", [], status="failed"))
    write(res, "mine", summary("2026-12-03T23:00:00+00:00", [1, 2, 3]))
    found = find_baselines(str(res), exclude=str(res / "mine"))
    assert [b["_file"] for b in found][-2:] == [last, old] and len(found) == 7
    cur = {"status": "ok", "max_tokens": 256, "counts": "counted",
           "metrics": {"decode_tps": stats([108, 109, 110])}}
    v = verdict("chat-greedy", cur, CTX, found, preset="small")
    assert (v["verdict"], v["baseline"]) == ("PASS", last)
    assert v["baseline_why"].startswith("the last steady comparable run of this member")
    # --baseline overrides: a given file is used even when settings differ
    given_ = {**summary("2026-12-01T00:00:00+00:00", [100, 100, 101], max_tokens=48),
              "_file": "given.json"}
    assert verdict("chat-greedy", cur, CTX, [given_, *found], preset="small")["baseline"] == "given.json"
    # no earlier run with these settings: no baseline, and the reason names the difference
    v = verdict("chat-greedy", {**cur, "max_tokens": 1024}, CTX, found, preset="small")
    assert v["verdict"] == "no baseline"
    assert v["reasons"] == ["no baseline: none given, and no earlier comparable run in the results "
                            "folder (earlier runs differ: preset small vs rig)"]  # the newest of rig's


def test_the_second_of_two_runs_compares_with_the_first_by_default(replay, tmp_path):
    """Through the CLI: run twice with the same settings; the second names the first as its
    baseline when the first is steady, and says it passed over an unstable first otherwise.

    The replay's 50 ms gaps make the first steady (CV ≤ 10%) on a quiet or moderately loaded machine,
    but whether it is depends on this machine's scheduling (at load 15 on 2 cores it was not), so the
    rule is asserted on what the first run itself recorded — never a race with the clock."""
    replay.default = Script(vllm_stream(answer=["abc"] * 6, gap_s=0.05))
    (tmp_path / "ctx.json").write_text(json.dumps({"gpu": "NVIDIA GeForce RTX 3090",
                                                   "driver": "610.57", "power_limit_w": 420,
                                                   "speculative": "dflash2"}))
    args = ["--url", replay.url, "--preset", "small", "--no-warmup", "--workload", "chat-greedy",
            "--results", str(tmp_path / "results"), "--context", str(tmp_path / "ctx.json")]
    first = CliRunner().invoke(bench, [*args, "--out", str(tmp_path / "results" / "one")])
    assert first.exit_code == 0, first.output
    second = CliRunner().invoke(bench, [*args, "--out", str(tmp_path / "results" / "two")])
    assert second.exit_code == 0, second.output
    v = json.loads((tmp_path / "results" / "two" / "summary.json").read_text())["verdicts"]
    one = json.loads((tmp_path / "results" / "one" / "summary.json").read_text())
    shaky = unsteady("chat-greedy", one["workloads"]["chat-greedy"])
    if shaky is None:
        assert v["chat-greedy"]["baseline"] == str(tmp_path / "results" / "one" / "summary.json")
        assert (f"  baseline: {tmp_path / 'results' / 'one' / 'summary.json'} (the last steady comparable "
                f"run of this member") in second.stdout
    else:  # this machine's load made the first unstable: never a default baseline, and said so
        assert v["chat-greedy"]["baseline"] is None, second.output
        assert "no steady comparable run in the results folder" in v["chat-greedy"]["reasons"][0]
        assert shaky in v["chat-greedy"]["reasons"][0]
    # another max_tokens: the earlier runs are not its baseline
    third = CliRunner().invoke(bench, [*args, "--max-tokens", "17",
                                       "--out", str(tmp_path / "results" / "three")])
    v3 = json.loads((tmp_path / "results" / "three" / "summary.json").read_text())["verdicts"]
    assert v3["chat-greedy"]["baseline"] is None, third.output
    assert v3["chat-greedy"]["reasons"][0].startswith("no baseline: none given, and no earlier "
                                                      "comparable run in the results folder "
                                                      "(earlier runs differ: max_tokens 17 vs 48)")


def test_an_unstable_workload_is_measured_again_and_its_last_attempt_is_the_summary(replay, tmp_path):
    """The first attempt's four requests decode at 30 ms and 240 ms per chunk (CV far above 10%:
    the gaps, not this machine, set it; each interval far above the 10 ms the bench can time, so no
    figure is impossible even when a loaded machine reads late — at 10 ms per chunk it did, beside the
    harness lanes); the workload is measured again, each record carries
    its attempt, the summary and the chart's points are the last attempt's."""
    fast = Script(vllm_stream(answer=["abc"] * 4, gap_s=0.03))
    slow = Script(vllm_stream(answer=["abc"] * 4, gap_s=0.24))
    replay.queue(fast, slow, fast, slow)
    replay.default = Script(vllm_stream(answer=["abc"] * 4, gap_s=0.06))
    out = tmp_path / "out"
    result = CliRunner().invoke(bench, ["--url", replay.url, "--preset", "small", "--no-warmup",
                                        "--workload", "chat-greedy", "--out", str(out),
                                        "--repeat-unstable", "2"])
    assert result.exit_code == 0, result.output
    s = json.loads((out / "summary.json").read_text())["workloads"]["chat-greedy"]
    assert s["attempts"] >= 2 and s["tries"][0]["cv"]["decode_tps"] > 0.5
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert [r["attempt"] for r in recs[:4]] == [1, 1, 1, 1]
    assert {r["attempt"] for r in recs} == set(range(1, s["attempts"] + 1))
    assert s["n"] == 4  # the last attempt only
    points = samples_from_jsonl(str(out / "requests.jsonl"))["chat-greedy"]["decode_tps"]
    assert sorted(points) == sorted(r["decode_tps"] for r in recs if r["attempt"] == s["attempts"])
    assert "chat-greedy: unstable (decode_tps CV" in result.output



def test_an_apparent_regression_is_measured_again_and_a_passing_remeasure_is_no_fail(replay, tmp_path):
    """The sandbox's twenty pairs met one FAIL between two steady runs of the same settings (35%
    apart: the shared host's load moved between them, not within them). A slowdown beyond both
    runs' spread is measured again before it is a FAIL: here the first attempt's four requests
    pace at 200 ms per chunk against a 40 ms baseline, the next at the baseline's pace."""
    (tmp_path / "ctx.json").write_text(json.dumps({"gpu": "NVIDIA GeForce RTX 3090",
                                                   "driver": "610.57", "power_limit_w": 420,
                                                   "speculative": "dflash2"}))
    args = ["--url", replay.url, "--preset", "small", "--no-warmup", "--workload", "chat-greedy",
            "--results", str(tmp_path / "results"), "--context", str(tmp_path / "ctx.json"),
            "--repeat-unstable", "2"]
    replay.default = Script(vllm_stream(answer=["abc"] * 4, gap_s=0.04))
    first = CliRunner().invoke(bench, [*args, "--out", str(tmp_path / "results" / "one")])
    assert first.exit_code == 0, first.output
    # the baseline made steady at its own median: under a loaded machine the 40 ms pacing alone can come out
    # unstable (CV 26.5% seen beside the harness lanes), and an unstable run is never a default baseline
    one = tmp_path / "results" / "one" / "summary.json"
    summary = json.loads(one.read_text())
    decode = summary["workloads"]["chat-greedy"]["metrics"]["decode_tps"]
    summary["workloads"]["chat-greedy"]["metrics"]["decode_tps"] = stats([decode["median"]] * 4)
    one.write_text(json.dumps(summary))
    slow = Script(vllm_stream(answer=["abc"] * 4, gap_s=0.2))
    replay.queue(slow, slow, slow, slow)
    second = CliRunner().invoke(bench, [*args, "--out", str(tmp_path / "results" / "two")])
    s = json.loads((tmp_path / "results" / "two" / "summary.json").read_text())
    w, v = s["workloads"]["chat-greedy"], s["verdicts"]["chat-greedy"]
    assert (w["tries"][0]["doubt"] or "").startswith("decode ") and "below baseline" in w["tries"][0]["doubt"], (w, v)
    assert w["attempts"] >= 2 and v["verdict"] != "FAIL" and second.exit_code == 0, second.output
    assert any(x.startswith("chat-greedy: decode ") and x.endswith("(confirming); measuring it again")
               for x in s["warnings"]), s["warnings"]
