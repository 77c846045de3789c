"""The stand-in HyperQwen engine (tests/harness/stubs/openai_stub.py, vLLM's kind) as a local process on a
free port, for the fast tier's speculative-decoding tests (issue 65): no llama-swap, no sandbox host."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import requests

from rigkit.remote import free_port

STUB = Path(__file__).resolve().parents[2] / "tests" / "harness" / "stubs" / "openai_stub.py"


@contextlib.contextmanager
def stand_in(control: Path, draft: int = 7, alias: str = "hq", chunk_s: float = 0.0) -> Iterator[str]:
    """Run the stand-in with ``DFLASH_TOKENS=draft`` and ``control`` as its control folder (made here;
    ``chunk_s``: seconds per chunk, 0: as fast as it can write them); yields its base URL, stops it after. Waits for it
    by a bounded poll of ``/health`` (RuntimeError when it never answers)."""
    control.mkdir(parents=True, exist_ok=True)
    (control / "chunk_s").write_text(str(chunk_s))
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(STUB), "--kind", "vllm", "--port", str(port), "--alias", alias,
                             "--control-dir", str(control)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={"PATH": "/usr/bin:/bin", "DFLASH_TOKENS": str(draft)})
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(400):
            try:
                requests.get(url + "/health", timeout=1)
                break
            except requests.RequestException:
                if proc.poll() is not None:
                    raise RuntimeError(f"the stand-in exited {proc.returncode}") from None
                time.sleep(0.05)
        else:
            raise RuntimeError("the stand-in never answered /health")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
