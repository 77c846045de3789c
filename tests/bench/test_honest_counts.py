"""Issue 16 item 1 and issue 17 item 1: verdicts compare like with like, llama.cpp's timings
count, cut answers name the thinking/answer split, odd JSON shapes are bad data, a warning
repeated per request is printed once with a count, workloads that cannot run are NOT-RUN."""

import json

import pytest
from click.testing import CliRunner

from rigkit.cli.bench import bench
from rigkit.bench.client import CHUNK_ESTIMATE_WARNING, stream_chat
from rigkit.bench.results import stats, summarize_workload, verdict
from rigkit.bench.session import applied_settings
from rigkit.bench.workloads import PRESETS, build_workloads, mark_unrunnable
from rigkit.spec.model import BenchSpec

from .replay import Script, chunk, said, usage_chunk, vllm_stream

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
CTX = {"gpu": "NVIDIA GeForce RTX 3090", "driver": "610.57", "power_limit_w": 420.0,
       "engine": "vllm", "engine_version": "0.19.1", "model": "qwen3.8-27b",
       "quantization": "W4A16", "speculative": "dflash2 (DFLASH_TOKENS=7)"}


def chat(replay, steps):
    replay.queue(Script(steps))
    return stream_chat(replay.url + "/v1/chat/completions", BODY)


def workload(decode, source):
    return {"status": "ok", "error": None, "tokens_source": source,
            "counts": "counted" if source in ("usage", "timings") else "estimate",
            "metrics": {"decode_tps": stats(decode), "prefill_tps": None}}


def test_estimated_run_against_a_usage_baseline_is_not_comparable_never_a_fail():
    base = {"context": dict(CTX), "_file": "base.json",
            "workloads": {"chat-greedy": workload([118, 118, 118], "usage")}}
    v = verdict("chat-greedy", workload([47, 47, 48], "chunk-estimate"), CTX, [base])
    assert v == {"verdict": "not comparable", "baseline": "base.json",
                 "baseline_why": "given (--baseline or bench.baseline)", "baseline_skipped": [], "reasons": [
        "decode not compared: this run's completion tokens are a chunk-count estimate (the "
        "server sent no usage), the baseline's are counted (usage); an estimate is neither a "
        "slowdown nor a speed-up"]}


def test_counted_run_against_an_estimated_baseline_is_not_comparable_either():
    base = {"context": dict(CTX), "_file": "b.json",
            "workloads": {"chat-greedy": workload([40], "chunk-estimate")}}
    v = verdict("chat-greedy", workload([118], "usage"), CTX, [base])
    assert v["verdict"] == "not comparable"
    assert v["reasons"][0].startswith("decode not compared: the baseline's completion tokens "
                                      "are a chunk-count estimate")


def test_timings_counted_run_is_judged_against_a_usage_baseline():
    base = {"context": dict(CTX), "_file": "b.json",
            "workloads": {"chat-greedy": workload([118, 119, 118], "usage")}}
    assert verdict("chat-greedy", workload([90, 91, 90], "timings"), CTX, [base])["verdict"] == "FAIL"


def test_llama_cpp_timings_predicted_n_is_the_count_when_usage_is_missing(replay):
    steps = [("event", chunk({"content": "a"})), ("event", chunk({"content": "b"})),
             ("event", {**chunk({}, finish="stop"),
                        "timings": {"prompt_n": 7, "cache_n": 3, "predicted_n": 5}}),
             ("done",)]
    r = chat(replay, steps)
    assert r.ok, r.error
    assert (r.completion_tokens, r.tokens_source, r.prompt_tokens, r.prompt_tokens_source) == \
        (5, "timings", 10, "timings")
    assert said(r.warnings) == []


@pytest.mark.parametrize("event, message", [
    ({"choices": [], "usage": "12 tokens"},
     "bad data in stream event 2: usage is a string, expected an object"),
    ({"choices": [{"index": 0, "delta": "hello"}]},
     "bad data in stream event 2: choices[0].delta is a string, expected an object"),
    ({"choices": {"index": 0}},
     "bad data in stream event 2: choices is an object, expected a list"),
    ({"choices": [{"delta": {"content": ["a"]}}]},
     "bad data in stream event 2: choices[0].delta.content is a list, expected a string"),
    ({"choices": [], "usage": {"completion_tokens": "9"}},
     "bad data in the stream: usage.completion_tokens is \"9\" (a string), expected an integer"),
])
def test_valid_json_of_an_unexpected_shape_is_bad_data_naming_the_field(replay, event, message):
    r = chat(replay, [("event", chunk({"content": "a"})), ("event", event), ("done",)])
    assert (r.ok, r.error_kind, r.error) == (False, "bad-data", message)


