"""Server-Sent Events parser, to the specification, plus the one non-standard field servers use.

Source of the format: WHATWG HTML Living Standard, "Server-sent events", §9.2.6
"Interpreting an event stream": the stream is UTF-8 (a leading BOM is dropped; invalid bytes
decode to U+FFFD); lines end in CRLF, LF or CR; a line starting with ``:`` is a comment
(llama.cpp sends them as pings while a long prefill is silent); ``field: value`` lines fill
``data`` (joined with LF; an empty ``data:`` line adds an empty line), ``event``, ``id`` and
``retry``; an empty line dispatches the event, and an event whose data buffer is empty is not
dispatched; an event still open when the stream ends is discarded.

Decisions beyond the specification, each with its source:

- ``error:`` lines. llama.cpp's server writes a failure inside a stream as
  ``error: {json}\n\n`` (``server_sent_event(sink, "error", …)`` in
  ``tools/server/utils.hpp``/``server.cpp``) and then still sends ``data: [DONE]``. To the
  specification ``error`` is an unknown field, ignored — a spec-only client would see no data
  and a clean ``[DONE]``. The parser records each such line in :attr:`SSEParser.errors`; so
  it does for an event of type ``error`` (``event: error``), whose data it also returns.
- Each error is recorded with the number of data events dispatched before it, so a client
  can act on it at the same place in the stream however the bytes were split.
- Bodies written into the stream outside any event. llama-swap writes its error response into a
  200 stream its loading writer already began (``router/base.go`` ``SendError`` after
  ``newLoadingWriter``; the body ``swaputil.SendResponse`` picks by ``Accept``, http.go:108-131):
  ``{"error":…,"src":"llama-swap"}``, ``llama-swap: …`` or an HTML page, with no ``data:``. To the
  specification such a line is an unknown field (``{"error"``, ``llama-swap``) and ignored; the
  parser records each line whose field name is ``llama-swap`` or starts with ``{`` or ``<`` in
  :attr:`SSEParser.raw_bodies` (``[(n_before, line)]``), for the client to judge.

Bytes are decoded with an incremental UTF-8 decoder, so a multi-byte character split across
network reads is reassembled instead of turning into replacement characters.

Two ways to read: :meth:`SSEParser.feed` returns :class:`SSEEvent` objects (every field);
:meth:`SSEParser.feed_data` returns only each event's ``data`` and is the bench client's hot
path: while the stream holds no CR and its events are single ``data: …`` lines (what vLLM and
llama.cpp send), it decodes each read's complete events at once (cut at the last blank line,
an ASCII boundary, so no multi-byte character is split) and keeps every byte after that
boundary — a read holding no blank line at all is kept whole — for the next read. Any other
event (a ``:`` ping, several lines, ``event:``/``id:``/``error:`` fields) goes through the
full interpreter one event at a time, and a CR anywhere switches the rest of the stream to
it, so both methods yield the same data for any split of the same bytes (a property test in
``tests/bench/test_split_property.py`` holds them to it). Both read in time linear in the stream's
length whatever the read size: bytes (and an open line) held between reads are kept as pieces and
joined once, when an event (a line) ends, and only each new read is searched for the blank line.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event: ``data`` (str, LF-joined data lines), ``event`` (type, default
    ``"message"``) and ``id`` (last event id, ``""`` when none was sent)."""

    data: str
    event: str = "message"
    id: str = ""


