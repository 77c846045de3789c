"""Issue 44, item 5: one failure classifier (:func:`rigkit.bench.result.failure_kind`).

Every shape of failure it is handed maps to exactly one documented kind (:data:`KINDS`); and the
four places that decided the kind before the client was split — the request (connection, HTTP
status), the one-body answer, the stream's consumer, the runner's ``/health`` re-judging — agree
with it: the client as it was at 67c32c2 (read from git, its imports pointed at today's SSE parser
and llama-swap client) and today's client give the same record, every field, for generated HTTP
answers, connection failures, and streams of every dialect with error lines, error events, bad
JSON and wrongly typed fields, cut at every byte or ended by every kind of read error.
"""

from __future__ import annotations

import http.client
import io
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigkit.bench import llama_swap
from rigkit.bench import result, transport
from rigkit.bench.client import consume
from rigkit.bench.result import starting_failed
from rigkit.bench.result import AT, KINDS, Happened, RequestResult, failure_kind
from rigkit.bench.sse import SSEParser
from rigkit.bench.stream import StreamConsumer

from .streams import DIALECTS, ENDINGS, LLAMA_CPP_RECORDED, build

ROOT = Path(__file__).resolve().parents[2]
BEFORE = "67c32c2"  # main before the split (issue 44b)
#: Where the client lived at :data:`BEFORE` (rigkit/bench/ since the layout of issue 44 item 1).
BEFORE_PATH = "rigkit/host/bench/client.py"

EXCEPTIONS = (TimeoutError("timed out"), ConnectionResetError(104, "reset"), BrokenPipeError(32, "pipe"),
              ConnectionRefusedError(111, "refused"), OSError(113, "no route"),
              http.client.IncompleteRead(b"x", 10), http.client.RemoteDisconnected("closed"))
MESSAGES = ("Loading model", "EngineDeadError: the engine died", "EngineCore encountered an issue",
            "context length exceeded", "", "loading", "rate limit", "☃",
            "unspecific error: upstream command exited prematurely")
HEALTH = ("/health answers 200", "/health answers 503", "/health answers 503 Loading model",
          "/health unreachable (ConnectionError)", "/health answers 500")


@st.composite
def happenings(draw):
    return Happened(at=draw(st.sampled_from(sorted(AT))),
                    exc=draw(st.none() | st.sampled_from(EXCEPTIONS)),
                    status=draw(st.none() | st.integers(100, 699)),
                    message=draw(st.none() | st.sampled_from(MESSAGES) | st.text(max_size=20)),
                    retry_after_s=draw(st.none() | st.floats(0, 1e4)),
                    kind=draw(st.sampled_from(sorted(KINDS))),
                    health=draw(st.none() | st.sampled_from(HEALTH)),
                    finish_reason=draw(st.none() | st.sampled_from(["length", "stop", "tool_calls", ""])))


@given(happenings())
def test_every_failure_maps_to_exactly_one_documented_kind(h):
    kind = failure_kind(h)
    assert kind in KINDS
    assert failure_kind(h) == kind  # a function of what happened, nothing else


@given(st.text(min_size=1).filter(lambda s: s not in AT))
def test_a_place_the_classifier_does_not_know_is_an_error_not_a_guess(at):
    with pytest.raises(ValueError, match="not where a request fails"):
        failure_kind(Happened(at))


def test_every_documented_kind_is_reached():
    seen = {failure_kind(Happened(at, exc=exc, status=status, message=msg, retry_after_s=ra, kind="http-5xx",
                                  health=health, finish_reason=fr))
            for at in AT for exc in (None, *EXCEPTIONS) for status in (400, 404, 429, 500, 502, 503)
            for msg in (None, *MESSAGES) for ra in (None, 2.0) for health in HEALTH for fr in (None, "length")}
    assert seen == set(KINDS)


# --- the client as it was: the four old sites ----------------------------------------------------

@pytest.fixture(scope="module")
def before():
    """The client module at :data:`BEFORE`, its SSE parser and llama-swap client today's."""
    try:
        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:{BEFORE_PATH}"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"the client before the split ({BEFORE}) is not in this checkout's git: {exc}")
    # its two imports of the project (llama_swap, SSEParser) become today's, wherever they live now
    ours = [line for line in src.splitlines() if line.startswith("from rigkit")]
    assert len(ours) == 2 and all(line.endswith((" llama_swap", " SSEParser")) for line in ours), ours
    src = "\n".join(line for line in src.splitlines() if not line.startswith("from rigkit"))
    mod = types.ModuleType("client_before_split")
    mod.__dict__.update(llama_swap=llama_swap, SSEParser=SSEParser)
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    try:
        exec(compile(src, f"{BEFORE}:{BEFORE_PATH}", "exec"), mod.__dict__)
        yield mod
    finally:
        sys.modules.pop(mod.__name__, None)


