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
import re
from typing import Any, Callable

from rigkit.bench.result import (BadData, Happened, RequestResult, check_counts, count, error_message,
                                 error_object_message, failed, has_count, integral, kind_of,
                                 llama_swap_error, starting_failed)
from rigkit.bench.sse import SSEParser

#: Seconds (on the reads' clock) the bytes after ``data: [DONE]`` are read for — a late usage, the
#: body's end — before the connection is dropped: what follows ``[DONE]`` is never waited on.
AFTER_DONE_S = 1.0
#: Token chunks per arrival instant at or above which reads of one fixed size are called bursts
#: (a buffering proxy's writes): TTFT, prefill and decode are then unmeasurable.
BURST_MIN_CHUNKS = 4
#: Finish reasons of a completed answer (OpenAI API ``finish_reason``); any other is named.
FINISHED = ("stop", "length")
#: Finish reasons saying the server gave the answer up: vLLM's ``abort`` and ``error``
#: (``vllm/v1/engine/__init__.py`` ``FINISH_REASON_STRINGS = ("stop", "length", "abort", "error",
#: "repetition")``): a FAIL naming it; any other outside :data:`FINISHED` is a WARNING naming it.
GIVEN_UP = ("abort", "error")

ONE_WRITE_WARNING = ("WARNING: time to first token, prefill and decode tok/s unmeasurable: the whole "
                     "answer arrived in one read (one write by the server, or a proxy that buffers it)")
BURSTS_WARNING = ("WARNING: time to first token, prefill and decode tok/s unmeasurable: the answer "
                  "arrived in fixed-size bursts of several chunks (a buffering proxy between the bench "
                  "and the server?)")
DECODE_BURST_WARNING = ("WARNING: decode tok/s unmeasurable: most of the answer arrived in one read after "
                        "the first (a burst), so the span between reads is not the decode's")
HARMONY_WARNING = ("WARNING: the answer carried gpt-oss's harmony channel markup (<|channel|>…<|message|>) "
                   "the server did not parse: only the final channel is counted as the answer, the "
                   "others as thinking; answer TTFT not measured (openai/harmony docs/format.md)")
LATE_USAGE_WARNING = ("WARNING: the usage arrived after data: [DONE] (read within the "
                      f"{AFTER_DONE_S:g} s the bench reads after it) and was used")
KEPT_SENDING_WARNING = ("WARNING: the server kept sending after data: [DONE]; read for "
                        f"{AFTER_DONE_S:g} s, not waited on, the connection dropped")

#: A harmony message header in text (openai/harmony ``docs/format.md``, "Special Tokens" and the
#: "Chat conversation format" example output: ``<|channel|>analysis<|message|>…<|end|><|start|>
#: assistant<|channel|>final<|message|>…<|return|>``; a tool call's header carries ``to=…`` and
#: ``<|constrain|>…``).
_HARMONY_HEADER = re.compile(r"<\|channel\|>([^<]*?)(?:<\|constrain\|>[^<]*)?<\|message\|>")
_HARMONY_STOP = re.compile(r"<\|(?:end|return|call|start|channel)\|>")

#: What llama-swap's loading writer says in its frames (``internal/router/loading.go:76-77, 98``).
_LOADING_MODEL = re.compile(r"llama-swap loading model: (\S+)")
_LOADING_DONE = re.compile(r"Done! \((\d+(?:\.\d+)?)s\)")


def split_harmony(text: str) -> tuple[str, str, list[str]]:
    """``(final, other, channels)`` of ``text`` holding harmony messages written inline: the
    ``final`` channel's content (the answer), every other channel's content joined (thinking), and
    the channel names met in order. Source: openai/harmony ``docs/format.md`` (message format
    ``<|start|>{header}<|message|>{content}<|end|>``; channels ``final``, ``analysis``,
    ``commentary``; stop tokens ``<|return|>``, ``<|call|>``)."""
    final: list[str] = []
    other: list[str] = []
    channels: list[str] = []
    for m in _HARMONY_HEADER.finditer(text):
        name = (m.group(1).split() or [""])[0]
        channels.append(name)
        stop = _HARMONY_STOP.search(text, m.end())
        body = text[m.end():stop.start() if stop else len(text)]
        (final if name == "final" else other).append(body)
    return "".join(final), "".join(other), channels


