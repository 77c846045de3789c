"""A model server for the docker stand-in: llama.cpp's real server (xllamacpp) when the host has it,
else a small stdlib OpenAI-compatible server. Fails like llama-server when the model file is missing.

usage: openai_stub.py --kind llama|vllm --model PATH --host H --port P --alias NAME [--api-key K]
Control (tests): a file CONTROL_DIR/answer500 makes every completion answer 500 (the stdlib server only).
"""
import argparse, json, os, signal, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--kind", default="llama")
ap.add_argument("--model", default="")
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, default=8080)
ap.add_argument("--alias", default="")
ap.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY", ""))
ap.add_argument("--control-dir", default="")
ap.add_argument("--model-shown", default="", help="the model path as the container sees it (for messages)")
a, _ = ap.parse_known_args()

if a.kind == "llama":
    if not a.model or not os.path.isfile(a.model):
        a.model = a.model_shown or a.model
        print(f"gguf_init_from_file: failed to open GGUF file '{a.model}'", file=sys.stderr)
        print(f"llama_model_load: error loading model: llama_model_loader: failed to load model from {a.model}", file=sys.stderr)
        print("common_init_from_params: failed to load model '%s'" % a.model, file=sys.stderr)
        print("srv    load_model: failed to load model, '%s'" % a.model, file=sys.stderr)
        print("main: exiting due to model loading error", file=sys.stderr)
        sys.exit(1)
    site = "/usr/lib/fake-docker/site"
    if os.path.isdir(os.path.join(site, "xllamacpp")) and not os.environ.get("FAKE_DOCKER_NO_XLLAMACPP"):
        sys.path.insert(0, site)
        try:
            import xllamacpp as xlc
        except Exception as e:  # noqa: BLE001 - fall back to the stdlib server
            print(f"(sandbox) xllamacpp unusable here ({e}); serving with the stdlib stand-in", file=sys.stderr)
        else:
            p = xlc.CommonParams()
            p.model.path = a.model
            p.n_ctx = 4096
            p.cpuparams.n_threads = 1
            p.cpuparams_batch.n_threads = 1
            p.hostnames = [a.host] if isinstance(p.hostnames, list) else a.host
            p.port = a.port
            alias = a.alias or os.path.basename(a.model)
            p.model_alias = [alias] if isinstance(p.model_alias, (list, set)) else alias
            srv = xlc.Server(p)
            print(f"main: server is listening on http://{a.host}:{a.port} (llama.cpp via xllamacpp)", flush=True)
            ev = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: ev.set())
            signal.signal(signal.SIGINT, lambda *_: ev.set())
            ev.wait()
            os._exit(0)

NAME = a.alias or os.path.basename(a.model) or "model"
T0 = int(time.time())


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        if a.api_key and self.headers.get("Authorization", "") != f"Bearer {a.api_key}":
            self.send(401, {"error": "Unauthorized"})
            return False
        return True

    def do_GET(self):
        if self.path in ("/health", "/v1/health"):
            return self.send(200, {"status": "ok"})
        if not self.authorized():
            return
        if self.path == "/v1/models":
            return self.send(200, {"object": "list", "data": [{"id": NAME, "object": "model", "created": T0, "owned_by": "sandbox"}]})
        self.send(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return self.send(400, {"error": {"message": "invalid JSON"}})
        if not self.authorized():
            return
        if a.control_dir and os.path.exists(os.path.join(a.control_dir, "answer500")):
            return self.send(500, {"error": {"message": "EngineDeadError (sandbox: told to answer 500)", "code": 500}})
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self.send(404, {"error": {"message": "Not Found"}})
        k = max(1, min(int(req.get("max_tokens") or 8), 64))
        words = ["sandbox"] * k
        usage = {"prompt_tokens": 4, "completion_tokens": k, "total_tokens": 4 + k}
        chat = self.path.endswith("chat/completions")
        if not req.get("stream"):
            choice = {"index": 0, "finish_reason": "length"}
            if chat:
                choice["message"] = {"role": "assistant", "content": " ".join(words)}
            else:
                choice["text"] = " ".join(words)
            return self.send(200, {"id": "cmpl-sandbox", "object": "chat.completion" if chat else "text_completion",
                                   "created": int(time.time()), "model": NAME, "choices": [choice], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for w in words:
            d = {"delta": {"content": w + " "}} if chat else {"text": w + " "}
            ch = {"id": "cmpl-sandbox", "object": "chat.completion.chunk", "model": NAME, "choices": [{"index": 0, **d, "finish_reason": None}]}
            self.wfile.write(b"data: " + json.dumps(ch).encode() + b"\n\n")
        if (req.get("stream_options") or {}).get("include_usage"):
            self.wfile.write(b"data: " + json.dumps({"id": "cmpl-sandbox", "choices": [], "usage": usage}).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


srv = ThreadingHTTPServer((a.host, a.port), H)
srv.daemon_threads = True
signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown).start())
print(f"main: server is listening on http://{a.host}:{a.port} (sandbox stand-in, model {NAME})", flush=True)
srv.serve_forever()
