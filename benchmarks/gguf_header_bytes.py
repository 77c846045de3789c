"""What ``rigkit models lock`` pays to read a GGUF header of the rig's scale (issues 46, 62): time,
memory, bytes and requests, beside llama.cpp's own reader on the same file, in one run.

The header is shaped like a real one with a 262,144-token vocabulary (Gemma 3's size; the 27B-class
models' vocabularies are as large): tokens, scores, token types and 262,143 merges, 64 blocks of 13
Q4_K tensor infos; it is written by a small raw GGUF writer that keeps each field's offset, and the
file is taken as 16.5 GB (a sparse file for llama.cpp; zeros past the header for rigkit's fetch).

1. **Time**: llama.cpp's ``gguf_init_from_file`` (no_alloc, from the xllamacpp wheel through
   ctypes: tests/unit/gguf_real.py) on the file, and :func:`rigkit.spec.gguf_header.read_header`
   through an in-memory ``fetch``; the median of 5 each. Target: rigkit ≤ 10× llama.cpp.
2. **Memory**: a fresh interpreter reads the header the way the lock does — range requests through
   huggingface-hub's client (:func:`rigkit.lockfile.hub.header_fetch`) to a local HTTP server —
   and prints its peak RSS (``VmHWM``) less its RSS when it started (``VmRSS``). Target: ≤ 100 MiB.
3. **Bytes**: fetched, in how many ranges, against the header and the file.
4. **A stalled server**: a header read from a server that sends 100 bytes and stalls ends after the
   read timeout (``--stall-read-s``, default 2 s; the lock's own is 30 s), naming the host and it.
5. **Faults**: one-field corruptions of the kinds issue 62 found unnamed, each named by field at its
   offset, with the bytes fetched: a count the file cannot hold stops the read before what it
   announces is fetched; otherwise at most the header and its read-ahead (≤ 2× the header's end,
   :class:`rigkit.spec.gguf_header._Reader`). llama.cpp's words beside.

Run: ``.venv/bin/python benchmarks/gguf_header_bytes.py [--stall-read-s S]``
"""

from __future__ import annotations

import argparse
import http.server
import json
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FILE_SIZE = 16_500_000_000
N_VOCAB = 262_144
MIB = 1 << 20


def build_header() -> tuple[bytes, dict[str, tuple[int, str]]]:
    """The header's bytes (GGUF v3, ggml ``docs/gguf.md``) and ``{field name: (offset, struct format)}``."""
    out = bytearray(b"GGUF")
    fields: dict[str, tuple[int, str]] = {"magic": (0, "4s")}

    def put(fmt: str, value, name: str | None = None) -> None:
        if name:
            fields[name] = (len(out), fmt)
        out.extend(struct.pack("<" + fmt, value))

    def string(raw: bytes, name: str | None = None) -> None:
        put("Q", len(raw), name)
        out.extend(raw)

    n_layer, names = 64, ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "attn_norm",
                          "ffn_norm", "attn_q_norm", "attn_k_norm", "post_attention_norm", "attn_gate"]
    tensors = [f"blk.{il}.{n}.weight" for il in range(n_layer) for n in names]
    scalars = [("general.architecture", 8, b"gemma3"), ("gemma3.block_count", 4, n_layer),
               ("gemma3.context_length", 4, 131072), ("gemma3.embedding_length", 4, 5120),
               ("gemma3.feed_forward_length", 4, 21504), ("gemma3.attention.head_count", 4, 32),
               ("gemma3.attention.head_count_kv", 4, 16), ("gemma3.attention.key_length", 4, 128),
               ("gemma3.attention.value_length", 4, 128), ("gemma3.attention.sliding_window", 4, 1024)]
    put("I", 3, "version")
    put("q", len(tensors), "n_tensors")
    put("q", len(scalars) + 4, "n_kv")
    for i, (key, vtype, v) in enumerate(scalars):
        string(key.encode(), f"key {i}")
        put("i", vtype, f"key {i} type")
        string(v) if vtype == 8 else put("I", v)
    arrays = [("tokenizer.ggml.tokens", 8), ("tokenizer.ggml.scores", 6), ("tokenizer.ggml.token_type", 5),
              ("tokenizer.ggml.merges", 8)]
    for i, (key, etype) in enumerate(arrays, start=len(scalars)):
        string(key.encode(), f"key {i}")
        put("i", 9, f"key {i} type")
        put("i", etype, f"key {i} element type")
        n = N_VOCAB - 1 if key.endswith("merges") else N_VOCAB
        put("Q", n, f"key {i} count")
        if key.endswith("tokens"):
            out.extend(b"".join(struct.pack("<Q", len(t)) + t for t in (f"\u2581tok{j:06d}".encode() for j in range(n))))
        elif key.endswith("merges"):
            out.extend(b"".join(struct.pack("<Q", len(t)) + t for t in (f"t{j} o{j}".encode() for j in range(n))))
        else:
            out.extend(bytes(4 * n))
    size = 5120 * 5120 // 256 * 144  # Q4_K: 144 bytes a block of 256
    for i, name in enumerate(tensors):
        string(name.encode(), f"tensor {i} name")
        put("I", 2, f"tensor {i} n_dims")
        put("q", 5120, f"tensor {i} ne[0]")
        put("q", 5120, f"tensor {i} ne[1]")
        put("i", 12, f"tensor {i} type")
        put("Q", i * size, f"tensor {i} offset")
    return bytes(out), fields


