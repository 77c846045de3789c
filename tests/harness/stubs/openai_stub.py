"""HyperQwen's vLLM engine stand-in (a stdlib OpenAI-compatible server), run by the sandbox's
HyperQwen image (tests/harness/images.py) and by the fast tier's sweep tests as a local process.
Strata and the GGUF baseline run llama.cpp's real server instead (the llama.cpp image).

usage: openai_stub.py [--kind vllm] --model PATH --host H --port P --alias NAME [--api-key K]
Control (tests), files in CONTROL_DIR (``$MODELS_DIR/.sandbox-control`` in the container,
hostctl.HQ_CONTROL; kept across restarts of the container):
- ``answer500``: completions answer 500 (EngineDeadError); if the file holds an integer N, the
  first N completions of this server process succeed and every later one answers 500.
- ``die_after``: an integer N; the engine dies (the process exits 1) on completion N+1.
- ``boot_delay_s``: seconds before the server binds its port (vLLM listens only once the
  engine is up); a large value means it never gets healthy. A FIFO there makes the engine load until
  the test writes to it (then it waits what was written, e.g. ``0``): a boot that ends on the test's
  word, never on the machine's speed (test_lock.py's races). A SIGTERM meanwhile ends the engine at
  once (``--kind vllm``), as vLLM's does: its api_server installs a SIGTERM handler that raises
  ``KeyboardInterrupt("terminated")`` before it builds the engine ("Interrupt server on sigterm while
  initializing", ``vllm/entrypoints/openai/api_server.py`` ``setup_server``). Before, the stand-in left
  SIGTERM at its default while loading, which its container's PID 1 ignores: every stop of a tenant
  still loading waited out compose's ``stop_grace_period`` (30 s) for the SIGKILL.
- ``chunk_s``: seconds between streamed chunks (HyperQwen's engine; default :data:`CHUNK_S`), to make
  a request last long enough for a test to interrupt it.
- ``collapse_after``: an integer N; from a request's N-th generated token on, speculative decoding
  accepts nothing (one token per chunk): the collapse operators report on long runs (club-3090 #1052),
  planted.
A chat prompt holding a passage between ``<<<QUOTE START>>>`` and ``<<<QUOTE END>>>`` lines is
answered with that passage (the bench's quoting workload), like a model that quotes correctly.

HyperQwen's engine (``--kind vllm``), as the operator's write-ups report it (DESIGN.md "Testing with
real parts"), from ``DFLASH_TOKENS`` in its environment (the ``.env`` compose passes; default 7):
- tokens per chunk grow with the draft length: chat ``1 + 1.5 * min(d, 7) / 7`` (2.5 at 7, the
  seeds' figure; longer drafts buy chat nothing), quoting ``1 + 0.6 * d`` (5.2 at 7, 10 at 15);
  one chunk every :data:`CHUNK_S` s (the verify step), so decode tok/s follows tokens per chunk;
  the steps keep the engine's own clock (:func:`paced`: chunk j leaves at the stream's start + j steps,
  never a sleep after the last write: sleeps that each wake late add their lateness up, and the
  figure then measures this host's scheduler, not the modelled engine);
  the first chunk is the prefill's one token (no draft), each later chunk one verify step: its
  accepted draft tokens and the bonus token. A request with ``ignore_eos`` (vLLM's sampling extra)
  generates its whole ``max_tokens``; other chat answers stop at 64 tokens.
- ``GET /metrics`` serves vLLM's speculative-decoding counters and its finished-request counter in
  Prometheus text format with vLLM's names, types and labels (``vllm:spec_decode_num_drafts_total``,
  ``…_num_draft_tokens_total``, ``…_num_accepted_tokens_total`` labelled ``model_name``, ``engine``;
  ``…_num_accepted_tokens_per_pos_total`` with ``position`` 0 … d-1; ``vllm:request_success_total``
  with ``finished_reason``; source: :mod:`rigkit.bench.metrics`, vLLM commits cited there), counted as
  the chunks are sent. Whether HyperQwen's DFlash2 patch feeds vLLM's counters is **unverified** (no
  capture of its /metrics exists); the stand-in assumes it does.
- **ASSUMPTION, a model of our own** (no measurement behind it): the acceptance. Each verify step
  drafts d tokens and keeps a prefix of them; position i (0-based) is kept with probability
  ``q_i = r ** (i + 1)``, r chosen so that ``sum(q_i)`` is the mean accepted per step the tokens per
  chunk above imply (chat 1.5 of 7: 21%, low, thinking-heavy; quoting 4.2 of 7: 60%, high). The
  steps are drawn from a low-discrepancy sequence (step j of a request keeps the positions with
  ``frac(j * 0.618…) < q_i``), so a request's counters are the same every time and the
  per-position rates tend to ``q_i``; tokens per chunk equal the accepted batch plus one.
  prefill at :data:`PREFILL_TPS` tok/s; prompt tokens are characters / 4 (there is no /tokenize).
- a prompt of :data:`CRASH_PROMPT_TOKENS` tokens or more with ``DFLASH_TOKENS`` above 7 kills the
  engine: ``EngineDeadError`` (marlin_gemm allocation failure) in the log, that request and every
  later completion answer 500 and ``/health`` 503 until the container restarts; the crash leaves
  ``crashed`` in the control directory, and the first engine to boot after it removes it and
  answers every completion 500 all the same (``/health`` 200: it looks fine), so it takes a second
  restart to recover (the seeds' "sometimes twice", made deterministic).

Power (issue 31; the curve is a model, not a measurement): with ``FAKE_GPU_SHARE`` set (the image sets
``/app/models/.sandbox-control/gpu``; the runtime hook registers it with the fake ``nvidia-smi`` and
writes ``gpu.json`` there: the power limit and the board's full-load demand, W) the engine writes its
load to ``$FAKE_GPU_SHARE/load.json`` whenever it starts or stops serving a stream (``busy``, ``since``,
``busy_s``: see stubs/nvidia-smi), so the fake's draw and energy counter follow its work, and its
decode slows with the limit: each chunk takes :data:`CHUNK_S` / :func:`speed_factor`, where
``speed_factor = sqrt(min(limit, demand) / demand)`` (1.0 at or above the demand, 370 W by default;
0.71 at 185 W, 0.52 at 100 W): decoding is memory-bound, so halving the power costs less than half
the speed.
"""
import argparse, json, os, signal, stat, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--kind", choices=["vllm"], default="vllm")  # the one engine it stands in for
ap.add_argument("--model", default="")
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, default=8080)
ap.add_argument("--alias", default="")
ap.add_argument("--api-key", default=os.environ.get("VLLM_API_KEY", ""))
ap.add_argument("--control-dir", default="")
ap.add_argument("--model-shown", default="", help="the model path as the container sees it (for messages)")
a, _ = ap.parse_known_args()

