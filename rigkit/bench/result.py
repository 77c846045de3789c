"""What one streamed request came to: :class:`RequestResult`, its counts, and the one failure classifier.

The failure kind of a request (``RequestResult.error_kind``) is decided here and only here, by
:func:`failure_kind` from what the client saw (:class:`Happened`: where in the request it went
wrong and what it saw there — an exception, an HTTP status and its body's message, an error in
the stream, an event that is not a completion chunk, a count that cannot be right, an empty
answer). :func:`failed` records it on the result; the transport (:mod:`.transport`), the stream
(:mod:`.stream`) and the runner (:mod:`.runner`, which judges an HTTP 5xx again with ``/health``)
all call it. :data:`KINDS` documents every kind; :data:`ABORT_KINDS` and :data:`WAIT_KINDS` are
the runner's policy over them (docs/bench.md "What the bench does with each stream", ``notes/bench.md``
§4.11).

Token counts (:func:`count`, :func:`check_counts`): from the server's ``usage``; without it from
llama.cpp's ``timings.predicted_n``; without both, from the chunks, with a loud warning (the
client's module doc, :mod:`rigkit.bench.client`, gives the definitions and sources).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

#: Every ``error_kind`` of a failed request, with what it means — the only kinds there are.
KINDS: dict[str, str] = {
    "connection": "no connection to the server, or it broke while the request was sent",
    "http-4xx": "the server refused the request (HTTP 4xx other than 429)",
    "http-5xx": "the server failed the request (HTTP 5xx that names no dead engine)",
    "engine-dead": "the engine is dead (its message says so, or /health answers 503 without Loading model)",
    "loading": "llama.cpp's HTTP 503 Loading model: not yet served",
    "rate-limited": "HTTP 429: asked to come back later",
    "unavailable": "HTTP 503 with Retry-After: asked to come back later",
    "stream-error": "the server sent an error instead of (or inside) the stream",
    "stalled": "no data (or only pings) for the stall timeout",
    "cut": "the stream ended before [DONE] without a finish_reason and a count",
    "not-streamed": "one application/json completion where a stream was asked for",
    "not-event-stream": "another Content-Type, an event stream labelled JSON, or a Content-Encoding not asked for",
    "several-choices": "a choice index other than 0 (the bench asks for one)",
    "bad-data": "an event that is not JSON, or JSON of the wrong shape",
    "bad-count": "a count of the server's that cannot be right",
    "thinking-ate-budget": "finish_reason length with an empty answer: thinking used all of max_tokens",
    "empty-answer": "the stream finished with an empty answer",
    "aborted": "a finish_reason saying the server gave the answer up (vLLM's abort or error)",
    "swap-failed": "llama-swap could not start the member (its error quoted)",
    "swapping": "every try of a request carried a llama-swap swap (the member kept being loaded)",
    "redirected": "an HTTP 3xx redirect (named with its Location): the bench does not follow one",
}

#: Kinds that end the whole run (the server is unwell, or it is not what the bench measures);
#: the others (a request's own failure) move on to the next workload.
ABORT_KINDS = frozenset(KINDS) - {"http-4xx", "thinking-ate-budget", "empty-answer"}
#: Kinds that say "not yet" rather than "broken": waited on within the health budget, with the
#: words the runner uses for each.
WAIT_KINDS = {"loading": "still loading", "rate-limited": "rate-limited (HTTP 429)",
              "unavailable": "unavailable (HTTP 503 with Retry-After)"}

#: Where in a request something went wrong — :attr:`Happened.at`, what :func:`failure_kind` reads.
AT = {
    "connect": "opening the connection raised (exc)",
    "send": "sending the request or waiting for the response's headers raised (exc)",
    "status": "an HTTP status >= 400 (status; message: the error body's; retry_after_s)",
    "health": "a failed request judged again with /health (kind: its kind; health: probe_health's phrase)",
    "type": "a 2xx answer that response_kind calls not an event stream",
    "body": "a 2xx application/json body where a stream was asked for (message: its error object's, or None)",
    "read": "reading the stream raised (exc)",
    "pings": "only pings arrived for longer than the stall timeout",
    "end": "the body ended before [DONE] without a finish_reason and the server's count",
    "event": "an error line, event or object in the stream (message)",
    "data": "an event that is not JSON, or JSON of the wrong shape",
    "choice": "a choice index other than 0",
    "count": "a count that cannot be right (check_counts)",
    "answer": "the stream finished with an empty answer (finish_reason)",
    "finish": "a finish_reason saying the server gave the answer up (finish_reason)",
    "swap": "every try of a request carried a llama-swap swap",
    "redirect": "an HTTP 3xx (status; message: its Location)",
}


@dataclass(frozen=True)
class Happened:
    """What went wrong with one request, as the client saw it: the input of :func:`failure_kind`.

    + at: one of :data:`AT` (where in the request).
    + exc: the exception raised there (``connect``, ``send``, ``read``).
    + status: the HTTP status (``status``); message: the server's message (``status``, ``body``,
      ``event``); retry_after_s: seconds its ``Retry-After`` asked for (``status``).
    + kind, health: a failed request's kind and ``/health``'s phrase (``health``).
    + finish_reason: the stream's (``answer``).
    """

    at: str
    exc: BaseException | None = None
    status: int | None = None
    message: str | None = None
    retry_after_s: float | None = None
    kind: str | None = None
    health: str | None = None
    finish_reason: str | None = None


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
    body: :func:`rigkit.bench.transport.not_streamed`), or ``("not-event-stream", message)`` naming what was received.

    The one place the response's type and encoding are judged. Sources: OpenAI API
    (``stream: true`` answers ``text/event-stream``); RFC 9110 §8.4 / §12.5.3 (the bench sends
    ``Accept-Encoding: identity``, so any other ``Content-Encoding`` means something between the
    bench and the server re-encoded the body — a proxy); WHATWG §9.2 (an event stream is
    ``text/event-stream``). A proxy's login page (``text/html``) or a gzip body used to end as
    "stream cut before [DONE]"; an event stream labelled ``application/json`` as "not a JSON
    object".
    """
    looks = _looks_like(head) if head else None
    seen = f"; its body is {looks}" if looks else ""
    # A header sent more than once reaches us as http.client and requests combine it, the values
    # joined by ", " (RFC 9110 §5.3; http.client.HTTPMessage.get_all → getheader). Content-Type is one
    # value: repeated alike it is that value, repeated otherwise it is named. Content-Encoding is a
    # list of codings (RFC 9110 §8.4): each is judged.
    types_ = sorted({p.split(";")[0].strip().lower() for p in (content_type or "").split(",")} - {""})
    if len(types_) > 1:
        return "not-event-stream", (
            f"the response carries Content-Type more than once with different values "
            f"({', '.join(types_)}){seen}: a proxy between the bench and the server added one; "
            f"nothing measured")
    ctype = types_[0] if types_ else ""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    enc = next((c for c in codings if c != "identity"), "identity" if codings else "")
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


