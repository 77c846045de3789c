"""Issue 27: one test per kind of stream a real server or proxy sends, against the replay
server (tests/bench/replay.py) — framing, endings, server states, counting. The verdict each
kind gets, and its source, is listed in docs/bench.md, "What the bench does with each stream"."""

from __future__ import annotations

import functools
import json
import threading

import pytest
from click.testing import CliRunner

from rigkit.cli.bench import bench
from rigkit.bench.client import CHUNK_ESTIMATE_WARNING, USAGE_WITHOUT_COUNT_WARNING, retry_after_seconds, stream_chat
from rigkit.bench.context import CONTEXT_KEYS
from rigkit.bench.results import verdict
from rigkit.bench import runner
from rigkit.bench.runner import send_patiently

from .replay import Script, chunk, said, usage_chunk, vllm_stream

#: The end of a stream whose one token-carrying chunk came before: finish, usage (1 token), [DONE].
ONE_TOKEN_END = [("event", chunk({}, finish="stop")), ("event", usage_chunk(100, 1)), ("done",)]

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}


def chat(replay, *scripts, **kw):
    replay.queue(*scripts)
    return stream_chat(replay.url + "/v1/chat/completions", BODY, **kw)


class Clock:
    """:func:`send_patiently`'s clock: time that moves only by its sleeps (the waits it reports are
    its own, never this machine's speed)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def thinking_stream() -> list[tuple]:
    """vLLM: 2 reasoning + 3 answer chunks of 3 tokens; usage says 15, 6 of them thinking."""
    steps = vllm_stream(reasoning=["Let me ", "think."], answer=["Hé", "llo ☃", "!"],
                        tokens_per_chunk=3, usage=False)
    u = usage_chunk(100, 15)
    u["usage"]["completion_tokens_details"] = {"reasoning_tokens": 6}
    return steps[:-1] + [("event", u), ("done",)]


# --- framing ---------------------------------------------------------------------------------

def test_each_event_in_three_writes_counts_what_usage_says_and_passes(replay, tmp_path):
    """The issue's case: `rigkit bench --url … --workload chat-greedy` against a server that
    writes each SSE event in three pieces failed its warm-up with 0 token chunks."""
    replay.default = Script(thinking_stream(), pieces=3, piece_gap_s=0.001)
    out = tmp_path / "out"
    result = CliRunner().invoke(bench, ["--url", replay.url, "--out", str(out), "--preset",
                                        "small", "--workload", "chat-greedy"])
    assert result.exit_code == 0, result.output
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 6 and all(r["ok"] for r in recs)  # 2 warm-up + 4 chat-greedy
    assert {(r["completion_tokens"], r["tokens_source"], r["reasoning_tokens"],
             r["reasoning_tokens_source"], r["token_chunks"], r["reasoning_chunks"],
             r["answer_head"]) for r in recs} == {(15, "usage", 6, "usage", 5, 2, "Héllo ☃!")}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["context"]["warmup_done"] is True
    v = summary["verdicts"]["chat-greedy"]
    # passes: no baseline was given; a replay's timings may vary enough to note the CV
    assert v["verdict"] in ("no baseline", "WARN"), v
    assert all(x.startswith(("no baseline:", "decode_tps CV")) for x in v["reasons"]), v
    assert summary["warnings"] == []
    assert "  completion tokens: 15 per request (median), 60 in total from usage; a chunk " \
           "count would say 20 · 3.00 tokens/chunk" in result.stdout.splitlines()


def test_crlf_split_between_cr_and_lf_and_inside_a_character_reads_whole(replay):
    ev = 'data: {"choices":[{"index":0,"delta":{"content":"naïve ☃"}}]}\r\n\r\n'.encode()
    steps = [("raw", ev), ("raw", b'data: {"choices":[{"index":0,"delta":{},'
                                  b'"finish_reason":"stop"}]}\r\n\r\n'),
             ("raw", b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}'
                     b'\r\n\r\ndata: [DONE]\r\n\r\n')]
    r = chat(replay, Script(steps, pieces=3, piece_gap_s=0.002))
    assert (r.ok, r.answer, r.completion_tokens, r.tokens_source) == (True, "naïve ☃", 4, "usage")


def test_empty_data_lines_comments_and_other_fields_are_read_to_the_specification(replay):
    steps = [("raw", b": ping\n\nevent: message\nid: 7\nretry: 100\ndata:\n\n"),
             ("raw", b'id: 8\ndata: {"choices":[{"index":0,"delta":\ndata: {"content":"ok"}}]}\n\n'),
             *ONE_TOKEN_END]
    r = chat(replay, Script(steps))
    assert (r.ok, r.answer, r.pings, r.token_chunks) == (True, "ok", 1, 1), r.error


def test_llama_cpp_error_line_before_done_fails_quoting_its_message(replay):
    steps = [("event", chunk({"content": "a"})),
             ("error_line", {"code": 500, "message": "llama_decode failed: no KV slot",
                             "type": "server_error"}), ("done",)]
    r = chat(replay, Script(steps, pieces=3))
    assert (r.ok, r.error_kind, r.error) == (
        False, "stream-error", "server sent an error in the stream: llama_decode failed: no KV slot")


def test_invalid_utf8_becomes_replacement_characters_not_a_failure(replay):
    steps = [("raw", b'data: {"choices":[{"index":0,"delta":{"content":"caf\xe9!"}}]}\n\n'),
             *ONE_TOKEN_END]
    r = chat(replay, Script(steps, pieces=3))
    assert (r.ok, r.answer) == (True, "caf\ufffd!")


# --- endings ---------------------------------------------------------------------------------

def test_an_old_vllm_error_object_mid_stream_is_a_stream_error_quoting_it(replay):
    steps = [("event", chunk({"content": "a"})),
             ("event", {"object": "error", "message": "max_tokens is too large",
                        "type": "BadRequestError", "code": 400}), ("done",)]
    r = chat(replay, Script(steps))
    assert (r.error_kind, r.error) == (
        "stream-error", "server sent an error in the stream: max_tokens is too large")


def test_a_connection_reset_mid_stream_is_cut_and_says_reset(replay):
    steps = vllm_stream(answer=["a", "b", "c"])
    read = threading.Event()  # the reset once the client has read the two token chunks (a reset drops unread data)
    r = chat(replay, Script(steps[:3] + [("wait", read), ("reset",)]),
             on_chunk=lambda res: res.token_chunks == 2 and read.set())
    assert (r.ok, r.error_kind) == (False, "cut")
    assert r.error == ("stream cut before [DONE] after 2 token chunks (ConnectionResetError: "
                       "connection reset by the server)")


def test_one_json_body_where_a_stream_was_asked_is_not_streamed_naming_the_count(replay):
    body = {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 9}}
    r = chat(replay, Script(body=body))
    assert (r.ok, r.error_kind, r.completion_tokens, r.decode_tps) == (
        False, "not-streamed", 9, None)
    assert r.error == ("server answered one application/json body, not an event stream "
                       "(stream: true not honoured): its usage says 9 completion tokens, but "
                       "time to first token and decode tok/s cannot be measured from one body")


def test_a_200_json_error_body_quotes_the_servers_message(replay):
    r = chat(replay, Script(body={"error": {"message": "model not found", "code": 404}}))
    assert (r.error_kind, r.error) == (
        "stream-error", "server answered 200 with an error body instead of a stream: "
                        "model not found")


# --- server states ---------------------------------------------------------------------------

def test_a_model_still_loading_is_waited_for_and_named(replay):
    replay.loading_for = 2
    replay.queue(Script(vllm_stream(answer=["ok"])))
    c = Clock()
    r = send_patiently(lambda: stream_chat(replay.url + "/v1/chat/completions", BODY),
                       health_budget_s=5, poll_s=0.05, clock=c, sleep=c.sleep)
    assert r.ok and r.completion_tokens == 3
    # two 503s, each waited out for the floor (poll_s 0.05 is below it): 2.0 s by the clock
    assert r.warnings == ["waited 2.0 s over 2 retries before this request was served: the server was still "
                          "loading: HTTP 503 from POST /v1/chat/completions: Loading model"]
    assert r.waited_s == 2.0


def test_loading_past_the_health_budget_fails_as_loading_never_as_dead(replay, tmp_path, monkeypatch):
    replay.loading_for = 1000
    c = Clock()  # the run's waits on the test's clock: "waited 0 s" however long the request took
    monkeypatch.setattr(runner, "send_patiently", functools.partial(send_patiently, clock=c, sleep=c.sleep))
    out = tmp_path / "out"
    result = CliRunner().invoke(bench, ["--url", replay.url, "--out", str(out), "--preset",
                                        "small", "--workload", "chat-greedy", "--no-warmup",
                                        "--health-budget", "0"])
    assert result.exit_code == 1
    summary = json.loads((out / "summary.json").read_text())
    w = summary["workloads"]["chat-greedy"]
    assert w["error_kind"] == "loading"
    assert w["error"] == ("HTTP 503 from POST /v1/chat/completions: Loading model; still "
                          "loading — waited 0.0 s over 0 retries of the 0 s health budget (not dead: rerun later "
                          "or raise --health-budget); /health answers 503 Loading model "
                          "(still loading, not dead)")
    assert "dead engine" not in result.output and "(engine dead)" not in result.output


def test_a_429_with_retry_after_is_honoured_within_the_budget(replay):
    replay.queue(Script(status=429, body={"error": {"message": "rate limited"}},
                        headers={"Retry-After": "0"}), Script(vllm_stream(answer=["ok"])))
    c = Clock()
    r = send_patiently(lambda: stream_chat(replay.url + "/v1/chat/completions", BODY),
                       health_budget_s=5, poll_s=0.05, clock=c, sleep=c.sleep)
    # Retry-After 0 is waited out for the floor, RETRY_FLOOR_S, and said as waited
    assert r.ok and r.warnings[0].startswith("waited 1.0 s over 1 retries before this request was served: the "
                                             "server was rate-limited (HTTP 429)")


def test_a_429_asking_longer_than_the_budget_is_named(replay):
    replay.queue(Script(status=429, body={"error": {"message": "rate limited"}},
                        headers={"Retry-After": "30"}))
    c = Clock()
    r = send_patiently(lambda: stream_chat(replay.url + "/v1/chat/completions", BODY),
                       health_budget_s=5, poll_s=0.05, clock=c, sleep=c.sleep)
    assert (r.ok, r.error_kind, r.retry_after_s) == (False, "rate-limited", 30.0)
    assert r.error == ("HTTP 429 from POST /v1/chat/completions: rate limited (Retry-After 30 s); "
                       "rate-limited (HTTP 429) — its Retry-After 30 s is more than the 5 s left "
                       "of the 5 s health budget (not dead: rerun later or raise --health-budget)")


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


# --- counting --------------------------------------------------------------------------------

def test_usage_without_completion_tokens_is_an_estimate_not_from_usage(replay):
    steps = vllm_stream(answer=["a", "b"], tokens_per_chunk=3, usage=False)
    steps = steps[:-1] + [("event", {"choices": [], "usage": {"prompt_tokens": 7}}), ("done",)]
    r = chat(replay, Script(steps))
    assert (r.ok, r.completion_tokens, r.tokens_source, r.prompt_tokens) == (
        True, 2, "chunk-estimate", 7)
    assert said(r.warnings) == [USAGE_WITHOUT_COUNT_WARNING] and CHUNK_ESTIMATE_WARNING not in r.warnings


def ws(decode, counts="counted", source="usage"):
    return {"status": "ok", "counts": counts, "tokens_source": source,
            "metrics": {"decode_tps": None if decode is None else
                        {"median": decode, "min": decode, "max": decode, "n": 1, "cv": None}}}


@pytest.mark.parametrize("current, base, reason", [
    (ws(None), ws(100.0), "decode not compared: this run has no decode tok/s figure"),
    (ws(100.0), ws(None), "decode not compared: the baseline has no decode tok/s figure"),
])
def test_a_missing_figure_never_passes_a_comparison(current, base, reason):
    ctx = {k: "x" for k in CONTEXT_KEYS}
    v = verdict("chat-greedy", current, ctx, [{"context": ctx, "workloads": {"chat-greedy": base},
                                               "_file": "b.json"}])
    assert (v["verdict"], v["reasons"]) == ("not comparable", [reason])
