"""The streaming client against vLLM's dialect, replayed with known true counts. Where a test needs
time between two chunks as the client sees them, the replay waits until the client has read the first
(``("wait", event)`` set from ``on_chunk``) and then sleeps: a lower bound, whatever the machine's speed."""

import threading

import pytest

from rigkit.bench.client import CHUNK_ESTIMATE_WARNING, NO_DONE_WARNING, stream_chat
from .replay import Script, chunk, said, usage_chunk, vllm_stream

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}


def chat(replay, *scripts, **kw):
    replay.queue(*scripts)
    return stream_chat(replay.url + "/v1/chat/completions", BODY, **kw)


def test_ten_chunks_of_three_tokens_report_thirty_tokens_not_ten(replay):
    r = chat(replay, Script(vllm_stream(answer=["abc"] * 10, tokens_per_chunk=3, gap_s=0.002)))
    assert r.ok, r.error
    assert (r.completion_tokens, r.tokens_source) == (30, "usage")
    assert r.token_chunks == 10 and r.chunk_estimate == 10
    assert r.tokens_per_chunk == pytest.approx(3.0)
    assert r.decode_tps == pytest.approx(29 / (r.e2e_s - r.ttft_s))
    assert r.prefill_tps == pytest.approx(100 / r.ttft_s)
    assert r.warnings == []


def test_request_asks_for_usage_in_the_stream(replay):
    chat(replay, Script(vllm_stream(answer=["a"])))
    sent = replay.requests_seen[-1]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


def test_usage_chunk_with_empty_choices_sets_counts_without_moving_e2e(replay):
    read = threading.Event()
    steps = vllm_stream(answer=["a", "b"], tokens_per_chunk=2)
    steps[-2:-2] = [("wait", read), ("sleep", 0.2)]  # the usage chunk 0.2 s after the client read the last token
    r = chat(replay, Script(steps), on_chunk=lambda res: res.token_chunks == 2 and read.set())
    assert r.completion_tokens == 4
    assert r.total_s >= r.e2e_s + 0.2  # e2e stopped at the last token chunk


def test_stream_without_usage_falls_back_to_chunk_estimate_with_a_loud_warning(replay):
    r = chat(replay, Script(vllm_stream(answer=["abc"] * 10, usage=False)))
    assert r.ok
    assert (r.completion_tokens, r.tokens_source) == (10, "chunk-estimate")
    assert said(r.warnings) == [CHUNK_ESTIMATE_WARNING.format(chunks=10)]
    assert r.prompt_tokens is None and r.prefill_tps is None


def test_vllm_delta_reasoning_is_thinking_and_answer_ttft_comes_later(replay):
    first = threading.Event()
    steps = vllm_stream(reasoning=["Let me", " think"], answer=["42"], gap_s=0.03)
    steps.insert(3, ("wait", first))  # the rest (two gaps, then the answer) once the client read "Let me"
    r = chat(replay, Script(steps), on_chunk=lambda res: res.ttft_s is not None and first.set())
    assert r.ok
    assert r.reasoning_source == "reasoning" and r.reasoning_chars == len("Let me think")
    assert r.answer == "42"
    assert r.ttft_answer_s > r.ttft_s + 0.04


@pytest.mark.parametrize("field", ["reasoning_content", "thinking"])
def test_other_reasoning_field_names_are_read(replay, field):
    steps = [("event", chunk({field: "hmm"})), ("event", chunk({"content": "ok"})),
             ("event", usage_chunk(5, 2)), ("done",)]
    r = chat(replay, Script(steps))
    assert (r.reasoning_source, r.reasoning_chars, r.answer) == (field, 3, "ok")


def test_inline_think_split_across_chunks_is_separated_from_the_answer(replay):
    parts = ["<th", "ink>plan", " it</thi", "nk>The answer", " is 4."]
    r = chat(replay, Script(vllm_stream(answer=parts, tokens_per_chunk=1)))
    assert r.answer == "The answer is 4."
    assert (r.reasoning_source, r.reasoning_chars) == ("inline-think", len("plan it"))


