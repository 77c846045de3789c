"""Does the client measure what the server measured? Client prefill/decode tok/s against
llama.cpp's own ``timings`` on a larger generated GGUF.

Not a test: prints figures (medians of several runs). Starts xllamacpp's llama.cpp server
(one thread, 127.0.0.1) on a GGUF generated like the test model but wider and deeper, so
prefill and decode take measurable time; each request has a unique first line so the prompt
cache cannot serve it.

- client prefill tok/s = usage.prompt_tokens / TTFT; server = ``timings.prompt_per_second``
  (excludes HTTP, tokenisation, queueing — so the client figure is a lower bound).
- client decode tok/s = (completion_tokens − 1) / (E2E − TTFT); server =
  ``timings.predicted_per_second``.

Run: ``.venv/bin/python benchmarks/bench_accuracy.py [--runs 5] [--prompt-chars 3000]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "bench"))

from tiny_gguf import write_tiny_gguf  # noqa: E402

from rigkit.bench.client import stream_chat  # noqa: E402
from rigkit.bench.tunnel import free_port  # noqa: E402
from rigkit.bench.workloads import make_document  # noqa: E402


def main() -> None:
    """Generate the model, start the server, run the requests, print the comparison."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompt-chars", type=int, default=3000)
    ap.add_argument("--max-tokens", type=int, default=128)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-accuracy-")
    model = write_tiny_gguf(os.path.join(tmp, "med.gguf"), reasoning=True, n_embd=256,
                            n_layer=6, n_ff=1024)
    port = free_port()
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "..", "tests", "bench",
                                                          "llama_server.py"),
                             "--model", model, "--port", str(port), "--threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if requests.get(url + "/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.1)
        doc = "".join(make_document(a.prompt_chars, 5))
        rows = []
        for i in range(a.runs + 1):  # the first is a warm-up, discarded
            r = stream_chat(url + "/v1/chat/completions", {
                "messages": [{"role": "user", "content": f"Run {i} {time.time_ns()}.\n{doc}"}],
                "max_tokens": a.max_tokens, "temperature": 0})
            assert r.ok and r.tokens_source == "usage", r.error
            t = r.server_timings
            assert t["cache_n"] < 32, t  # really prefilled (only the template head is cached)
            if i:
                rows.append((r.prefill_tps, t["prompt_per_second"], r.decode_tps,
                             t["predicted_per_second"], r.prompt_tokens, r.completion_tokens))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    med = statistics.median
    cp, sp = med(x[0] for x in rows), med(x[1] for x in rows)
    cd, sd = med(x[2] for x in rows), med(x[3] for x in rows)
    print(f"model: {os.path.getsize(model) / 1e6:.1f} MB GGUF (n_embd 256, 6 layers), 1 thread; "
          f"{a.runs} runs, prompt {rows[0][4]} tokens, {rows[0][5]} completion tokens")
    print(f"prefill: client {cp:,.0f} tok/s vs server {sp:,.0f} tok/s -> client/server "
          f"{med(x[0] / x[1] for x in rows):.3f} (median of per-run ratios)")
    print(f"decode:  client {cd:,.0f} tok/s vs server {sd:,.0f} tok/s -> client/server "
          f"{med(x[2] / x[3] for x in rows):.3f} (median of per-run ratios)")


if __name__ == "__main__":
    main()
