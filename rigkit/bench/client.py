"""One streamed chat completion against an OpenAI-compatible server, timed and counted right.

Sources of the wire format: OpenAI API reference, "Create chat completion" with
``stream: true`` and ``stream_options.include_usage`` (a last chunk with ``choices: []`` and
``usage``); vLLM's OpenAI server (``delta.reasoning``, formerly ``reasoning_content``; several
tokens per chunk under speculative decoding; per-request ``metrics`` on the usage chunk) and
its benchmark client ``vllm/benchmarks/lib/endpoint_request_func.py``; llama.cpp's server
README (``delta.reasoning_content``, ``timings`` on the last chunk, ``:`` pings). See
``notes/bench.md`` for why each rule exists.

Definitions (seconds, tok/s, all from :func:`time.monotonic`): the send is the clock read just
before the request's bytes go out on an already open connection (connecting, building the
body and the headers come before it); every chunk time is the clock read when the network read
that brought it returns.

- ``ttft_s``: send → first chunk carrying a token of any kind (reasoning or answer).
- ``ttft_answer_s``: send → first chunk carrying answer text.
- ``e2e_s``: send → last chunk carrying a token (the usage chunk and ``[DONE]`` do not count).
- ``decode_tps`` = (completion_tokens − 1) / (e2e_s − ttft_s) — vLLM's TPOT inverted.
- ``prefill_tps`` = prompt_tokens / ttft_s — a lower bound (HTTP, tokenisation, queueing).
- ``tokens_per_chunk`` = completion_tokens / token-carrying chunks.

Token counts come from the server's ``usage`` (``tokens_source="usage"``); without it, from
llama.cpp's ``timings.predicted_n`` (``"timings"``: the server's own count of generated tokens,
as authoritative as usage); without both the client falls back to counting chunks, marks
``tokens_source="chunk-estimate"`` and adds a loud warning (worded once per run: the runner
counts repeats).

What the bench does not read as a completion, each named in its verdict (issue 39): a response
that is not an event stream — another Content-Type, an event stream labelled
``application/json``, or a Content-Encoding though ``identity`` was asked
(:func:`response_kind`, the one place it is judged: ``not-event-stream``); events of a type
other than ``message``/``error`` (counted in ``other_events``, WHATWG typed events); a choice
index other than 0 (``several-choices``: the bench asks for one); counts that cannot be right
(:func:`check_counts`: ``bad-count``).

Transport: :mod:`http.client` over a :class:`ChatSession` that keeps one connection per
server open between requests (a connection the server closed is reopened once); no proxy
support — the bench talks to 127.0.0.1 or an SSH forward.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

from rigkit.bench import llama_swap
from rigkit.bench.sse import SSEParser

#: Delta fields that carry thinking, in the order servers adopted them (vLLM ``reasoning``,
#: llama.cpp/SGLang/old vLLM ``reasoning_content``, others ``thinking``).
REASONING_FIELDS = ("reasoning", "reasoning_content", "thinking")

_OPEN, _CLOSE = "<think>", "</think>"

CHUNK_ESTIMATE_WARNING = (
    "WARNING: the server sent no usage; completion tokens are a chunk-count estimate. Under "
    "speculative decoding one chunk carries several tokens, so this undercounts (~2.5x on "
    "HyperQwen). Send stream_options.include_usage or start vLLM with "
    "--enable-force-include-usage."
)

NO_DONE_WARNING = (
    "WARNING: the stream ended without data: [DONE] after its finish_reason and the server's "
    "token count; counted as complete (a proxy that drops [DONE] may drop more: check it)"
)

USAGE_WITHOUT_COUNT_WARNING = (
    "WARNING: the server's usage has no completion_tokens; completion tokens are a chunk-count "
    "estimate, not counted from usage (under speculative decoding it undercounts)"
)

#: Share of the request's ``max_tokens`` that thinking must have used for an answer cut by
#: ``finish_reason: "length"`` to be reported as cut by thinking.
THINKING_MOST = 0.5

CUT_BY_THINKING_WARNING = (
    "WARNING: answers cut by max_tokens after thinking used most of the budget "
    "(finish_reason \"length\"); raise max_tokens"
)


@dataclass
class RequestResult:
    """Measurements of one streamed request (one JSON line in ``requests.jsonl``).

    Times in seconds from the send, rates in tok/s, counts in tokens. ``ok`` False means the
    request failed: ``error_kind`` is one of ``connection``, ``http-4xx``, ``http-5xx``,
    ``engine-dead``, ``loading`` (llama.cpp's 503 ``Loading model``), ``rate-limited`` (429),
    ``unavailable`` (503 with ``Retry-After``), ``stream-error``, ``stalled``, ``cut``,
    ``not-streamed`` (one ``application/json`` body where a stream was asked for),
    ``not-event-stream`` (another Content-Type, or a Content-Encoding the bench did not ask
    for: :func:`response_kind`), ``several-choices`` (a choice index other than 0),
    ``bad-data``, ``bad-count`` (a count that cannot be right: :func:`check_counts`),
    ``thinking-ate-budget``, ``empty-answer``; ``error`` is the message shown
    to the operator; ``retry_after_s`` the seconds a ``Retry-After`` header asked for.
    ``tokens_source`` is ``usage``, ``timings`` (llama.cpp's ``predicted_n``) or
    ``chunk-estimate``; ``reasoning_tokens`` comes from ``usage.completion_tokens_details``
    (``reasoning_tokens_source="usage"``) or, for a cut answer, is split from the completion
    tokens by the share of thinking chunks (``"chunk-share"``). ``cut_note`` names the
    reasoning/answer split when thinking used most of the budget and the answer was cut.
    ``answer`` is the answer text (kept in memory for the verbatim check; the JSONL keeps
    only its length and a short head). ``other_events`` counts events of types other than
    ``message``/``error`` by type (``{"ping": 3}``: not completions, WHATWG typed events);
    ``usage_keys`` the keys of the usage the server sent (None: it sent none).
    """

    ok: bool = True
    error: str | None = None
    error_kind: str | None = None
    status: int | None = None
    ttft_s: float | None = None
    ttft_answer_s: float | None = None
    e2e_s: float | None = None
    total_s: float | None = None
    prompt_tokens: int | None = None
    prompt_tokens_source: str | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    tokens_source: str | None = None
    reasoning_tokens: int | None = None
    reasoning_tokens_source: str | None = None
    answer_tokens: int | None = None
    token_chunks: int = 0
    reasoning_chunks: int = 0
    chunk_estimate: int = 0
    tokens_per_chunk: float | None = None
    decode_tps: float | None = None
    prefill_tps: float | None = None
    finish_reason: str | None = None
    reasoning_source: str | None = None
    reasoning_chars: int = 0
    answer_chars: int = 0
    pings: int = 0
    other_events: dict[str, int] = field(default_factory=dict)
    usage_keys: list[str] | None = None
    done: bool = False
    server_timings: dict[str, Any] | None = None
    server_metrics: dict[str, Any] | None = None
    cut_note: str | None = None
    retry_after_s: float | None = None
    warnings: list[str] = field(default_factory=list)
    answer: str = ""

    def to_record(self) -> dict[str, Any]:
        """The JSON-ready dict for ``requests.jsonl``: every field but the full answer, which
        is replaced by ``answer_head`` (its first 200 characters)."""
        d = asdict(self)
        d.pop("answer")
        d["answer_head"] = self.answer[:200]
        return d


class _ThinkSplitter:
    """Splits inline ``<think>…</think>`` out of ``content`` across chunk boundaries.

    An orphan ``</think>`` (templates that open the tag inside the prompt, as Qwen3's does)
    turns everything before it into reasoning.
    """

    def __init__(self) -> None:
        self.in_think = False
        self.seen_tag = False
        self.pending = ""

    def feed(self, text: str, final: bool = False) -> list[tuple[str, str]]:
        """Return ``[(kind, text)]`` pieces, kind ``reasoning``, ``answer`` or ``orphan-close``."""
        s = self.pending + text
        self.pending = ""
        out: list[tuple[str, str]] = []
        while s:
            tag = _CLOSE if self.in_think else _OPEN
            i = s.find(tag)
            j = s.find(_CLOSE) if not self.in_think else -1
            if not self.in_think and j != -1 and (i == -1 or j < i):
                out.append(("answer", s[:j]))
                out.append(("orphan-close", ""))
                self.seen_tag = True
                s = s[j + len(_CLOSE):]
                continue
            if i != -1:
                out.append(("reasoning" if self.in_think else "answer", s[:i]))
                self.in_think = not self.in_think
                self.seen_tag = True
                s = s[i + len(tag):]
                continue
            # hold back a possible partial tag at the end
            keep = 0
            if not final:
                for tag_ in (_OPEN, _CLOSE):
                    for k in range(min(len(tag_) - 1, len(s)), 0, -1):
                        if s.endswith(tag_[:k]):
                            keep = max(keep, k)
                            break
            body = s[: len(s) - keep] if keep else s
            out.append(("reasoning" if self.in_think else "answer", body))
            self.pending = s[len(s) - keep:] if keep else ""
            s = ""
        return [(k, t) for k, t in out if t or k == "orphan-close"]


def _error_message(body: bytes) -> str:
    """Best-effort message from an error body (OpenAI ``{"error": {"message"}}``, FastAPI
    ``{"detail"}``, vLLM ``{"message"}``) — at most 300 characters."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return text[:300] or "(empty body)"
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or json.dumps(err)
        else:
            msg = str(err)
        if isinstance(obj.get("detail"), str) and not isinstance(obj.get("error"), dict):
            msg = obj["detail"]
        return str(msg)[:300]
    return text[:300]


def _looks_engine_dead(message: str) -> bool:
    m = message.lower()
    return "enginedead" in m or "engine dead" in m or "enginecore" in m or "engine core" in m


class ChatSession:
    """Open HTTP/1.1 connections to chat servers, one per ``(scheme, host, port)``, kept
    between requests so a request's clock starts on a warm connection (no TCP handshake in
    TTFT). Not thread-safe: one request at a time, as the bench runs them. Close with
    :meth:`close` (or use it as a context manager)."""

    def __init__(self) -> None:
        self._conns: dict[tuple[str, str, int], http.client.HTTPConnection] = {}

    def connection(self, scheme: str, host: str, port: int,
                   connect_timeout_s: float) -> tuple[http.client.HTTPConnection, bool]:
        """``(connection, reused)``: the open connection to the server, or a new one
        connected now. Raises OSError (``TimeoutError`` on the connect timeout)."""
        key = (scheme, host, port)
        conn = self._conns.get(key)
        if conn is not None and conn.sock is not None:
            return conn, True
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        conn = cls(host, port, timeout=connect_timeout_s)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conns[key] = conn
        return conn, False

    def drop(self, scheme: str, host: str, port: int) -> None:
        """Close and forget the connection to that server (after an error or a close)."""
        conn = self._conns.pop((scheme, host, port), None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Close every connection."""
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def __enter__(self) -> "ChatSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def stream_chat(
    url: str,
    payload: dict[str, Any],
    *,
    api_key: str | None = None,
    session: ChatSession | None = None,
    stall_timeout_s: float = 120.0,
    connect_timeout_s: float = 10.0,
    clock: Callable[[], float] = time.monotonic,
    on_chunk: Callable[[RequestResult], None] | None = None,
) -> RequestResult:
    """POST ``payload`` to ``url`` (``…/v1/chat/completions``) as a stream and measure it.

    + payload: an OpenAI chat-completion body; ``stream`` and
      ``stream_options.include_usage`` are forced on. ``n`` other than 1 raises ValueError
      (usage then covers every choice).
    + api_key: sent as ``Authorization: Bearer``; never stored in the result.
    + session: a :class:`ChatSession` to reuse connections across calls (default: a
      connection of its own, closed afterwards).
    + stall_timeout_s: seconds without a data event (bytes or only ``:`` pings) after which the
      stream counts as stalled.
    + clock: the monotonic clock (seconds); tests may pass their own.

    Returns a :class:`RequestResult`; network and server failures are reported in it
    (``ok=False``), never raised.
    """
    if payload.get("n", 1) != 1:
        raise ValueError(f"n={payload['n']!r}: the bench measures one choice per request (n=1)")
    body = dict(payload)
    body["stream"] = True
    body["stream_options"] = {**(payload.get("stream_options") or {}), "include_usage": True}
    data = json.dumps(body).encode("utf-8")
    parts = urlsplit(url)
    scheme = parts.scheme or "http"
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if scheme == "https" else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    # identity: the stream must arrive as the server sends it, never compressed on the way
    headers = {"Accept": "text/event-stream", "Accept-Encoding": "identity",
               "Content-Type": "application/json", "Content-Length": str(len(data))}
    headers.update(llama_swap.headers(api_key))
    own = session is None
    sess = session or ChatSession()
    r = RequestResult()

    def fail(kind: str, message: str) -> RequestResult:
        r.ok, r.error_kind, r.error = False, kind, message
        return r

    try:
        return _request(sess, scheme, host, port, url, path, data, headers, r, clock,
                        connect_timeout_s, stall_timeout_s, fail, on_chunk)
    finally:
        if own:
            sess.close()


def proxy_lost_the_request(status: int, body: bytes) -> bool:
    """A ``502`` with an empty body: llama-swap's reverse proxy found the member's kept connection closed
    and never had an answer (Go's ReverseProxy default error handler, ``http: proxy error: EOF``; members
    get no ErrorHandler, llama-swap v250 router/peer.go:91). llama.cpp's server closes its connection
    after every streamed answer while advertising keep-alive, so the next request through llama-swap can
    be handed that connection as it closes; Go retries only replayable requests, never a POST
    (net/http transport.go:818-862). The member's own errors carry a body, llama-swap's own ones are JSON
    (``{"src": "llama-swap", ...}``), so an empty 502 is that lost request: sent once more (issue #25)."""
    return status == 502 and not body.strip()


def _request(sess, scheme, host, port, url, path, data, headers, r, clock, connect_timeout_s,
             stall_timeout_s, fail, on_chunk) -> RequestResult:
    for attempt in (0, 1):
        try:
            conn, reused = sess.connection(scheme, host, port, connect_timeout_s)
        except TimeoutError:
            return fail("connection", f"could not connect to {url} within {connect_timeout_s:g} s")
        except OSError as exc:
            return fail("connection", f"could not connect to {url}: {type(exc).__name__}")
        conn.sock.settimeout(stall_timeout_s)
        try:
            conn.putrequest("POST", path, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            t0 = clock()  # the request leaves now
            conn.endheaders(data)
            resp = conn.getresponse()
        except TimeoutError:
            sess.drop(scheme, host, port)
            return fail("stalled", f"stalled: no response headers within {stall_timeout_s:g} s "
                                   f"(stall timeout)")
        except (http.client.HTTPException, OSError) as exc:
            sess.drop(scheme, host, port)
            if reused and attempt == 0:
                continue  # the server closed the kept connection: once more on a new one
            return fail("connection", f"could not connect to {url}: {type(exc).__name__}")
        raw = b""
        if resp.status >= 400:
            try:
                raw = resp.read(4096)
            except Exception:  # noqa: BLE001 - the status already says what matters
                raw = b""
            sess.drop(scheme, host, port)
            if attempt == 0 and proxy_lost_the_request(resp.status, raw):
                continue
        break
    r.status = resp.status
    if resp.status >= 400:
        msg = _error_message(raw)
        r.retry_after_s = retry_after_seconds(resp.getheader("Retry-After"))
        kind = "http-5xx" if resp.status >= 500 else "http-4xx"
        if resp.status == 503 and "loading" in msg.lower():
            kind = "loading"  # llama.cpp's 503 {"error": {"message": "Loading model"}}
        elif resp.status == 429:
            kind = "rate-limited"
        elif resp.status == 503 and r.retry_after_s is not None:
            kind = "unavailable"
        elif resp.status >= 500 and _looks_engine_dead(msg):
            kind = "engine-dead"
        after = (f" (Retry-After {r.retry_after_s:g} s)" if r.retry_after_s is not None else "")
        return fail(kind, f"HTTP {resp.status} from POST {path}: {msg}{after}")
    how, _ = response_kind(resp.getheader("Content-Type"), resp.getheader("Content-Encoding"))
    try:
        if how == "json":
            out = _not_streamed(resp, r, t0, clock)
        elif how == "stream":
            out = _read_stream(resp, r, t0, clock, stall_timeout_s, on_chunk)
        else:
            out = _not_event_stream(resp, r, t0, clock)
    except BaseException:
        sess.drop(scheme, host, port)
        raise
    if not r.ok or resp.will_close or not _drained(resp):
        sess.drop(scheme, host, port)
    return out


#: Content-Types read as an event stream: the one the OpenAI API answers ``stream: true`` with, and
#: none at all (a server that names no type is read, and judged by what it sends).
EVENT_STREAM_TYPES = ("text/event-stream", "")


def _looks_like(head: bytes) -> str:
    """What the first bytes of a body look like, in words: ``an event stream``, ``a JSON
    document``, ``an HTML page``, ``gzip data``, ``text``, ``binary data`` or ``empty``."""
    h = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if not h:
        return "empty"
    if h[:2] == b"\x1f\x8b":
        return "gzip data"
    low = h[:64].lower()
    if low.startswith((b"data:", b"event:", b":", b"id:", b"retry:")):
        return "an event stream"
    if low.startswith((b"<!doctype html", b"<html", b"<head", b"<body", b"<?xml", b"<")):
        return "an HTML page"
    if h[:1] in (b"{", b"["):
        return "a JSON document"
    try:
        h[:256].decode("utf-8")
        return "text"
    except UnicodeDecodeError:
        return "binary data"


def response_kind(content_type: str | None, content_encoding: str | None,
                  head: bytes = b"") -> tuple[str, str | None]:
    """How to read a 2xx answer to a streamed request, from its headers (and, for a verdict, the
    first bytes of its body): ``("stream", None)``, ``("json", None)`` (one ``application/json``
    body: :func:`_not_streamed`), or ``("not-event-stream", message)`` naming what was received.

    The one place the response's type and encoding are judged. Sources: OpenAI API
    (``stream: true`` answers ``text/event-stream``); RFC 9110 §8.4 / §12.5.3 (the bench sends
    ``Accept-Encoding: identity``, so any other ``Content-Encoding`` means something between the
    bench and the server re-encoded the body — a proxy); WHATWG §9.2 (an event stream is
    ``text/event-stream``). A proxy's login page (``text/html``) or a gzip body used to end as
    "stream cut before [DONE]"; an event stream labelled ``application/json`` as "not a JSON
    object".
    """
    ctype = (content_type or "").split(";")[0].strip().lower()
    enc = (content_encoding or "").strip().lower()
    looks = _looks_like(head) if head else None
    seen = f"; its body is {looks}" if looks else ""
    named = ctype or "untyped (no Content-Type)"
    if enc and enc != "identity":
        return "not-event-stream", (
            f"the response came with Content-Encoding {enc} (Content-Type {named}){seen}: the "
            f"bench asked for identity (Accept-Encoding: identity), so something between it and "
            f"the server re-encoded the stream (a proxy?); nothing measured")
    if ctype in EVENT_STREAM_TYPES:
        return "stream", None
    if ctype == "application/json":
        if looks == "an event stream":
            return "not-event-stream", (
                "the response is an event stream labelled Content-Type application/json "
                "(expected text/event-stream): the server or a proxy relabelled it, and a proxy "
                "that relabels may also buffer it; its timings are not trusted, nothing measured")
        return "json", None
    hint = " (a proxy's login or error page?)" if looks == "an HTML page" or ctype == "text/html" else ""
    return "not-event-stream", (
        f"the response is Content-Type {ctype}, not an event stream (text/event-stream){seen}"
        f"{hint}; nothing measured")


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (RFC 9110 §10.2.3: delay-seconds or an
    HTTP-date), at least 0; None when absent or unreadable. ``now``: epoch seconds for a date
    (default the current time)."""
    if value is None:
        return None
    v = value.strip()
    if v.isdigit():
        return float(v)
    try:
        from email.utils import parsedate_to_datetime

        when = parsedate_to_datetime(v).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def _drained(resp: http.client.HTTPResponse, timeout_s: float = 2.0) -> bool:
    """Read what follows ``[DONE]`` (the chunked terminator) so the connection can carry the
    next request; False when that did not end within ``timeout_s``."""
    try:
        if resp.fp is not None and resp.fp.raw is not None:
            sock = getattr(resp.fp.raw, "_sock", None)
            if sock is not None:
                sock.settimeout(timeout_s)
        resp.read()
        return resp.isclosed()
    except (OSError, http.client.HTTPException, AttributeError):
        return False


class _BadData(Exception):
    """A stream event is valid JSON of an unexpected shape; the message names the field."""


def _kind(v: Any) -> str:
    return {str: "a string", list: "a list", dict: "an object", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _error_object_message(obj: dict[str, Any]) -> str | None:
    """The message of an error object inside a stream, or None when ``obj`` is no error:
    ``{"error": {...}}`` (OpenAI, vLLM's ``create_streaming_error_response``, llama.cpp) or a
    bare ``{"object": "error", "message": ...}`` (vLLM's older ``ErrorResponse``)."""
    err = obj.get("error")
    if err:
        msg = err.get("message", json.dumps(err)) if isinstance(err, dict) else err
        return str(msg)
    if obj.get("object") == "error":
        return str(obj.get("message") or json.dumps(obj))
    return None


def _has_count(usage: dict[str, Any] | None, timings: dict[str, Any] | None) -> bool:
    """Whether the server sent a count of completion tokens (an integer
    ``usage.completion_tokens`` or llama.cpp's ``timings.predicted_n``)."""
    return (type((usage or {}).get("completion_tokens")) is int
            or type((timings or {}).get("predicted_n")) is int)


class StreamConsumer:
    """Turns the bytes of one streamed chat completion into a :class:`RequestResult`, however
    they were split into reads: the bench client's core, apart from the network.

    + ``feed(data, t)``: one read's bytes (``bytes``) and the clock when the read returned
      (seconds, same clock as ``t0``); returns True when the stream is over (``[DONE]``, or
      a failure: read no more).
    + ``end(t, exc=None)``: the stream ended at ``t`` — cleanly (``exc`` None: the body ended)
      or with the exception the read raised (``TimeoutError``: stalled; other ``OSError`` or
      :class:`http.client.HTTPException`: cut). Returns the finished result.

    Verdicts at the end (README "What the bench does with each stream" names the sources): ``[DONE]`` → counted and
    checked; a clean end without ``[DONE]`` after a ``finish_reason`` and the server's count
    → counted, with :data:`NO_DONE_WARNING`; any other end before ``[DONE]`` → ``cut``; an
    error event or error object → ``stream-error`` (``engine-dead`` when it says so), quoting
    the server's message.
    """

    def __init__(self, result: RequestResult, t0: float, stall_timeout_s: float = 120.0,
                 on_chunk: Callable[[RequestResult], None] | None = None) -> None:
        self.result = result
        self.parser = SSEParser(accept=("message", "error"))
        self.feed, self.end = _consumer(result, self.parser, t0, stall_timeout_s, on_chunk)


def consume(reads, t0: float = 0.0, stall_timeout_s: float = 120.0) -> RequestResult:
    """The :class:`RequestResult` of a stream given as ``reads``: an iterable of
    ``(bytes, t)`` pairs (``t`` in seconds, the clock when each read returned), ending cleanly
    after the last. For tests and replays; :func:`stream_chat` feeds the same consumer from
    the network."""
    c = StreamConsumer(RequestResult(status=200), t0, stall_timeout_s)
    t = t0
    for data, t in reads:
        if c.feed(data, t):
            break
    return c.end(t)


def _consumer(r: RequestResult, parser: SSEParser, t0: float, stall_timeout_s: float, on_chunk):
    splitter = _ThinkSplitter()
    answer_parts: list[str] = []
    append_answer = answer_parts.append
    reasoning_chars = 0
    usage: dict[str, Any] | None = None
    t_last_data = t0
    t_last_token: float | None = None
    loads = json.loads
    rfields = REASONING_FIELDS
    n_event = 0

    def fail(kind: str, message: str) -> RequestResult:
        r.ok, r.error_kind, r.error = False, kind, message
        return r

    def bad(field_name: str, value: Any, expected: str) -> _BadData:
        return _BadData(f"bad data in stream event {n_event}: {field_name} is {_kind(value)}, "
                        f"expected {expected}")

    def stream_error(msg: str) -> RequestResult:
        kind = "engine-dead" if _looks_engine_dead(msg) else "stream-error"
        return fail(kind, f"server sent an error in the stream: {msg[:300]}")

    def handle(payload, t: float) -> RequestResult | None:
        if payload[:1] != "{":
            stripped = payload.strip()
            if stripped == "[DONE]":
                nonlocal n_event
                n_event += 1
                r.done = True
                return None
            if not stripped:  # an empty data: line dispatches "" (WHATWG): it carries nothing
                return None
        try:
            obj = loads(payload)
        except ValueError:
            return fail("bad-data", f"unparseable SSE data: {payload[:120]!r}")
        return handle_obj(obj, t)

    def handle_obj(obj, t: float) -> RequestResult | None:
        nonlocal usage, reasoning_chars, t_last_token, n_event
        n_event += 1
        if type(obj) is not dict:
            return fail("bad-data", f"unexpected SSE data (event {n_event}): {_kind(obj)}, "
                                    f"expected an object")
        if "error" in obj or "object" in obj and obj["object"] == "error":
            msg = _error_object_message(obj)
            if msg is not None:
                return stream_error(msg)
        u = obj.get("usage")
        if u is not None:
            if type(u) is not dict:
                raise bad("usage", u, "an object")
            if u:
                usage = u
            r.usage_keys = sorted(u)
        if "timings" in obj:
            tm = obj["timings"]
            if tm is not None and type(tm) is not dict:
                raise bad("timings", tm, "an object")
            r.server_timings = tm or r.server_timings
        if "metrics" in obj:
            mt = obj["metrics"]
            if mt is not None and type(mt) is not dict:
                raise bad("metrics", mt, "an object")
            r.server_metrics = mt or r.server_metrics
        choices = obj.get("choices")
        if not choices:
            if choices is not None and type(choices) is not list:
                raise bad("choices", choices, "a list")
            return None
        if type(choices) is not list:
            raise bad("choices", choices, "a list")
        for ci, choice in enumerate(choices):
            if type(choice) is not dict:
                raise bad(f"choices[{ci}]", choice, "an object")
            index = choice.get("index", 0)
            if index != 0:
                if type(index) is not int:
                    raise bad(f"choices[{ci}].index", index, "an integer")
                seen = sorted({0, index} | {c.get("index") for c in choices
                                            if type(c) is dict and type(c.get("index")) is int})
                return fail("several-choices", (
                    f"the server sent more than one choice (index {', '.join(map(str, seen))} in "
                    f"stream event {n_event}) though the bench asks for one (n=1): counted as one "
                    f"answer their text would mix and decode tok/s would add up; nothing measured"))
            fr = choice.get("finish_reason")
            if fr:
                if type(fr) is not str:
                    raise bad(f"choices[{ci}].finish_reason", fr, "a string")
                r.finish_reason = fr
            delta = choice.get("delta")
            if not delta:
                if delta is not None and type(delta) is not dict:
                    raise bad(f"choices[{ci}].delta", delta, "an object")
                continue
            if type(delta) is not dict:
                raise bad(f"choices[{ci}].delta", delta, "an object")
            carried = False
            thinking = False
            content = delta.get("content")
            if content is None or len(delta) > 1:  # more than an answer piece: look for thinking
                for fname in rfields:
                    val = delta.get(fname)
                    if val:
                        if type(val) is not str:
                            raise bad(f"choices[{ci}].delta.{fname}", val, "a string")
                        reasoning_chars += len(val)
                        r.reasoning_source = r.reasoning_source or fname
                        carried = thinking = True
                        break
                if delta.get("tool_calls"):
                    carried = True
            if content:
                if type(content) is not str:
                    raise bad(f"choices[{ci}].delta.content", content, "a string")
                carried = True
                if not splitter.pending and not splitter.in_think and "<" not in content:
                    append_answer(content)  # the common case, without the tag splitter
                    if r.ttft_answer_s is None:
                        r.ttft_answer_s = t - t0
                else:
                    for kind, text in splitter.feed(content):
                        if kind == "orphan-close":
                            reasoning_chars += sum(len(p) for p in answer_parts)
                            answer_parts.clear()
                            r.ttft_answer_s = None
                            r.reasoning_source = r.reasoning_source or "inline-think"
                            thinking = True
                        elif kind == "reasoning":
                            reasoning_chars += len(text)
                            r.reasoning_source = r.reasoning_source or "inline-think"
                            thinking = True
                        else:
                            append_answer(text)
                            if r.ttft_answer_s is None:
                                r.ttft_answer_s = t - t0
            if carried:
                r.token_chunks += 1
                if thinking:
                    r.reasoning_chunks += 1
                if r.ttft_s is None:
                    r.ttft_s = t - t0
                t_last_token = t
        return None

    def feed(data: bytes, t: float) -> bool:
        nonlocal t_last_data
        if not r.ok or r.done:
            return True
        comments_before = parser.comments + sum(parser.ignored.values())
        try:
            payloads = parser.feed_data(data)
            error_text = None
            if parser.errors:  # an error line or event: act on it where it stands in the stream
                n_before, error_text = parser.errors[0]
                payloads = payloads[:max(n_before - (parser.dispatched - len(payloads)), 0)]
            if payloads:
                t_last_data = t
            elif (parser.comments + sum(parser.ignored.values()) > comments_before
                  and t - t_last_data > stall_timeout_s):
                fail("stalled", f"stalled: only pings, no data for {t - t_last_data:.1f} s "
                                f"(stall timeout {stall_timeout_s:g} s)")
                return True
            objs = None
            if len(payloads) > 1:
                # one JSON text for the whole read: the per-call cost of json.loads paid once;
                # any event that is not JSON alone (or [DONE]) sends the read down the
                # per-event path, which names it
                try:
                    objs = loads("[" + ",".join(payloads) + "]")
                except ValueError:
                    objs = None
                if objs is not None and (len(objs) != len(payloads)
                                         or any(type(o) is not dict for o in objs)):
                    objs = None
            if objs is not None:
                for obj in objs:
                    if handle_obj(obj, t) is not None:
                        return True
            else:
                for p in payloads:
                    if r.done:
                        break
                    if handle(p, t) is not None:
                        return True
        except _BadData as exc:
            fail("bad-data", str(exc))
            return True
        if error_text is not None and not r.done:
            stream_error(_error_message(error_text.encode("utf-8", errors="replace")))
            return True
        if on_chunk is not None and payloads:
            on_chunk(r)
        return r.done

    def end(t: float, exc: BaseException | None = None) -> RequestResult:
        nonlocal reasoning_chars
        if not r.ok:
            return r
        if exc is not None and not r.done:
            if isinstance(exc, TimeoutError):
                return fail("stalled", f"stalled: no data for {stall_timeout_s:g} s (stall "
                                       f"timeout) after {r.token_chunks} token chunks")
            why = ("connection reset by the server" if isinstance(exc, ConnectionResetError)
                   else "the response ended mid-body")
            return fail("cut", f"stream cut before [DONE] after {r.token_chunks} token chunks "
                               f"({type(exc).__name__}: {why})")
        if not r.done:
            try:
                for ev in parser.close():
                    if handle(ev.data, t) is not None:
                        return r
            except _BadData as exc_:
                return fail("bad-data", str(exc_))
            if parser.errors and not r.done:
                return stream_error(_error_message(parser.errors[0][1].encode("utf-8", "replace")))
        r.total_s = t - t0
        r.pings = parser.comments
        r.other_events = dict(parser.ignored)
        for kind, text in splitter.feed("", final=True):
            if kind == "answer":
                answer_parts.append(text)
            elif kind == "reasoning":
                reasoning_chars += len(text)
        r.answer = "".join(answer_parts)
        r.answer_chars = len(r.answer)
        r.reasoning_chars = reasoning_chars
        r.chunk_estimate = r.token_chunks
        if t_last_token is not None:
            r.e2e_s = t_last_token - t0
        if not r.done:
            if r.finish_reason and _has_count(usage, r.server_timings):
                r.warnings.append(NO_DONE_WARNING)
            else:
                missing = ("no finish_reason" if not r.finish_reason
                           else "a finish_reason but no usage count")
                tail = (", an unfinished event at the end discarded" if parser.open_event else "")
                return fail("cut", f"stream cut before [DONE] after {r.token_chunks} token "
                                   f"chunks (the body ended cleanly with {missing}{tail})")
        try:
            _count(r, usage)
        except _BadData as exc_:
            return fail("bad-data", str(exc_))
        wrong = check_counts(r)
        if wrong:
            return fail("bad-count", wrong)
        if not r.answer.strip():
            if r.finish_reason == "length":
                return fail("thinking-ate-budget",
                            f"thinking ate the max_tokens budget: finish_reason \"length\" after "
                            f"{r.completion_tokens} completion tokens with an empty answer "
                            f"({r.reasoning_chars} characters of thinking); raise max_tokens")
            return fail("empty-answer", f"empty answer (finish_reason {r.finish_reason!r})")
        return r

    return feed, end


def _read_stream(resp, r: RequestResult, t0: float, clock, stall_timeout_s: float, on_chunk):
    c = StreamConsumer(r, t0, stall_timeout_s, on_chunk)
    feed = c.feed
    read1 = resp.read1
    try:
        while True:
            data = read1(65536)
            t = clock()
            if not data or feed(data, t):
                break
    except (OSError, http.client.HTTPException) as exc:
        return c.end(clock(), exc)
    return c.end(clock())


def _not_event_stream(resp, r: RequestResult, t0: float, clock) -> RequestResult:
    """A 2xx answer that is not an event stream (:func:`response_kind`): ``not-event-stream``
    naming the Content-Type or Content-Encoding received and what its first bytes look like."""
    try:
        head = resp.read(4096)
    except (OSError, http.client.HTTPException):
        head = b""
    r.total_s = clock() - t0
    _, msg = response_kind(resp.getheader("Content-Type"), resp.getheader("Content-Encoding"), head)
    r.ok, r.error_kind, r.error = False, "not-event-stream", msg
    return r


def _not_streamed(resp, r: RequestResult, t0: float, clock) -> RequestResult:
    """A server that answered one ``application/json`` body where a stream was asked for
    (OpenAI API: ``stream: true`` answers ``text/event-stream``): an error body quotes its
    message; a completion is ``not-streamed`` — its usage is the server's count, but neither
    time to first token nor decode can be timed from one body."""
    try:
        raw = resp.read(8 << 20)
    except (OSError, http.client.HTTPException) as exc:
        raw = b""
        r.error = type(exc).__name__
    r.total_s = clock() - t0

    def fail(kind: str, message: str) -> RequestResult:
        r.ok, r.error_kind, r.error = False, kind, message
        return r

    how, msg = response_kind(resp.getheader("Content-Type"), resp.getheader("Content-Encoding"),
                             raw[:4096])
    if how == "not-event-stream":
        return fail("not-event-stream", msg)
    try:
        obj = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        msg = _error_object_message(obj)
        if msg is not None:
            kind = "engine-dead" if _looks_engine_dead(msg) else "stream-error"
            return fail(kind, f"server answered {r.status} with an error body instead of a "
                              f"stream: {msg[:300]}")
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
        ct = usage.get("completion_tokens")
        if type(ct) is int:
            r.completion_tokens, r.tokens_source = ct, "usage"
        said = (f"its usage says {ct} completion tokens, but" if type(ct) is int
                else "it carries no usage count, and")
        return fail("not-streamed", f"server answered one application/json body, not an event "
                                    f"stream (stream: true not honoured): {said} time to first "
                                    f"token and decode tok/s cannot be measured from one body")
    return fail("not-streamed", f"server answered application/json where a stream was asked "
                                f"for, and the body is not a JSON object ({len(raw)} bytes)")


def check_counts(r: RequestResult) -> str | None:
    """Why the server's counts of a finished stream cannot be right, or None. Holds only for a
    count the server sent (``tokens_source`` ``usage`` or ``timings``):

    - no completion tokens after token-carrying chunks: each such chunk carries at least one
      token (a usage all zeros after ten content chunks used to pass as OK with "n/a");
    - ``reasoning_tokens`` above ``completion_tokens``: reasoning is part of the completion
      (OpenAI's ``completion_tokens_details``; vLLM, llama.cpp count it in ``completion_tokens``).
    """
    if r.tokens_source not in ("usage", "timings"):
        return None
    where = ("usage.completion_tokens" if r.tokens_source == "usage"
             else "llama.cpp's timings.predicted_n")
    if r.completion_tokens is not None and r.completion_tokens < 1 and r.token_chunks:
        return (f"wrong count: {where} is {r.completion_tokens} after {r.token_chunks} "
                f"token-carrying chunks (each carries at least one token): the server's count "
                f"cannot be right, nothing measured")
    if (r.reasoning_tokens_source == "usage" and r.reasoning_tokens is not None
            and r.completion_tokens is not None and r.reasoning_tokens > r.completion_tokens):
        return (f"wrong count: usage.completion_tokens_details.reasoning_tokens "
                f"{r.reasoning_tokens} is more than usage.completion_tokens "
                f"{r.completion_tokens} (reasoning is part of the completion): the server's "
                f"count cannot be right, nothing measured")
    return None


def _int_field(obj: dict[str, Any], key: str, where: str) -> int | None:
    v = obj.get(key)
    if v is None:
        return None
    if type(v) is not int:
        raise _BadData(f"bad data in the stream: {where}.{key} is {_kind(v)}, expected an integer")
    return v


def _count(r: RequestResult, usage: dict[str, Any] | None) -> None:
    """Fill the token counts and rates of a finished stream (see the module doc); raises
    :class:`_BadData` naming a count field of the wrong type."""
    tm = r.server_timings or {}
    ct = _int_field(usage, "completion_tokens", "usage") if usage else None
    if usage:
        r.prompt_tokens = _int_field(usage, "prompt_tokens", "usage")
        r.prompt_tokens_source = "usage" if r.prompt_tokens is not None else None
        pdetails = usage.get("prompt_tokens_details") or {}
        if type(pdetails) is dict:
            r.cached_tokens = _int_field(pdetails, "cached_tokens", "usage.prompt_tokens_details")
    if ct is not None:
        r.completion_tokens = ct
        r.tokens_source = "usage"
        details = usage.get("completion_tokens_details") or {}
        if type(details) is not dict:
            raise _BadData(f"bad data in the stream: usage.completion_tokens_details is "
                           f"{_kind(details)}, expected an object")
        r.reasoning_tokens = _int_field(details, "reasoning_tokens", "usage.completion_tokens_details")
        if r.reasoning_tokens is not None:
            r.reasoning_tokens_source = "usage"
    elif isinstance(tm.get("predicted_n"), int):
        r.completion_tokens = tm["predicted_n"]
        r.tokens_source = "timings"
    else:
        r.completion_tokens = r.token_chunks
        r.tokens_source = "chunk-estimate"
        r.warnings.append(USAGE_WITHOUT_COUNT_WARNING if usage else CHUNK_ESTIMATE_WARNING)
    if r.prompt_tokens is None and isinstance(tm.get("prompt_n"), int):
        r.prompt_tokens = int(tm.get("prompt_n", 0)) + int(tm.get("cache_n") or 0)
        r.prompt_tokens_source = "timings"
    if r.completion_tokens and r.token_chunks:
        r.tokens_per_chunk = r.completion_tokens / r.token_chunks
    if r.ttft_s and r.prompt_tokens:
        r.prefill_tps = r.prompt_tokens / r.ttft_s
    if (r.completion_tokens or 0) > 1 and r.e2e_s is not None and r.ttft_s is not None \
            and r.e2e_s > r.ttft_s:
        r.decode_tps = (r.completion_tokens - 1) / (r.e2e_s - r.ttft_s)
    if r.finish_reason == "length" and r.completion_tokens and r.answer.strip():
        if r.reasoning_tokens is None and r.token_chunks:
            r.reasoning_tokens = round(r.completion_tokens * r.reasoning_chunks / r.token_chunks)
            r.reasoning_tokens_source = "chunk-share"
        if r.reasoning_tokens is not None:
            r.answer_tokens = r.completion_tokens - r.reasoning_tokens
            if r.reasoning_tokens >= THINKING_MOST * r.completion_tokens:
                approx = "~" if r.reasoning_tokens_source != "usage" else ""
                r.cut_note = (f"answer cut by max_tokens (finish_reason \"length\") after "
                              f"{r.completion_tokens} tokens: thinking {approx}{r.reasoning_tokens}, "
                              f"answer {approx}{r.answer_tokens}")
                r.warnings.append(CUT_BY_THINKING_WARNING)