def test_orphan_closing_think_tag_turns_what_came_before_into_thinking(replay):
    r = chat(replay, Script(vllm_stream(answer=["plan", "</think>", "Four."])))
    assert (r.answer, r.reasoning_chars) == ("Four.", 4)


def test_length_finish_with_empty_answer_is_thinking_ate_the_budget(replay):
    r = chat(replay, Script(vllm_stream(reasoning=["a" * 10] * 3, finish="length",
                                        tokens_per_chunk=4)))
    assert not r.ok and r.error_kind == "thinking-ate-budget"
    assert r.error == ('thinking ate the max_tokens budget: finish_reason "length" after 12 '
                       'completion tokens with an empty answer (30 characters of thinking); '
                       'raise max_tokens')


def test_500_after_engine_death_names_the_engine_error(replay):
    replay.dead = True
    r = stream_chat(replay.url + "/v1/chat/completions", BODY)
    assert (r.ok, r.status, r.error_kind) == (False, 500, "engine-dead")
    assert r.error == ("HTTP 500 from POST /v1/chat/completions: EngineCore encountered an "
                       "issue. See stack trace (above) for the root cause.")


def test_stalled_stream_stops_after_the_stall_timeout(replay):
    steps = vllm_stream(answer=["a", "b", "c"])
    r = chat(replay, Script(steps[:3] + [("hold",)]), stall_timeout_s=0.3)
    assert (r.ok, r.error_kind) == (False, "stalled")
    assert r.error == "stalled: no data for 0.3 s (stall timeout) after 2 token chunks"


def test_stream_cut_before_done_is_a_failure(replay):
    steps = vllm_stream(answer=["a", "b", "c"], done=False)
    r = chat(replay, Script(steps[:3] + [("cut",)]))
    assert (r.ok, r.error_kind) == (False, "cut")
    assert r.error.startswith("stream cut before [DONE] after 2 token chunks")


def test_stream_that_ends_cleanly_after_finish_and_usage_without_done_is_counted_with_a_warning(replay):
    r = chat(replay, Script(vllm_stream(answer=["a"], done=False)))
    assert (r.ok, r.done, r.completion_tokens, r.tokens_source) == (True, False, 3, "usage")
    assert NO_DONE_WARNING in r.warnings


def test_stream_that_ends_cleanly_before_its_finish_reason_is_cut(replay):
    steps = vllm_stream(answer=["a"], done=False)
    r = chat(replay, Script(steps[:2]))
    assert r.error == ("stream cut before [DONE] after 1 token chunks (the body ended cleanly "
                       "with no finish_reason)")


def test_stream_that_ends_after_finish_without_usage_or_done_is_cut(replay):
    r = chat(replay, Script(vllm_stream(answer=["a"], usage=False, done=False)))
    assert r.error == ("stream cut before [DONE] after 1 token chunks (the body ended cleanly "
                       "with a finish_reason but no usage count)")


def test_error_event_inside_the_stream_stops_the_request(replay):
    steps = [("event", chunk({"content": "a"})),
             ("event", {"error": {"message": "EngineDeadError: engine loop died"}}), ("done",)]
    r = chat(replay, Script(steps))
    assert (r.error_kind, r.error) == (
        "engine-dead", "server sent an error in the stream: EngineDeadError: engine loop died")


def test_n_other_than_one_is_refused():
    with pytest.raises(ValueError, match=r"n=2: the bench measures one choice per request"):
        stream_chat("http://127.0.0.1:9/v1/chat/completions", {**BODY, "n": 2})


def test_api_key_goes_out_as_a_bearer_header_and_not_into_the_record(replay):
    r = chat(replay, Script(vllm_stream(answer=["a"])), api_key="sk-secret-123")
    assert replay.seen_headers[-1]["Authorization"] == "Bearer sk-secret-123"
    assert "sk-secret-123" not in repr(r.to_record())
