"""Issue #25: llama.cpp's server closes its connection after every streamed answer while advertising
keep-alive, so llama-swap (Go's ReverseProxy, no ErrorHandler for members) can send the next POST on it
as it closes and answer ``502`` with an empty body. rigkit's own clients (the bench and smoke, the
activation's confirmations, the keeper and watchdog) send such a request once more; any other 502 is
reported as it is."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rigkit.bench import llama_swap
from rigkit.bench.client import proxy_lost_the_request, stream_chat


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script: list = []
    seen: list = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body, ctype = self.script.pop(0) if self.script else (200, None, None)
        self.seen.append(status)
        if body is None:  # a streamed answer with usage, as a member sends it through llama-swap
            ev = [{"choices": [{"index": 0, "delta": {"content": "hi"}}]},
                  {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}}]
            if self.headers.get("Accept") != "text/event-stream":
                b = json.dumps({"choices": [{"message": {"content": "hi"}}], "usage": ev[1]["usage"]}).encode()
                ctype = "application/json"
            else:
                b = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in ev) + b"data: [DONE]\n\n"
                ctype = "text/event-stream"
            body = b
        self.send_response(status)
        if ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def proxy():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Proxy.seen = []
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_only_an_empty_502_is_a_lost_request():
    assert proxy_lost_the_request(502, b"") and proxy_lost_the_request(502, b" \n")
    assert not proxy_lost_the_request(502, b'{"src": "llama-swap", "error": "x"}')
    assert not proxy_lost_the_request(500, b"") and not proxy_lost_the_request(503, b"")


def test_the_bench_sends_a_lost_request_once_more(proxy):
    _, base = proxy
    _Proxy.script = [(502, b"", None)]
    r = stream_chat(f"{base}/v1/chat/completions", {"model": "strata", "messages": []})
    assert r.ok and r.completion_tokens == 1 and _Proxy.seen == [502, 200], r.error


@pytest.mark.parametrize("second", [(502, b"", None), (502, b"bad gateway", "text/plain")])
def test_the_bench_reports_a_second_502_and_never_retries_a_502_with_a_body(proxy, second):
    _, base = proxy
    _Proxy.script = [second] if second[1] else [second, second]
    r = stream_chat(f"{base}/v1/chat/completions", {"model": "strata", "messages": []})
    assert not r.ok and r.status == 502 and r.error_kind == "http-5xx"
    assert _Proxy.seen == ([502] if second[1] else [502, 502])


def test_the_activations_completion_sends_a_lost_request_once_more(proxy):
    _, base = proxy
    _Proxy.script = [(502, b"", None)]
    assert llama_swap.complete(base, "strata").status_code == 200 and _Proxy.seen == [502, 200]
    _Proxy.seen, _Proxy.script = [], [(502, b"", None), (502, b"", None)]
    assert llama_swap.complete(base, "strata").status_code == 502 and _Proxy.seen == [502, 502]