#: Fields issue 60 added to a request's record (none of them in the client before the split).
ISSUE_60_FIELDS = ("waited_s", "swap", "unmeasurable", "after_done")


def _record(r) -> dict:
    d = r.to_record()
    d["answer"] = r.answer
    for k in ISSUE_60_FIELDS:
        d.pop(k, None)
    return d


def _same(new, old) -> None:
    """``new`` reads as ``old`` did, but for issue 60's rules, each checked where it applies: a count
    below the token-carrying chunks or going back is ``bad-count`` (the old client took it); a stream
    whose token chunks all arrived in one read has no TTFT, prefill or decode (the old one reported
    the read's time as TTFT)."""
    n, o = _record(new), _record(old)
    if not new.ok and new.error_kind == "bad-count" and ("token-carrying chunks" in new.error
                                                       or "went back" in new.error
                                                       or "below 0" in new.error):
        assert o["ok"] or o["error_kind"] in ("bad-count", "empty-answer", "thinking-ate-budget"), (n, o)
        if "token-carrying chunks" in new.error and o["ok"] and o["tokens_source"] in ("usage", "timings"):
            assert o["completion_tokens"] < o["token_chunks"], (n, o)
        return
    if new.error_kind == "swap-failed":  # llama-swap's word for a member it could not start
        assert o["error_kind"] in ("stream-error", "http-5xx", "http-4xx", "engine-dead", "not-streamed"), o
        assert starting_failed(new.error), new.error
        o["error_kind"] = "swap-failed"
    if new.error_kind == o["error_kind"] == "bad-data" and n["error"] != o["error"]:  # now naming the value
        assert n["error"].split(" is ")[0] == o["error"].split(" is ")[0], (n["error"], o["error"])
        n["error"] = o["error"]
    if new.after_done and new.after_done["ended"] is False:  # reads past AFTER_DONE_S: left, and said
        n["warnings"] = [w for w in n["warnings"] if "kept sending after data: [DONE]" not in w]
    if new.after_done and new.after_done["late_usage"]:  # a usage after [DONE]: used, and said
        assert any("after data: [DONE]" in w for w in new.warnings) and o["usage_keys"] is None
        return
    if new.error_kind == "redirected":  # a 3xx: named with its Location, never read as a stream
        assert 300 <= new.status < 400 and "redirected to" in new.error
        return
    if new.error_kind in ("stream-error", "engine-dead") and "outside any event" in new.error:  # an error body, raw
        assert o["error_kind"] in ("cut", "bad-data") or o["ok"], o
        return
    if new.unmeasurable:
        assert o["token_chunks"] >= 2
        for k in ("ttft_s", "ttft_answer_s", "prefill_tps", "decode_tps"):
            o[k] = None
        o["warnings"] = o["warnings"] + [w for w in n["warnings"] if "unmeasurable" in w]
    assert n == o


def _old_consume(before, reads, exc=None):
    c = before.StreamConsumer(before.RequestResult(status=200), 0.0, 120.0)
    t = 0.0
    for data, t in reads:
        if c.feed(data, t):
            break
    return c.end(t, exc)


def _new_consume(reads, exc=None):
    return consume(reads, 0.0, 120.0, exc)


ENDS = (None, TimeoutError("timed out"), ConnectionResetError(104, "reset"), http.client.IncompleteRead(b""))


def test_every_cut_of_a_recorded_stream_reads_the_same_before_and_after(before):
    data = LLAMA_CPP_RECORDED
    for i in range(len(data) + 1):
        for exc in ENDS:
            reads = [(data[:i], 1.0), (data[i:], 2.0)] if exc is None else [(data[:i], 1.0)]
            _same(_new_consume(reads, exc), _old_consume(before, reads, exc))


def _chunk(delta, finish=None, index=0):
    return {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": index, "delta": delta,
                                                                       "finish_reason": finish}]}


