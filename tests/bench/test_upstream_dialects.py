"""Issue 60: the bench reads a swapping proxy and a misbehaving server as their own code says.

Each kind is generated (hypothesis over frames, header sets, timings) from its owner's shapes, cited
where they are built: llama-swap v250 (``../shared/vendor/llama-swap/``, emulated in
``tests/bench/replay.py``: :func:`llama_swap_loading`, :func:`llama_swap_error_body`), vLLM's
``FINISH_REASON_STRINGS`` (``vllm/v1/engine/__init__.py``), openai/harmony ``docs/format.md``,
Python's ``http.client`` (the library's own reading of repeated headers), RFC 9110.
"""

from __future__ import annotations

import io
import http.client
import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigkit.bench import runner
from rigkit.bench.client import consume, response_kind, stream_chat
from rigkit.bench.context import Target
from rigkit.bench.result import LLAMA_SWAP_START_FAILURES, RequestResult
from rigkit.bench.runner import MAX_RETRIES, RETRY_FLOOR_S, SWAP_REMEASURE, run_workloads, send_patiently
from rigkit.bench.stream import (AFTER_DONE_S, BURST_MIN_CHUNKS, FINISHED, GIVEN_UP, HARMONY_WARNING,
                                 LATE_USAGE_WARNING)
from rigkit.bench.workloads import RequestSpec, Workload

from .replay import (Script, chunk, llama_swap_error_body, llama_swap_frame, llama_swap_loading,
                     usage_chunk, vllm_stream)

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


def _bytes(steps: list[tuple]) -> bytes:
    """A script's stream as the replay server writes it (``event``, ``raw``, ``done`` steps)."""
    out = b""
    for step in steps:
        if step[0] == "event":
            out += b"data: " + json.dumps(step[1]).encode() + b"\n\n"
        elif step[0] == "done":
            out += b"data: [DONE]\n\n"
        elif step[0] == "raw":
            out += step[1]
    return out


def _reads(data: bytes, cuts: list[int], t: float = 1.0, step: float = 0.0) -> list[tuple[bytes, float]]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    parts = [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]
    return [(p, t + i * step) for i, p in enumerate(parts)]


MODEL = st.sampled_from(["strata", "gguf-baseline", "hyperqwen", "Qwen/Qwen3-8B"])
TICKS = st.lists(st.sampled_from([".", ".", "Queue position: #1", "Warming up the GPU…", "Reticulating splines"]),
                 max_size=12)


# --- 1. llama-swap's loading ------------------------------------------------------------------

@FAST
@given(model=MODEL, ticks=TICKS, done_s=st.floats(0.01, 999, allow_nan=False),
       answer=st.lists(st.text(alphabet="ab ☃", min_size=1, max_size=4), min_size=1, max_size=5),
       tpc=st.integers(1, 4), cuts=st.lists(st.integers(0, 1 << 14), max_size=6))
def test_loading_frames_are_llama_swaps_not_the_members(model, ticks, done_s, answer, tpc, cuts):
    """llama-swap's loading writer (``router/loading.go:59-101, 120-148, 200-235``) writes its progress
    as ``reasoning_content`` before the member answers: none of it is a token, TTFT or thinking, and
    the request is named as one that carried a swap, with the model and llama-swap's own ``Done!``."""
    answer[0] = "A" + answer[0]
    frames = llama_swap_loading(model, ticks, done_s)
    member = vllm_stream(answer=answer, tokens_per_chunk=tpc)
    data = _bytes(frames + member)
    r = consume(_reads(data, cuts, step=0.01), t0=0.0)
    assert r.ok, r.error
    assert r.swap["model"] == model and r.swap["frames"] == len(frames)
    assert r.swap["llama_swap_s"] == float(f"{done_s:.2f}")
    assert r.token_chunks == len(answer) and r.reasoning_chars == 0 and r.answer == "".join(answer)
    assert r.completion_tokens == len(answer) * tpc and r.tokens_source == "usage"