def test_answer_cut_after_thinking_used_most_of_the_budget_names_the_split(replay):
    steps = vllm_stream(reasoning=["x"] * 6, answer=["y"] * 2, finish="length",
                        tokens_per_chunk=8)
    r = chat(replay, steps)
    assert r.ok
    assert (r.reasoning_tokens, r.answer_tokens, r.reasoning_tokens_source) == (48, 16, "chunk-share")
    assert r.cut_note == ('answer cut by max_tokens (finish_reason "length") after 64 tokens: '
                          'thinking ~48, answer ~16')
    assert len(said(r.warnings)) == 1 and said(r.warnings)[0].startswith("WARNING: answers cut by max_tokens")


def test_usage_reasoning_tokens_give_an_exact_split(replay):
    steps = vllm_stream(reasoning=["x"] * 2, answer=["y"], finish="length", usage=False)
    steps.insert(-1, ("event", usage_chunk(10, 30, **{})))
    steps[-2][1]["usage"]["completion_tokens_details"] = {"reasoning_tokens": 25}
    r = chat(replay, steps)
    assert r.cut_note == ('answer cut by max_tokens (finish_reason "length") after 30 tokens: '
                          'thinking 25, answer 5')


def test_short_thinking_before_a_length_cut_is_no_warning(replay):
    r = chat(replay, vllm_stream(reasoning=["x"], answer=["y"] * 5, finish="length"))
    assert r.ok and r.cut_note is None and said(r.warnings) == []


def run_cli(replay, tmp_path, *args):
    out = tmp_path / "out"
    result = CliRunner().invoke(bench, ["--url", replay.url, "--out", str(out), "--preset",
                                        "small", *args])
    return result, out


def test_a_warning_repeated_per_request_is_printed_once_with_a_count(replay, tmp_path):
    # 50 ms between chunks: a decode figure the bench can time (over 10 ms, results.MIN_INTERVAL_S; the
    # arrivals carry one, so an estimate can be marked as one)
    replay.default = Script(vllm_stream(answer=["abc"] * 4, usage=False, gap_s=0.05))
    result, out = run_cli(replay, tmp_path, "--workload", "chat-greedy", "--no-warmup")
    assert result.exit_code == 0, result.output
    assert result.stderr.count("the server sent no usage") == 1
    summary = json.loads((out / "summary.json").read_text())
    assert said(summary["warnings"]) == [f"{CHUNK_ESTIMATE_WARNING} (4 of 4 requests)"]
    assert summary["workloads"]["chat-greedy"]["counts"] == "estimate"
    assert any(ln.startswith("chat-greedy: n=4 · prompt n/a · decode ~") and
               "(ESTIMATE: chunks counted; the server sent no usage)" in ln for ln in result.stdout.splitlines())
    assert ("  completion tokens: 4 per request (median), 16 in total ESTIMATED by counting "
            "chunks (the server sent no usage); a chunk count would say 16 · 1.00 tokens/chunk") \
        in result.stdout.splitlines()


def test_estimated_run_against_usage_baseline_exits_0_not_as_a_regression(replay, tmp_path):
    replay.default = Script(vllm_stream(answer=["abc"] * 10, tokens_per_chunk=3))
    first, out1 = run_cli(replay, tmp_path / "a", "--workload", "chat-greedy", "--no-warmup",
                          "--context", str(_ctx_file(tmp_path)))
    assert first.exit_code == 0, first.output
    replay.default = Script(vllm_stream(answer=["abc"] * 10, usage=False))
    result, _ = run_cli(replay, tmp_path / "b", "--workload", "chat-greedy", "--no-warmup",
                        "--baseline", str(out1 / "summary.json"),
                        "--context", str(_ctx_file(tmp_path)))
    assert result.exit_code == 0, result.output
    verdict_line = [ln for ln in result.stdout.splitlines() if ln.startswith("  verdict:")][0]
    assert verdict_line.startswith("  verdict: not comparable — decode not compared: this "
                                   "run's completion tokens are a chunk-count estimate"), \
        verdict_line
    assert "FAIL" not in result.stdout


