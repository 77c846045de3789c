"""HTTP side of the stand-in, held to upstream ``internal/server/{server,api,apigroup}.go``
and ``internal/swaputil/{http,httperror}.go``.

Routes: model-dispatched POSTs (``/v1/chat/completions``, ``/v1/completions`` and the
other OpenAI paths) routed by the body's ``model``; ``GET /v1/models``, ``/running``,
``/health`` (``OK``), ``/api/version``, ``GET /unload``, ``POST /api/models/unload``,
``POST /api/models/unload/<model>``, ``/upstream/<model>/<path>``. Responses from a
member are streamed through chunk by chunk. Error bodies are OpenAI-style envelopes
``{"src":"llama-swap","error":{"message","type","param","code"}}``.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from .config import Config
from .log import Logger
from .process import READY, Process, split_proxy
from .router import GroupRouter, RouterError
from .version import BUILD_DATE, COMMIT, VERSION

MODEL_POST_ROUTES = {
    "/v1/chat/completions", "/v1/responses", "/v1/completions", "/v1/messages",
    "/v1/messages/count_tokens", "/v1/embeddings", "/reranking", "/rerank", "/v1/rerank",
    "/v1/reranking", "/infill", "/completion", "/v1/audio/speech", "/v1/audio/voices",
    "/v1/images/generations", "/sdapi/v1/txt2img", "/sdapi/v1/img2img",
}
VERSIONLESS = {"/v/chat/completions", "/v/responses", "/v/completions", "/v/messages",
               "/v/messages/count_tokens", "/v/embeddings", "/v/rerank", "/v/reranking"}
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailers", "transfer-encoding", "upgrade", "proxy-connection"}

_ERR_TYPES = {
    400: ("invalid_request_error", "bad_request"), 401: ("authentication_error", "unauthorized"),
    403: ("authentication_error", "forbidden"), 404: ("invalid_request_error", "not_found"),
    409: ("invalid_request_error", "conflict"), 429: ("rate_limit_error", "rate_limit_exceeded"),
    502: ("server_error", "bad_gateway"), 503: ("server_error", "service_unavailable"),
    504: ("server_error", "gateway_timeout"),
}


def error_envelope(status: int, message: str) -> bytes:
    """Upstream ``NewErrorEnvelope`` as JSON bytes."""
    etype, code = _ERR_TYPES.get(status, ("invalid_request_error", "invalid_request") if 400 <= status < 500
                                 else ("server_error", "internal_error"))
    return json.dumps({"src": "llama-swap",
                       "error": {"message": message, "type": etype, "param": None, "code": code}},
                      separators=(",", ":")).encode()


class App:
    """The running server state: config, router, loggers. Swapped whole on reload."""

    def __init__(self, cfg: Config, proxylog: Logger, upstreamlog: Logger) -> None:
        self.cfg = cfg
        self.log = proxylog
        self.router = GroupRouter(cfg, proxylog, upstreamlog)
        self._ignore = [re.compile(p) for p in cfg.ignore_paths]

    def start_preload(self) -> None:
        """``hooks.on_startup.preload``: load each model in order (upstream ``startPreload``)."""
        if not self.cfg.preload:
            return
        threading.Thread(target=self._preload, daemon=True).start()

    def _preload(self) -> None:
        for mid in self.cfg.preload:
            if not self.router.handles(mid):
                self.log.warn("preload: model %s is not a local model, skipping" % mid)
                continue
            self.log.info("preloading model: %s" % mid)
            try:
                proc = self.router.acquire(mid)
            except RouterError as e:
                self.log.error("failed to preload model %s: status %d" % (mid, e.status))
                continue
            try:
                host, port, base = split_proxy(proc.config.proxy)
                conn = http.client.HTTPConnection(host, port, timeout=30)
                try:
                    conn.request("GET", base + "/")
                    r = conn.getresponse()
                    r.read()
                    if r.status >= 400:
                        self.log.error("failed to preload model %s: status %d" % (mid, r.status))
                finally:
                    conn.close()
            except OSError:
                self.log.error("failed to preload model %s: status %d" % (mid, 502))
            finally:
                self.router.release(mid)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llama-swap"
    sys_version = ""

    @property
    def app(self) -> App:
        return self.server.app  # type: ignore[attr-defined]

    def log_message(self, fmt: str, *args) -> None:  # upstream logs requests at debug
        self.app.log.debug("Request %s %s" % (self.command, self.path))

    # ------------------------------------------------------------- responses
    def _send(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json(self, obj, status: int = 200) -> None:
        self._send(status, (json.dumps(obj) + "\n").encode(), "application/json")

    def _send_error(self, status: int, message: str) -> None:
        accept = self.headers.get("Accept", "")
        if "text/plain" in accept:
            self._send(status, ("llama-swap: %s" % message).encode(), "text/plain")
        else:
            self._send(status, error_envelope(status, message), "application/json")

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _authorized(self) -> bool:
        keys = self.app.cfg.api_keys
        if not keys:
            return True
        auth = self.headers.get("Authorization", "")
        cand = []
        if auth.startswith("Bearer "):
            cand.append(auth[7:].strip())
        if auth.startswith("Basic "):
            import base64

            try:
                user, _, pw = base64.b64decode(auth[6:]).decode().partition(":")
                cand += [pw, user]
            except (ValueError, UnicodeDecodeError):
                pass
        if self.headers.get("x-api-key"):
            cand.append(self.headers["x-api-key"])
        if any(c in keys for c in cand):
            return True
        # wording not confirmed in upstream source (internal/server/auth.go not read)
        self._send_error(401, "unauthorized: invalid or missing API key")
        return False

    # ------------------------------------------------------------- dispatch
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/wol-health"):
            return self._send(200, b"OK")
        if path.startswith("/upstream/"):
            return self._upstream(b"")
        if path in ("/v1/models", "/models"):
            if self._authorized():
                self._list_models()
            return
        if path == "/running":
            if self._authorized():
                self._running()
            return
        if path == "/unload":
            if self._authorized():
                self.app.router.unload()
                self._send(200, b"OK")
            return
        if path == "/api/version":
            if self._authorized():
                self._send_json({"version": VERSION, "commit": COMMIT, "build_date": BUILD_DATE})
            return
        self._not_found()

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        body = self._read_body()
        if path in MODEL_POST_ROUTES or path in VERSIONLESS:
            if self._authorized():
                self._model_request(body, path[2:] if path.startswith("/v/") else path)
            return
        if path == "/api/models/unload":
            if self._authorized():
                self.app.router.unload()
                self._send_json({"msg": "ok"})
            return
        if path.startswith("/api/models/unload/"):
            if self._authorized():
                requested = path[len("/api/models/unload/"):].lstrip("/")
                real = self.app.cfg.real_model_name(requested)
                if real is None:
                    return self._send_error(404, "model not found")
                if not self.app.router.handles(real):
                    return self._send_error(404, "no local server found for requested model")
                self.app.router.unload([real])
                self._send(200, b"OK")
            return
        if path.startswith("/upstream/"):
            return self._upstream(body)
        self._not_found()

    def _not_found(self) -> None:
        self._send(404, b"404 page not found\n")

    # ------------------------------------------------------------- API
    def _list_models(self) -> None:
        created = int(time.time())
        data = []

        def rec(mid, mc):
            r = {"id": mid, "object": "model", "created": created, "owned_by": "llama-swap"}
            if mc.name.strip():
                r["name"] = mc.name.strip()
            if mc.description.strip():
                r["description"] = mc.description.strip()
            if mc.metadata:
                r["meta"] = {"llamaswap": mc.metadata}
            return r

        for mid, mc in self.app.cfg.models.items():
            if mc.unlisted:
                continue
            data.append(rec(mid, mc))
            if self.app.cfg.include_aliases_in_list:
                for a in mc.aliases:
                    if a.strip():
                        data.append(rec(a.strip(), mc))
        for pid, peer in self.app.cfg.peers.items():
            for m in peer.get("models") or []:
                data.append({"id": m, "object": "model", "created": created, "owned_by": "llama-swap",
                             "name": "%s: %s" % (pid, m), "meta": {"llamaswap": {"peerID": pid}}})
        data.sort(key=lambda r: r["id"])
        self._send_json({"object": "list", "data": data})

    def _running(self) -> None:
        out = []
        for mid, state in sorted(self.app.router.running_models().items()):
            mc = self.app.cfg.models[mid]
            out.append({"model": mid, "state": state, "cmd": mc.cmd, "proxy": mc.proxy, "ttl": mc.ttl,
                        "name": mc.name, "description": mc.description})
        self._send_json({"running": out})

    # ------------------------------------------------------------- proxying
    def _model_request(self, body: bytes, fwd_path: str) -> None:
        try:
            req = json.loads(body or b"{}")
            model = req.get("model") if isinstance(req, dict) else None
        except ValueError:
            model = None
        if not isinstance(model, str) or not model:
            return self._send_error(404, "no model id could be identified")
        real = self.app.cfg.real_model_name(model)
        if real is None or not self.app.router.handles(real):
            return self._send_error(404, "no router for requested model")
        mc = self.app.cfg.models[real]
        if mc.use_model_name:
            req["model"] = mc.use_model_name
            body = json.dumps(req).encode()
        query = self.path[len(self.path.split("?", 1)[0]):]
        self._serve_via(real, body, fwd_path + query)

    def _upstream(self, body: bytes) -> None:
        if not self._authorized():
            return
        rest = self.path[len("/upstream/"):]
        path_part, _, query = rest.partition("?")
        parts = path_part.split("/")
        for i in range(1, len(parts) + 1):
            real = self.app.cfg.real_model_name("/".join(parts[:i]))
            if real is not None:
                remaining = "/" + "/".join(parts[i:])
                break
        else:
            return self._send_error(404, "model not found")
        if not self.app.router.handles(real):
            return self._send_error(404, "no router for model " + real)
        proc = self.app.router.processes[real]
        if proc.state != READY and any(p.search(remaining) for p in self.app._ignore):
            return self._send_error(409, "model %s is not loaded; path %s is ignored" % (real, remaining))
        self._serve_via(real, body, remaining + ("?" + query if query else ""))

    def _serve_via(self, model_id: str, body: bytes, fwd_path: str) -> None:
        router = self.app.router
        try:
            proc = router.acquire(model_id)
        except RouterError as e:
            return self._send_error(e.status, e.message)
        try:
            if not proc.begin_request():
                return self._send_error(503, "[%s] process is not ready" % model_id)
            try:
                self._proxy(proc, body, fwd_path)
            finally:
                proc.end_request()
        finally:
            router.release(model_id)

    def _proxy(self, proc: Process, body: bytes, fwd_path: str) -> None:
        host, port, base = split_proxy(proc.config.proxy)
        conn = http.client.HTTPConnection(host, port, timeout=None)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP
                   and k.lower() not in ("host", "content-length")}
        headers["Host"] = "%s:%d" % (host, port)
        if self.command in ("POST", "PUT", "PATCH") or body:
            headers["Content-Length"] = str(len(body))
        try:
            conn.request(self.command, base + fwd_path, body=body or None, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            self.app.log.warn("<%s> proxy error: %s" % (proc.id, e))
            conn.close()
            self.send_response(502)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        try:
            self.send_response(resp.status)
            length = resp.getheader("Content-Length")
            for k, v in resp.getheaders():
                if k.lower() in HOP_BY_HOP or k.lower() in ("content-length", "date", "server"):
                    continue
                self.send_header(k, v)
            if "text/event-stream" in (resp.getheader("Content-Type") or "").lower():
                self.send_header("X-Accel-Buffering", "no")
            chunked = length is None
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", length)
            self.end_headers()
            self.wfile.flush()
            while True:
                data = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
                if not data:
                    break
                if chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                else:
                    self.wfile.write(data)
                self.wfile.flush()
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (OSError, http.client.HTTPException) as e:
            self.app.log.info("<%s> recovered from upstream disconnection during streaming: %s" % (proc.id, e))
            self.close_connection = True
        finally:
            conn.close()


class Server(ThreadingHTTPServer):
    """Threaded HTTP server bound to ``host:port``; ``app`` may be replaced on reload."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, app: App) -> None:
        host = addr[0]
        if host and ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__(addr, Handler)
        self.app = app


def parse_listen(listen: str):
    """``host:port`` (Go ``net.Listen`` style; empty host = all addresses) → tuple."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    return host, int(port)


def make_server(listen: str, app: App) -> Server:
    return Server(parse_listen(listen), app)