def raw_error(line: str) -> str | None:
    """The message of an error body written into an event stream outside any event — llama-swap's
    (:func:`~rigkit.bench.result.llama_swap_error`) or a JSON error object — else None (a line an
    SSE reader ignores, WHATWG §9.2.6: an unknown field)."""
    said = llama_swap_error(line)
    if said is not None:
        return said
    if line[:1] == "{":
        try:
            obj = json.loads(line)
        except ValueError:
            return None
        if type(obj) is dict:
            return error_object_message(obj)
    return None


def loading_frame(obj: dict[str, Any]) -> str | None:
    """The text of llama-swap's loading frame, or None when ``obj`` is not one. Its writer marshals
    exactly ``{"choices":[{"delta":{"reasoning_content": <text>}}]}`` — no id, object, model or index
    (``internal/router/loading.go:200-219``, ``sendData``), sent only while a member is loaded for a
    streamed ``/v1/chat/completions`` of a model with ``sendLoadingState`` (``router/base.go:529``) —
    where every server's own chunk carries ``index`` (OpenAI API ``choices[].index``)."""
    ch = obj.get("choices")
    if type(ch) is not list or len(ch) != 1:
        return None
    c = ch[0]
    if type(c) is not dict or len(c) != 1:
        return None
    d = c.get("delta")
    if type(d) is not dict or len(d) != 1:
        return None
    text = d.get("reasoning_content")
    return text if type(text) is str else None

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
                 "_append_answer", "reasoning_chars", "usage", "t_last_data", "t_last_token", "n_event",
                 "loading_text", "t_loading", "usage_ct", "count_back", "instant_chunks", "t_prev_token",
                 "token_read_sizes", "t_done", "comments_at_done", "after_bytes", "after_events",
                 "late_usage", "t_after", "tail_ended")

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
        self.loading_text: list[str] = []  # llama-swap's loading frames' text
        self.t_loading: float | None = None
        self.usage_ct: int | None = None  # the last usage.completion_tokens seen
        self.count_back: tuple[int, int, int] | None = None  # (before, after, event)
        self.instant_chunks: list[int] = []  # token chunks per distinct arrival time, in order
        self.t_prev_token: float | None = None
        self.token_read_sizes: list[int] = []
        self.t_done: float | None = None
        self.comments_at_done = 0
        self.after_bytes = 0
        self.after_events = 0
        self.late_usage = False
        self.t_after: float | None = None
        #: whether the body ended within AFTER_DONE_S after [DONE] (None: not read; set by the reader)
        self.tail_ended: bool | None = None

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
                self.t_done = t
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
        if r.token_chunks == 0 and len(obj) == 1:
            text = loading_frame(obj)
            if text is not None:  # llama-swap's, not the member's: no token, no TTFT
                if sum(map(len, self.loading_text)) < 4096:
                    self.loading_text.append(text)
                self.t_loading = t
                r.swap = {"seen": "llama-swap's loading frames", "frames": len(self.loading_text)
                          if r.swap is None else r.swap["frames"] + 1}
                return None
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
                ct = integral(u.get("completion_tokens"))
                if ct is not None:
                    if self.usage_ct is not None and ct < self.usage_ct and self.count_back is None:
                        self.count_back = (self.usage_ct, ct, n_event)
                    self.usage_ct = ct
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

    def _first_problem(self) -> tuple[int, str, str] | None:
        """The first error line/event or raw body the parser met: ``(n_before, how, text)``."""
        parser = self.parser
        found = []
        if parser.errors:
            found.append((parser.errors[0][0], "error", parser.errors[0][1]))
        for n_before, line in parser.raw_bodies:
            if raw_error(line) is not None:
                found.append((n_before, "raw", line))
                break
        return min(found, key=lambda f: f[0]) if found else None

    def _problem(self, how: str, text: str) -> RequestResult:
        """Fail on an error line/event (``how`` ``error``) or a body written into the stream outside
        any event (``raw``: llama-swap's ``SendError`` after its loading writer had sent the 200,
        ``internal/router/base.go`` ``SendError(w, req, resp.Err)`` → ``swaputil/http.go:108-131``)."""
        r = self.result
        if how == "error":
            return self._stream_error(error_message(text.encode("utf-8", errors="replace")))
        said = llama_swap_error(text)
        if said is None:
            return failed(r, Happened("event", message=raw_error(text)),
                          f"the server wrote an error body into the stream outside any event: "
                          f"{raw_error(text)[:300]}")
        sw = r.swap
        loading = (f" after {sw['frames']} of its loading frames over {self.t_loading - self.t0:.1f} s"
                   if sw and self.t_loading is not None else "")
        if starting_failed(said):
            return failed(r, Happened("event", message=said),
                          f"llama-swap could not start the member{loading}: llama-swap said {said!r}")
        return failed(r, Happened("event", message=f"llama-swap: {said}"),
                      f"llama-swap wrote its error into the stream{loading}: {said!r}")

    def _after_payload(self, payload: str, t: float) -> None:
        """One event after ``[DONE]``: counted; a usage with a count, when the stream had none, is
        used (and said)."""
        self.after_events += 1
        self.t_after = t
        if payload[:1] != "{":
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            return
        u = obj.get("usage") if type(obj) is dict else None
        if type(u) is dict and has_count(u, None) and not has_count(self.usage, self.result.server_timings):
            self.usage = u
            self.late_usage = True
            self.result.usage_keys = sorted(u)

    def after(self, data: bytes, t: float) -> None:
        """Bytes that came after ``[DONE]`` (a later read, at clock ``t``): parsed and counted, never
        waited on — the reader stops after :data:`AFTER_DONE_S`."""
        self.after_bytes += len(data)
        self.t_after = t
        for p in self.parser.feed_data(data):
            self._after_payload(p, t)

    def feed(self, data: bytes, t: float) -> bool:
        """One read's bytes at clock ``t`` (s); True when the stream is over (read no more)."""
        r = self.result
        if not r.ok or r.done:
            return True
        parser = self.parser
        comments_before = parser.comments + sum(parser.ignored.values())
        chunks_before = r.token_chunks
        try:
            payloads = parser.feed_data(data)
            problem = None
            if parser.errors or parser.raw_bodies:  # act on it where it stands in the stream
                problem = self._first_problem()
                payloads = payloads[:max(problem[0] - (parser.dispatched - len(payloads)), 0)]
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
                    if r.done:  # the same read's events after [DONE]
                        self._after_payload(p, t)
                        continue
                    if handle(p, t) is not None:
                        return True
        except BadData as exc:
            failed(r, Happened("data"), str(exc))
            return True
        if r.token_chunks != chunks_before:  # a read's events share its instant: counted per read
            self.token_read_sizes.append(len(data))
            self._arrived(r.token_chunks - chunks_before, t)
        if problem is not None and not r.done:
            self._problem(problem[1], problem[2])
            return True
        if self.on_chunk is not None and payloads:
            self.on_chunk(r)
        if r.done:  # pings are counted up to the read that brought [DONE]; later ones in after_done
            self.comments_at_done = parser.comments
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
            if r.swap and self.t_loading is not None:
                message += (f", after {r.swap['frames']} of llama-swap's loading frames over "
                            f"{self.t_loading - self.t0:.1f} s (the member was being loaded)")
            return failed(r, Happened("read", exc=exc), message)
        if not r.done:
            chunks_before = r.token_chunks
            try:
                for ev in parser.close():
                    if self._handle(ev.data, t) is not None:
                        return r
            except BadData as exc_:
                return failed(r, Happened("data"), str(exc_))
            if r.token_chunks != chunks_before:  # completed by the end of the body
                self._arrived(r.token_chunks - chunks_before, t)
            if r.done:  # [DONE] completed by the end of the body (a final CR)
                self.comments_at_done = parser.comments
            problem = self._first_problem()
            if problem is not None and not r.done:
                return self._problem(problem[1], problem[2])
        r.total_s = t - self.t0
        r.pings = self.comments_at_done if self.t_done is not None else parser.comments
        r.other_events = dict(parser.ignored)
        for kind, text in self.splitter.feed("", final=True):
            if kind == "answer":
                self.answer_parts.append(text)
            elif kind == "reasoning":
                self.reasoning_chars += len(text)
        r.answer = "".join(self.answer_parts)
        if "<|channel|>" in r.answer:  # gpt-oss's harmony messages the server did not parse
            final, other, _ = split_harmony(r.answer)
            r.answer = final
            self.reasoning_chars += len(other)
            r.reasoning_source = r.reasoning_source or "harmony-inline"
            r.ttft_answer_s = None
            r.warnings.append(HARMONY_WARNING)
        r.answer_chars = len(r.answer)
        r.reasoning_chars = self.reasoning_chars
        r.chunk_estimate = r.token_chunks
        if self.t_last_token is not None:
            r.e2e_s = self.t_last_token - self.t0
        if r.swap is not None:
            text = "".join(self.loading_text)
            m = _LOADING_MODEL.search(text)
            d = _LOADING_DONE.search(text)
            r.swap.update(model=m.group(1) if m else None,
                          loading_s=round(self.t_loading - self.t0, 6) if self.t_loading is not None else None,
                          llama_swap_s=float(d.group(1)) if d else None)
        if self.t_done is not None and (self.after_bytes or self.after_events or self.tail_ended is False
                                        or parser.comments > self.comments_at_done):
            r.after_done = {"bytes": self.after_bytes, "events": self.after_events,
                            "comments": parser.comments - self.comments_at_done,
                            "read_s": round((self.t_after or self.t_done) - self.t_done, 6),
                            "ended": self.tail_ended, "late_usage": self.late_usage}
            if self.tail_ended is False:
                r.warnings.append(KEPT_SENDING_WARNING)
        if self.late_usage:
            r.warnings.append(LATE_USAGE_WARNING)
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
        wrong = None
        if self.count_back is not None and r.tokens_source == "usage":
            before, after, at = self.count_back
            wrong = (f"wrong count: usage.completion_tokens went back from {before} to {after} at stream "
                     f"event {at} (a running count only grows): the server's count cannot be right, "
                     f"nothing measured")
        wrong = wrong or check_counts(r)
        if wrong:
            return failed(r, Happened("count"), wrong)
        fr = r.finish_reason
        if fr in GIVEN_UP:
            return failed(r, Happened("finish", finish_reason=fr), (
                f"the server gave the answer up: finish_reason {fr!r} after {r.completion_tokens} "
                f"completion tokens (vLLM: the request was aborted or failed in the engine), not a "
                f"completed answer; nothing measured"))
        if fr and fr not in FINISHED:
            r.warnings.append(f"WARNING: finish_reason {fr!r}, neither stop nor length: the answer "
                              f"may not be a completed one")
        self._bursts()
        if not r.answer.strip():
            if r.finish_reason == "length":
                message = (f"thinking ate the max_tokens budget: finish_reason \"length\" after "
                           f"{r.completion_tokens} completion tokens with an empty answer "
                           f"({r.reasoning_chars} characters of thinking); raise max_tokens")
            else:
                message = f"empty answer (finish_reason {r.finish_reason!r})"
            return failed(r, Happened("answer", finish_reason=r.finish_reason), message)
        return r

    def _arrived(self, n: int, t: float) -> None:
        """``n`` token chunks arrived at clock ``t``: counted per distinct arrival time."""
        if t != self.t_prev_token:
            self.instant_chunks.append(n)
            self.t_prev_token = t
        else:
            self.instant_chunks[-1] += n

    def _bursts(self) -> None:
        """Mark TTFT, prefill and decode unmeasurable when the arrival times cannot carry them: every
        token chunk in one read (one write), or reads of one fixed size carrying
        :data:`BURST_MIN_CHUNKS` or more token chunks each (a buffering proxy's writes); decode alone
        when one read after the first brought most of the answer (at least half the token chunks and
        at least :data:`BURST_MIN_CHUNKS`): its span is then a gap between reads, not the generation
        (the sandbox's CPU llama.cpp through an SSH forward once reported 171,121 tok/s that way).
        Reads of a few chunks each spread over the answer still carry decode: the span is the
        generation's, delivered in small batches."""
        r = self.result
        per = self.instant_chunks
        n, k = r.token_chunks, len(per)
        sizes = self.token_read_sizes
        if n >= 2 and k == 1:
            why = (f"all {n} token chunks arrived in one read (one write by the server, or a proxy "
                   f"that buffered the whole answer): the arrival times hold no time to first token "
                   f"and no decode")
            warning = ONE_WRITE_WARNING
        elif (k >= 2 and n >= BURST_MIN_CHUNKS * k and len(sizes) >= 3
              and len(set(sizes[:-1])) == 1):
            why = (f"the {n} token chunks arrived in {k} reads, all but the last of {sizes[0]} bytes "
                   f"(~{n / k:.0f} chunks each: fixed-size bursts, a buffering proxy between the bench "
                   f"and the server?): the arrival times are the proxy's, not the server's")
            warning = BURSTS_WARNING
        elif k >= 2 and max(per[1:]) >= max(BURST_MIN_CHUNKS, n / 2):
            why = (f"the {sum(per[1:])} token chunks after the first read came in {k - 1} reads "
                   f"(up to {max(per[1:])} in one: bursts — the server's writes held back on the way, "
                   f"or read late): the decode span is gaps between reads, not the tokens'")
            r.unmeasurable = {"decode_tps": why}
            r.decode_tps = None
            r.warnings.append(DECODE_BURST_WARNING)
            return
        else:
            return
        r.unmeasurable = {"ttft_s": why, "prefill_tps": why, "decode_tps": why}
        r.ttft_s = r.ttft_answer_s = r.prefill_tps = r.decode_tps = None
        r.warnings.append(warning)


def consume(reads, t0: float = 0.0, stall_timeout_s: float = 120.0,
            exc: BaseException | None = None) -> RequestResult:
    """The :class:`RequestResult` of a stream given as ``reads``: an iterable of
    ``(bytes, t)`` pairs (``t`` in seconds, the clock when each read returned), ending cleanly
    after the last (or with ``exc``, what the read after the last raised; nothing after ``[DONE]`` is
    read then). Reads after ``[DONE]`` are read as the network reader does, up to
    :data:`AFTER_DONE_S` after it on their clock. For tests and replays; :func:`rigkit.bench.client.stream_chat` feeds
    the same consumer from the network."""
    c = StreamConsumer(RequestResult(status=200), t0, stall_timeout_s)
    t = t0
    reads = iter(reads)
    for data, t in reads:
        if c.feed(data, t):
            break
    if c.result.ok and c.t_done is not None and exc is None:
        c.tail_ended = True
        for data, t_ in reads:  # what follows [DONE], read for AFTER_DONE_S on the reads' clock
            if t_ - c.t_done > AFTER_DONE_S:
                c.tail_ended = False
                break
            c.after(data, t_)
    return c.end(t, exc)