def write_sparse(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.truncate(FILE_SIZE)  # a hole: no disk, reads as zeros


def llama_seconds(path: Path, runs: int = 5) -> float:
    import ctypes

    from tests.unit.gguf_real import _Params, library

    lib = library()
    lib.ggml_log_set(ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(lambda *a: None), None)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        ctx = lib.gguf_init_from_file(str(path).encode(), _Params(True, None))
        times.append(time.perf_counter() - t0)
        assert ctx, "llama.cpp does not read the benchmark's header"
        lib.gguf_free(ctx)
    return statistics.median(times)


def rigkit_seconds(data: bytes, runs: int = 5) -> tuple[float, dict, int, int]:
    from rigkit.spec.gguf_header import parse, summarize

    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        h = parse(lambda a, b: data[a:b + 1].ljust(b + 1 - a, b"\0"), FILE_SIZE)
        summary = summarize(h)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), summary, h.fetched, h.requests


class RangeServer(http.server.ThreadingHTTPServer):
    """GET with ``Range: bytes=a-b`` of the header's bytes, zeros past them (206); ``stall``: send
    100 bytes of the answer and wait until released."""

    def __init__(self, data: bytes, stall: bool = False):
        self.data, self.stall, self.release = data, stall, threading.Event()
        self.daemon_threads = True
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 - http.server's name
        a, b = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
        body = self.server.data[a:b + 1].ljust(b + 1 - a, b"\0")
        self.send_response(206)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Range", f"bytes {a}-{b}/{FILE_SIZE}")
        self.end_headers()
        if self.server.stall:
            self.wfile.write(body[:100])
            self.wfile.flush()
            self.server.release.wait(120)
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


_CHILD = r"""
import json, sys, time
def status(key):  # kB; VmHWM: the peak RSS of this process image (ru_maxrss carries the parent's over exec)
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key + ":"))
start = status("VmRSS")
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
from rigkit.spec.gguf_header import parse, summarize
from rigkit.lockfile.hub import header_fetch, hub_timeout
h = parse(header_fetch(sys.argv[2], {}, hub_timeout()), int(sys.argv[3]))
summarize(h)
dt = time.perf_counter() - t0
peak = status("VmHWM")
print(json.dumps({"start_kib": start, "peak_kib": peak, "s": dt, "fetched": h.fetched, "requests": h.requests}))
"""


def fresh_process(url: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT), url, str(FILE_SIZE)], capture_output=True,
                         text=True, check=True, timeout=300)
    return json.loads(out.stdout)