#: Events a stream may carry, good and bad: data payloads (str) or whole raw lines (bytes).
EVENTS = st.one_of(
    st.builds(lambda t: json.dumps(_chunk({"content": t})), st.text(max_size=8)),
    st.builds(lambda t: json.dumps(_chunk({"reasoning": t})), st.text(max_size=8)),
    st.builds(lambda t: json.dumps(_chunk({"content": f"<think>{t}</think>"})), st.text(max_size=8)),
    st.just(json.dumps(_chunk({}, finish="stop"))), st.just(json.dumps(_chunk({}, finish="length"))),
    st.builds(lambda n: json.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}}),
              st.integers(-1, 9)),
    st.builds(lambda n: json.dumps({"choices": [], "timings": {"predicted_n": n, "prompt_n": 2}}), st.integers(0, 9)),
    st.builds(lambda m: json.dumps({"error": {"message": m}}), st.sampled_from(MESSAGES)),
    st.builds(lambda m: json.dumps({"object": "error", "message": m}), st.sampled_from(MESSAGES)),
    st.sampled_from(["[DONE]", "not json", "[1, 2]", "42", '"text"', "null", "{", "",
                     json.dumps(_chunk({"content": "a"}, index=1)), json.dumps(_chunk({"content": 5})),
                     json.dumps(_chunk("delta")), json.dumps(_chunk({}, finish=3)),
                     json.dumps({"choices": {"index": 0}}), json.dumps({"choices": [], "usage": [1]}),
                     json.dumps({"choices": [], "usage": {"completion_tokens": "7"}}),
                     json.dumps({"choices": [], "usage": {"completion_tokens": 4,
                                                          "completion_tokens_details": {"reasoning_tokens": 9}}}),
                     json.dumps({"choices": [], "timings": "x"}), json.dumps({"choices": [], "metrics": 1})]),
    st.sampled_from([b": ping", b'error: {"message": "llama_decode failed"}', b"event: error\ndata: boom",
                     b"event: ping\ndata: 123", b"id: 7\ndata: " + json.dumps(_chunk({"content": "x"})).encode()]),
)


@st.composite
def streams(draw):
    """A stream's bytes: a generated dialect's (:func:`tests.bench.streams.build`) or a list of good
    and bad events."""
    if draw(st.booleans()):
        return build(draw(st.sampled_from(DIALECTS)), ["think"], ["An", "swer"],
                     tokens_per_chunk=draw(st.integers(1, 3)), eol=draw(st.sampled_from(["\n", "\r\n", "\r"])),
                     pings=draw(st.integers(0, 2)), extras=draw(st.booleans()), bom=draw(st.booleans()),
                     ending=draw(st.sampled_from(ENDINGS)), multiline=draw(st.booleans()),
                     invalid_utf8=draw(st.booleans()))[0]
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))
    out = []
    for ev in draw(st.lists(EVENTS, max_size=8)):
        out.append((ev if isinstance(ev, bytes) else b"data: " + ev.encode()) + eol + eol)
    return b"".join(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.lists(st.integers(0, 1 << 16), max_size=4), st.sampled_from(ENDS), st.data())
def test_any_stream_split_and_ended_anyhow_reads_the_same_before_and_after(before, data, cuts, exc, more):
    points = sorted({c % (len(data) + 1) for c in cuts})
    parts = [data[a:b] for a, b in zip([0, *points], [*points, len(data)])]
    if exc is not None:
        parts = parts[:more.draw(st.integers(0, len(parts)))]  # the read that raised brought nothing
    reads = [(p, 1.0 + i) for i, p in enumerate(parts)]
    new, old = _new_consume(reads, exc), _old_consume(before, reads, exc)
    _same(new, old)
    assert new.ok or new.error_kind in KINDS
    if exc is None:
        assert _record(consume(reads, t0=0.0)) == _record(new)


# --- the request: connection failures, HTTP statuses, one-body answers ----------------------------

class _Resp:
    """What http.client's response gives the client: status, headers, the body."""

    def __init__(self, status, headers, body, read_exc=None):
        self.status = status
        self._headers = {k.lower(): v for k, v in headers.items()}
        self._body = io.BytesIO(body)
        self._read_exc = read_exc
        self.will_close = True
        self.fp = None

    def getheader(self, name, default=None):
        return self._headers.get(name.lower(), default)

    def read(self, n=-1):
        if self._read_exc is not None:
            raise self._read_exc
        return self._body.read(n)

    def read1(self, n=-1):
        return self.read(n)

    def isclosed(self):
        return True


class _Conn:
    def __init__(self, script):
        self.script = script
        self.sock = types.SimpleNamespace(settimeout=lambda _s: None)

    def putrequest(self, *a, **k):
        pass

    def putheader(self, *a):
        pass

    def endheaders(self, data=None):
        pass

    def getresponse(self):
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step


class _Session:
    """A :class:`ChatSession` whose connections answer from ``script`` (responses or exceptions);
    ``connect`` an exception the first connect raises; ``reused`` whether the first is a kept one."""

    def __init__(self, script, connect=None, reused=False):
        self.script, self.connect, self.reused = list(script), connect, reused

    def connection(self, scheme, host, port, connect_timeout_s):
        if self.connect is not None:
            raise self.connect
        reused, self.reused = self.reused, False
        return _Conn(self.script), reused

    def drop(self, *a):
        pass


