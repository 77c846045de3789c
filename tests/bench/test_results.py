"""Summaries, verdicts against a baseline, speed-ups and context matching."""

import pytest

from rigkit.bench.context import comparable, quantization_from
from rigkit.bench.metrics import parse_counters, spec_delta
from rigkit.bench.results import exit_code, speedups, stats, verdict
from rigkit.bench.workloads import verbatim_check

CTX = {"gpu": "NVIDIA GeForce RTX 3090", "driver": "610.57", "power_limit_w": 420.0,
       "engine": "vllm", "engine_version": "0.19.1", "model": "qwen3.8-27b",
       "quantization": "W4A16", "speculative": "dflash2 (DFLASH_TOKENS=7)"}


def wl(decode, prefill=None, status="ok", error=None):
    return {"status": status, "error": error,
            "metrics": {"decode_tps": stats(decode), "prefill_tps": stats(prefill or [])}}


def base(decode, ctx=CTX, name="chat-greedy"):
    return {"context": dict(ctx), "workloads": {name: wl(decode)}, "_file": "base.json"}


def test_stats_give_median_min_max_n_and_sample_cv():
    s = stats([100, 110, 120, None])
    assert (s["median"], s["min"], s["max"], s["n"]) == (110, 100, 120, 3)
    assert s["cv"] == pytest.approx(10 / 110)
    assert stats([5])["cv"] is None and stats([]) is None


def test_more_than_15_percent_slower_fails():
    v = verdict("chat-greedy", wl([100, 100, 101]), CTX, [base([118, 118, 118])])
    assert v == {"verdict": "FAIL", "baseline": "base.json",
                 "baseline_why": "given (--baseline or bench.baseline)", "baseline_skipped": [],
                 "reasons": ["decode 100.0 tok/s is 15% below baseline 118.0 tok/s, beyond the "
                             "noise of both runs (this run 100.0 tok/s (min 100.0, max 101.0, n 3, "
                             "CV 0.6%), every request slower than the baseline's slowest 118.0)"]}


def test_within_the_band_passes():
    assert verdict("chat-greedy", wl([110, 111, 112]), CTX, [base([118])])["verdict"] == "PASS"


def test_more_than_15_percent_faster_warns_as_a_likely_counting_bug():
    v = verdict("chat-greedy", wl([295, 296, 297]), CTX, [base([118])])
    assert v["verdict"] == "WARN"
    assert v["reasons"] == ["decode 296.0 tok/s is 151% above baseline 118.0 tok/s, beyond the "
                            "noise of both runs (stale baseline or a counting bug?)"]


def test_coefficient_of_variation_above_10_percent_warns_and_is_never_compared():
    v = verdict("chat-greedy", wl([90, 118, 140]), CTX, [base([118])])
    assert v["verdict"] == "WARN"
    assert v["reasons"] == ["decode unstable: this run 118.0 tok/s (min 90.0, max 140.0, n 3, CV "
                            "21.6%) has CV above 10%, too noisy to compare with baseline 118.0 "
                            "tok/s (min 118.0, max 118.0, n 1): neither PASS nor FAIL, rerun on a "
                            "quiet host"]
    # the case: 30% below an earlier run, CV 21.5% — WARN unstable, not FAIL
    cur = wl([900, 1274.7, 1500])
    assert verdict("chat-greedy", cur, CTX, [base([1831.1])])["verdict"] == "WARN"
    assert verdict("chat-greedy", wl([90, 118, 140]), CTX, [])["reasons"][-1] == \
        "decode_tps CV 21.6% > 10%: unstable, rerun"


def test_differing_context_gives_no_baseline_naming_the_difference():
    other = {**CTX, "driver": "600.10", "power_limit_w": 350}
    v = verdict("chat-greedy", wl([50]), CTX, [base([118], ctx=other)])
    assert v["verdict"] == "no baseline"
    assert v["reasons"] == ["no baseline: context differs: driver 610.57 vs 600.10; "
                            "power_limit_w 420.0 vs 350"]


def test_unknown_context_gives_no_baseline_naming_the_unknown_keys():
    v = verdict("chat-greedy", wl([50]), {**CTX, "gpu": None, "driver": None}, [base([118])])
    assert v["reasons"] == ["no baseline: context unknown: gpu, driver"]