@FAST
@given(model=MODEL, ticks=TICKS, failure=st.sampled_from(LLAMA_SWAP_START_FAILURES),
       accept=st.sampled_from(["text/event-stream", "text/plain", "text/html", "application/json"]),
       cuts=st.lists(st.integers(0, 1 << 14), max_size=4))
def test_a_member_llama_swap_could_not_start_is_a_fail_quoting_llama_swap(model, ticks, failure, accept, cuts):
    """Its start failed (``process/process_command.go:266, 477, 506, 536``): the router hands the error to
    the waiting request (``router/base.go`` ``SendError``), written as ``unspecific error: <err>``
    (``swaputil/http.go:103``) raw into the 200 stream the loading writer began, in the body
    ``SendResponse`` picks by ``Accept`` (``http.go:108-131``) — a FAIL quoting llama-swap, never
    "stream cut after N token chunks"."""
    said = f"unspecific error: {failure}" + (" 5m0s" if failure.startswith("health") else "")
    data = _bytes(llama_swap_loading(model, ticks, 0.5)) + llama_swap_error_body(said, accept)
    r = consume(_reads(data, cuts, step=0.01), t0=0.0)
    assert (r.ok, r.error_kind) == (False, "swap-failed"), r.error
    assert said in r.error and f"{len(llama_swap_loading(model, ticks, 0.5))} of its loading frames" in r.error


@pytest.mark.parametrize("accept", ["text/event-stream", "text/plain", "text/html"])
@pytest.mark.parametrize("failure", LLAMA_SWAP_START_FAILURES)
def test_llama_swaps_error_as_an_http_answer_is_swap_failed_and_quoted(replay, accept, failure):
    """Without ``sendLoadingState`` the error comes as the answer itself, HTTP 500 (``http.go:103``)."""
    said = f"unspecific error: {failure}"
    replay.queue(Script(status=500, raw_status_body=llama_swap_error_body(said, accept),
                        headers={"Content-Type": accept}))
    r = stream_chat(replay.url + "/v1/chat/completions", BODY)
    assert (r.ok, r.error_kind) == (False, "swap-failed")
    assert f"llama-swap: {said}" in r.error


def test_a_request_that_carried_a_swap_is_measured_again_and_kept_out_of_n(replay, tmp_path):
    """``/running`` (``server/api.go:333-351``) says the member is ``starting`` before the first send;
    the second try carries llama-swap's frames; the third is measured. n counts only it; the two are
    in requests.jsonl, discarded, with their swap."""
    member = vllm_stream(answer=["Hello"] * 3)
    # the first /running read is the counters' scrape before the workload (rigkit.bench.metrics.scrape)
    replay.running_queue.extend([[{"model": "m", "state": "ready"}], [{"model": "m", "state": "starting"}],
                                 [{"model": "m", "state": "ready"}]])
    replay.running = [{"model": "m", "state": "ready"}]
    replay.queue(Script(member), Script(llama_swap_loading("m", ["."], 0.2) + member), Script(member))
    target = Target(chat_url=replay.url + "/v1/chat/completions", aux_base=replay.url, label="t", model="m",
                    swap_base=replay.url)
    wl = Workload(name="chat-greedy", requests=[RequestSpec(prompt_id="p", repetition=0, payload=dict(BODY))])
    summaries, warnings = run_workloads(target, [wl], run_id="r", out_dir=str(tmp_path))
    recs = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [(r["discarded"], (r["swap"] or {}).get("seen")) for r in recs] == [
        (True, "llama-swap's /running said starting before the send"), (True, "llama-swap's loading frames"),
        (False, None)]
    w = summaries["chat-greedy"]
    assert (w["n"], w["swapped"], w["status"]) == (1, 2, "ok")
    assert any("carried a llama-swap swap" in x and "(2 of 3 requests)" in x for x in warnings), warnings


