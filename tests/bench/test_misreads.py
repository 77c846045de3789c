"""Issue 39: the six misread kinds an operator meets behind a proxy or with another server — each
ends in a verdict naming what the bench saw, proven over the shapes the input takes: content
types × encodings (the response's headers), event types × choice counts × counts (the stream),
each stream read whole and split at arbitrary bytes."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigkit.bench.client import consume, response_kind, stream_chat
from rigkit.bench.results import summarize_workload

from .replay import Script, chunk, usage_chunk, vllm_stream

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}

CONTENT_TYPES = ["text/event-stream", "text/event-stream; charset=utf-8", "TEXT/EVENT-STREAM",
                 None, "application/json", "application/json; charset=utf-8", "text/html",
                 "text/html; charset=UTF-8", "text/plain", "application/octet-stream",
                 "application/x-ndjson"]
ENCODINGS = [None, "", "identity", "gzip", "br", "deflate", "zstd", "x-gzip"]
SSE = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
HEADS = {"an event stream": SSE, "a JSON document": b'{"choices": []}',
         "an HTML page": b"<!DOCTYPE html><html><title>Sign in</title>",
         "gzip data": b"\x1f\x8b\x08\x00\x00\x00\x00\x00", "empty": b""}


@given(ctype=st.sampled_from(CONTENT_TYPES), enc=st.sampled_from(ENCODINGS),
       looks=st.sampled_from(sorted(HEADS)))
def test_every_content_type_and_encoding_is_read_or_named(ctype, enc, looks):
    """A stream is read only as ``text/event-stream`` (or untyped) with no encoding; one JSON
    body only as ``application/json`` that is not an event stream; everything else is
    ``not-event-stream`` with a message naming the type or the encoding received — never a
    "cut" or "not a JSON object" verdict about a body that was never a stream."""
    how, msg = response_kind(ctype, enc, HEADS[looks])
    bare = (ctype or "").split(";")[0].strip().lower()
    if enc and enc.lower() != "identity":
        assert how == "not-event-stream"
        assert f"Content-Encoding {enc}" in msg and "identity" in msg and "re-encoded" in msg
    elif bare in ("text/event-stream", ""):
        assert (how, msg) == ("stream", None)
    elif bare == "application/json":
        if looks == "an event stream":
            assert how == "not-event-stream"
            assert "event stream labelled Content-Type application/json" in msg
        else:
            assert (how, msg) == ("json", None)
    else:
        assert how == "not-event-stream"
        assert f"Content-Type {bare}, not an event stream" in msg
        if looks != "empty":
            assert f"its body is {looks}" in msg
    if msg:
        assert "cut" not in msg and "not a JSON object" not in msg


@pytest.mark.parametrize("headers, head, words", [
    ({"Content-Type": "text/html; charset=utf-8"},
     b"<!DOCTYPE html><html><body><form action=/login>Sign in</form></body></html>",
     "Content-Type text/html, not an event stream (text/event-stream); its body is an HTML page "
     "(a proxy's login or error page?)"),
    ({"Content-Encoding": "gzip"}, b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",
     "the response came with Content-Encoding gzip (Content-Type text/event-stream); its body is "
     "gzip data: the bench asked for identity"),
    ({"Content-Type": "application/json"}, SSE + b"data: [DONE]\n\n",
     "the response is an event stream labelled Content-Type application/json"),
])
def test_a_proxys_page_a_gzip_body_and_a_mislabelled_stream_are_named_over_the_network(
        replay, headers, head, words):
    """The issue's three probes through a real socket: each used to end as "stream cut before
    [DONE] … the body ended cleanly" or "not a JSON object"."""
    replay.queue(Script([("raw", head)], headers=headers))
    r = stream_chat(replay.url + "/v1/chat/completions", BODY)
    assert (r.ok, r.error_kind) == (False, "not-event-stream"), r.error
    assert words in r.error
    assert "cut" not in r.error


# --- the stream: event types × choice counts × counts ----------------------------------------

EVENT_TYPES = ["ping", "keepalive", "update", "Message", "heartbeat"]


