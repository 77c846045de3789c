"""Run xllamacpp's embedded llama.cpp HTTP server until SIGTERM (a test helper process).

Folded from the project's prototype launcher (reference/llama/xllamacpp_serve.py; xllamacpp
2026.10.11549). Usage: ``python -m tests.bench.llama_server --model M.gguf --port P
--threads 1 [--reasoning-format deepseek|none|auto]``; prints ``listening <url>`` when up.
"""

from __future__ import annotations

import argparse
import signal
import threading


def main() -> None:
    """Parse the arguments, start the server on 127.0.0.1, wait for SIGTERM/SIGINT."""
    import xllamacpp as xlc

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--n-ctx", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reasoning-format", default=None)
    ap.add_argument("--alias", default="tiny")
    a = ap.parse_args()
    p = xlc.CommonParams()
    p.model.path = a.model
    p.n_ctx = a.n_ctx
    p.n_parallel = 1
    p.cpuparams.n_threads = a.threads
    p.cpuparams_batch.n_threads = a.threads
    p.hostnames = [a.host] if isinstance(p.hostnames, list) else a.host
    p.port = a.port
    p.use_jinja = True
    p.model_alias = a.alias if not isinstance(p.model_alias, (list, set)) else [a.alias]
    if a.reasoning_format:
        p.reasoning_format = getattr(xlc.common_reasoning_format,
                                     "COMMON_REASONING_FORMAT_" + a.reasoning_format.upper())
    server = xlc.Server(p)
    print("listening", server.listening_address, flush=True)
    ev = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: ev.set())
    signal.signal(signal.SIGINT, lambda *_: ev.set())
    ev.wait()


if __name__ == "__main__":
    main()