def test_every_try_swapping_fails_the_workload_swapping(replay, tmp_path):
    replay.running = [{"model": "m", "state": "starting"}]
    target = Target(chat_url=replay.url + "/v1/chat/completions", aux_base=replay.url, label="t", model="m",
                    swap_base=replay.url)
    wl = Workload(name="chat-greedy", requests=[RequestSpec(prompt_id="p", repetition=0, payload=dict(BODY))])
    summaries, _ = run_workloads(target, [wl], run_id="r", out_dir=str(tmp_path))
    w = summaries["chat-greedy"]
    assert w["error_kind"] == "swapping" and f"every one of {SWAP_REMEASURE + 1} tries" in w["error"]


# --- 2. HTTP as the library reads it ---------------------------------------------------------

def _headers(pairs: list[tuple[str, str]]) -> http.client.HTTPMessage:
    """Headers as http.client itself parses them off the wire (``http.client.parse_headers``)."""
    raw = "".join(f"{k}: {v}\r\n" for k, v in pairs).encode("latin-1") + b"\r\n"
    return http.client.parse_headers(io.BytesIO(raw))


CTYPES = st.sampled_from(["text/event-stream", "text/event-stream; charset=utf-8", "TEXT/EVENT-STREAM",
                          "application/json", "text/html"])
CODINGS = st.sampled_from(["identity", "gzip", "br", "Identity"])


@settings(max_examples=200, deadline=None)
@given(types_=st.lists(CTYPES, min_size=1, max_size=3), codings=st.lists(CODINGS, max_size=3))
def test_repeated_headers_are_read_as_http_client_combines_them(types_, codings):
    """http.client joins a repeated header's values with ", " (``HTTPMessage.get_all`` → ``getheader``);
    Content-Type is one value (RFC 9110 §8.3), Content-Encoding a list of codings (§8.4)."""
    msg = _headers([("Content-Type", t) for t in types_] + [("Content-Encoding", c) for c in codings])
    how, why = response_kind(msg.get_all("Content-Type") and ", ".join(msg.get_all("Content-Type")),
                             msg.get_all("Content-Encoding") and ", ".join(msg.get_all("Content-Encoding")))
    kinds = {t.split(";")[0].strip().lower() for t in types_}
    if len(kinds) > 1:
        assert how == "not-event-stream" and all(k in why for k in kinds)
    elif any(c.lower() != "identity" for c in codings):
        assert how == "not-event-stream" and "Content-Encoding" in why
    else:
        assert how == {"text/event-stream": "stream", "application/json": "json"}.get(kinds.pop(),
                                                                                       "not-event-stream")


def test_a_content_type_sent_twice_alike_is_read_as_a_stream_over_the_wire(replay):
    replay.queue(Script(vllm_stream(answer=["ok"]), header_list=[("Content-Type", "text/event-stream")] * 2))
    r = stream_chat(replay.url + "/v1/chat/completions", BODY)
    assert r.ok and r.completion_tokens == 3, r.error


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_named_with_its_location(replay, status):
    replay.queue(Script(status=status, headers={"Location": "http://127.0.0.1:9/v1/chat/completions"}))
    r = stream_chat(replay.url + "/v1/chat/completions", BODY)
    assert (r.ok, r.error_kind, r.status) == (False, "redirected", status)
    assert "redirected to http://127.0.0.1:9/v1/chat/completions" in r.error


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


@settings(max_examples=200, deadline=None)
@given(asked=st.lists(st.sampled_from([None, 0.0, 0.2, 1.0, 3.0]), min_size=1, max_size=400),
       budget=st.sampled_from([0.0, 2.0, 30.0, 1e6]), kind=st.sampled_from(["rate-limited", "unavailable", "loading"]))