def looks_engine_dead(message: str) -> bool:
    """Whether a server's message says its engine died (vLLM's ``EngineDeadError``, ``EngineCore``)."""
    m = message.lower()
    return "enginedead" in m or "engine dead" in m or "enginecore" in m or "engine core" in m


def failure_kind(h: Happened) -> str:
    """The one failure classifier: the :data:`KINDS` key for what happened (:class:`Happened`).
    Raises ValueError for an ``at`` outside :data:`AT`.

    - ``connect`` → ``connection``; ``send`` → ``stalled`` on a timeout, else ``connection``;
    - ``status``: 503 whose message says loading → ``loading`` (llama.cpp's ``Loading model``);
      429 → ``rate-limited``; 503 with ``Retry-After`` → ``unavailable`` (RFC 9110 §15.6.4);
      other 5xx → ``engine-dead`` when the message says so, else ``http-5xx``; else ``http-4xx``;
    - ``health``: an ``http-5xx`` becomes ``engine-dead`` when ``/health`` answers a bare 503
      (vLLM after ``EngineDeadError``) and ``loading`` when it answers 503 Loading model; any
      other kind stays;
    - ``type`` → ``not-event-stream``; ``body`` → ``engine-dead``/``stream-error`` for an error
      object (by its message), else ``not-streamed``;
    - ``read`` → ``stalled`` on a timeout, else ``cut``; ``pings`` → ``stalled``; ``end`` → ``cut``;
    - ``event`` → ``engine-dead`` when the message says so, else ``stream-error``;
    - ``data`` → ``bad-data``; ``choice`` → ``several-choices``; ``count`` → ``bad-count``;
    - ``answer`` → ``thinking-ate-budget`` after ``finish_reason: "length"``, else ``empty-answer``;
    - ``finish`` → ``aborted``; ``swap`` → ``swapping``; ``redirect`` → ``redirected``;
    - before all of these, a ``status``/``event``/``body`` message that is llama-swap's own word for a
      member it could not start (:func:`starting_failed`) → ``swap-failed``.
    """
    at = h.at
    if at == "connect":
        return "connection"
    if at in ("send", "read"):
        if isinstance(h.exc, TimeoutError):
            return "stalled"
        return "connection" if at == "send" else "cut"
    if at in ("status", "event", "body") and h.message is not None and starting_failed(h.message):
        return "swap-failed"
    if at == "status":
        status, msg = h.status or 0, h.message or ""
        if status == 503 and "loading" in msg.lower():
            return "loading"
        if status == 429:
            return "rate-limited"
        if status == 503 and h.retry_after_s is not None:
            return "unavailable"
        if status >= 500:
            return "engine-dead" if looks_engine_dead(msg) else "http-5xx"
        return "http-4xx"
    if at == "health":
        if h.kind == "http-5xx" and (h.health or "").endswith(" 503"):
            return "engine-dead"
        if h.kind == "http-5xx" and (h.health or "").endswith(" 503 Loading model"):
            return "loading"
        if h.kind not in KINDS:
            raise ValueError(f"kind {h.kind!r}: not a failure kind (one of {', '.join(KINDS)})")
        return h.kind
    if at in ("event", "body"):
        if h.message is None:
            return "not-streamed"  # a body without an error object: a completion, not streamed
        return "engine-dead" if looks_engine_dead(h.message) else "stream-error"
    if at == "answer":
        return "thinking-ate-budget" if h.finish_reason == "length" else "empty-answer"
    simple = {"type": "not-event-stream", "pings": "stalled", "end": "cut", "data": "bad-data",
              "choice": "several-choices", "count": "bad-count", "finish": "aborted",
              "swap": "swapping", "redirect": "redirected"}
    if at in simple:
        return simple[at]
    raise ValueError(f"at {at!r}: not where a request fails (one of {', '.join(AT)})")


