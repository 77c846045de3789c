"""`rigkit drift` against a converged `rigkit deploy` on one converged sandbox host, in one run.

On a copy of the converged sandbox host (tests/harness/golden.py), ``--runs`` times each (default
3), alternating: ``rigkit drift -i inventory/sandbox.py`` (the probe, its default), ``rigkit drift
--plan`` (pyinfra's plan too, what drift ran by default before) and ``rigkit deploy --no-smoke``
(converged: 0 changed, checked), after ``--warmup`` untimed rounds (default 1: a copied host's
first commands read a cold page cache). Prints wall seconds of each run, the medians, drift / deploy
(target <= 0.2) and drift --plan / deploy, each command's exit codes (drift: 0 on a converged
host) and the load average, so a run on a busy machine reads for what it is. Not a test.

usage: python benchmarks/drift_ratio.py [--runs 3] [--warmup 1] [--keep]
(root, from the project root; `make sandbox-fixtures` first; RIGKIT_HARNESS_* as for the tests)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "harness"))
os.environ.setdefault("RIGKIT_HARNESS_PREFIX", "rkr-")
import conftest  # noqa: E402  (the harness' host factory: a copy of the golden converged host)
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402

SUMMARY = re.compile(r": (\d+) operations: (\d+) changed")


def run(name: str, project: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    """``(wall s, result)`` of ``rigkit ARGS -i inventory/sandbox.py`` for sandbox host ``name``."""
    env = {**os.environ, "RIGKIT_SANDBOX_HOST": name, "HF_TOKEN": hostctl.hub_token()}
    t0 = time.monotonic()
    proc = subprocess.run([str(ROOT / ".venv/bin/rigkit"), *args, "-i", "inventory/sandbox.py"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=900)
    return time.monotonic() - t0, proc


def counted(proc: subprocess.CompletedProcess) -> int:
    """How many findings count (drift, error) in a ``rigkit drift --json`` run."""
    recs = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return sum(r.get("severity") in ("drift", "error") for r in recs if r.get("kind") not in ("status", "run"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="leave the host up")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds of drift and deploy first")
    a = ap.parse_args()
    project = sandbox_project.cwd()
    load0 = os.getloadavg()
    host = conftest._up(conftest.PREFIX + "ratio", "nspawn", converged=True)
    times: dict[str, list[float]] = {"drift": [], "drift --plan": [], "deploy": []}
    codes: dict[str, list[int]] = {k: [] for k in times}
    try:
        for _ in range(a.warmup):  # a copied host's first commands read a cold page cache: untimed
            run(host.name, project, "drift", "--json")
            run(host.name, project, "deploy", "--no-smoke")
        for r in range(a.runs):
            w, p = run(host.name, project, "drift", "--json")
            times["drift"].append(w)
            codes["drift"].append(p.returncode)
            n = counted(p)
            w2, p2 = run(host.name, project, "drift", "--json", "--plan")
            times["drift --plan"].append(w2)
            codes["drift --plan"].append(p2.returncode)
            w3, p3 = run(host.name, project, "deploy", "--no-smoke")
            times["deploy"].append(w3)
            codes["deploy"].append(p3.returncode)
            changed = [int(m.group(2)) for m in SUMMARY.finditer(p3.stdout + p3.stderr)]
            print(f"run {r + 1}: drift {w:.2f} s (exit {p.returncode}, {n} findings), drift --plan {w2:.2f} s "
                  f"(exit {p2.returncode}, {counted(p2)} findings), converged deploy {w3:.2f} s "
                  f"(exit {p3.returncode}, changed {changed})", flush=True)
            if p3.returncode != 0 or any(changed):
                print(p3.stderr[-3000:])
                return 1
    finally:
        if not a.keep:
            conftest._remove_hosts([host])
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"medians of {a.runs}: rigkit drift {med['drift']:.2f} s, rigkit drift --plan {med['drift --plan']:.2f} s, "
          f"converged rigkit deploy --no-smoke {med['deploy']:.2f} s")
    print(f"drift / deploy = {med['drift'] / med['deploy']:.3f} (target <= 0.2); drift --plan / deploy = "
          f"{med['drift --plan'] / med['deploy']:.3f}; drift --plan / drift = {med['drift --plan'] / med['drift']:.1f}x")
    print(f"exit codes: " + "; ".join(f"{k} {v}" for k, v in codes.items()))
    print(f"load average (1, 5, 15 min) before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, after "
          f"{os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on {os.cpu_count()} CPUs")
    return 0 if med["drift"] <= 0.2 * med["deploy"] else 1


if __name__ == "__main__":
    sys.exit(main())