def test_retry_after_is_honoured_with_a_floor_and_a_bound_and_the_wait_is_said(asked, budget, kind):
    """RFC 9110 §10.2.3 lets ``Retry-After`` be 0: every wait is at least :data:`RETRY_FLOOR_S`, the
    retries at most :data:`MAX_RETRIES`, and the wait reported is the clock's."""
    c = Clock()
    answers = iter(asked)

    def send() -> RequestResult:
        a = next(answers, "served")
        if a == "served":
            return RequestResult()
        return RequestResult(ok=False, error_kind=kind, error="HTTP 429", retry_after_s=a)

    r = send_patiently(send, health_budget_s=budget, poll_s=0.05, clock=c, sleep=c.sleep)
    assert all(s >= RETRY_FLOOR_S for s in c.slept)
    assert len(c.slept) <= min(MAX_RETRIES, budget / RETRY_FLOOR_S)
    assert r.waited_s == pytest.approx(sum(c.slept))
    if r.ok and c.slept:
        assert r.warnings[-1].startswith(f"waited {sum(c.slept):.1f} s over {len(c.slept)} retries")


# --- 3. after [DONE] -------------------------------------------------------------------------

def _ok_stream(usage: bool = True) -> bytes:
    return _bytes(vllm_stream(answer=["Hi", "!"], tokens_per_chunk=2, usage=usage))


@FAST
@given(gaps=st.lists(st.floats(0.0, 0.6), max_size=20), late=st.booleans())
def test_what_follows_done_is_read_for_a_bounded_time_never_waited_on(gaps, late):
    """Comments after ``[DONE]`` without end (an infinite iterable of reads) are read for
    :data:`AFTER_DONE_S` on the reads' clock, then left; a usage within it is used and said."""
    base = _ok_stream(usage=not late)
    t = [1.0]

    def tail():
        if late:
            t[0] += 0.01
            yield (b"data: " + json.dumps(usage_chunk(10, 4)).encode() + b"\n\n", t[0])
        for g in itertools.chain(gaps, itertools.repeat(0.3)):
            t[0] += g
            yield (b": keep-alive\n\n", t[0])

    r = consume(itertools.chain([(base, 1.0)], tail()), t0=0.0)
    assert r.ok and r.after_done["ended"] is False and r.after_done["read_s"] <= AFTER_DONE_S
    assert r.completion_tokens == 4 and r.tokens_source == "usage"
    assert (LATE_USAGE_WARNING in r.warnings) is late


def test_a_server_that_keeps_sending_after_done_does_not_hold_the_bench(replay):
    steps = vllm_stream(answer=["ok"]) + [item for _ in range(400) for item in (("raw", b": ping\n\n"),
                                                                                 ("sleep", 0.05))]
    replay.queue(Script(steps))
    r = stream_chat(replay.url + "/v1/chat/completions", BODY)
    assert r.ok and r.after_done["ended"] is False and r.after_done["comments"] >= 1


# --- 4. counts held to the stream -------------------------------------------------------------

@FAST
@given(counts=st.lists(st.integers(0, 40), min_size=2, max_size=6), chunks=st.integers(1, 8))
def test_a_usage_counter_that_goes_back_or_sits_below_the_chunks_is_named(counts, chunks):
    """vLLM's ``continuous_usage_stats`` sends a running usage on every chunk: it only grows, and a
    count is never below the chunks that carried text (each carries a token) by more than llama.cpp's
    diffs explain (``tools/server`` ``to_json_oaicompat_chat_stream``: a chunk per diff; one more here,
    a content-only stream)."""
    steps = [("event", chunk({"content": "a"})) for _ in range(chunks)]
    steps += [("event", usage_chunk(5, n)) for n in counts] + [("event", chunk({}, finish="stop")), ("done",)]
    r = consume([(_bytes(steps), 1.0)], t0=0.0)
    back = next(((a, b) for a, b in zip(counts, counts[1:]) if b < a), None)
    if back:
        assert r.error_kind == "bad-count" and f"went back from {back[0]} to {back[1]}" in r.error
    elif counts[-1] < 1 or counts[-1] + 1 < chunks:  # llama.cpp's diffs: one chunk more at most here
        assert r.error_kind == "bad-count" and f"is {counts[-1]} after {chunks} token-carrying chunks" in r.error
    else:
        assert r.ok and r.completion_tokens == counts[-1]


