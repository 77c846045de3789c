"""The transport: one streamed chat request over :mod:`http.client` — the connection, the request,
its timeouts, and the answers that are not a stream.

:class:`ChatSession` keeps one HTTP/1.1 connection per server open between requests (a
connection the server closed is reopened once; an empty 502 from llama-swap's proxy is sent
once more: :func:`proxy_lost_the_request`). :func:`request` sends one request, reads an error
status, judges the answer's type (:func:`response_kind`) and hands an event stream to
:class:`rigkit.bench.stream.StreamConsumer`. Every failure goes through the one classifier
(:func:`rigkit.bench.result.failed`). No proxy support — the bench talks to 127.0.0.1 or
an SSH forward.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any, Callable

from rigkit.bench.result import (Happened, RequestResult, error_message, error_object_message, failed, integral,
                                 response_kind)
from rigkit.bench.stream import AFTER_DONE_S, StreamConsumer


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



def proxy_lost_the_request(status: int, body: bytes) -> bool:
    """A ``502`` with an empty body: llama-swap's reverse proxy found the member's kept connection closed
    and never had an answer (Go's ReverseProxy default error handler, ``http: proxy error: EOF``; members
    get no ErrorHandler, llama-swap v250 router/peer.go:91). llama.cpp's server closes its connection
    after every streamed answer while advertising keep-alive, so the next request through llama-swap can
    be handed that connection as it closes; Go retries only replayable requests, never a POST
    (net/http transport.go:818-862). The member's own errors carry a body, llama-swap's own ones are JSON
    (``{"src": "llama-swap", ...}``), so an empty 502 is that lost request: sent once more (issue #25)."""
    return status == 502 and not body.strip()



def request(sess: ChatSession, scheme: str, host: str, port: int, url: str, path: str, data: bytes,
            headers: dict[str, str], r: RequestResult, clock: Callable[[], float],
            connect_timeout_s: float, stall_timeout_s: float,
            on_chunk: Callable[[RequestResult], None] | None) -> RequestResult:
    """POST ``data`` to ``path`` on ``(scheme, host, port)`` over ``sess`` and read the answer into
    ``r`` (see :func:`rigkit.bench.client.stream_chat`, which builds the body and headers).
    The clock starts just before the request's bytes go out; ``connect_timeout_s`` bounds the
    connect, ``stall_timeout_s`` (s) every later wait. Returns ``r``; failures are recorded in
    it (:func:`rigkit.bench.result.failed`), never raised."""
    for attempt in (0, 1):
        try:
            conn, reused = sess.connection(scheme, host, port, connect_timeout_s)
        except TimeoutError as exc:
            return failed(r, Happened("connect", exc=exc),
                          f"could not connect to {url} within {connect_timeout_s:g} s")
        except OSError as exc:
            return failed(r, Happened("connect", exc=exc),
                          f"could not connect to {url}: {type(exc).__name__}")
        conn.sock.settimeout(stall_timeout_s)
        try:
            conn.putrequest("POST", path, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            t0 = clock()  # the request leaves now
            conn.endheaders(data)
            resp = conn.getresponse()
        except TimeoutError as exc:
            sess.drop(scheme, host, port)
            return failed(r, Happened("send", exc=exc),
                          f"stalled: no response headers within {stall_timeout_s:g} s (stall timeout)")
        except (http.client.HTTPException, OSError) as exc:
            sess.drop(scheme, host, port)
            if reused and attempt == 0:
                continue  # the server closed the kept connection: once more on a new one
            return failed(r, Happened("send", exc=exc),
                          f"could not connect to {url}: {type(exc).__name__}")
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
    if 300 <= resp.status < 400:
        where = resp.getheader("Location")
        sess.drop(scheme, host, port)
        return failed(r, Happened("redirect", status=resp.status, message=where),
                      f"HTTP {resp.status} from POST {path}: redirected to "
                      f"{where if where else '(no Location header)'}; the bench does not follow a "
                      f"redirect (a POST's body is not sent twice): point the bench at that URL")
    if resp.status >= 400:
        msg = error_message(raw)
        r.retry_after_s = retry_after_seconds(resp.getheader("Retry-After"))
        after = (f" (Retry-After {r.retry_after_s:g} s)" if r.retry_after_s is not None else "")
        return failed(r, Happened("status", status=resp.status, message=msg,
                                  retry_after_s=r.retry_after_s),
                      f"HTTP {resp.status} from POST {path}: {msg}{after}")
    how, _ = response_kind(resp.getheader("Content-Type"), resp.getheader("Content-Encoding"))
    try:
        if how == "json":
            out = not_streamed(resp, r, t0, clock)
        elif how == "stream":
            out = read_stream(resp, r, t0, clock, stall_timeout_s, on_chunk)
        else:
            out = not_event_stream(resp, r, t0, clock)
    except BaseException:
        sess.drop(scheme, host, port)
        raise
    if not r.ok or resp.will_close or not resp.isclosed():  # a body not read to its end
        sess.drop(scheme, host, port)
    return out


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


def _network_clock(resp: http.client.HTTPResponse, clock: Callable[[], float]) -> list[float] | None:
    """``[t]``: the clock when the last network read under ``resp`` returned, kept current by wrapping
    its socket reader's ``readinto`` (None when ``resp`` has none). ``read1`` of a chunked body returns
    one HTTP chunk at a time (CPython ``http.client`` ``_read1_chunked``), so chunks that one network
    read brought are handed over one by one with no network wait between them; stamped with the
    network read's clock they share its instant, as they arrived (a burst read as a burst), and the
    figures follow the definition in :mod:`rigkit.bench.client` (the clock when the read that
    brought a chunk returned)."""
    raw = getattr(getattr(resp, "fp", None), "raw", None)
    inner = getattr(raw, "readinto", None)
    if inner is None:
        return None
    stamp = [clock()]

    def readinto(b):  # the network read: its clock, as it returns
        n = inner(b)
        stamp[0] = clock()
        return n

    raw.readinto = readinto
    return stamp


def _set_timeout(resp: http.client.HTTPResponse, timeout_s: float) -> None:
    """Bound the next socket read of ``resp`` to ``timeout_s`` seconds (its socket's own timeout)."""
    sock = getattr(getattr(resp.fp, "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(max(timeout_s, 0.001))


def read_stream(resp: http.client.HTTPResponse, r: RequestResult, t0: float, clock: Callable[[], float],
                stall_timeout_s: float, on_chunk: Callable[[RequestResult], None] | None,
                after_done_s: float = AFTER_DONE_S) -> RequestResult:
    """Read an event stream into ``r`` (:class:`StreamConsumer`), one ``read1`` at a time, each
    stamped with ``clock()`` as it returns; a read that raises ends the stream with it. After
    ``data: [DONE]`` the rest is read for at most ``after_done_s`` seconds (a late usage, the
    body's end), never waited on: a server that keeps sending (comments after ``[DONE]``) or holds
    the body open is left, and its connection dropped."""
    c = StreamConsumer(r, t0, stall_timeout_s, on_chunk)
    feed = c.feed
    read1 = resp.read1
    stamp = _network_clock(resp, clock)
    try:
        while True:
            data = read1(65536)
            t = stamp[0] if stamp is not None else clock()
            if not data or feed(data, t):
                break
    except (OSError, http.client.HTTPException) as exc:
        return c.end(clock(), exc)
    if r.ok and c.t_done is not None:
        c.tail_ended = resp.isclosed()
        deadline = c.t_done + after_done_s
        try:
            while not c.tail_ended:
                left = deadline - clock()
                if left <= 0:
                    break
                _set_timeout(resp, left)
                data = read1(65536)
                if not data:
                    c.tail_ended = True
                    break
                c.after(data, clock())
        except (OSError, http.client.HTTPException):
            c.tail_ended = False
    return c.end(clock())


def not_event_stream(resp, r: RequestResult, t0: float, clock) -> RequestResult:
    """A 2xx answer that is not an event stream (:func:`response_kind`): ``not-event-stream``
    naming the Content-Type or Content-Encoding received and what its first bytes look like."""
    try:
        head = resp.read(4096)
    except (OSError, http.client.HTTPException):
        head = b""
    r.total_s = clock() - t0
    _, msg = response_kind(resp.getheader("Content-Type"), resp.getheader("Content-Encoding"), head)
    return failed(r, Happened("type"), msg)


def not_streamed(resp, r: RequestResult, t0: float, clock) -> RequestResult:
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
    how, msg = response_kind(resp.getheader("Content-Type"), resp.getheader("Content-Encoding"),
                             raw[:4096])
    if how != "json":  # an event stream labelled application/json
        return failed(r, Happened("type"), msg)
    try:
        obj = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        msg = error_object_message(obj)
        if msg is not None:
            return failed(r, Happened("body", message=msg),
                          f"server answered {r.status} with an error body instead of a "
                          f"stream: {msg[:300]}")
        usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
        ct = integral(usage.get("completion_tokens"))
        if ct is not None:
            r.completion_tokens, r.tokens_source = ct, "usage"
        said = (f"its usage says {ct} completion tokens, but" if ct is not None
                else "it carries no usage count, and")
        return failed(r, Happened("body"), f"server answered one application/json body, not an "
                                           f"event stream (stream: true not honoured): {said} time "
                                           f"to first token and decode tok/s cannot be measured "
                                           f"from one body")
    return failed(r, Happened("body"), f"server answered application/json where a stream was "
                                       f"asked for, and the body is not a JSON object "
                                       f"({len(raw)} bytes)")

