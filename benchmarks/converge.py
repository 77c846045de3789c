"""Deploy cost on the sandbox over SSH: a first deploy onto a fresh host and the converged re-run.

For each of N rounds (default 3): a fresh nspawn host, `rigkit deploy -i inventory/sandbox.py
--reboot --no-smoke -vv` (first run), then the same again (converged run). Prints, as medians
of the rounds: wall seconds of each run, remote commands executed (pyinfra's `>>>` command
lines at -vv, fact commands included), operations changed, and the re-run/first-run ratios.

Hosts are named ``<RIGKIT_HARNESS_PREFIX>conv<i>`` (default ``rkb-``), so a session touches only its own.

usage: python benchmarks/converge.py [--rounds 3]   (root; `make sandbox-fixtures` first)
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import hostctl  # noqa: E402

SUMMARY = re.compile(r": (\d+) operations: (\d+) changed")


def run_deploy(name: str, *extra: str) -> tuple[float, int, int]:
    """(wall s, remote commands, changed operations) of one deploy."""
    env = {**os.environ, "RIGKIT_SANDBOX_HOST": name, "HF_TOKEN": hostctl.hub_token()}
    t0 = time.monotonic()
    proc = subprocess.run([str(ROOT / ".venv/bin/rigkit"), "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "-vv",
                           *extra], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"deploy failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    commands = sum(1 for line in proc.stderr.splitlines() if ">>>" in line)
    m = SUMMARY.search(proc.stderr)
    return wall, commands, int(m.group(2)) if m else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for i in range(args.rounds):
        name = f"{os.environ.get('RIGKIT_HARNESS_PREFIX', 'rkb-')}conv{i}"  # this session's prefix only
        with hostctl.lock():
            hostctl.host_down(name)
        hostctl.host_up(name, "nspawn")
        try:
            first = run_deploy(name, "--reboot")
            again = run_deploy(name)
        finally:
            with hostctl.lock():
                hostctl.host_down(name)
        rows.append((first, again))
        print(f"round {i + 1}: first {first[0]:.1f} s, {first[1]} commands, {first[2]} changed; "
              f"re-run {again[0]:.1f} s, {again[1]} commands, {again[2]} changed", flush=True)
    med = lambda xs: statistics.median(xs)  # noqa: E731
    f_wall, f_cmd = med([r[0][0] for r in rows]), med([r[0][1] for r in rows])
    a_wall, a_cmd = med([r[1][0] for r in rows]), med([r[1][1] for r in rows])
    print(f"median of {args.rounds}: first deploy {f_wall:.1f} s / {f_cmd:.0f} remote commands; "
          f"converged re-run {a_wall:.1f} s / {a_cmd:.0f} remote commands, "
          f"{med([r[1][2] for r in rows]):.0f} changed")
    print(f"re-run / first-run: wall {a_wall / f_wall:.2f} (target <= 0.2), commands {a_cmd / f_cmd:.2f}; "
          f"converged re-run commands {a_cmd:.0f} (target <= 120)")
    print(f"load average (1, 5, 15 min) {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