@FAST
@given(n=st.integers(1, 10**6), frac=st.sampled_from([0.0, 0.5, 0.25]))
def test_an_integral_float_is_read_and_said_a_fraction_is_named_with_its_value(n, frac):
    steps = [("event", chunk({"content": "a"})), ("event", chunk({}, finish="stop")),
             ("event", {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n + frac}}), ("done",)]
    r = consume([(_bytes(steps), 1.0)], t0=0.0)
    if frac == 0.0:
        assert r.ok and r.completion_tokens == n
        assert f"WARNING: usage.completion_tokens is {float(n)!r}, a float with no fraction; read as {n}" in r.warnings
    else:
        assert r.error_kind == "bad-data" and f"usage.completion_tokens is {json.dumps(n + frac)}" in r.error


# --- 5. bursts ---------------------------------------------------------------------------------

@FAST
@given(n=st.integers(2, 40), gap=st.floats(0.001, 0.5), cuts=st.lists(st.integers(0, 1 << 14), max_size=5))
def test_one_write_has_no_ttft_or_decode_and_says_why(n, gap, cuts):
    """Every token chunk at one instant (one write, or a proxy that buffered the answer): TTFT,
    prefill and decode are unmeasurable with the reason, however the bytes were split."""
    data = _bytes(vllm_stream(answer=["word"] * n))
    one = consume([(p, 1.0) for p, _ in _reads(data, cuts)], t0=0.0)
    assert one.ok and (one.ttft_s, one.prefill_tps, one.decode_tps) == (None, None, None)
    assert f"all {n} token chunks arrived in one read" in one.unmeasurable["decode_tps"]


@FAST
@given(per_read=st.integers(1, 8), reads=st.integers(3, 6), gap=st.floats(0.001, 0.5))
def test_fixed_size_bursts_are_named_per_event_arrival_is_measured(per_read, reads, gap):
    """Reads of one size, each bringing ``per_read`` whole events at its own instant: from
    :data:`BURST_MIN_CHUNKS` chunks per read on, a buffering proxy's bursts (unmeasurable, named);
    below it, measured."""
    ev = b"data: " + json.dumps(chunk({"content": "word"})).encode() + b"\n\n"
    tail = _bytes([("event", chunk({}, finish="stop")), ("event", usage_chunk(5, per_read * reads)), ("done",)])
    parts = [ev * per_read for _ in range(reads)]
    parts[-1] += tail
    r = consume([(p, 1.0 + k * gap) for k, p in enumerate(parts)], t0=0.0)
    assert r.ok, r.error
    if per_read >= BURST_MIN_CHUNKS:
        assert r.decode_tps is None and f"arrived in {reads} reads, all but the last of {len(ev) * per_read} bytes" \
            in r.unmeasurable["decode_tps"]
    else:
        assert not r.unmeasurable and r.decode_tps == pytest.approx((per_read * reads - 1) / ((reads - 1) * gap))


# --- 6. finish reasons, inline channel markup ---------------------------------------------------

@FAST
@given(reason=st.sampled_from(["stop", "length", "abort", "error", "repetition", "tool_calls", "content_filter",
                               "cancelled"]))
def test_a_finish_reason_outside_stop_and_length_is_named(reason):
    """vLLM's ``FINISH_REASON_STRINGS = ("stop", "length", "abort", "error", "repetition")``: abort and
    error are a FAIL naming it; any other outside stop/length a WARNING naming it."""
    r = consume([(_bytes(vllm_stream(answer=["Hi"], finish=reason)), 1.0)], t0=0.0)
    if reason in GIVEN_UP:
        assert (r.ok, r.error_kind) == (False, "aborted") and repr(reason) in r.error
    elif reason in FINISHED:
        assert r.ok and not any("finish_reason" in w for w in r.warnings)
    else:
        assert r.ok and any(f"finish_reason {reason!r}" in w for w in r.warnings)


