"""A replay server speaking vLLM's streaming dialect, with true token counts known by construction.

Each POST to ``/v1/chat/completions`` plays the next queued :class:`Script` (or the default
one). A script is a list of steps: ``("event", obj)`` sends ``data: <json>\\n\\n``,
``("raw", bytes)`` sends bytes as they are, ``("sleep", seconds)``, ``("wait", event)`` waits until
the test sets ``event`` (a :class:`threading.Event`; e.g. from the client's ``on_chunk``: the client
has read what came before), ``("hold",)`` sends nothing more until the client hangs up (a stall it
must time out on), ``("done",)`` sends
``data: [DONE]``, ``("cut",)`` closes the socket mid-stream (no terminating chunk),
``("kill",)`` marks the engine dead (later requests get 500, ``/health`` 503);
``Script(die=True)`` answers this request with vLLM's 500 after engine death and stays dead. Each write is
one HTTP/1.1 chunk so the client sees it as soon as it is sent.

Other shapes a real server or proxy sends: ``("error_line", obj)`` writes llama.cpp's
``error: <json>\n\n``; ``("reset",)`` resets the connection (RST, SO_LINGER 0);
``Script(pieces=N)`` writes every step in N HTTP chunks (cut at :func:`cut_points`: inside
``data:``, inside a multi-byte character, between CR and LF), ``piece_gap_s`` apart, with
TCP_NODELAY; ``Script(status=200, body=obj)`` answers one ``application/json`` body;
``Script(headers={...})`` adds response headers (``Retry-After``; a ``Content-Type`` there
replaces ``text/event-stream``, a ``Content-Encoding`` is sent as it is — the steps' bytes are
not encoded: what a proxy that relabels does). ``loading_for = N`` makes
the next N chat requests, and ``/health`` meanwhile, answer llama.cpp's 503 ``Loading model``.

llama-swap's own shapes (v250, ``../shared/vendor/llama-swap/``): :func:`llama_swap_loading` its
loading writer's frames, :func:`llama_swap_error_body` the bodies ``swaputil.SendResponse`` writes
(into the 200 stream, raw, when the loading writer had begun it); ``Script(header_list=[(k, v)])``
sends headers as given, a name repeated included; ``running_queue`` answers ``/running`` with its
next list, then ``running``.

Side endpoints: ``/health`` (200, or 503 once dead), ``/version`` (``{"version": ...}``, as
vLLM), ``/v1/models`` (with ``max_model_len``), ``/metrics`` (vLLM's spec-decode counters,
advancing per request), ``/tokenize`` (4 characters per token), ``/running`` (llama-swap's,
from ``running``); ``/upstream/<model>/<path>`` is served as ``/<path>``. Every request's headers are
kept in ``seen_headers`` so tests can check the Authorization header.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: How long a ``wait`` or ``hold`` step waits at most: a hang guard only.
WAIT_S = 60.0

LOADING_BODY = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}

ENGINE_DEAD_BODY = {"error": {"message": "EngineCore encountered an issue. See stack trace "
                              "(above) for the root cause.", "type": "InternalServerError",
                              "param": None, "code": 500}}


def chunk(delta: dict[str, Any], finish: str | None = None, model: str = "qwen3.8-27b") -> dict:
    """A ``chat.completion.chunk`` with one choice."""
    return {"id": "chatcmpl-replay", "object": "chat.completion.chunk", "created": 1,
            "model": model, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                         "finish_reason": finish}]}


def usage_chunk(prompt_tokens: int, completion_tokens: int, **extra: Any) -> dict:
    """The OpenAI usage chunk: ``choices: []`` plus ``usage``."""
    return {"id": "chatcmpl-replay", "object": "chat.completion.chunk", "created": 1,
            "model": "qwen3.8-27b", "choices": [],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}, **extra}


def vllm_stream(*, reasoning: list[str] = (), answer: list[str] = (), tokens_per_chunk: int = 3,
                prompt_tokens: int = 100, usage: bool = True, finish: str = "stop",
                gap_s: float = 0.0, done: bool = True) -> list[tuple]:
    """Steps for a vLLM stream: role chunk, ``delta.reasoning`` chunks, ``delta.content``
    chunks (each worth ``tokens_per_chunk`` tokens), the finish chunk, the usage chunk when
    ``usage`` (completion_tokens = chunks × tokens_per_chunk, true by construction), [DONE]."""
    steps: list[tuple] = [("event", chunk({"role": "assistant", "content": ""}))]
    for text in reasoning:
        if gap_s:
            steps.append(("sleep", gap_s))
        steps.append(("event", chunk({"reasoning": text})))
    for text in answer:
        if gap_s:
            steps.append(("sleep", gap_s))
        steps.append(("event", chunk({"content": text})))
    steps.append(("event", chunk({}, finish=finish)))
    if usage:
        n = (len(reasoning) + len(answer)) * tokens_per_chunk
        steps.append(("event", usage_chunk(prompt_tokens, n)))
    if done:
        steps.append(("done",))
    return steps


def said(warnings: list[str]) -> list[str]:
    """``warnings`` but the arrival ones (TTFT/decode ``unmeasurable``): a replay stream written back to
    back may reach the client in one network read or in several, as the machine schedules it, and a
    test about counts or words does not depend on that."""
    return [w for w in warnings if "unmeasurable" not in w]


#: llama-swap's loading writer streams text in pieces of ``max(3, int(charPerSecond)/15)`` runes,
#: ``charPerSecond`` 75 (``internal/router/loading.go:68, 163-189``): 5.
LOADING_PIECE = 5


def llama_swap_frame(text: str) -> tuple:
    """One frame of llama-swap's loading writer, as Go's ``json.Marshal`` writes it:
    ``data: {"choices":[{"delta":{"reasoning_content":…}}]}`` (``internal/router/loading.go:200-235``:
    no id, object, model, index or finish_reason; compact, non-ASCII as is, ``<>&`` escaped)."""
    body = json.dumps({"choices": [{"delta": {"reasoning_content": text}}]}, separators=(",", ":"),
                      ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return ("raw", b"data: " + body.encode() + b"\n\n")


def _inline(text: str) -> list[str]:
    return [text[i:i + LOADING_PIECE] for i in range(0, len(text), LOADING_PIECE)]


def _line(text: str) -> list[str]:
    return ["\n"] if text == "" else [*_inline(text), "\n"]  # sendLine, loading.go:191-198


def llama_swap_loading(model: str, ticks: list[str], done_s: float | None = 1.0) -> list[tuple]:
    """The frames llama-swap's loading writer sends while ``model`` is loaded for a streamed chat
    request of a member with ``sendLoadingState`` (``router/base.go:529-547``): the header lines
    (``loading.go:76-77``: ``━━━━━``, ``llama-swap loading model: <model>``), one frame per tick
    (``:120-148``: ``"."``, or a remark or queue update as ``"\n"``, its pieces, ``" "``), and — when
    ``done_s`` is given — the closing lines (``:90-101``: ``"\n"``, ``Done! (<done_s>s)``, ``━━━━━``,
    ``" "``). ``ticks``: ``"."`` or a remark's text each."""
    texts = [*_line("━━━━━"), *_line(f"llama-swap loading model: {model}")]
    for tick in ticks:
        texts += ["."] if tick == "." else ["\n", *_inline(tick), " "]
    if done_s is not None:
        texts += ["\n", *_line(f"Done! ({done_s:.2f}s)"), *_line("━━━━━"), *_line(" ")]
    return [llama_swap_frame(t) for t in texts]