class SSEParser:
    """Incremental SSE parser: :meth:`feed` bytes as they arrive, get complete events back.

    + ``comments``: how many comment lines (``:``…) were seen — pings, not data.
    + ``open_event``: True when the stream ended (``close``) inside an unfinished event,
      which the specification discards; the client names it in its verdict.
    + ``errors``: ``[(n_before, message)]`` — each ``error:`` line (llama.cpp) or
      ``event: error`` event, with the number of data events dispatched before it.
    + ``dispatched``: data events dispatched so far (returned by ``feed``/``feed_data``).
    + ``raw_bodies``: ``[(n_before, line)]`` — lines written outside any event (module doc).
    + ``accept``: event types to return (None: all); an event of another type is counted in
      ``ignored`` (``{type: n}``) and not returned — a client that reads completions takes
      ``("message", "error")``, as the specification's ``onmessage`` sees only ``message``
      events (sse-starlette's ``event: ping`` keep-alives, whose data is a timestamp, are not
      completions).

    Never raises on malformed input: invalid UTF-8 becomes U+FFFD (the specification's
    decoding), unknown fields are ignored.
    """

    def __init__(self, accept: tuple[str, ...] | None = None) -> None:
        self._accept = accept
        self.ignored: dict[str, int] = {}
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self._started = False
        self._has_fields = False
        self.comments = 0
        self.open_event = False
        self._fast = True
        self._pend: list[bytes] = []  # fast-path bytes not yet split into events, as they came
        self._parts: list[str] = []  # a line still open, in pieces (joined once it ends)
        self.raw_bodies: list[tuple[int, str]] = []
        self.errors: list[tuple[int, str]] = []
        self.dispatched = 0

    def _take_raw(self) -> bytes:
        """The fast path's held bytes, joined once, and forgotten."""
        raw = b"".join(self._pend) if len(self._pend) != 1 else self._pend[0]
        self._pend = []
        return raw

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` (bytes, any split) and return the events it completed, in order."""
        if self._pend:
            chunk = self._take_raw() + chunk
        text = self._decoder.decode(chunk)
        return self._consume(text, final=False)

    def feed_data(self, chunk: bytes) -> list[str]:
        """Parse ``chunk`` (bytes, any split) and return the ``data`` of each event it
        completed, in order (what :meth:`feed` would return as ``SSEEvent.data``)."""
        if not self._fast or b"\r" in chunk:
            if self._fast:  # leave the fast path for good, handing over what it holds
                self._fast = False
            return [ev.data for ev in self.feed(chunk)]
        if not self._started:
            buf = self._take_raw() + chunk if self._pend else chunk
            if not buf:
                return []
            if len(buf) < 3 and b"\xef\xbb\xbf".startswith(buf):
                self._pend = [buf]
                return []
            self._started = True
            if buf.startswith(b"\xef\xbb\xbf"):
                buf = buf[3:]
            chunk = buf
        # Only the new bytes are searched for the last blank line (one across the seam: the held
        # bytes end in LF and these begin with one); held bytes are joined once, when an event
        # ends: linear in the stream's length however small the reads (a 3 MB event in 1 KiB
        # reads used to be copied and searched again on every read).
        j = chunk.rfind(b"\n\n")
        if j >= 0:
            complete = (self._take_raw() + chunk[:j]) if self._pend else chunk[:j]
            rest = chunk[j + 2:]
        elif self._pend and chunk[:1] == b"\n" and self._pend[-1][-1:] == b"\n":
            complete = self._take_raw()[:-1]
            rest = chunk[1:]
        else:  # no event ends in what has arrived: keep all of it for the next read
            if chunk:
                self._pend.append(chunk)
            return []
        if rest:
            self._pend = [rest]
        # whole events only, so no multi-byte character is cut: one decode per read
        text = complete.decode("utf-8", errors="replace")
        out: list[str] = []
        append = out.append
        base = self.dispatched
        for block in text.split("\n\n"):
            if block[:6] == "data: " and "\n" not in block:
                append(block[6:])
            elif block:
                if block[0] == "\n":  # a run of blank lines: an empty line dispatches nothing
                    block = block.lstrip("\n")
                    if block[:6] == "data: " and "\n" not in block:
                        append(block[6:])
                        continue
                    if not block:
                        continue
                self.dispatched = base + len(out)  # errors recorded in it count from here
                out.extend(ev.data for ev in self._consume(block + "\n\n", final=False))
        self.dispatched = base + len(out)
        return out

    def close(self) -> list[SSEEvent]:
        """End of stream: flush the decoder; an event without its blank line is discarded
        (``open_event`` then becomes True). Returns any event a final CR completed."""
        text = self._decoder.decode(self._take_raw() if self._pend else b"", final=True)
        events = self._consume(text, final=True)
        if self._buf:
            self._line(self._buf)
            self._buf = ""
        if self._data or self._has_fields:
            self.open_event = True
        self._data, self._event, self._has_fields = [], "", False
        return events

    def _consume(self, text: str, final: bool) -> list[SSEEvent]:
        if not self._started and text:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        if not final and text and not self._buf.endswith("\r") and "\n" not in text and "\r" not in text:
            self._parts.append(text)  # no line ends here: held in pieces, joined once it does
            return []
        if self._parts:
            self._buf += "".join(self._parts)
            self._parts.clear()
        buf = self._buf + text
        # A CR at the very end may be the first half of a CRLF still in flight.
        hold_cr = not final and buf.endswith("\r")
        if hold_cr:
            buf = buf[:-1]
        parts = _LINE_END.split(buf)
        self._buf = parts.pop() + ("\r" if hold_cr else "")
        events: list[SSEEvent] = []
        for line in parts:
            ev = self._line(line)
            if ev is not None:
                events.append(ev)
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if line.endswith("\r"):
            line = line[:-1]
        if line == "":
            return self._dispatch()
        if line[0] == ":":
            self.comments += 1
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        self._has_fields = True
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "error":  # llama.cpp's error line (module doc): not in the specification
            self.errors.append((self.dispatched, value))
        elif name == "llama-swap" or name[:1] in ("{", "<"):
            # an error body written into the stream as it is (module doc): no SSE field at all
            self.raw_bodies.append((self.dispatched, line))
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        # "retry" and unknown fields do not concern a client that never reconnects.
        return None

    def _dispatch(self) -> SSEEvent | None:
        self._has_fields = False
        if not self._data:
            self._event = ""
            return None
        ev = SSEEvent(data="\n".join(self._data), event=self._event or "message", id=self._last_id)
        self._data, self._event = [], ""
        if self._accept is not None and ev.event not in self._accept:
            self.ignored[ev.event] = self.ignored.get(ev.event, 0) + 1
            return None
        if ev.event == "error":
            self.errors.append((self.dispatched, ev.data))
        self.dispatched += 1
        return ev