@st.composite
def streams(draw):
    """A vLLM-style stream with typed events (sse-starlette's ``event: ping`` whose data is a
    timestamp, or JSON) slipped between its chunks, ``choices`` answers interleaved by index,
    and a usage whose counts may be impossible. Returns the bytes and what must be read."""
    n_choices = draw(st.integers(1, 3))
    pieces = draw(st.lists(st.sampled_from(["ab", "c", "☃", "d e"]), min_size=1, max_size=6))
    tpc = draw(st.integers(1, 3))
    completion = len(pieces) * tpc
    counts = draw(st.sampled_from(["right", "zeros", "reasoning-over"]))
    typed = draw(st.lists(st.tuples(st.integers(0, len(pieces) + 1), st.sampled_from(EVENT_TYPES),
                                    st.sampled_from(["2026-12-03 23:41:51.123456", '{"t": 1}',
                                                     "[DONE]"])), max_size=4))
    events: list[bytes] = [b"data: " + json.dumps(chunk({"role": "assistant", "content": ""})).encode()
                           + b"\n\n"]
    answer0 = []
    for i, text in enumerate(pieces):
        for idx in range(n_choices):
            c = chunk({"content": text if idx == 0 else text.upper()})
            c["choices"][0]["index"] = idx
            events.append(b"data: " + json.dumps(c).encode() + b"\n\n")
        answer0.append(text)
    events.append(b"data: " + json.dumps(chunk({}, finish="stop")).encode() + b"\n\n")
    u = usage_chunk(100, 0 if counts == "zeros" else completion)
    if counts == "zeros":
        u["usage"]["prompt_tokens"] = u["usage"]["total_tokens"] = 0
    if counts == "reasoning-over":
        u["usage"]["completion_tokens_details"] = {"reasoning_tokens": completion * 10}
    events.append(b"data: " + json.dumps(u).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    seen: dict[str, int] = {}
    for pos, etype, data in sorted(typed, key=lambda x: x[0]):
        events.insert(min(pos, len(events) - 1), f"event: {etype}\ndata: {data}\n\n".encode())
        seen[etype] = seen.get(etype, 0) + 1
    cuts = draw(st.lists(st.integers(0, 10_000), max_size=4))
    return b"".join(events), {"choices": n_choices, "counts": counts, "answer": "".join(answer0),
                              "completion": completion, "typed": seen, "chunks": len(pieces)}, cuts


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]


@settings(max_examples=300, deadline=None)
@given(streams())
def test_typed_events_several_choices_and_impossible_counts_are_named(case):
    """For every mix, read whole or split anywhere: typed events other than ``message`` are not
    completions (counted by type, never "unparseable"); a second choice is ``several-choices``
    naming the indexes; a usage of zeros after token chunks, or more reasoning tokens than
    completion tokens, is ``bad-count`` naming the fields; else the answer is choice 0's and the
    count is usage's."""
    data, want, cuts = case
    for reads in ([data], split(data, cuts)):
        r = consume([(b, 0.01 * (i + 1)) for i, b in enumerate(reads)])
        if want["choices"] > 1:
            assert (r.ok, r.error_kind) == (False, "several-choices"), r.error
            assert "more than one choice (index 0, 1" in r.error and "n=1" in r.error
        elif want["counts"] == "zeros":
            assert (r.ok, r.error_kind) == (False, "bad-count"), r.error
            assert (f"usage.completion_tokens is 0 after {want['chunks']} token-carrying chunks"
                    in r.error)
        elif want["counts"] == "reasoning-over":
            assert (r.ok, r.error_kind) == (False, "bad-count"), r.error
            assert (f"reasoning_tokens {want['completion'] * 10} is more than "
                    f"usage.completion_tokens {want['completion']}") in r.error
        else:
            assert r.ok, r.error
            assert (r.answer, r.completion_tokens, r.tokens_source) == \
                (want["answer"], want["completion"], "usage")
            assert r.other_events == want["typed"]
        assert r.error is None or "unparseable" not in r.error