def llama_swap_error_body(message: str, accept: str = "text/event-stream") -> bytes:
    """The body ``swaputil.SendResponse`` writes for ``message`` (``internal/swaputil/http.go:108-131``),
    chosen by the request's ``Accept``: ``text/plain`` → ``llama-swap: <message>``; ``text/html`` → its
    HTML page (message HTML-escaped); else JSON ``{"error":…,"src":"llama-swap"}`` (a Go map: keys
    sorted). No trailing newline."""
    import html

    if "text/plain" in accept:
        return f"llama-swap: {message}".encode()
    if "text/html" in accept:
        return f"<html><body><h1>llama-swap</h1><p>{html.escape(message)}</p></body></html>".encode()
    return json.dumps({"error": message, "src": "llama-swap"}, separators=(",", ":"),
                      ensure_ascii=False).encode()


@dataclass
class Script:
    """What one chat request gets: an HTTP ``status`` and either ``steps`` (a stream) or a
    JSON ``body`` (an error)."""

    steps: list[tuple] = field(default_factory=list)
    status: int = 200
    body: dict | None = None
    quote: bool = False
    quote_diff_at: int | None = None
    die: bool = False
    pieces: int = 1
    piece_gap_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    header_list: list[tuple[str, str]] = field(default_factory=list)
    raw_status_body: bytes | None = None


