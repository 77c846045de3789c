"""One streamed chat completion against an OpenAI-compatible server, timed and counted right.

Sources of the wire format: OpenAI API reference, "Create chat completion" with
``stream: true`` and ``stream_options.include_usage`` (a last chunk with ``choices: []`` and
``usage``); vLLM's OpenAI server (``delta.reasoning``, formerly ``reasoning_content``; several
tokens per chunk under speculative decoding; per-request ``metrics`` on the usage chunk) and
its benchmark client ``vllm/benchmarks/lib/endpoint_request_func.py``; llama.cpp's server
README (``delta.reasoning_content``, ``timings`` on the last chunk, ``:`` pings). See
``notes/bench.md`` for why each rule exists.

Definitions (seconds, tok/s, all from :func:`time.monotonic` taken when a network read
returns):

- ``ttft_s``: send → first chunk carrying a token of any kind (reasoning or answer).
- ``ttft_answer_s``: send → first chunk carrying answer text.
- ``e2e_s``: send → last chunk carrying a token (the usage chunk and ``[DONE]`` do not count).
- ``decode_tps`` = (completion_tokens − 1) / (e2e_s − ttft_s) — vLLM's TPOT inverted.
- ``prefill_tps`` = prompt_tokens / ttft_s — a lower bound (HTTP, tokenisation, queueing).
- ``tokens_per_chunk`` = completion_tokens / token-carrying chunks.

Token counts come from the server's ``usage``; without it the client falls back to counting
chunks, marks ``tokens_source="chunk-estimate"`` and adds a loud warning.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import requests

from rigkit.host.bench.sse import SSEParser

#: Delta fields that carry thinking, in the order servers adopted them (vLLM ``reasoning``,
#: llama.cpp/SGLang/old vLLM ``reasoning_content``, others ``thinking``).
REASONING_FIELDS = ("reasoning", "reasoning_content", "thinking")

_OPEN, _CLOSE = "<think>", "</think>"

CHUNK_ESTIMATE_WARNING = (
    "WARNING: the server sent no usage; completion tokens are a chunk-count estimate "
    "({chunks} chunks). Under speculative decoding one chunk carries several tokens, so this "
    "undercounts (~2.5x on HyperQwen). Send stream_options.include_usage or start vLLM with "
    "--enable-force-include-usage."
)


@dataclass
class RequestResult:
    """Measurements of one streamed request (one JSON line in ``requests.jsonl``).

    Times in seconds from the send, rates in tok/s, counts in tokens. ``ok`` False means the
    request failed: ``error_kind`` is one of ``connection``, ``http-4xx``, ``http-5xx``,
    ``engine-dead``, ``stream-error``, ``stalled``, ``cut``, ``bad-data``,
    ``thinking-ate-budget``, ``empty-answer``; ``error`` is the message shown to the operator.
    ``answer`` is the answer text (kept in memory for the verbatim check; the JSONL keeps
    only its length and a short head).
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
    token_chunks: int = 0
    chunk_estimate: int = 0
    tokens_per_chunk: float | None = None
    decode_tps: float | None = None
    prefill_tps: float | None = None
    finish_reason: str | None = None
    reasoning_source: str | None = None
    reasoning_chars: int = 0
    answer_chars: int = 0
    pings: int = 0
    done: bool = False
    server_timings: dict[str, Any] | None = None
    server_metrics: dict[str, Any] | None = None
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


