"""The client and `rigkit bench --url` against llama.cpp's own server (xllamacpp, tiny GGUF
that thinks "<think>Let me think about it</think>" and then loops a fixed sentence)."""

import json

import pytest
from click.testing import CliRunner

from rigkit.cli.bench import bench
from rigkit.bench.client import stream_chat

pytestmark = pytest.mark.slow
THINK = "Let me think about it"


def ask(url, max_tokens, **extra):
    return stream_chat(url + "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": max_tokens,
        "temperature": 0, **extra})


def test_counts_equal_the_server_usage_and_its_timings(llama_server):
    r = ask(llama_server, 40)
    assert r.ok, r.error
    assert (r.completion_tokens, r.tokens_source, r.finish_reason) == (40, "usage", "length")
    assert r.server_timings["predicted_n"] == 40
    # <think> and </think> count as tokens but stream no delta: 38 chunks for 40 tokens
    assert r.token_chunks == 38
    assert r.prompt_tokens == r.server_timings["prompt_n"] + r.server_timings["cache_n"]


def test_reasoning_content_is_split_from_the_answer(llama_server):
    r = ask(llama_server, 30)
    assert (r.reasoning_source, r.reasoning_chars) == ("reasoning_content", len(THINK))
    assert r.answer.startswith("Hello! This is a tiny test model")
    assert r.ttft_answer_s >= r.ttft_s  # not before the thinking; equal when one read carried both


def test_budget_spent_on_thinking_is_reported_as_such(llama_server):
    r = ask(llama_server, 5)
    assert (r.ok, r.error_kind) == (False, "thinking-ate-budget")
    assert r.error == ('thinking ate the max_tokens budget: finish_reason "length" after 5 '
                       'completion tokens with an empty answer (18 characters of thinking); '
                       'raise max_tokens')


def test_bench_url_prints_figures_and_writes_jsonl_summary_and_png(llama_server, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(bench, ["--url", llama_server, "--out", str(out)])
    lines = result.stdout.splitlines()
    # the tiny model (131,392 parameters) cannot quote: quoting is NOT-RUN, saying so, not FAIL
    assert result.exit_code == 0, result.output
    assert lines[0] == ("target " + llama_server + " · engine llama.cpp b0-unknown · model tiny "
                        "(F32) · preset small · warm-up done")
    for name in ("chat-greedy", "chat-sampled"):
        assert any(ln.startswith(f"{name}: n=") and " tok/s" in ln for ln in lines), name
    assert ("quoting: NOT-RUN — the model has 131,392 parameters (the server's /v1/models "
            "meta.n_params), under the 100,000,000 a model needs to follow the quoting "
            "instruction; a verbatim FAIL would judge the model, not the rig") in lines
    assert lines[-2] == "result: OK"
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert [r["workload"] for r in recs] == ["warmup"] * 2 + ["chat-greedy"] * 4 + \
        ["chat-sampled"] * 4
    assert all(r["tokens_source"] == "usage" for r in recs)
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["context"]["warmup_done"] is True
    assert summary["context"]["chars_per_token_source"] == "tokenize"
    assert summary["context"]["n_ctx"] == 8192  # the slot's context, from /props
    assert summary["verdicts"]["quoting"]["verdict"] == "NOT-RUN"
    assert summary["workloads"]["chat-greedy"]["spec_decode_note"] == "/metrics answered HTTP 501"


def test_chat_only_run_against_llama_cpp_exits_0(llama_server, tmp_path):
    result = CliRunner().invoke(bench, ["--url", llama_server, "--out", str(tmp_path / "o"),
                                        "--workload", "chat-greedy", "--no-warmup"])
    assert result.exit_code == 0, result.output
    assert "warm-up NOT done" in result.stdout.splitlines()[0]
