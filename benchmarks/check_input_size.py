"""``rigkit check`` is linear in its input (issue #28): the time on an inventory holding a 10-byte (the
fixed cost: start-up and the validators), a 40 kB and a 120 kB value (HyperQwen's .env, a member's env and a model file name — three readers), median
of N runs each, the ratio (a linear check grows ~3×; the quadratic URL-password pattern made 135 kB
take ~60 s), and a 1 MB value, which must be refused (exit 2) for being over the kernel's per-argument
limit. Then the co-load check's growth (issue #45): the time on an inventory with 1, 10, 20 and 50
llama-swap groups (one member each, every third persistent, every other exclusive: the sets of groups
that can be loaded together grow as 2^n), which must stay under 2 s at 50 groups (it was exponential:
16 groups 10 s, 20 groups 40 s). Then (issue #59) 100 operator members in 25 groups, every member's command
read by its owner's grammar (llama-server's table, docker's publish, POSIX words), which must stay under
2 s, shown as a ratio over the 10 B run. Runs in a temporary project copy with the llama-swap schema from the shared folder
($RIGKIT_LLAMA_SWAP_SCHEMA_URL, as the tests do); the validators run too, so the figures include them.

usage: python benchmarks/check_input_size.py [--n 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RIGKIT = [sys.executable, "-m", "rigkit"]


def project(size: int, where: Path) -> Path:
    """A project copy whose inventory ``inventory/big.py`` has a ``size``-byte value in three places."""
    d = where / f"p{size}"
    shutil.copytree(ROOT / "group_data", d / "group_data")
    shutil.copytree(ROOT / "inventory", d / "inventory")
    value = ("word " * (size // 5 + 1))[:size]
    (d / "inventory" / "big.py").write_text(
        "hosts = [(\"box\", {\n"
        f"    \"hyperqwen\": {{\"extra_env\": {{\"NOTE\": {value!r}}}}},\n"
        f"    \"llama_swap\": {{\"members\": {{\"strata\": {{\"env\": [{('NOTE=' + value)!r}]}}}}}},\n"
        f"    \"strata\": {{\"model_file\": {value.replace(' ', '-')[:-5] + '.gguf'!r}}},\n"
        "})]\n")
    return d


def groups_project(n: int, where: Path) -> Path:
    """A project copy whose inventory ``inventory/big.py`` declares ``n`` more llama-swap groups, one small
    operator member each (fixed port, 0.01 GiB), mixed exclusive and persistent."""
    d = where / f"g{n}"
    shutil.copytree(ROOT / "group_data", d / "group_data")
    shutil.copytree(ROOT / "inventory", d / "inventory")
    members = {f"m{i}": {"cmd": f"llama-server --port {19000 + i}", "cmd_stop": f"pkill -f 'port {19000 + i}'",
                         "proxy": f"http://127.0.0.1:{19000 + i}", "vram_gib": 0.01, "cold_boot_s": 5}
               for i in range(n)}
    groups = {f"g{i}": {"members": [f"m{i}"], "exclusive": i % 2 == 0, "persistent": i % 3 == 0} for i in range(n)}
    data = {"llama_swap": {"members": members, "groups": {"gpu": {"members": ["strata", "gguf-baseline", "hyperqwen"]},
                                                          **groups}}}
    (d / "inventory" / "big.py").write_text(f"hosts = [('box', {data!r})]\n")
    return d


def members_project(n: int, groups: int, where: Path) -> Path:
    """A project copy with ``n`` operator members in ``groups`` swap groups: half a ``docker run`` of the
    llama.cpp image published on loopback, half a ``llama-server`` on the host, each with a few options."""
    d = where / f"m{n}"
    shutil.copytree(ROOT / "group_data", d / "group_data")
    shutil.copytree(ROOT / "inventory", d / "inventory")
    members = {}
    for i in range(n):
        port = 19000 + i
        args = f"--port {port} -c 8192 -np 2 --jinja -ngl all -fa on --temp 0.7"
        cmd = (f"docker run --rm --init --name m{i} -p 127.0.0.1:{port}:{port} ghcr.io/ggml-org/llama.cpp:server-cuda "
               f"--host 0.0.0.0 {args}" if i % 2 else f"llama-server --host 127.0.0.1 {args}")
        members[f"m{i}"] = {"cmd": cmd, "cmd_stop": f"docker stop m{i}" if i % 2 else None,
                            "proxy": f"http://127.0.0.1:{port}", "vram_gib": 0.01, "cold_boot_s": 5}
    per = n // groups
    grouped = {f"g{g}": {"members": [f"m{i}" for i in range(g * per, (g + 1) * per)]} for g in range(groups)}
    data = {"llama_swap": {"members": members, "groups": {"gpu": {"members": ["strata", "gguf-baseline", "hyperqwen"]},
                                                          **grouped}}}
    (d / "inventory" / "big.py").write_text(f"hosts = [('box', {data!r})]\n")
    return d


def timed(d: Path) -> tuple[float, int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    p = subprocess.run([*RIGKIT, "check", "-i", "inventory/big.py"], cwd=d, env=env, capture_output=True, text=True)
    return time.perf_counter() - t, p.returncode, p.stdout + p.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3)
    args = ap.parse_args()
    shared = ROOT.parent / "shared" / "data" / "llama-swap" / "config-schema.json"
    if shared.exists():
        os.environ.setdefault("RIGKIT_LLAMA_SWAP_SCHEMA_URL", f"file://{shared}")
    with tempfile.TemporaryDirectory() as tmp:
        medians = {}
        for size in (10, 40_000, 120_000):
            d = project(size, Path(tmp))
            runs = [timed(d) for _ in range(args.n)]
            medians[size] = statistics.median(r[0] for r in runs)
            label = f"{size // 1000:>5} kB" if size >= 1000 else f"{size:>5} B "
            print(f"{label}: median {medians[size]:.2f} s of {args.n} (exit {runs[0][1]})")
        print(f"120 kB / 40 kB: {medians[120_000] / medians[40_000]:.2f}x (the target: <= 4x, 120 kB <= 2 s); "
              f"over the 10 B run (start-up and validators): 40 kB +{medians[40_000] - medians[10]:.2f} s, "
              f"120 kB +{medians[120_000] - medians[10]:.2f} s")
        secs, rc, out = timed(project(1_000_000, Path(tmp)))
        line = next((ln for ln in out.splitlines() if "bytes" in ln), out.strip().splitlines()[-1] if out.strip() else "")
        print(f"1 MB: exit {rc} in {secs:.2f} s: {line.strip()[:160]}")
        grouped = {}
        for n in (1, 10, 20, 50):
            d = groups_project(n, Path(tmp))
            runs = [timed(d) for _ in range(args.n)]
            grouped[n] = statistics.median(r[0] for r in runs)
            print(f"{n:>2} groups: median {grouped[n]:.2f} s of {args.n} (exit {runs[0][1]}), "
                  f"+{grouped[n] - medians[10]:.2f} s over the 10 B run"
                  + ("" if runs[0][1] in (0, 1) and "Traceback" not in runs[0][2] else f": {runs[0][2].strip()[-300:]}"))
        ok_groups = grouped[50] < 2.0
        d = members_project(100, 25, Path(tmp))
        runs = [timed(d) for _ in range(args.n)]
        many = statistics.median(r[0] for r in runs)
        print(f"100 members in 25 groups: median {many:.2f} s of {args.n} (exit {runs[0][1]}), "
              f"{many / medians[10]:.2f}x the 10 B run (+{many - medians[10]:.2f} s over it; the target: < 2 s)"
              + ("" if runs[0][1] in (0, 1) and "Traceback" not in runs[0][2] else f": {runs[0][2].strip()[-300:]}"))
        ok_members = many - medians[10] < 2.0 and runs[0][1] in (0, 1)  # machine-independent: over the fixed cost
        return 0 if rc == 2 and medians[120_000] <= 2.0 and medians[120_000] / medians[40_000] <= 4 and ok_groups \
            and ok_members else 1


if __name__ == "__main__":
    raise SystemExit(main())
