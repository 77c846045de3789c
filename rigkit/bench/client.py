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

What issue 60 added, each read as its owner writes it (docs/bench.md names every number): llama-swap's
loading frames (``sendLoadingState``) are not the member's tokens — the request is named as one that
carried a swap (``RequestResult.swap``) and the runner measures it again — and its error bodies, raw in
the stream or as the answer, are ``swap-failed`` when a member could not start; a 3xx is ``redirected``;
repeated headers are read as :mod:`http.client` combines them; the stream ends at ``[DONE]`` and what
follows is read for :data:`~rigkit.bench.stream.AFTER_DONE_S` only (a late usage used, and said); a
count that goes back, sits below the text-carrying chunks or is below 0 is ``bad-count``, an integral
float is read and said; arrival times that cannot carry TTFT or decode (one write, fixed-size bursts)
leave those figures ``unmeasurable`` with the reason; ``finish_reason`` ``abort``/``error`` is
``aborted``, any other outside stop/length a warning; gpt-oss's harmony markup left in ``content`` is
split, only its ``final`` channel the answer.

In three parts under this entry point: :mod:`.transport` (:mod:`http.client` over a
:class:`ChatSession` that keeps one connection per server open between requests; no proxy
support — the bench talks to 127.0.0.1 or an SSH forward), :mod:`.stream` (the event → state
machine, :class:`StreamConsumer`) and :mod:`.result` (:class:`RequestResult`, the counts, and
the one failure classifier :func:`~rigkit.bench.result.failure_kind`).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable
from urllib.parse import urlsplit

from rigkit.bench import llama_swap
from rigkit.bench.result import (CHUNK_ESTIMATE_WARNING, CUT_BY_THINKING_WARNING, EVENT_STREAM_TYPES, KINDS,
                                 THINKING_MOST, USAGE_WITHOUT_COUNT_WARNING, RequestResult, check_counts,
                                 failure_kind, response_kind)
from rigkit.bench.stream import NO_DONE_WARNING, REASONING_FIELDS, StreamConsumer, consume
from rigkit.bench.transport import ChatSession, proxy_lost_the_request, request, retry_after_seconds

__all__ = ["CHUNK_ESTIMATE_WARNING", "CUT_BY_THINKING_WARNING", "EVENT_STREAM_TYPES", "KINDS",
           "NO_DONE_WARNING", "REASONING_FIELDS", "THINKING_MOST", "USAGE_WITHOUT_COUNT_WARNING",
           "ChatSession", "RequestResult", "StreamConsumer", "check_counts", "consume",
           "failure_kind", "proxy_lost_the_request", "response_kind", "retry_after_seconds",
           "stream_chat"]


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
    try:
        return request(sess, scheme, host, port, url, path, data, headers, r, clock,
                       connect_timeout_s, stall_timeout_s, on_chunk)
    finally:
        if own:
            sess.close()