def stream_chat(
    url: str,
    payload: dict[str, Any],
    *,
    api_key: str | None = None,
    session: requests.Session | None = None,
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
    headers = {"Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    sess = session or requests.Session()
    r = RequestResult()

    def fail(kind: str, message: str) -> RequestResult:
        r.ok, r.error_kind, r.error = False, kind, message
        return r

    path = "/" + url.split("://", 1)[-1].partition("/")[2]
    t0 = clock()
    try:
        resp = sess.post(url, json=body, headers=headers, stream=True,
                         timeout=(connect_timeout_s, stall_timeout_s))
    except requests.exceptions.ConnectTimeout:
        return fail("connection", f"could not connect to {url} within {connect_timeout_s:g} s")
    except requests.exceptions.ReadTimeout:
        return fail("stalled", f"stalled: no response headers within {stall_timeout_s:g} s (stall timeout)")
    except requests.exceptions.ConnectionError as exc:
        return fail("connection", f"could not connect to {url}: {type(exc).__name__}")
    r.status = resp.status_code
    with resp:
        if resp.status_code >= 400:
            try:
                raw = resp.raw.read(4096)
            except Exception:  # noqa: BLE001 - the status already says what matters
                raw = b""
            msg = _error_message(raw)
            kind = "http-5xx" if resp.status_code >= 500 else "http-4xx"
            if resp.status_code >= 500 and _looks_engine_dead(msg):
                kind = "engine-dead"
            return fail(kind, f"HTTP {resp.status_code} from POST {path}: {msg}")
        return _read_stream(resp, r, t0, clock, stall_timeout_s, fail, on_chunk)


def _read_stream(resp, r: RequestResult, t0: float, clock, stall_timeout_s: float, fail, on_chunk):
    parser = SSEParser()
    splitter = _ThinkSplitter()
    answer_parts: list[str] = []
    reasoning_chars = 0
    usage: dict[str, Any] | None = None
    t_last_data = t0
    t_last_token: float | None = None

    def handle(ev_data: str, t: float) -> RequestResult | None:
        nonlocal usage, reasoning_chars, t_last_token
        if ev_data.strip() == "[DONE]":
            r.done = True
            return None
        try:
            obj = json.loads(ev_data)
        except ValueError:
            return fail("bad-data", f"unparseable SSE data: {ev_data[:120]!r}")
        if not isinstance(obj, dict):
            return fail("bad-data", f"unexpected SSE data: {ev_data[:120]!r}")
        if obj.get("error"):
            err = obj["error"]
            msg = err.get("message", json.dumps(err)) if isinstance(err, dict) else str(err)
            kind = "engine-dead" if _looks_engine_dead(str(msg)) else "stream-error"
            return fail(kind, f"server sent an error in the stream: {str(msg)[:300]}")
        if obj.get("usage"):
            usage = obj["usage"]
        if isinstance(obj.get("timings"), dict):
            r.server_timings = obj["timings"]
        if isinstance(obj.get("metrics"), dict):
            r.server_metrics = obj["metrics"]
        for choice in obj.get("choices") or []:
            if choice.get("finish_reason"):
                r.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            carried = False
            for fname in REASONING_FIELDS:
                val = delta.get(fname)
                if isinstance(val, str) and val:
                    reasoning_chars += len(val)
                    r.reasoning_source = r.reasoning_source or fname
                    carried = True
                    break
            content = delta.get("content")
            if isinstance(content, str) and content:
                carried = True
                for kind, text in splitter.feed(content):
                    if kind == "orphan-close":
                        reasoning_chars += sum(len(p) for p in answer_parts)
                        answer_parts.clear()
                        r.ttft_answer_s = None
                        r.reasoning_source = r.reasoning_source or "inline-think"
                    elif kind == "reasoning":
                        reasoning_chars += len(text)
                        r.reasoning_source = r.reasoning_source or "inline-think"
                    else:
                        answer_parts.append(text)
                        if r.ttft_answer_s is None:
                            r.ttft_answer_s = t - t0
            if delta.get("tool_calls"):
                carried = True
            if carried:
                r.token_chunks += 1
                if r.ttft_s is None:
                    r.ttft_s = t - t0
                t_last_token = t
        return None

    try:
        while True:
            data = resp.raw.read1(65536)
            t = clock()
            if not data:
                break
            comments_before = parser.comments
            events = parser.feed(data)
            if events:
                t_last_data = t
            elif parser.comments > comments_before and t - t_last_data > stall_timeout_s:
                return fail("stalled", f"stalled: only pings, no data for {t - t_last_data:.1f} s "
                                       f"(stall timeout {stall_timeout_s:g} s)")
            for ev in events:
                if r.done:
                    break
                failed = handle(ev.data, t)
                if failed is not None:
                    return failed
            if on_chunk is not None and events:
                on_chunk(r)
            if r.done:
                break
        for ev in parser.close():
            if handle(ev.data, clock()) is not None:
                return r
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        if "timed out" in str(exc).lower() or isinstance(exc, requests.exceptions.Timeout):
            return fail("stalled", f"stalled: no data for {stall_timeout_s:g} s (stall timeout) "
                                   f"after {r.token_chunks} token chunks")
        return fail("cut", f"stream cut before [DONE] after {r.token_chunks} token chunks "
                           f"({type(exc).__name__})")
    except Exception as exc:  # urllib3 ProtocolError / IncompleteRead / socket timeout
        name = type(exc).__name__
        text = str(exc).lower()
        if "timed out" in text or "timeout" in name.lower():
            return fail("stalled", f"stalled: no data for {stall_timeout_s:g} s (stall timeout) "
                                   f"after {r.token_chunks} token chunks")
        return fail("cut", f"stream cut before [DONE] after {r.token_chunks} token chunks ({name})")
    r.total_s = clock() - t0
    r.pings = parser.comments
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
        return fail("cut", f"stream cut before [DONE] after {r.token_chunks} token chunks")

    if usage:
        r.completion_tokens = usage.get("completion_tokens")
        r.prompt_tokens = usage.get("prompt_tokens")
        r.prompt_tokens_source = "usage" if r.prompt_tokens is not None else None
        r.tokens_source = "usage"
        details = usage.get("completion_tokens_details") or {}
        r.reasoning_tokens = details.get("reasoning_tokens")
        r.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    else:
        r.completion_tokens = r.token_chunks
        r.tokens_source = "chunk-estimate"
        r.warnings.append(CHUNK_ESTIMATE_WARNING.format(chunks=r.token_chunks))
        tm = r.server_timings or {}
        if "prompt_n" in tm:
            r.prompt_tokens = int(tm.get("prompt_n", 0)) + int(tm.get("cache_n", 0))
            r.prompt_tokens_source = "timings"
    if r.completion_tokens and r.token_chunks:
        r.tokens_per_chunk = r.completion_tokens / r.token_chunks
    if r.ttft_s and r.prompt_tokens:
        r.prefill_tps = r.prompt_tokens / r.ttft_s
    if (r.completion_tokens or 0) > 1 and r.e2e_s is not None and r.ttft_s is not None \
            and r.e2e_s > r.ttft_s:
        r.decode_tps = (r.completion_tokens - 1) / (r.e2e_s - r.ttft_s)

    if not r.answer.strip():
        if r.finish_reason == "length":
            return fail("thinking-ate-budget",
                        f"thinking ate the max_tokens budget: finish_reason \"length\" after "
                        f"{r.completion_tokens} completion tokens with an empty answer "
                        f"({r.reasoning_chars} characters of thinking); raise max_tokens")
        return fail("empty-answer", f"empty answer (finish_reason {r.finish_reason!r})")
    return r
