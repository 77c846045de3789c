#!/usr/bin/python3.11
"""llama-server's command line over llama.cpp's server in the xllamacpp wheel (rigkit sandbox image:
``/app/llama-server``).

The command line is parsed as llama-server parses it (``/app/llama_args.py`` over the table of the
wheel's own options, ``/app/llama_server_args.py``: rigkit/spec/llama_server.py and its table): an unknown flag, a flag missing its value, a
number that is not one or an enum value not among its choices exits 1 with llama-server's message
(``error: invalid argument: --no-such-flag``) before anything loads. Of the flags it accepts, these
reach llama.cpp's server (``xllamacpp.CommonParams``): -m/--model, --host, --port, -a/--alias,
-c/--ctx-size, -t/--threads, -tb/--threads-batch, -np/--parallel, -n/--predict, -b/--batch-size,
-ub/--ubatch-size, -fa/--flash-attn, --jinja/--no-jinja; every other known flag is accepted and not
honoured (GPU layers, cache types, sampling defaults …: the sandbox runs a tiny model on the CPU).
A model file that is missing fails with llama-server's messages, exit 1.
"""
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import llama_args  # the image: /app/llama_args.py is rigkit/spec/llama_server.py (tests/harness/images.py)
except ImportError:  # run from the checkout: the same module where it lives
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    from rigkit.spec import llama_server as llama_args

try:
    opts, warnings = llama_args.parse(sys.argv[1:])
except llama_args.Exit as e:
    sys.stdout.write(e.stdout)
    sys.stdout.flush()
    sys.stderr.write(e.stderr)
    sys.exit(e.code)
for w in warnings:
    print(w, file=sys.stderr)
if os.environ.get("RIGKIT_PARSE_ONLY"):  # the unit tests: stop after the command line
    sys.exit(0)
m = opts.get("--model", "")
if not m or not os.path.isfile(m):
    for line in (f"gguf_init_from_file: failed to open GGUF file '{m}'",
                 f"llama_model_load: error loading model: llama_model_loader: failed to load model from {m}",
                 f"common_init_from_params: failed to load model '{m}'", f"srv    load_model: failed to load model, '{m}'",
                 "main: exiting due to model loading error"):
        print(line, file=sys.stderr)
    sys.exit(1)
import xllamacpp as xlc  # noqa: E402

host, port = opts.get("--host", "127.0.0.1"), opts.get("--port", 8080)
threads = opts.get("--threads", 1)
p = xlc.CommonParams()
p.model.path = m
p.n_ctx = opts.get("--ctx-size", 4096) or 4096
p.cpuparams.n_threads = threads
p.cpuparams_batch.n_threads = opts.get("--threads-batch", threads)
p.hostnames = [host] if isinstance(p.hostnames, list) else host
p.port = port
alias = opts.get("--alias") or os.path.basename(m)
p.model_alias = {alias} if isinstance(p.model_alias, set) else [alias] if isinstance(p.model_alias, list) else alias
for flag, field in (("--parallel", "n_parallel"), ("--predict", "n_predict"), ("--batch-size", "n_batch"),
                    ("--ubatch-size", "n_ubatch"), ("--jinja", "use_jinja")):
    if flag in opts:
        setattr(p, field, opts[flag])
if "--flash-attn" in opts:
    fa = xlc.llama_flash_attn_type
    p.flash_attn_type = {"on": fa.LLAMA_FLASH_ATTN_TYPE_ENABLED, "off": fa.LLAMA_FLASH_ATTN_TYPE_DISABLED,
                         "auto": fa.LLAMA_FLASH_ATTN_TYPE_AUTO}[opts["--flash-attn"]]
srv = xlc.Server(p)
print(f"main: server is listening on http://{host}:{port}", flush=True)
ev = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: ev.set())
signal.signal(signal.SIGINT, lambda *_: ev.set())
ev.wait()
os._exit(0)