NAME = a.alias or os.path.basename(a.model) or "model"
T0 = int(time.time())
SERVED = [0]  # completions answered by this process
SERVED_LOCK = threading.Lock()
VLLM = a.kind == "vllm"
DRAFT = int(os.environ.get("DFLASH_TOKENS") or 7) if VLLM else None
SAFE_DRAFT = 7
CRASH_PROMPT_TOKENS = 20_000
#: The verify step, seconds: ``$SANDBOX_STEP_S`` from the image's own ``Env`` (tests/harness/images.py: the
#: ``sandbox`` tag leaves it unset, 0.01 s; the ``sandbox-slow`` tag, a build planted several times slower for
#: ``rigkit bisect``, sets it) — the speed is the image's, pulled by its digest, never a knob the deploy does not know.
CHUNK_S = float(os.environ.get("SANDBOX_STEP_S") or 0.01)
#: A build tuned for drafts of at most ``$SANDBOX_TUNED_DRAFT`` tokens (tests/harness/images.py: the
#: ``sandbox-draft`` tag sets it with ``$SANDBOX_UNTUNED_STEP_S``; unset: every draft runs at :data:`CHUNK_S`).
#: With a longer ``DFLASH_TOKENS`` its verify step is ``$SANDBOX_UNTUNED_STEP_S`` — slow only for the image
#: *and* the spec's ``dflash_tokens`` together: an interaction of two entries, planted for ``rigkit bisect``'s
#: pair search (issue 68). A plant, not a model of a measured build.
TUNED_DRAFT = int(os.environ.get("SANDBOX_TUNED_DRAFT") or 0)
if VLLM and TUNED_DRAFT and DRAFT > TUNED_DRAFT:
    CHUNK_S = float(os.environ.get("SANDBOX_UNTUNED_STEP_S") or CHUNK_S)
PREFILL_TPS = 400_000.0
DEAD = [None]  # why the engine is dead (None: alive)
SHARE = os.environ.get("FAKE_GPU_SHARE") or ""
LOAD = {"active": 0, "busy_s": 0.0, "since": time.time()}
LOAD_LOCK = threading.Lock()


def speed_factor():
    """Decode speed relative to an unconstrained card, from ``$FAKE_GPU_SHARE/gpu.json`` (module doc);
    1.0 without a share or before the hook wrote one."""
    try:
        g = json.load(open(os.path.join(SHARE, "gpu.json"))) if SHARE else {}
        limit, demand = float(g["power_limit_w"]), float(g["power_demand_w"])
    except (OSError, ValueError, KeyError, TypeError):
        return 1.0
    return (min(limit, demand) / demand) ** 0.5 if demand > 0 else 1.0