def test_power_limit_420_matches_420_0():
    assert comparable({**CTX, "power_limit_w": 420}, CTX) == (True, "")


def test_failed_workload_is_a_fail_naming_its_error():
    v = verdict("quoting", wl([], status="failed", error="stalled: no data for 2 s"), CTX, [])
    assert v == {"verdict": "FAIL", "reasons": ["stalled: no data for 2 s"], "baseline": None,
                 "baseline_why": None}
    assert exit_code({"quoting": v}) == 1
    assert exit_code({"chat-greedy": {"verdict": "WARN"}}) == 0


def test_quoting_prefill_is_judged_too():
    b = {"context": CTX, "workloads": {"quoting": wl([237.6, 238, 237], [1210, 1215, 1205])}}
    v = verdict("quoting", wl([240, 239, 241], [900, 905, 895]), CTX, [b])
    assert v["verdict"] == "FAIL"
    assert v["reasons"] == ["prefill 900.0 tok/s is 26% below baseline 1210.0 tok/s, beyond the "
                            "noise of both runs (this run 900.0 tok/s (min 895.0, max 905.0, n 3, CV 0.6%), "
                            "every request slower than the baseline's slowest 1205.0)"]


def test_a_slowdown_from_one_figure_is_a_warn_naming_n_never_a_fail():
    """The small preset's quoting workload is one request: one slow prefill cannot tell a regression from a
    slow request, so the same finding is a WARN that names n (a FAIL needs 3 figures in each run)."""
    b = {"context": CTX, "workloads": {"quoting": wl([237.6], [1210])}}
    v = verdict("quoting", wl([240], [900]), CTX, [b])
    assert v["verdict"] == "WARN"
    assert v["reasons"] == ["prefill 900.0 tok/s is 26% below baseline 1210.0 tok/s and below its slowest, but "
                            "with too few figures to know the noise (this run 1, the baseline 1; a FAIL needs at "
                            "least 3 of each): not a certain regression, rerun with more requests"]


def test_speed_up_against_the_gguf_baseline_when_both_measured():
    gguf = {"context": {**CTX, "engine": "llama.cpp", "model": "qwen3.8-27b",
                        "quantization": "Q4_K_M"},
            "workloads": {"chat-greedy": wl([42]), "quoting": wl([], status="failed")},
            "_file": "gguf.json"}
    cur = {"chat-greedy": wl([118]), "quoting": wl([237.6])}
    assert speedups(cur, [gguf]) == [{"workload": "chat-greedy", "file": "gguf.json",
                                      "against": "llama.cpp qwen3.8-27b Q4_K_M",
                                      "factor": 2.81}]


def test_verbatim_check_normalises_line_ends_and_trailing_space_only():
    assert verbatim_check("a b\nc", "a b  \r\nc\n").passed
    r = verbatim_check("line one\nline two", "line one\nline tw0")
    assert (r.passed, r.first_diff, r.line, r.column) == (False, 16, 2, 8)
    assert r.message() == ("verbatim FAIL: answer differs from the quoted passage at character "
                           "16 (line 2, column 8): expected 'o', got '0'")


def test_quantization_is_read_from_model_names():
    assert quantization_from("/srv/models/qwen/Qwen3.8-27B-Q4_K_M.gguf") == "Q4_K_M"
    assert quantization_from(None, "Qwen3.8-27B-W4A16-AutoRound") == "W4A16"


def test_spec_decode_counters_are_summed_over_labels_and_differenced():
    text = ('vllm:spec_decode_num_drafts_total{engine="0"} 10\n'
            'vllm:spec_decode_num_drafts_total{engine="1"} 5\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0"} 105\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 45\n')
    after = parse_counters(text)
    assert after == {"drafts": 15.0, "draft_tokens": 105.0, "accepted": 45.0}
    d = spec_delta({"drafts": 5, "draft_tokens": 35, "accepted": 15}, after)
    assert d == {"drafts": 10, "draft_tokens": 70, "accepted": 30, "generated": 40,
                 "acceptance_length": 4.0, "acceptance_rate": 0.4286, "by_position": {},
                 "requests": None, "own_requests": None, "mixed": None}
    assert spec_delta(None, after) is None