def cut_points(data: bytes, n: int) -> list[bytes]:
    """``data`` in ``n`` pieces, cut where a parser is most easily fooled: inside ``data:``,
    inside a multi-byte UTF-8 character, between a CR and its LF; else evenly."""
    if n <= 1 or len(data) < n:
        return [data]
    cuts: list[int] = []
    for cand in (data.find(b"ata:") + 2 if b"ata:" in data else -1,
                 next((i + 1 for i, b in enumerate(data) if b >= 0xC0), -1),
                 data.find(b"\r\n") + 1 if b"\r\n" in data else -1):
        if 0 < cand < len(data) and cand not in cuts:
            cuts.append(cand)
    k = 1
    while len(cuts) < n - 1:
        cand = k * len(data) // n
        if 0 < cand < len(data) and cand not in cuts:
            cuts.append(cand)
        k += 1
    cuts = sorted(cuts[: n - 1])
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


def quote_steps(prompt: str, diff_at: int | None) -> list[tuple]:
    """Answer a quoting prompt with its marked passage (``#`` replacing the character at
    ``diff_at`` when given), 12 characters per chunk, each chunk worth 3 tokens."""
    start = prompt.index("<<<QUOTE START>>>\n") + len("<<<QUOTE START>>>\n")
    passage = prompt[start:prompt.index("\n<<<QUOTE END>>>")]
    if diff_at is not None:
        passage = passage[:diff_at] + "#" + passage[diff_at + 1:]
    parts = [passage[i:i + 12] for i in range(0, len(passage), 12)]
    return vllm_stream(reasoning=["Copying."], answer=parts, tokens_per_chunk=3)


