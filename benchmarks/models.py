"""How fast the model fetch verifies: rigkit's hashing against OpenSSL, across cores, and the
converged check.

Not a test: prints figures (medians of ``--runs``). Files are written once into ``--dir``
(default a temp folder) and read warm from the page cache, so the figures are the hashing
cost, not the disk's:

1. throughput — :func:`rigkit.host.modelrecords.hash_file` (sha256, the LFS oid) on one ``--size-mib`` file
   against ``openssl dgst -sha256`` on the same file, in MiB/s, and their ratio. OpenSSL is the
   bar (it uses the CPU's SHA extensions; coreutils ``sha256sum`` is ~4x slower on such CPUs).
   Python's hashlib is OpenSSL's code, so the ratio measures rigkit's reading loop.
2. parallel — two such files hashed by :func:`rigkit.host.modelrecords.hash_files` with 2 workers vs 1
   (threads: hashlib releases the GIL on large updates), wall s and speed-up.
3. converged check — a second :func:`rigkit.host.fetch.fetch_model` over a 20-file model whose
   record matches: size + mtime only, no read, no request, in ms.

Run: ``.venv/bin/python benchmarks/models.py [--size-mib 512] [--runs 3] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rigkit.host.fetch import fetch_model
from rigkit.host.modelrecords import hash_file, hash_files, write_record


def write_file(path: Path, size: int) -> Path:
    """``size`` bytes of pseudo-random data (fast: a 1 MiB random block, varied per MiB)."""
    block = os.urandom(1 << 20)
    with open(path, "wb") as fh:
        for i in range(size >> 20):
            fh.write(i.to_bytes(8, "little") + block[8:])
    return path


def timed(fn, runs: int) -> float:
    """Median wall seconds of ``fn()`` over ``runs`` calls."""
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def openssl_sha256(path: Path) -> str:
    proc = subprocess.run(["openssl", "dgst", "-sha256", "-r", str(path)], capture_output=True, text=True, check=True)
    return proc.stdout.split()[0]


def converged_check(folder: Path, runs: int) -> float:
    """Median seconds of a converged :func:`fetch_model` over 20 recorded files."""
    models = folder / "models" / "m"
    models.mkdir(parents=True)
    files, rec = [], {}
    for i in range(20):
        p = models / f"model-{i + 1:05d}-of-00020.safetensors"
        p.write_bytes(os.urandom(64 << 10))
        d = hash_file(p)
        st = p.stat()
        files.append({"path": p.name, "size": d["size"], "sha256": d["sha256"]})
        rec[p.name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": d["sha256"]}
    lock = {"version": 1, "models": {"m": {"source": {"repo_id": "x/y", "revision": "main", "include": [], "exclude": [],
                                                      "path": "m"},
                                           "commit": "0" * 40, "files": files, "total_bytes": 0}}}
    write_record(folder / "state", "m", {"version": 1, "model": "m", "dir": str(models), "commit": "0" * 40,
                                         "reference": "lock", "prepare_needed": False, "files": rec,
                                         "locked": {f["path"]: f["sha256"] for f in files}})

    def run():
        res = fetch_model(lock, "m", models_root=folder / "models", state_dir=folder / "state",
                          token_file=folder / "none", endpoint="http://127.0.0.1:9", log=lambda m: None)
        assert len(res.unchanged) == 20 and not res.fetched

    return timed(run, max(runs, 5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="rigkit-bench-models-", dir=args.dir))
    try:
        size = args.size_mib << 20
        a, b = write_file(folder / "a.bin", size), write_file(folder / "b.bin", size)
        assert hash_file(a)["sha256"] == openssl_sha256(a) == hashlib.sha256(a.read_bytes()).hexdigest()
        hash_file(a), hash_file(b)  # warm the page cache
        t_rig = timed(lambda: hash_file(a), args.runs)
        t_ossl = timed(lambda: openssl_sha256(a), args.runs)
        mib = size / (1 << 20)
        print(f"CPU cores: {os.cpu_count()}; file {mib:.0f} MiB, warm page cache, median of {args.runs}")
        print(f"1. sha256  rigkit hash_file {mib / t_rig:8.0f} MiB/s   openssl dgst -sha256 {mib / t_ossl:8.0f} MiB/s   "
              f"ratio rigkit/openssl {t_ossl / t_rig:.2f}")
        t1 = timed(lambda: hash_files([a, b], workers=1), args.runs)
        t2 = timed(lambda: hash_files([a, b], workers=2), args.runs)
        print(f"2. 2 files {t1:.2f} s on 1 worker, {t2:.2f} s on 2 workers: speed-up {t1 / t2:.2f}x "
              f"({2 * mib / t2:.0f} MiB/s aggregate)")
        tc = converged_check(folder / "conv", args.runs)
        print(f"3. converged check of 20 recorded files (size + mtime, no read, no request): {tc * 1000:.1f} ms")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
