"""Server-Sent Events parser, to the specification.

Source of the format: WHATWG HTML Living Standard, "Server-sent events", §9.2.6
"Interpreting an event stream": the stream is UTF-8 (a leading BOM is dropped); lines end in
CRLF, LF or CR; a line starting with ``:`` is a comment (llama.cpp sends them as pings while a
long prefill is silent); ``field: value`` lines fill ``data`` (joined with LF), ``event``,
``id`` and ``retry``; an empty line dispatches the event; an event still open when the stream
ends is discarded.

Bytes are decoded with an incremental UTF-8 decoder, so a multi-byte character split across
network reads is reassembled instead of turning into replacement characters.
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
      which the specification discards; the client reports that as a cut stream.

    Never raises on malformed input: invalid UTF-8 becomes U+FFFD (the specification's
    decoding), unknown fields are ignored.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self._started = False
        self._has_fields = False
        self.comments = 0
        self.open_event = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` (bytes, any split) and return the events it completed, in order."""
        text = self._decoder.decode(chunk)
        return self._consume(text, final=False)

    def close(self) -> list[SSEEvent]:
        """End of stream: flush the decoder; an event without its blank line is discarded
        (``open_event`` then becomes True). Returns any event a final CR completed."""
        text = self._decoder.decode(b"", final=True)
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
        return ev