def _clock():
    t = iter(range(1000))
    return lambda: float(next(t))


def _old_request(before, session):
    r = before.RequestResult()

    def fail(kind, message):
        r.ok, r.error_kind, r.error = False, kind, message
        return r

    return before._request(session, "http", "h", 1, "http://h:1/v1/chat/completions", "/v1/chat/completions",
                           b"{}", {}, r, _clock(), 10.0, 120.0, fail, None)


def _new_request(session):
    return transport.request(session, "http", "h", 1, "http://h:1/v1/chat/completions", "/v1/chat/completions",
                             b"{}", {}, RequestResult(), _clock(), 10.0, 120.0, None)


BODIES = (b"", b"oops", b'{"error": {"message": "Loading model"}}', b'{"detail": "EngineDeadError"}',
          b'{"message": "engine core died", "object": "error"}', b'{"error": "bad"}', b"<html>login</html>",
          b'{"choices": [], "usage": {"completion_tokens": 5}}', b'{"usage": {}}', b"[1]",
          b"data: {}\n\n", b"\x1f\x8b\x08\x00", b'{"error": {"message": "EngineCore failed"}}')
TYPES = (None, "text/event-stream", "application/json", "application/json; charset=utf-8", "text/html",
         "text/plain", "")


@st.composite
def answers(draw):
    status = draw(st.sampled_from([200, 400, 404, 413, 429, 500, 502, 503, 504]) | st.integers(200, 599))
    headers = {}
    ctype = draw(st.sampled_from(TYPES))
    if ctype is not None:
        headers["Content-Type"] = ctype
    if draw(st.booleans()):
        headers["Retry-After"] = draw(st.sampled_from(["3", "0", "soon", "Wed, 21 Oct 2015 07:28:00 GMT"]))
    if draw(st.integers(0, 4)) == 0:
        headers["Content-Encoding"] = draw(st.sampled_from(["gzip", "identity", "br"]))
    read_exc = draw(st.none() | st.sampled_from([ConnectionResetError(104, "reset"), TimeoutError("t")]))
    return _Resp(status, headers, draw(st.sampled_from(BODIES)), read_exc)


@settings(max_examples=300, deadline=None)
@given(answers(), answers(), st.booleans())
def test_every_http_answer_reads_the_same_before_and_after(before, first, second, reused):
    new = _new_request(_Session([first, second], reused=reused))
    for resp in (first, second):  # the same answers again, from the start
        resp._body.seek(0)
    old = _old_request(before, _Session([first, second], reused=reused))
    _same(new, old)
    assert new.error_kind in KINDS if not new.ok else new.error_kind is None


@pytest.mark.parametrize("connect", [None, *(e for e in EXCEPTIONS if isinstance(e, OSError))])
@pytest.mark.parametrize("send", [None, *EXCEPTIONS])
@pytest.mark.parametrize("reused", [False, True])
def test_every_connection_failure_reads_the_same_before_and_after(before, connect, send, reused):
    ok = _Resp(200, {"Content-Type": "text/event-stream"}, LLAMA_CPP_RECORDED)
    script = [send, ok] if send is not None else [ok]
    new = _new_request(_Session(list(script), connect, reused))
    ok._body.seek(0)
    old = _old_request(before, _Session(list(script), connect, reused))
    _same(new, old)


# --- the runner: a 5xx judged again with /health -------------------------------------------------

def _runner_before(kind: str, health: str) -> str:
    """The runner's rule at 67c32c2 (rigkit/host/bench/runner.py, run_workloads), as it was written."""
    if kind == "http-5xx" and health.endswith(" 503"):
        kind = "engine-dead"  # vLLM's /health after EngineDeadError
    elif kind == "http-5xx" and health.endswith(" 503 Loading model"):
        kind = "loading"
    return kind


@pytest.mark.parametrize("health", HEALTH)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_health_rejudging_agrees_with_the_runner_before(kind, health):
    assert failure_kind(Happened("health", kind=kind, health=health)) == _runner_before(kind, health)


def test_the_runner_sets_are_the_old_ones():
    assert result.ABORT_KINDS == {"connection", "http-5xx", "engine-dead", "stalled", "cut", "stream-error",
                                  "bad-data", "loading", "rate-limited", "unavailable", "not-streamed",
                                  "not-event-stream", "several-choices", "bad-count",
                                  # issue 60's: an answer given up, a member llama-swap could not start
                                  # or kept swapping, a redirect
                                  "aborted", "swap-failed", "swapping", "redirected"}