KINDS = [  # (what, field, new value): the kinds issue 62 found unnamed, and a few more
    ("a count of 2^63 (the token list's)", "key 10 count", 1 << 63),
    ("a count of 2^63 (n_kv)", "n_kv", (1 << 63) - 1),
    ("a duplicate key", "key 1", None),
    ("an invalid n_dims", "tensor 7 n_dims", 5),
    ("a ggml type of 9999", "tensor 100 type", 9999),
    ("a misaligned tensor offset", "tensor 3 offset", 3 * 5120 * 5120 // 256 * 144 + 16),
    ("a negative dimension", "tensor 9 ne[1]", -5),
    ("a string of 1 GiB - 1 (within llama.cpp's limit)", "key 4", (1 << 30) - 1),
    ("an unsupported version", "version", 4),
]


def corrupt(data: bytes, fields: dict, field: str, value) -> bytes:
    bad = bytearray(data)
    if value is None:  # a duplicate key: key 1 renamed to key 0's name (the bytes after it shift)
        (off0, _), (off1, _) = fields["key 0"], fields["key 1"]
        n0, n1 = (struct.unpack_from("<Q", bad, o)[0] for o in (off0, off1))
        return bytes(bad[:off1]) + bytes(bad[off0:off0 + 8 + n0]) + bytes(bad[off1 + 8 + n1:])
    off, fmt = fields[field]
    struct.pack_into("<" + fmt, bad, off, value)
    return bytes(bad)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stall-read-s", type=float, default=2.0, help="read timeout for the stalled server (s)")
    args = ap.parse_args()

    from rigkit.spec.gguf_header import HeaderError, parse
    from rigkit.lockfile.errors import LockError
    from rigkit.lockfile.hub import hub_timeout, model_metadata
    from tests.unit.gguf_real import Oracle

    data, fields = build_header()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "header.gguf"
        write_sparse(path, data)
        llama_s = llama_seconds(path)
        ours_s, summary, fetched, requests = rigkit_seconds(data)
        print(f"header: {len(data):,} B ({len(data) / MIB:.2f} MiB) of a {FILE_SIZE:,} B file; "
              f"{N_VOCAB:,} tokens, {summary['block_count']} blocks, {sum(1 for k in fields if k.endswith('n_dims'))} "
              "tensor infos")
        print(f"time: llama.cpp gguf_init_from_file {llama_s * 1000:.1f} ms; rigkit read_header {ours_s * 1000:.1f} ms "
              f"= {ours_s / llama_s:.1f}x (target <= 10x) [median of 5 each, this machine]")
        print(f"bytes: fetched {fetched:,} B in {requests} range requests; the header is {len(data):,} B to its "
              f"tensor infos' end ({summary['header_bytes']:,} padded); {fetched / FILE_SIZE:.4%} of the file")

        srv = RangeServer(data)
        try:
            child = fresh_process(f"http://{srv.host}/m.gguf")
        finally:
            srv.close()
        beyond = (child["peak_kib"] - child["start_kib"]) / 1024
        print(f"memory: a fresh interpreter (header read by HTTP ranges through huggingface-hub's client): started at "
              f"{child['start_kib'] / 1024:.1f} MiB RSS, peak {child['peak_kib'] / 1024:.1f} MiB: {beyond:.1f} MiB "
              f"beyond its start (target <= 100 MiB); {child['fetched']:,} B in {child['requests']} requests, "
              f"{child['s']:.2f} s with the imports")

        stall = RangeServer(data, stall=True)
        try:
            api = type("Api", (), {"endpoint": f"http://{stall.host}", "token": False})()
            t0 = time.perf_counter()
            try:
                model_metadata("m", "owner/m", "a" * 40, [{"path": "m.gguf", "size": FILE_SIZE, "sha256": "0" * 64}],
                               api, timeout=hub_timeout(read=args.stall_read_s))
                said = "no error"
            except LockError as exc:
                said = str(exc)
            dt = time.perf_counter() - t0
        finally:
            stall.close()
        print(f"stalled server (read timeout {args.stall_read_s:g} s): ended after {dt:.2f} s: {said}")

        print("faults (rigkit: field at offset, bytes fetched; llama.cpp's words beside):")
        oracle = Oracle()
        try:
            for what, field, value in KINDS:
                bad = corrupt(data, fields, field, value)
                asked: list = []

                def fetch(a, b, bad=bad, asked=asked):
                    asked.append((a, b))
                    return bad[a:b + 1].ljust(b + 1 - a, b"\0")

                try:
                    parse(fetch, FILE_SIZE)
                    ours = "read (not refused)"
                except HeaderError as exc:
                    ours = (f"{exc} [fetched {exc.fetched:,} B of a {len(data):,} B header; within its read-ahead "
                            f"bound, 2x the header: {exc.fetched <= 2 * len(data)}]")
                bad_path = Path(tmp) / "bad.gguf"
                write_sparse(bad_path, bad)
                real = oracle.read(str(bad_path))
                words = "reads it" if real["ok"] else (real["log"][0].split(": ", 1)[1] if real["log"] else "crashed")
                print(f"  {what}: {ours}\n      llama.cpp: {words}")
        finally:
            oracle.close()


if __name__ == "__main__":
    main()