TEXT = st.text(alphabet="abc .☃", min_size=1, max_size=20)


@FAST
@given(analysis=TEXT, final=TEXT, piece=st.integers(1, 9), header=st.sampled_from(["", "<|start|>assistant"]))
def test_gpt_oss_inline_channel_markup_is_named_and_only_final_is_the_answer(analysis, final, piece, header):
    """openai/harmony ``docs/format.md`` (Chat conversation format, example output):
    ``<|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…<|return|>``."""
    final = "F" + final
    text = (f"{header}<|channel|>analysis<|message|>{analysis}<|end|>"
            f"<|start|>assistant<|channel|>final<|message|>{final}<|return|>")
    pieces = [text[i:i + piece] for i in range(0, len(text), piece)]
    r = consume([(_bytes(vllm_stream(answer=pieces)), 1.0)], t0=0.0)
    assert r.ok and r.answer == final and r.reasoning_chars == len(analysis)
    assert HARMONY_WARNING in r.warnings and r.reasoning_source == "harmony-inline"


def test_the_frame_shape_is_what_gos_encoder_writes():
    """``loading.go:201-221``: ``{"choices":[{"delta":{"reasoning_content":…}}]}``, compact."""
    assert llama_swap_frame("a<b")[1] == b'data: {"choices":[{"delta":{"reasoning_content":"a\\u003cb"}}]}\n\n'


def test_an_unmeasurable_figure_reaches_the_summary_and_the_printed_line_with_its_reason():
    from rigkit.bench.results import summarize_workload

    data = _bytes(vllm_stream(answer=["word"] * 5))
    recs = [{**consume([(data, 1.0)], t0=0.0).to_record(), "prompt_id": "p"},
            {**consume([(e + b"\n\n", 1.0 + k) for k, e in enumerate(data.split(b"\n\n")[:-1])], t0=0.0).to_record(),
             "prompt_id": "p"}]
    w = summarize_workload("chat-greedy", recs)
    assert w["unmeasurable"]["decode_tps"].startswith("1 of 2 requests: all 5 token chunks arrived in one read")
    assert w["metrics"]["decode_tps"]["n"] == 1  # the measured one alone


@FAST
@given(first=st.integers(1, 3), burst=st.integers(1, 30), trickle=st.integers(0, 6), gap=st.floats(0.001, 0.5))
def test_most_of_the_answer_in_one_read_after_the_first_has_no_decode(first, burst, trickle, gap):
    """Reads at their own instants: ``first`` chunks, then ``burst`` at once, then ``trickle`` one by
    one. Decode is unmeasurable (named) when the burst is at least half the chunks and at least
    :data:`BURST_MIN_CHUNKS`; TTFT stands. Else decode is the chunks over the span (small batches spread
    over the answer carry it)."""
    ev = b"data: " + json.dumps(chunk({"content": "w"})).encode() + b"\n\n"
    n = first + burst + trickle
    tail = _bytes([("event", chunk({}, finish="stop")), ("event", usage_chunk(5, n)), ("done",)])
    parts = [ev * first, ev * burst] + [ev] * trickle
    parts[-1] += tail
    r = consume([(p, 1.0 + k * gap) for k, p in enumerate(parts)], t0=0.0)
    assert r.ok and r.ttft_s == 1.0
    if burst >= max(BURST_MIN_CHUNKS, n / 2):
        assert r.decode_tps is None and (f"the {burst + trickle} token chunks after the first read came in "
                                         f"{1 + trickle} reads (up to {burst} in one" in r.unmeasurable["decode_tps"])
    else:
        assert not r.unmeasurable and r.decode_tps == pytest.approx((n - 1) / ((len(parts) - 1) * gap))
