"""Load a GGUF in llama.cpp's server (xllamacpp's embedded llama-server) and exit: a test helper
process whose stderr is llama.cpp's load log (``verbosity`` 10), read by ``tests/unit/test_vram_llamacpp.py``.

Usage: ``python -m tests.unit.llama_load MODEL.gguf N_CTX N_PARALLEL CACHE_TYPE FLASH_ATTN [UNIFIED]``
(``CACHE_TYPE`` a ggml type name for K and V, ``FLASH_ATTN`` auto|enabled|disabled, ``UNIFIED`` 0|1).
The weights are read into memory (``LLAMA_LOAD_MODE_NONE``, no mmap) so the log's model buffer is
the weights' size. One thread, 127.0.0.1, an ephemeral port.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    """Load the model with the given context, slots, cache type and flash attention; return 0."""
    import xllamacpp as xlc

    model, n_ctx, n_parallel, cache_type, flash = argv[:5]
    p = xlc.CommonParams()
    p.model.path = model
    p.n_ctx = int(n_ctx)
    p.n_parallel = int(n_parallel)
    p.kv_unified = len(argv) > 5 and argv[5] == "1"
    p.cpuparams.n_threads = 1
    p.cpuparams_batch.n_threads = 1
    p.hostnames = ["127.0.0.1"] if isinstance(p.hostnames, list) else "127.0.0.1"
    p.port = 0
    p.verbosity = 10
    p.load_mode = xlc.llama_load_mode.LLAMA_LOAD_MODE_NONE
    p.cache_type_k = getattr(xlc.ggml_type, "GGML_TYPE_" + cache_type.upper())
    p.cache_type_v = getattr(xlc.ggml_type, "GGML_TYPE_" + cache_type.upper())
    p.flash_attn_type = getattr(xlc.llama_flash_attn_type, "LLAMA_FLASH_ATTN_TYPE_" + flash.upper())
    server = xlc.Server(p)  # noqa: F841 - held until os._exit, never destroyed (its destructor can hang)
    _wait_for_the_log()
    print("loaded", flush=True)
    sys.stderr.flush()
    os._exit(0)  # the server's threads would keep the process alive


#: What llama-server's init logs once the model is loaded (``tools/server/server.cpp``: ``"model
#: loaded"``), queued after every line of the load (the fit probe's and the real one's).
LOADED = "init: model loaded"


def _wait_for_the_log(limit_s: float = 120.0) -> None:
    """llama.cpp's log is written by a worker thread of its own (``common/log.cpp``: entries queued,
    written asynchronously), so the load can return before its last lines reach stderr — and
    ``os._exit`` would drop them. When stderr is a file (the test gives one), wait until :data:`LOADED`
    is in it: the log writes its queue in order, so every line of the load is there before it —
    evidence, not a pause. Gives up after ``limit_s``."""
    import time

    import stat

    if not stat.S_ISREG(os.fstat(2).st_mode):
        return
    path = "/proc/self/fd/2"  # the file itself, even unlinked (the test's TemporaryFile)
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            log = f.read()
        if LOADED in log:
            return
        time.sleep(0.05)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