def failed(r: "RequestResult", happened: Happened, message: str) -> "RequestResult":
    """Mark ``r`` failed: ``ok`` False, ``error_kind`` :func:`failure_kind` of ``happened``,
    ``error`` ``message`` (the operator's words). Returns ``r``."""
    r.ok, r.error_kind, r.error = False, failure_kind(happened), message
    return r


#: Share of the request's ``max_tokens`` that thinking must have used for an answer cut by
#: ``finish_reason: "length"`` to be reported as cut by thinking.
THINKING_MOST = 0.5

CUT_BY_THINKING_WARNING = (
    "WARNING: answers cut by max_tokens after thinking used most of the budget "
    "(finish_reason \"length\"); raise max_tokens"
)

CHUNK_ESTIMATE_WARNING = (
    "WARNING: the server sent no usage; completion tokens are a chunk-count estimate. Under "
    "speculative decoding one chunk carries several tokens, so this undercounts (~2.5x on "
    "HyperQwen). Send stream_options.include_usage or start vLLM with "
    "--enable-force-include-usage."
)

USAGE_WITHOUT_COUNT_WARNING = (
    "WARNING: the server's usage has no completion_tokens; completion tokens are a chunk-count "
    "estimate, not counted from usage (under speculative decoding it undercounts)"
)