class ReplayServer:
    """Threaded HTTP server on 127.0.0.1 (free port); use as a context manager.

    + ``queue(script, ...)``: scripts for the next chat requests, in order.
    + ``default``: the script used when the queue is empty.
    + ``url``: ``http://127.0.0.1:PORT``.
    """

    def __init__(self, default: Script | None = None) -> None:
        self.default = default or Script(vllm_stream(answer=["Hello"] * 3))
        self.scripts: deque[Script] = deque()
        self.dead = False
        self.requests_seen: list[dict] = []
        self.seen_headers: list[dict[str, str]] = []
        self.gets: list[str] = []  # the paths of every GET, as asked (before /upstream/<model> is stripped)
        self.spec_counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
        self.metrics_enabled = True
        self.running: list[dict] = []
        self.running_queue: deque[list[dict]] = deque()
        self.loading_for = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _strip_upstream(self) -> None:
                # llama-swap's /upstream/<model>/<path> passes <path> to the member
                if self.path.startswith("/upstream/"):
                    self.path = "/" + self.path.split("/", 3)[3]

            def do_GET(self):  # noqa: N802
                server.seen_headers.append(dict(self.headers))
                server.gets.append(self.path)
                self._strip_upstream()
                if self.path == "/running":
                    self._json(200, {"running": server.running_queue.popleft() if server.running_queue
                                     else server.running})
                elif self.path == "/health":
                    if server.loading_for > 0:
                        self._json(503, LOADING_BODY)
                    elif server.dead:
                        self._json(503, {"error": "EngineDeadError"})
                    else:
                        self.send_response(200)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                elif self.path == "/version":
                    self._json(200, {"version": "0.19.1-replay"})
                elif self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{
                        "id": "qwen3.8-27b", "object": "model", "owned_by": "vllm",
                        "root": "/models/Qwen3.8-27B-W4A16-AutoRound", "max_model_len": 65536}]})
                elif self.path == "/metrics" and server.metrics_enabled:
                    c = server.spec_counters
                    text = (
                        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
                        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="q"}} {c["drafts"]}.0\n'
                        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="q"}} {c["draft_tokens"]}.0\n'
                        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="q"}} {c["accepted"]}.0\n'
                    ).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                else:
                    self._json(404, {"detail": "Not Found"})

            def do_POST(self):  # noqa: N802
                server.seen_headers.append(dict(self.headers))
                self._strip_upstream()
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path == "/tokenize":
                    text = body.get("prompt") or body.get("content") or ""
                    self._json(200, {"count": max(len(text) // 4, 1), "max_model_len": 65536,
                                     "tokens": []})
                    return
                if self.path != "/v1/chat/completions":
                    self._json(404, {"detail": "Not Found"})
                    return
                server.requests_seen.append(body)
                if server.loading_for > 0:
                    server.loading_for -= 1
                    self._json(503, LOADING_BODY)
                    return
                if server.dead:
                    self._json(500, ENGINE_DEAD_BODY)
                    return
                script = server.scripts.popleft() if server.scripts else server.default
                if script.die:
                    server.dead = True
                    self._json(500, ENGINE_DEAD_BODY)
                    return
                if script.quote:
                    script = Script(quote_steps(body["messages"][-1]["content"],
                                                script.quote_diff_at))
                if script.status != 200 and script.raw_status_body is not None:
                    self.send_response(script.status)  # a body as it is (llama-swap's text/plain one)
                    for k, v in script.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(script.raw_status_body)))
                    self.end_headers()
                    self.wfile.write(script.raw_status_body)
                    return
                if script.status != 200:
                    self._json(script.status, script.body or {"error": {"message": "boom"}},
                               script.headers)
                    return
                if script.body is not None:  # one JSON body where a stream was asked for
                    self._json(200, script.body, script.headers)
                    return
                # 10 drafts of 7 tokens, 2 accepted each → acceptance length 1 + 20/10 = 3.0
                server.spec_counters["drafts"] += 10
                server.spec_counters["draft_tokens"] += 70
                server.spec_counters["accepted"] += 20
                self.send_response(200)
                if "Content-Type" not in script.headers and not any(
                        k.lower() == "content-type" for k, _ in script.header_list):
                    self.send_header("Content-Type", "text/event-stream")
                for k, v in script.header_list:
                    self.send_header(k, v)
                self.send_header("Transfer-Encoding", "chunked")
                for k, v in script.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if script.pieces > 1:
                    import socket
                    self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for step in script.steps:
                    kind = step[0]
                    if kind == "sleep":
                        time.sleep(step[1])
                        continue
                    if kind == "wait":
                        self.wfile.flush()
                        assert step[1].wait(WAIT_S), "a replay step waited for an event never set"
                        continue
                    if kind == "hold":
                        self.wfile.flush()
                        self.connection.settimeout(WAIT_S)
                        try:
                            while self.connection.recv(4096):  # until the client closes its end
                                pass
                        except OSError:
                            pass
                        self.close_connection = True
                        return
                    if kind == "cut":
                        self.wfile.flush()
                        self.close_connection = True
                        try:
                            import socket
                            self.connection.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass
                        return
                    if kind == "reset":
                        import socket
                        import struct
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                   struct.pack("ii", 1, 0))
                        self.connection.close()
                        return
                    if kind == "kill":
                        server.dead = True
                        continue
                    if kind == "event":
                        data = b"data: " + json.dumps(step[1]).encode() + b"\n\n"
                    elif kind == "error_line":
                        data = b"error: " + json.dumps(step[1]).encode() + b"\n\n"
                    elif kind == "done":
                        data = b"data: [DONE]\n\n"
                    else:
                        data = step[1]
                    for i, piece in enumerate(cut_points(data, script.pieces)):
                        if i and script.piece_gap_s:
                            time.sleep(script.piece_gap_s)
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    def queue(self, *scripts: Script) -> None:
        """Queue scripts for the next chat requests."""
        self.scripts.extend(scripts)

    def __enter__(self) -> "ReplayServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
