"""The stream: the bytes of one streamed chat completion, as they arrive, turned into a
:class:`~rigkit.bench.result.RequestResult` — apart from the network (:mod:`.transport`).

:class:`StreamConsumer` is the state machine: each read's bytes go through the SSE parser
(:mod:`.sse`), each event's JSON is read for tokens (answer, reasoning in any of
:data:`REASONING_FIELDS`, inline ``<think>`` split by :class:`ThinkSplitter`), usage, llama.cpp's
``timings`` and vLLM's ``metrics``; the end judges what arrived. Failures are recorded through
the one classifier (:func:`rigkit.bench.result.failed`). Definitions of the times and
counts, and the sources of each rule: :mod:`rigkit.bench.client`.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from rigkit.bench.result import (BadData, Happened, RequestResult, check_counts, count, error_message,
                                 error_object_message, failed, has_count, kind_of)
from rigkit.bench.sse import SSEParser

#: Delta fields that carry thinking, in the order servers adopted them (vLLM ``reasoning``,
#: llama.cpp/SGLang/old vLLM ``reasoning_content``, others ``thinking``).
REASONING_FIELDS = ("reasoning", "reasoning_content", "thinking")

_OPEN, _CLOSE = "<think>", "</think>"

NO_DONE_WARNING = (
    "WARNING: the stream ended without data: [DONE] after its finish_reason and the server's "
    "token count; counted as complete (a proxy that drops [DONE] may drop more: check it)"
)


class ThinkSplitter:
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


class StreamConsumer:
    """Turns the bytes of one streamed chat completion into a :class:`RequestResult`, however
    they were split into reads: the bench client's core, apart from the network.

    + ``feed(data, t)``: one read's bytes (``bytes``) and the clock when the read returned
      (seconds, same clock as ``t0``); returns True when the stream is over (``[DONE]``, or
      a failure: read no more).
    + ``end(t, exc=None)``: the stream ended at ``t`` — cleanly (``exc`` None: the body ended)
      or with the exception the read raised (``TimeoutError``: stalled; other ``OSError`` or
      :class:`http.client.HTTPException`: cut). Returns the finished result.

    Verdicts at the end (docs/bench.md "What the bench does with each stream" names the sources): ``[DONE]`` → counted and
    checked; a clean end without ``[DONE]`` after a ``finish_reason`` and the server's count
    → counted, with :data:`NO_DONE_WARNING`; any other end before ``[DONE]`` → ``cut``; an
    error event or error object → ``stream-error`` (``engine-dead`` when it says so), quoting
    the server's message.
    """

    __slots__ = ("result", "parser", "t0", "stall_timeout_s", "on_chunk", "splitter", "answer_parts",
                 "_append_answer", "reasoning_chars", "usage", "t_last_data", "t_last_token", "n_event")

    def __init__(self, result: RequestResult, t0: float, stall_timeout_s: float = 120.0,
                 on_chunk: Callable[[RequestResult], None] | None = None) -> None:
        self.result = result
        self.parser = SSEParser(accept=("message", "error"))
        self.t0 = t0
        self.stall_timeout_s = stall_timeout_s
        self.on_chunk = on_chunk
        self.splitter = ThinkSplitter()
        self.answer_parts: list[str] = []
        self._append_answer = self.answer_parts.append
        self.reasoning_chars = 0
        self.usage: dict[str, Any] | None = None
        self.t_last_data = t0
        self.t_last_token: float | None = None
        self.n_event = 0

    def _bad(self, field_name: str, value: Any, expected: str) -> BadData:
        return BadData(f"bad data in stream event {self.n_event}: {field_name} is {kind_of(value)}, "
                       f"expected {expected}")

    def _stream_error(self, msg: str) -> RequestResult:
        return failed(self.result, Happened("event", message=msg),
                      f"server sent an error in the stream: {msg[:300]}")

    def _handle(self, payload: str, t: float) -> RequestResult | None:
        """One event's data; a result when the request failed on it, else None."""
        if payload[:1] != "{":
            stripped = payload.strip()
            if stripped == "[DONE]":
                self.n_event += 1
                self.result.done = True
                return None
            if not stripped:  # an empty data: line dispatches "" (WHATWG): it carries nothing
                return None
        try:
            obj = json.loads(payload)
        except ValueError:
            return failed(self.result, Happened("data"), f"unparseable SSE data: {payload[:120]!r}")
        return self._handle_obj(obj, t)

    def _handle_obj(self, obj: Any, t: float) -> RequestResult | None:
        """One event's JSON value (the hot path); a result when the request failed on it, else
        None. Raises :class:`BadData` naming a field of the wrong type."""
        r = self.result
        self.n_event += 1
        n_event = self.n_event
        if type(obj) is not dict:
            return failed(r, Happened("data"), f"unexpected SSE data (event {n_event}): "
                                               f"{kind_of(obj)}, expected an object")
        if "error" in obj or "object" in obj and obj["object"] == "error":
            msg = error_object_message(obj)
            if msg is not None:
                return self._stream_error(msg)
        u = obj.get("usage")
        if u is not None:
            if type(u) is not dict:
                raise self._bad("usage", u, "an object")
            if u:
                self.usage = u
            r.usage_keys = sorted(u)
        if "timings" in obj:
            tm = obj["timings"]
            if tm is not None and type(tm) is not dict:
                raise self._bad("timings", tm, "an object")
            r.server_timings = tm or r.server_timings
        if "metrics" in obj:
            mt = obj["metrics"]
            if mt is not None and type(mt) is not dict:
                raise self._bad("metrics", mt, "an object")
            r.server_metrics = mt or r.server_metrics
        choices = obj.get("choices")
        if not choices:
            if choices is not None and type(choices) is not list:
                raise self._bad("choices", choices, "a list")
            return None
        if type(choices) is not list:
            raise self._bad("choices", choices, "a list")
        for ci, choice in enumerate(choices):
            if type(choice) is not dict:
                raise self._bad(f"choices[{ci}]", choice, "an object")
            index = choice.get("index", 0)
            if index != 0:
                if type(index) is not int:
                    raise self._bad(f"choices[{ci}].index", index, "an integer")
                seen = sorted({0, index} | {c.get("index") for c in choices
                                            if type(c) is dict and type(c.get("index")) is int})
                return failed(r, Happened("choice"), (
                    f"the server sent more than one choice (index {', '.join(map(str, seen))} in "
                    f"stream event {n_event}) though the bench asks for one (n=1): counted as one "
                    f"answer their text would mix and decode tok/s would add up; nothing measured"))
            fr = choice.get("finish_reason")
            if fr:
                if type(fr) is not str:
                    raise self._bad(f"choices[{ci}].finish_reason", fr, "a string")
                r.finish_reason = fr
            delta = choice.get("delta")
            if not delta:
                if delta is not None and type(delta) is not dict:
                    raise self._bad(f"choices[{ci}].delta", delta, "an object")
                continue
            if type(delta) is not dict:
                raise self._bad(f"choices[{ci}].delta", delta, "an object")
            carried = False
            thinking = False
            content = delta.get("content")
            if content is None or len(delta) > 1:  # more than an answer piece: look for thinking
                for fname in REASONING_FIELDS:
                    val = delta.get(fname)
                    if val:
                        if type(val) is not str:
                            raise self._bad(f"choices[{ci}].delta.{fname}", val, "a string")
                        self.reasoning_chars += len(val)
                        r.reasoning_source = r.reasoning_source or fname
                        carried = thinking = True
                        break
                if delta.get("tool_calls"):
                    carried = True
            if content:
                if type(content) is not str:
                    raise self._bad(f"choices[{ci}].delta.content", content, "a string")
                carried = True
                splitter = self.splitter
                if not splitter.pending and not splitter.in_think and "<" not in content:
                    self._append_answer(content)  # the common case, without the tag splitter
                    if r.ttft_answer_s is None:
                        r.ttft_answer_s = t - self.t0
                else:
                    for kind, text in splitter.feed(content):
                        if kind == "orphan-close":
                            self.reasoning_chars += sum(len(p) for p in self.answer_parts)
                            self.answer_parts.clear()
                            r.ttft_answer_s = None
                            r.reasoning_source = r.reasoning_source or "inline-think"
                            thinking = True
                        elif kind == "reasoning":
                            self.reasoning_chars += len(text)
                            r.reasoning_source = r.reasoning_source or "inline-think"
                            thinking = True
                        else:
                            self.answer_parts.append(text)
                            if r.ttft_answer_s is None:
                                r.ttft_answer_s = t - self.t0
            if carried:
                r.token_chunks += 1
                if thinking:
                    r.reasoning_chunks += 1
                if r.ttft_s is None:
                    r.ttft_s = t - self.t0
                self.t_last_token = t
        return None

    def feed(self, data: bytes, t: float) -> bool:
        """One read's bytes at clock ``t`` (s); True when the stream is over (read no more)."""
        r = self.result
        if not r.ok or r.done:
            return True
        parser = self.parser
        comments_before = parser.comments + sum(parser.ignored.values())
        try:
            payloads = parser.feed_data(data)
            error_text = None
            if parser.errors:  # an error line or event: act on it where it stands in the stream
                n_before, error_text = parser.errors[0]
                payloads = payloads[:max(n_before - (parser.dispatched - len(payloads)), 0)]
            if payloads:
                self.t_last_data = t
            elif (parser.comments + sum(parser.ignored.values()) > comments_before
                  and t - self.t_last_data > self.stall_timeout_s):
                failed(r, Happened("pings"),
                       f"stalled: only pings, no data for {t - self.t_last_data:.1f} s "
                       f"(stall timeout {self.stall_timeout_s:g} s)")
                return True
            objs = None
            if len(payloads) > 1:
                # one JSON text for the whole read: the per-call cost of json.loads paid once;
                # any event that is not JSON alone (or [DONE]) sends the read down the
                # per-event path, which names it
                try:
                    objs = json.loads("[" + ",".join(payloads) + "]")
                except ValueError:
                    objs = None
                if objs is not None and (len(objs) != len(payloads)
                                         or any(type(o) is not dict for o in objs)):
                    objs = None
            if objs is not None:
                handle_obj = self._handle_obj
                for obj in objs:
                    if handle_obj(obj, t) is not None:
                        return True
            else:
                handle = self._handle
                for p in payloads:
                    if r.done:
                        break
                    if handle(p, t) is not None:
                        return True
        except BadData as exc:
            failed(r, Happened("data"), str(exc))
            return True
        if error_text is not None and not r.done:
            self._stream_error(error_message(error_text.encode("utf-8", errors="replace")))
            return True
        if self.on_chunk is not None and payloads:
            self.on_chunk(r)
        return r.done

    def end(self, t: float, exc: BaseException | None = None) -> RequestResult:
        """The stream ended at clock ``t`` (s), cleanly or with the read's exception ``exc``:
        judge what arrived, count it, and return the finished result."""
        r = self.result
        parser = self.parser
        if not r.ok:
            return r
        if exc is not None and not r.done:
            if isinstance(exc, TimeoutError):
                message = (f"stalled: no data for {self.stall_timeout_s:g} s (stall timeout) "
                           f"after {r.token_chunks} token chunks")
            else:
                why = ("connection reset by the server" if isinstance(exc, ConnectionResetError)
                       else "the response ended mid-body")
                message = (f"stream cut before [DONE] after {r.token_chunks} token chunks "
                           f"({type(exc).__name__}: {why})")
            return failed(r, Happened("read", exc=exc), message)
        if not r.done:
            try:
                for ev in parser.close():
                    if self._handle(ev.data, t) is not None:
                        return r
            except BadData as exc_:
                return failed(r, Happened("data"), str(exc_))
            if parser.errors and not r.done:
                return self._stream_error(error_message(parser.errors[0][1].encode("utf-8", "replace")))
        r.total_s = t - self.t0
        r.pings = parser.comments
        r.other_events = dict(parser.ignored)
        for kind, text in self.splitter.feed("", final=True):
            if kind == "answer":
                self.answer_parts.append(text)
            elif kind == "reasoning":
                self.reasoning_chars += len(text)
        r.answer = "".join(self.answer_parts)
        r.answer_chars = len(r.answer)
        r.reasoning_chars = self.reasoning_chars
        r.chunk_estimate = r.token_chunks
        if self.t_last_token is not None:
            r.e2e_s = self.t_last_token - self.t0
        if not r.done:
            if r.finish_reason and has_count(self.usage, r.server_timings):
                r.warnings.append(NO_DONE_WARNING)
            else:
                missing = ("no finish_reason" if not r.finish_reason
                           else "a finish_reason but no usage count")
                tail = (", an unfinished event at the end discarded" if parser.open_event else "")
                return failed(r, Happened("end"),
                              f"stream cut before [DONE] after {r.token_chunks} token "
                              f"chunks (the body ended cleanly with {missing}{tail})")
        try:
            count(r, self.usage)
        except BadData as exc_:
            return failed(r, Happened("data"), str(exc_))
        wrong = check_counts(r)
        if wrong:
            return failed(r, Happened("count"), wrong)
        if not r.answer.strip():
            if r.finish_reason == "length":
                message = (f"thinking ate the max_tokens budget: finish_reason \"length\" after "
                           f"{r.completion_tokens} completion tokens with an empty answer "
                           f"({r.reasoning_chars} characters of thinking); raise max_tokens")
            else:
                message = f"empty answer (finish_reason {r.finish_reason!r})"
            return failed(r, Happened("answer", finish_reason=r.finish_reason), message)
        return r


def consume(reads, t0: float = 0.0, stall_timeout_s: float = 120.0) -> RequestResult:
    """The :class:`RequestResult` of a stream given as ``reads``: an iterable of
    ``(bytes, t)`` pairs (``t`` in seconds, the clock when each read returned), ending cleanly
    after the last. For tests and replays; :func:`rigkit.bench.client.stream_chat` feeds
    the same consumer from the network."""
    c = StreamConsumer(RequestResult(status=200), t0, stall_timeout_s)
    t = t0
    for data, t in reads:
        if c.feed(data, t):
            break
    return c.end(t)