def test_sse_starlettes_ping_event_does_not_fail_the_warm_up():
    """Older llama-cpp-python servers (sse-starlette's EventSourceResponse) send
    ``event: ping`` with a timestamp as keep-alive; it used to fail as unparseable data."""
    steps = (b"event: ping\r\ndata: 2026-12-03 23:41:51.123456\r\n\r\n"
             + b"".join(b"data: " + json.dumps(o).encode() + b"\r\n\r\n" for o in (
                 chunk({"role": "assistant"}), chunk({"content": "Hi"}), chunk({}, finish="stop"),
                 usage_chunk(10, 1)))
             + b"data: [DONE]\r\n\r\n")
    r = consume([(steps, 0.1)])
    assert r.ok, r.error
    assert (r.answer, r.other_events, r.completion_tokens) == ("Hi", {"ping": 1}, 1)


def test_usage_without_completion_tokens_is_not_called_no_usage():
    """The server sent usage — without ``completion_tokens``: the estimate says so, in the
    record (``usage_keys``), the summary (``estimate_why``) and the report line."""
    u = usage_chunk(100, 3)
    del u["usage"]["completion_tokens"]
    data = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in (
        chunk({"content": "a"}), chunk({"content": "b"}), chunk({}, finish="stop"), u))
    r = consume([(data + b"data: [DONE]\n\n", 0.1)])
    assert (r.ok, r.tokens_source, r.usage_keys) == \
        (True, "chunk-estimate", ["prompt_tokens", "total_tokens"])
    rec = {**r.to_record(), "max_tokens": 64}
    s = summarize_workload("chat-greedy", [rec])
    assert s["estimate_why"] == ("the server's usage had no completion_tokens (it sent "
                                 "prompt_tokens, total_tokens)")
    none = consume([(b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in (
        chunk({"content": "a"}), chunk({}, finish="stop"))) + b"data: [DONE]\n\n", 0.1)])
    assert none.usage_keys is None
    assert summarize_workload("x", [none.to_record()])["estimate_why"] == "the server sent no usage"


def test_a_stream_of_zeros_from_the_replay_server_fails_the_workload_with_its_words(replay):
    """Usage all zeros after ten content chunks: FAIL ``bad-count``, never OK with "n/a"."""
    steps = vllm_stream(answer=["abc"] * 10, usage=False)[:-1] + [
        ("event", {**usage_chunk(0, 0)}), ("done",)]
    replay.queue(Script(steps))
    r = stream_chat(replay.url + "/v1/chat/completions", BODY)
    assert (r.ok, r.error_kind) == (False, "bad-count")
    assert r.error.startswith("wrong count: usage.completion_tokens is 0 after 10 token-carrying")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=streams(), ctype=st.sampled_from(CONTENT_TYPES), enc=st.sampled_from(ENCODINGS))
def test_content_types_x_encodings_x_event_types_x_choice_counts_over_the_network(replay, case, ctype, enc):
    """The whole product through a real socket: the replay server answers the generated stream
    (typed events, 1–3 choices, right or impossible counts) under any Content-Type and
    Content-Encoding. What is not an event stream is named by its header before its body is
    read as one; what is, gets the body's verdict — never a "cut" for a body that was not a
    stream, never "unparseable" for a typed event."""
    data, want, _cuts = case
    headers = {"Content-Type": ctype} if ctype is not None else {"Content-Type": ""}
    if enc is not None:
        headers["Content-Encoding"] = enc
    replay.queue(Script([("raw", data)], headers=headers))
    r = stream_chat(replay.url + "/v1/chat/completions", BODY)
    how, _ = response_kind(ctype, enc)
    if how != "stream":
        assert (r.ok, r.error_kind) == (False, "not-event-stream"), (ctype, enc, r.error)
        if enc and enc.lower() != "identity":
            named = f"Content-Encoding {enc}"
        elif how == "json":  # the body is an event stream: labelled application/json
            named = "event stream labelled Content-Type application/json"
        else:
            named = f"Content-Type {(ctype or '').split(';')[0].strip().lower()}, not an event stream"
        assert named in r.error, r.error
    elif want["choices"] > 1:
        assert r.error_kind == "several-choices", r.error
    elif want["counts"] != "right":
        assert r.error_kind == "bad-count", r.error
    else:
        assert r.ok, r.error
        assert (r.answer, r.completion_tokens, r.other_events) == (want["answer"], want["completion"],
                                                                 want["typed"])
    assert r.error is None or ("cut" not in r.error and "unparseable" not in r.error), r.error