def busy(delta):
    """One stream more (+1) or fewer (-1); write load.json when the engine starts or stops being busy."""
    if not SHARE:
        return
    with LOAD_LOCK:
        now = time.time()
        was = LOAD["active"] > 0
        if was:
            LOAD["busy_s"] += now - LOAD["since"]
        LOAD["since"] = now
        LOAD["active"] = max(0, LOAD["active"] + delta)
        try:
            os.makedirs(SHARE, exist_ok=True)
            tmp = os.path.join(SHARE, f".load.{os.getpid()}.tmp")
            with open(tmp, "w") as f:
                json.dump({"busy": int(LOAD["active"] > 0), "since": now, "busy_s": LOAD["busy_s"], "pid": os.getpid()}, f)
            os.replace(tmp, os.path.join(SHARE, "load.json"))
        except OSError:
            pass


GOLDEN = (5 ** 0.5 - 1) / 2
METRICS = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": [0] * (DRAFT or 0),
           "requests": {"stop": 0, "length": 0, "abort": 0}}
METRICS_LOCK = threading.Lock()


def position_rates(mean_accepted, d):
    """``[q_0 … q_{d-1}]`` with ``q_i = r ** (i + 1)`` summing to ``mean_accepted`` (module doc:
    ASSUMPTION); r by bisection."""
    if d <= 0 or mean_accepted <= 0:
        return [0.0] * max(d, 0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        r = (lo + hi) / 2
        if sum(r ** (i + 1) for i in range(d)) < mean_accepted:
            lo = r
        else:
            hi = r
    return [lo ** (i + 1) for i in range(d)]


def steps(k, quoting, collapse_after=None):
    """The chunk sizes (tokens) of an answer of ``k`` tokens and the accepted count of each verify
    step: ``[(tokens, accepted or None for the prefill's chunk)]`` (module doc)."""
    if DRAFT is None:
        return [(1, None)] * k
    q = position_rates(tokens_per_chunk(quoting) - 1, DRAFT)
    out, done, j = [(1, None)], 1, 0
    while done < k:
        j += 1  # each request runs the sequence from its start: the same request, the same steps
        u = (j * GOLDEN) % 1.0
        acc = sum(1 for qi in q if u < qi)
        if collapse_after is not None and done >= collapse_after:
            acc = 0
        n = min(acc + 1, k - done)
        out.append((n, n - 1))  # a step cut by max_tokens counts what it emitted
        done += n
    return out[:k]


def count_step(accepted):
    """One verify step into the counters (drafts, draft tokens, accepted, per position)."""
    with METRICS_LOCK:
        METRICS["drafts"] += 1
        METRICS["draft_tokens"] += DRAFT
        METRICS["accepted"] += accepted
        for i in range(accepted):
            METRICS["per_pos"][i] += 1


def exposition():
    """The counters as prometheus-client writes vLLM's: ``# HELP``/``# TYPE`` per family, the
    ``_total`` sample with labels ``model_name`` and ``engine`` (and ``position`` /
    ``finished_reason``), documentation strings as vLLM's source has them."""
    lab = f'engine="0",model_name="{NAME}"'
    with METRICS_LOCK:
        m = {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v) for k, v in METRICS.items()}
    lines = []

    def family(name, doc, samples):
        lines.append(f"# HELP {name}_total {doc}")
        lines.append(f"# TYPE {name}_total counter")
        lines.extend(f"{name}_total{{{labels}}} {float(v)}" for labels, v in samples)

    if DRAFT is not None:
        family("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [(lab, m["drafts"])])
        family("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [(lab, m["draft_tokens"])])
        family("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", [(lab, m["accepted"])])
        family("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
               [(f'{lab},position="{i}"', v) for i, v in enumerate(m["per_pos"])])
    family("vllm:request_success", "Count of successfully processed requests.",
           [(f'{lab},finished_reason="{r}"', v) for r, v in m["requests"].items()])
    return ("\n".join(lines) + "\n").encode()


def tokens_per_chunk(quoting):
    """Accepted tokens per streamed chunk at this draft length (module doc)."""
    if DRAFT is None:
        return 1.0
    return 1 + 0.6 * DRAFT if quoting else 1 + 1.5 * min(DRAFT, SAFE_DRAFT) / SAFE_DRAFT


def prompt_tokens(req):
    """Characters / 4 of the messages (chat) or the prompt (completions)."""
    chars = sum(len(m.get("content") or "") for m in req.get("messages") or [] if isinstance(m.get("content"), str))
    if isinstance(req.get("prompt"), str):
        chars += len(req["prompt"])
    return max(1, chars // 4)


def paced(items, step_s, clock=time.monotonic, sleep=time.sleep):
    """Yield each of ``items`` at its deadline: item j (1-based) no earlier than the start + j × ``step_s``
    (seconds), the start being the first call's ``clock()``. A wake that comes late (a busy host's scheduler)
    delays that item only, never the ones after it: the next deadline is the schedule's, not the late wake
    plus a step. So a stream of k items lasts k × ``step_s`` plus the last item's lateness, whatever the
    lateness of the others — as vLLM's engine core steps on (``vllm/v1/engine/core.py``
    ``EngineCoreProc.run_busy_loop``, a process of its own) while the front end that writes the stream
    (``vllm/v1/engine/async_llm.py`` ``AsyncLLM._run_output_handler``) runs late. A sleep of ``step_s`` after
    each write instead adds every wake's lateness to the stream (docs/bench.md "Why the sandbox's runs are
    rarely steady")."""
    t0 = None
    for j, item in enumerate(items, 1):
        now = clock()
        t0 = now if t0 is None else t0
        wait = t0 + j * step_s - now
        if wait > 0:
            sleep(wait)
        yield item


def control(name):
    """The content of CONTROL_DIR/name (stripped), or None when the file is absent."""
    path = os.path.join(a.control_dir, name) if a.control_dir else ""
    try:
        return open(path).read().strip() if path else None
    except OSError:
        return None


def quoted(req):
    """The marked passage of the last user message, or None."""
    msgs = req.get("messages") or []
    text = msgs[-1].get("content") if msgs and isinstance(msgs[-1].get("content"), str) else ""
    start, end = "<<<QUOTE START>>>\n", "\n<<<QUOTE END>>>"
    if start in text and end in text.split(start, 1)[1]:
        return text.split(start, 1)[1].split(end, 1)[0]
    return None


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
            if DEAD[0] and DEAD[0] != "sticky":
                return self.send(503, {"error": {"message": DEAD[0], "code": 503}})
            return self.send(200, {"status": "ok"})
        if not self.authorized():
            return
        if self.path == "/v1/models":
            return self.send(200, {"object": "list", "data": [{"id": NAME, "object": "model", "created": T0, "owned_by": "sandbox"}]})
        if self.path == "/metrics" and VLLM:
            body = exposition()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return self.wfile.write(body)
        self.send(404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(n) or b"{}")
        except ValueError:
            return self.send(400, {"error": {"message": "invalid JSON"}})
        if not self.authorized():
            return
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            return self.send(404, {"error": {"message": "Not Found"}})
        with SERVED_LOCK:
            SERVED[0] += 1
            n = SERVED[0]
        die, e500 = control("die_after"), control("answer500")
        if die is not None and die.isdigit() and n > int(die):
            print("EngineDeadError: engine core died (sandbox: told to die)", file=sys.stderr, flush=True)
            os._exit(1)
        if e500 is not None and (not e500.isdigit() or n > int(e500)):
            return self.send(500, {"error": {"message": "EngineDeadError (sandbox: told to answer 500)", "code": 500}})
        n_prompt = prompt_tokens(req)
        if DEAD[0]:
            return self.send(500, {"error": {"message": "EngineDeadError: EngineCore encountered an issue. See stack "
                                             "trace (above) for the root cause.", "code": 500}})
        if VLLM and DRAFT > SAFE_DRAFT and n_prompt >= CRASH_PROMPT_TOKENS:
            DEAD[0] = "EngineDeadError: engine core died"
            print(f"ERROR EngineCore: RuntimeError: marlin_gemm: CUDA error: out of memory (aten::empty call failed "
                  f"while allocating the int4 draft workspace; DFLASH_TOKENS={DRAFT}, prompt {n_prompt} tokens)\n"
                  "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
                  "(above) for the root cause.", file=sys.stderr, flush=True)
            if a.control_dir:
                os.makedirs(a.control_dir, exist_ok=True)
                open(os.path.join(a.control_dir, "crashed"), "w").write(f"DFLASH_TOKENS={DRAFT} prompt {n_prompt}\n")
            return self.send(500, {"error": {"message": "EngineDeadError: EngineCore encountered an issue. See stack "
                                             "trace (above) for the root cause.", "code": 500}})
        if not req.get("stream"):
            return self.answer(req, n_prompt)
        busy(+1)
        try:
            return self.answer(req, n_prompt)
        finally:
            busy(-1)

    def answer(self, req, n_prompt):
        if VLLM:
            time.sleep(n_prompt / PREFILL_TPS)
        cap = 10 ** 7 if req.get("ignore_eos") else 64
        k = max(1, min(int(req.get("max_tokens") or 8), cap))
        pieces = ["sandbox "] * k  # one piece per token
        passage = quoted(req) if self.path.endswith("chat/completions") else None
        if passage is not None:
            k = max(1, min(len(passage) // 4, int(req.get("max_tokens") or 10 ** 6)))
            cut = [round(i * len(passage) / k) for i in range(k + 1)]
            pieces = [passage[a:b] for a, b in zip(cut, cut[1:])]
        plan = [(1, None)] * k
        if VLLM:  # whole accepted batches per chunk (module doc)
            collapse = control("collapse_after")
            plan = steps(k, passage is not None, int(collapse) if collapse and collapse.isdigit() else None)
            edges = [0]
            for n, _acc in plan:
                edges.append(edges[-1] + n)
            pieces = ["".join(pieces[a:b]) for a, b in zip(edges, edges[1:])]
        usage = {"prompt_tokens": n_prompt, "completion_tokens": k, "total_tokens": n_prompt + k}
        chat = self.path.endswith("chat/completions")
        if not req.get("stream"):
            for _n, acc in plan:
                if acc is not None:
                    count_step(acc)
            with METRICS_LOCK:
                METRICS["requests"]["length"] += 1
            choice = {"index": 0, "finish_reason": "length"}
            text = "".join(pieces) if passage is not None else "".join(pieces).rstrip()
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            return self.send(200, {"id": "cmpl-sandbox", "object": "chat.completion" if chat else "text_completion",
                                   "created": int(time.time()), "model": NAME, "choices": [choice], "usage": usage})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        chunk_s = control("chunk_s")
        step_s = (float(chunk_s) if chunk_s else CHUNK_S) / speed_factor()
        finished = "abort"
        try:
            for w, (_n, acc) in paced(zip(pieces, plan), step_s if VLLM else 0.0):
                if acc is not None:
                    count_step(acc)
                d = {"delta": {"content": w}} if chat else {"text": w}
                ch = {"id": "cmpl-sandbox", "object": "chat.completion.chunk", "model": NAME, "choices": [{"index": 0, **d, "finish_reason": None}]}
                self.wfile.write(b"data: " + json.dumps(ch).encode() + b"\n\n")
            if (req.get("stream_options") or {}).get("include_usage"):
                self.wfile.write(b"data: " + json.dumps({"id": "cmpl-sandbox", "choices": [], "usage": usage}).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            finished = "length"
        finally:
            with METRICS_LOCK:
                METRICS["requests"][finished] += 1
        self.close_connection = True


def _terminated(*_):
    """vLLM's SIGTERM handler while it initializes (``setup_server``'s ``signal_handler``)."""
    raise KeyboardInterrupt("terminated")


def main():
    """Serve until SIGTERM (module doc)."""
    if VLLM and control("crashed") is not None:  # the first boot after a crash comes up broken
        os.remove(os.path.join(a.control_dir, "crashed"))
        DEAD[0] = "sticky"
        print("(sandbox) the engine crashed before this boot: every completion answers 500 until the next restart",
              file=sys.stderr, flush=True)
    gate = os.path.join(a.control_dir, "boot_delay_s") if a.control_dir else ""
    if gate and os.path.exists(gate):
        if VLLM:  # vLLM's setup_server: "Interrupt server on sigterm while initializing" (module doc)
            signal.signal(signal.SIGTERM, _terminated)
        try:  # the lines inside: a SIGTERM once one is printed lands in here (test_standin_sigterm.py waits for it)
            if stat.S_ISFIFO(os.stat(gate).st_mode):
                print("(sandbox) loading the engine until boot_delay_s is written (a FIFO)", flush=True)
            delay = control("boot_delay_s")  # a FIFO: the engine loads until the test writes to it (module doc)
            if delay:
                print(f"(sandbox) loading the engine for {delay} s before listening", flush=True)
                time.sleep(float(delay))
        except KeyboardInterrupt as exc:
            print(f"(sandbox) {exc} while loading the engine", file=sys.stderr, flush=True)
            sys.exit(128 + signal.SIGINT)  # what an uncaught KeyboardInterrupt ends a Python process with
    busy(0)  # load.json: not busy (a restarted engine starts its own count)
    srv = ThreadingHTTPServer((a.host, a.port), H)
    srv.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown).start())
    print(f"main: server is listening on http://{a.host}:{a.port} (sandbox stand-in, model {NAME})", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
