#!/usr/bin/env python3
"""A tiny OpenAI-compatible model server, the members of the real llama-swap's tests (stdlib only).

Endpoints: ``GET /health`` (503 ``Loading model`` like llama.cpp's server until
``--health-delay`` s have passed, then 200 ``{"status":"ok"}``), ``GET /`` (200),
``GET /v1/models``, ``POST /v1/chat/completions`` and ``POST /v1/completions`` (plain,
or SSE with ``"stream": true``: one chunk per token, a usage chunk when
``stream_options.include_usage`` is true, then ``data: [DONE]``). Replies echo the
request's ``model`` so tests can see ``useModelName`` rewrites.

Failure modes: ``--never-healthy``, ``--exit-at-start CODE`` (exits before listening),
``--die-after S`` (``os._exit(3)`` S seconds after start), ``--ignore-sigterm``
(only SIGKILL stops it), ``--token-delay S`` (slow streams), ``--drop-reused`` (a request that
is not the first on its keep-alive connection is read and the connection closed without an
answer: a server closing an idle connection as the proxy reuses it; each drop is appended to
``--drop-log F``), ``--keepalive-timeout S`` (a server whose keep-alive idle timeout is S s, like
cpp-httplib's 5 s in llama.cpp's server, caught at the moment it closes: a request arriving on a
connection idle for S s or more is read and the connection closed without an answer; logged in
``--drop-log F`` too).

Steps a test controls (so no test waits on this machine's speed): ``--ready-file F`` (``/health``
answers 503 ``Loading model`` until F exists: the model has loaded when the test says so),
``--hold-file F`` (a stream sends its first token, then waits until F exists before the rest: a
request held mid-stream), ``--keepalive-file F`` (the keep-alive timeout at the test's word: F holds a
number, and a request arriving on a connection that went idle before that number last changed is
read and the connection closed without an answer, as with ``--keepalive-timeout``; logged in
``--drop-log F`` too). Observability for tests: ``--conn-log F`` appends ``open`` when a client
connects and ``closed`` when that connection ends (the client closed it, or this server did), so a
test waits for the proxy to close its idle connections instead of sleeping; ``--vram-seen-file F``
writes the MiB held by other live processes when this one starts (proves a swap freed
VRAM first); ``--signal-log F`` appends the name of each stop signal received.

VRAM stand-in (shared convention with the sandbox's fake ``nvidia-smi``): with
``--vram-mib N`` it writes N (MiB, integer) to
``$RIGKIT_FAKE_GPU_DIR/procs/<pid>.mib`` (default dir ``/run/fake-gpu``) and removes
the file on a clean exit (SIGTERM/SIGINT); readers count an entry only while that pid
is alive, so a crash (``--die-after``) leaves a stale file that no longer counts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
START = time.monotonic()
VRAM_FILE = None


def _log_signal(signum):
    if ARGS is not None and ARGS.signal_log and signum:
        with open(ARGS.signal_log, "a") as f:
            f.write(signal.Signals(signum).name + "\n")


def vram_in_use_mib(gpu_dir):
    """Sum of ``procs/<pid>.mib`` entries whose pid is alive (the shared convention)."""
    total = 0
    d = os.path.join(gpu_dir, "procs")
    for n in os.listdir(d) if os.path.isdir(d) else []:
        if not n.endswith(".mib"):
            continue
        try:
            pid = int(n[:-4])
            os.kill(pid, 0)
            with open(os.path.join(d, n)) as f:
                total += int(f.read().strip() or 0)
        except (ValueError, ProcessLookupError, PermissionError, FileNotFoundError):
            continue
    return total


def _wait_for(path):
    """Return once ``path`` exists (a test's word)."""
    while not os.path.exists(path):
        time.sleep(0.01)


def _keepalive_word():
    """The number in ``--keepalive-file`` (its text; "" while absent)."""
    try:
        with open(ARGS.keepalive_file) as f:
            return f.read().strip()
    except OSError:
        return ""


def _cleanup_and_exit(signum=None, _frame=None):
    _log_signal(signum)
    if VRAM_FILE:
        try:
            os.unlink(VRAM_FILE)
        except OSError:
            pass
    os._exit(0)


ANSWERED = [0]  # completions answered by this process
_CONN_LOG_LOCK = threading.Lock()


def _conn_log(event):
    """``--conn-log``: one line per connection event (``open``, ``closed``)."""
    if ARGS is not None and ARGS.conn_log:
        with _CONN_LOG_LOCK, open(ARGS.conn_log, "a") as f:
            f.write(event + "\n")


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("fake-member %s %s\n" % (self.command, self.path))

    def _json(self, code, obj):
        b = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def _dropped(self) -> bool:
        self._served = getattr(self, "_served", 0) + 1
        idle = time.monotonic() - getattr(self, "_done_at", time.monotonic())
        stale = ARGS.keepalive_timeout is not None and self._served > 1 and idle >= ARGS.keepalive_timeout
        stale = stale or (ARGS.keepalive_file is not None and self._served > 1
                          and _keepalive_word() != getattr(self, "_idle_word", None))
        if not stale and (not ARGS.drop_reused or self._served == 1):
            return False
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        if ARGS.drop_log:
            with open(ARGS.drop_log, "a") as f:
                f.write("%s %s\n" % (self.command, self.path))
        self.close_connection = True
        return True

    def setup(self):
        super().setup()
        _conn_log("open")

    def finish(self):
        try:
            super().finish()
        finally:
            _conn_log("closed")

    def handle_one_request(self):
        super().handle_one_request()
        self._done_at = time.monotonic()  # the connection is idle from here
        if ARGS.keepalive_file is not None:
            self._idle_word = _keepalive_word()

    def do_GET(self):
        if self._dropped():
            return
        p = self.path.split("?")[0]
        if p == "/health":
            ready = not ARGS.never_healthy and time.monotonic() - START >= ARGS.health_delay
            ready = ready and (ARGS.ready_file is None or os.path.exists(ARGS.ready_file))
            if ready:
                return self._json(200, {"status": "ok"})
            return self._json(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
        if p == "/v1/models":
            return self._json(200, {"object": "list", "data": [{"id": ARGS.name, "object": "model"}]})
        if p == "/":
            return self._json(200, {"name": ARGS.name})
        return self._json(404, {"error": "not found"})

    def do_POST(self):
        if self._dropped():
            return
        n = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        p = self.path.split("?")[0]
        if p not in ("/v1/chat/completions", "/v1/completions"):
            return self._json(404, {"error": "not found"})
        chat = p == "/v1/chat/completions"
        model = req.get("model", "")
        words = [("w%d " % i) for i in range(ARGS.tokens)]
        usage = {"prompt_tokens": 3, "completion_tokens": len(words), "total_tokens": 3 + len(words)}
        if not req.get("stream"):
            time.sleep(ARGS.token_delay * len(words))
            text = "".join(words)
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                      if chat else {"index": 0, "text": text, "finish_reason": "stop"})
            self._json(200, {"id": "x1", "object": "chat.completion" if chat else "text_completion",
                             "created": int(time.time()), "model": model, "served_by": ARGS.name,
                             "choices": [choice], "usage": usage})
            return self._answered()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        obj = "chat.completion.chunk" if chat else "text_completion"
        for i, w in enumerate(words):
            ch = ({"index": 0, "delta": {"content": w}, "finish_reason": None} if chat
                  else {"index": 0, "text": w, "finish_reason": None})
            self._event({"id": "x1", "object": obj, "model": model, "choices": [ch]})
            if i == 0 and ARGS.hold_file:
                _wait_for(ARGS.hold_file)
            time.sleep(ARGS.token_delay)
        last = ({"index": 0, "delta": {}, "finish_reason": "stop"} if chat
                else {"index": 0, "text": "", "finish_reason": "stop"})
        self._event({"id": "x1", "object": obj, "model": model, "choices": [last]})
        if (req.get("stream_options") or {}).get("include_usage"):
            self._event({"id": "x1", "object": obj, "model": model, "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True
        self._answered()

    def _answered(self):
        """``--die-after-answers N``: the process exits 3 once N completions were answered (the
        answer already sent), as a server that crashes after serving does."""
        ANSWERED[0] += 1
        if ARGS.die_after_answers is not None and ANSWERED[0] >= ARGS.die_after_answers:
            self.wfile.flush()
            threading.Timer(0.05, lambda: os._exit(3)).start()

    def _event(self, obj):
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


def main(argv=None):
    global ARGS, VRAM_FILE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--name", default="fake")
    ap.add_argument("--health-delay", type=float, default=0.0)
    ap.add_argument("--never-healthy", action="store_true")
    ap.add_argument("--exit-at-start", type=int, default=None)
    ap.add_argument("--die-after", type=float, default=None)
    ap.add_argument("--die-after-answers", type=int, default=None)
    ap.add_argument("--ignore-sigterm", action="store_true")
    ap.add_argument("--vram-mib", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=5)
    ap.add_argument("--token-delay", type=float, default=0.0)
    ap.add_argument("--vram-seen-file", default=None)
    ap.add_argument("--signal-log", default=None)
    ap.add_argument("--drop-reused", action="store_true")
    ap.add_argument("--drop-log", default=None)
    ap.add_argument("--keepalive-timeout", type=float, default=None)
    ap.add_argument("--ready-file", default=None)
    ap.add_argument("--hold-file", default=None)
    ap.add_argument("--keepalive-file", default=None)
    ap.add_argument("--conn-log", default=None)
    ARGS = ap.parse_args(argv)
    if ARGS.exit_at_start is not None:
        sys.stderr.write("fake-member: exiting at start with code %d\n" % ARGS.exit_at_start)
        sys.exit(ARGS.exit_at_start)
    gpu_dir = os.environ.get("RIGKIT_FAKE_GPU_DIR", "/run/fake-gpu")
    if ARGS.vram_seen_file:
        with open(ARGS.vram_seen_file, "w") as f:
            f.write("%d\n" % vram_in_use_mib(gpu_dir))
    if ARGS.ignore_sigterm:
        signal.signal(signal.SIGTERM, lambda s, _f: _log_signal(s))
    else:
        signal.signal(signal.SIGTERM, _cleanup_and_exit)
    signal.signal(signal.SIGINT, _cleanup_and_exit)
    if ARGS.vram_mib:
        d = os.path.join(gpu_dir, "procs")
        os.makedirs(d, exist_ok=True)
        VRAM_FILE = os.path.join(d, "%d.mib" % os.getpid())
        with open(VRAM_FILE + ".tmp", "w") as f:
            f.write("%d\n" % ARGS.vram_mib)
        os.replace(VRAM_FILE + ".tmp", VRAM_FILE)
    if ARGS.die_after is not None:
        threading.Timer(ARGS.die_after, lambda: os._exit(3)).start()
    srv = ThreadingHTTPServer((ARGS.host, ARGS.port), H)
    srv.daemon_threads = True
    sys.stderr.write("fake-member %s listening on %s:%d\n" % (ARGS.name, ARGS.host, ARGS.port))
    sys.stderr.flush()
    try:
        srv.serve_forever(poll_interval=0.1)
    finally:
        _cleanup_and_exit()


if __name__ == "__main__":
    main()