@dataclass
class RequestResult:
    """Measurements of one streamed request (one JSON line in ``requests.jsonl``).

    Times in seconds from the send, rates in tok/s, counts in tokens. ``ok`` False means the
    request failed: ``error_kind`` is one of :data:`KINDS` (decided by
    :func:`failure_kind`); ``error`` is the message shown
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
    ``waited_s``: seconds the runner waited (by the clock) before this request was served (429/503).
    ``swap``: the request carried a llama-swap swap (``{"model", "frames", "loading_s", "seen"}``:
    its loading frames, or ``/running`` before the send) — kept out of the figures and measured again.
    ``unmeasurable``: ``{figure: reason}`` for a figure the arrival times cannot carry (``ttft_s``,
    ``decode_tps``, ``prefill_tps``: one write, fixed-size bursts); the figure is then None.
    ``after_done``: what came after ``data: [DONE]`` (``{"bytes", "events", "comments", "read_s",
    "ended", "late_usage"}``), read for at most :data:`rigkit.bench.stream.AFTER_DONE_S`.
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
    waited_s: float | None = None
    swap: dict[str, Any] | None = None
    unmeasurable: dict[str, str] = field(default_factory=dict)
    after_done: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    answer: str = ""

    def to_record(self) -> dict[str, Any]:
        """The JSON-ready dict for ``requests.jsonl``: every field but the full answer, which
        is replaced by ``answer_head`` (its first 200 characters)."""
        d = asdict(self)
        d.pop("answer")
        d["answer_head"] = self.answer[:200]
        return d


def error_message(body: bytes) -> str:
    """Best-effort message from an error body (OpenAI ``{"error": {"message"}}``, FastAPI
    ``{"detail"}``, vLLM ``{"message"}``) — at most 300 characters."""
    text = body.decode("utf-8", errors="replace").strip()
    swap_said = llama_swap_error(text)
    if swap_said is not None:
        return f"llama-swap: {swap_said}"[:300]
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


#: What llama-swap v250 says when it could not start a member — the errors its start path returns
#: (``internal/process/process_command.go``: :477 ``failed to start command``, :506 ``upstream command
#: exited prematurely``, :536 ``health check timed out after``, :266 ``could not be started in``),
#: which its router hands to the waiting request (``router/base.go`` ``doSwap`` → ``GrantError``) and
#: ``swaputil.SendError`` writes as ``unspecific error: <err>`` (``swaputil/http.go:103``).
LLAMA_SWAP_START_FAILURES = ("upstream command exited prematurely", "health check timed out after",
                             "failed to start command", "could not be started in")


def starting_failed(message: str) -> bool:
    """Whether ``message`` is llama-swap's word for a member it could not start
    (:data:`LLAMA_SWAP_START_FAILURES`)."""
    return any(p in message for p in LLAMA_SWAP_START_FAILURES)


def llama_swap_error(body: str) -> str | None:
    """llama-swap's own error message from one of the three bodies ``swaputil.SendResponse`` writes
    (``internal/swaputil/http.go:108-131``, chosen by the request's ``Accept``): ``text/plain``
    ``llama-swap: <message>`` (:113), ``text/html`` ``<html><body><h1>llama-swap</h1><p><message></p>…``
    (:120, HTML-escaped), else JSON ``{"error": <message>, "src": "llama-swap"}`` (:126, keys sorted by
    Go's encoder). None when ``body`` is none of them."""
    import html as _html
    import re as _re

    text = body.strip()
    if text.startswith("llama-swap: "):
        return text[len("llama-swap: "):]
    m = _re.match(r"<html><body><h1>llama-swap</h1><p>(.*)</p></body></html>$", text, _re.S)
    if m:
        return _html.unescape(m.group(1))
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError:
            return None
        if isinstance(obj, dict) and obj.get("src") == "llama-swap" and isinstance(obj.get("error"), str):
            return obj["error"]
    return None


class BadData(Exception):
    """A stream event is valid JSON of an unexpected shape; the message names the field."""


def kind_of(v: Any) -> str:
    """A JSON value's type in words for messages (``a string``, ``an object``, ``null``, …)."""
    return {str: "a string", list: "a list", dict: "an object", bool: "a boolean",
            int: "a number", float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def error_object_message(obj: dict[str, Any]) -> str | None:
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


def has_count(usage: dict[str, Any] | None, timings: dict[str, Any] | None) -> bool:
    """Whether the server sent a count of completion tokens (an integer
    ``usage.completion_tokens`` or llama.cpp's ``timings.predicted_n``)."""
    return (integral((usage or {}).get("completion_tokens")) is not None
            or integral((timings or {}).get("predicted_n")) is not None)


def integral(v: Any) -> int | None:
    """``v`` as a count: an integer (never a boolean), or a float with no fraction (``10.0``: JSON has
    one number type, and some servers write counts through a float); None for anything else."""
    if type(v) is int:
        return v
    if type(v) is float and v.is_integer():
        return int(v)
    return None


def check_counts(r: RequestResult) -> str | None:
    """Why the server's counts of a finished stream cannot be right, or None. Holds only for a
    count the server sent (``tokens_source`` ``usage`` or ``timings``):

    - fewer completion tokens than token-carrying chunks (none at all, or a usage below the chunks
      that carried text by more than llama.cpp's diffs explain: one more, two when the stream both
      thought and answered): each such chunk carries a token (a usage all zeros after ten content
      chunks used to pass as OK with "n/a"); a count below 0;
    - ``reasoning_tokens`` above ``completion_tokens``: reasoning is part of the completion
      (OpenAI's ``completion_tokens_details``; vLLM, llama.cpp count it in ``completion_tokens``).
    """
    if r.tokens_source not in ("usage", "timings"):
        return None
    where = ("usage.completion_tokens" if r.tokens_source == "usage"
             else "llama.cpp's timings.predicted_n")
    if r.completion_tokens is not None and r.completion_tokens < 0:
        return f"wrong count: {where} is {r.completion_tokens}, below 0: nothing measured"
    # one chunk per diff, not per token (llama.cpp tools/server: to_json_oaicompat_chat_stream sends a
    # chunk for each of oaicompat_msg_diffs): a token that ends the thinking and begins the answer
    # is two, and the final result flushes what the parser held back — at most that many over
    slack = 1 + (1 if 0 < r.reasoning_chunks < r.token_chunks else 0)
    if r.completion_tokens is not None and (r.completion_tokens < 1 <= r.token_chunks
                                            or r.completion_tokens + slack < r.token_chunks):
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


def _int_field(obj: dict[str, Any], key: str, where: str, r: "RequestResult | None" = None) -> int | None:
    """``obj[key]`` as a count (None when absent): an integral float is read as its integer, and
    said in ``r.warnings``; anything else raises :class:`BadData` naming the field and its value."""
    v = obj.get(key)
    if v is None:
        return None
    n = integral(v)
    if n is None:
        raise BadData(f"bad data in the stream: {where}.{key} is {json.dumps(v)[:60]} "
                      f"({kind_of(v)}), expected an integer")
    if type(v) is float and r is not None:
        r.warnings.append(f"WARNING: {where}.{key} is {v!r}, a float with no fraction; read as {n}")
    return n


def count(r: RequestResult, usage: dict[str, Any] | None) -> None:
    """Fill the token counts and rates of a finished stream (see the module doc); raises
    :class:`BadData` naming a count field of the wrong type."""
    tm = r.server_timings or {}
    ct = _int_field(usage, "completion_tokens", "usage", r) if usage else None
    if usage:
        r.prompt_tokens = _int_field(usage, "prompt_tokens", "usage", r)
        r.prompt_tokens_source = "usage" if r.prompt_tokens is not None else None
        pdetails = usage.get("prompt_tokens_details") or {}
        if type(pdetails) is dict:
            r.cached_tokens = _int_field(pdetails, "cached_tokens", "usage.prompt_tokens_details", r)
    if ct is not None:
        r.completion_tokens = ct
        r.tokens_source = "usage"
        details = usage.get("completion_tokens_details") or {}
        if type(details) is not dict:
            raise BadData(f"bad data in the stream: usage.completion_tokens_details is "
                           f"{kind_of(details)}, expected an object")
        r.reasoning_tokens = _int_field(details, "reasoning_tokens", "usage.completion_tokens_details", r)
        if r.reasoning_tokens is not None:
            r.reasoning_tokens_source = "usage"
    elif integral(tm.get("predicted_n")) is not None:
        r.completion_tokens = integral(tm["predicted_n"])
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