def _ctx_file(tmp_path):
    p = tmp_path / "ctx.json"
    p.write_text(json.dumps({k: CTX[k] for k in ("gpu", "driver", "power_limit_w", "speculative")}))
    return p


def test_workload_larger_than_the_server_context_is_not_run_with_the_figures():
    wls = build_workloads(PRESETS["small"], ["warmup", "chat-greedy", "quoting"], model="m",
                          nonce="n", chars_per_token=1.0, chat_max_tokens=8192,
                          quoting_tokens=29_000)
    mark_unrunnable(wls, n_ctx=4096, n_params=None, chars_per_token=1.0)
    by = {w.name: w.not_run for w in wls}
    assert by["chat-greedy"].startswith("needs ~8,")
    assert by["chat-greedy"].endswith("-token prompt + max_tokens 8192); the server allows "
                                      "4,096 per request (its reported context); use a "
                                      "smaller --preset, --quoting-tokens or --max-tokens")
    assert by["quoting"].startswith("needs ~29,")


def test_quoting_is_not_run_on_a_model_too_small_to_follow_it_and_runs_when_unknown():
    wls = build_workloads(PRESETS["small"], ["chat-greedy", "quoting"], model="m", nonce="n")
    mark_unrunnable(wls, n_ctx=4096, n_params=131_392, chars_per_token=4.0)
    assert [w.not_run for w in wls] == [None, (
        "the model has 131,392 parameters (the server's /v1/models meta.n_params), under the "
        "100,000,000 a model needs to follow the quoting instruction; a verbatim FAIL would "
        "judge the model, not the rig")]
    wls = build_workloads(PRESETS["small"], ["quoting"], model="m", nonce="n")
    mark_unrunnable(wls, n_ctx=None, n_params=None, chars_per_token=4.0)
    assert wls[0].not_run is None


def test_host_bench_defaults_are_the_rig_presets_and_leave_the_small_preset_alone():
    assert applied_settings(BenchSpec().model_dump(), "small") == {}
    assert applied_settings(BenchSpec().model_dump(), "rig") == {
        "quoting_prompt_tokens": 29000, "max_tokens": 8192, "reasoning_effort": "medium"}
    assert applied_settings(BenchSpec(max_tokens=256).model_dump(), "small") == {"max_tokens": 256}


def test_not_run_workload_verdict_is_not_run_and_exit_stays_0():
    s = summarize_workload("quoting", [], not_run="too small", skipped=True)
    assert verdict("quoting", s, CTX, []) == {"verdict": "NOT-RUN", "reasons": ["too small"],
                                             "baseline": None, "baseline_why": None}


def _sse(*objs):
    return b"".join(b"data: " + (o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n\n"
                    for o in objs)


def test_events_arriving_in_one_read_are_counted_like_events_arriving_apart(replay):
    many = [chunk({"content": "ab"})] * 50
    r = chat(replay, [("raw", _sse(*many, usage_chunk(5, 100), b"[DONE]"))])
    assert r.ok, r.error
    assert (r.token_chunks, r.completion_tokens, r.answer) == (50, 100, "ab" * 50)


@pytest.mark.parametrize("bad, message", [
    (b'{"choices": [', "unparseable SSE data: '{\"choices\": ['"),
    (b"[1, 2]", "unexpected SSE data (event 3): a list, expected an object"),
    (json.dumps({"choices": [], "usage": 7}).encode(),
     "bad data in stream event 3: usage is a number, expected an object"),
])
def test_a_bad_event_inside_one_read_is_named_as_when_it_comes_alone(replay, bad, message):
    r = chat(replay, [("raw", _sse(chunk({"content": "a"}), chunk({"content": "b"}), bad,
                                   chunk({"content": "c"}), b"[DONE]"))])
    assert (r.ok, r.error_kind, r.error) == (False, "bad-data", message)
