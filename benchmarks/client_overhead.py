"""How much the bench client costs: events/s it parses, latency it adds to the first token.

Not a test: prints figures (medians of several runs). A local server on 127.0.0.1 streams
vLLM-shaped chunks as fast as the socket takes them:

1. parse rate — ``stream_chat`` end to end (requests + SSE parser + JSON + counting) over a
   stream of EVENTS chunks, in events/s; also the bare :class:`SSEParser` on the same bytes.
   At 1,000 tok/s with one token per chunk the client must parse well over 1,000 events/s.
2. added latency to first token — the server answers with headers and one chunk at once;
   ``stream_chat``'s ``ttft_s`` against a raw socket that sends the same request and reads
   until the first ``data:`` line, in milliseconds.

Run: ``.venv/bin/python benchmarks/client_overhead.py [--events 20000] [--runs 7]``
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time

from rigkit.host.bench.client import stream_chat
from rigkit.host.bench.sse import SSEParser

CHUNK = json.dumps({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1,
                    "model": "qwen3.8-27b", "choices": [{"index": 0, "delta": {"content": " tok"},
                                                         "logprobs": None, "finish_reason": None}]})


def stream_bytes(n_events: int) -> bytes:
    """The SSE body: role chunk, ``n_events`` content chunks, finish, usage, [DONE]."""
    ev = f"data: {CHUNK}\n\n".encode()
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 10,
                                                 "completion_tokens": n_events}})
    return ev * n_events + f"data: {usage}\n\ndata: [DONE]\n\n".encode()


class Server:
    """A minimal HTTP/1.1 server on 127.0.0.1: each connection reads one request and writes
    the prepared body (close-delimited), then closes."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(65536)
            head, _, rest = buf.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            while len(rest) < length:
                rest += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Connection: close\r\n\r\n" + self.body)


def raw_first_token_s(port: int) -> float:
    """Seconds from sending the request on a raw socket to reading the first ``data:`` line."""
    body = json.dumps({"messages": [], "stream": True}).encode()
    req = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
           f"application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(req)
        buf = b""
        while b"data: " not in buf:
            buf += s.recv(65536)
        return time.monotonic() - t0


def main() -> None:
    """Run both measurements and print medians."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    body = stream_bytes(a.events)
    big = Server(body)
    url = f"http://127.0.0.1:{big.port}/v1/chat/completions"
    rates, parser_rates = [], []
    for _ in range(a.runs):
        t0 = time.monotonic()
        r = stream_chat(url, {"messages": []})
        dt = time.monotonic() - t0
        assert r.ok and r.completion_tokens == a.events and r.token_chunks == a.events, r.error
        rates.append(a.events / dt)
        p = SSEParser()
        t0 = time.monotonic()
        n = 0
        for i in range(0, len(body), 16384):
            n += len(p.feed(body[i:i + 16384]))
        parser_rates.append(n / (time.monotonic() - t0))
    small = Server(stream_bytes(1))
    surl = f"http://127.0.0.1:{small.port}/v1/chat/completions"
    client_ms, raw_ms = [], []
    for _ in range(max(a.runs, 15)):
        client_ms.append(1000 * stream_chat(surl, {"messages": []}).ttft_s)
        raw_ms.append(1000 * raw_first_token_s(small.port))
    med = statistics.median
    print(f"stream_chat parse rate: {med(rates):,.0f} events/s median over {a.runs} runs of "
          f"{a.events:,} events (min {min(rates):,.0f}, max {max(rates):,.0f})")
    print(f"SSEParser alone:        {med(parser_rates):,.0f} events/s median")
    print(f"time to first token:    stream_chat {med(client_ms):.3f} ms, raw socket "
          f"{med(raw_ms):.3f} ms median over {len(raw_ms)} runs -> client adds "
          f"{med(client_ms) - med(raw_ms):.3f} ms")


if __name__ == "__main__":
    main()
