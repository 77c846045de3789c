"""Deploy cost on the sandbox over SSH: a first deploy onto a fresh host, then on the converged host
``rigkit drift``, the deploy's probe path (issue 48) and pyinfra's converged run (``--full``).

For each of N rounds (default 3): a fresh nspawn host, `rigkit deploy -i inventory/sandbox.py
--reboot --no-smoke -vv` (the first run), then on the converged host, in turn, `rigkit drift`,
`rigkit deploy --no-smoke` (the probe path: it must print ``converged (probe)``) and `rigkit deploy
--no-smoke --full -vv` (pyinfra's run: 0 changed). Prints each round and, as medians of the rounds,
wall seconds of each, pyinfra's remote commands (its ``>>>`` command lines at -vv, fact commands
included), and the ratios the issue asks for: the probe path <= 1.5x drift and <= 0.05x the first
deploy; pyinfra's converged run beside them for comparison.

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
PROBE = re.compile(r": converged \(probe\): 0 changed")


def run(name: str, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    """(wall s, result) of ``rigkit ARGS`` for sandbox host ``name``; SystemExit on a failure."""
    env = {**os.environ, "RIGKIT_SANDBOX_HOST": name, "HF_TOKEN": hostctl.hub_token()}
    t0 = time.monotonic()
    proc = subprocess.run([str(ROOT / ".venv/bin/rigkit"), *args], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"rigkit {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, proc


def deploy(name: str, *extra: str) -> tuple[float, int, int]:
    """(wall s, pyinfra's remote commands, changed operations) of one pyinfra deploy (-vv)."""
    wall, proc = run(name, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "-vv", *extra)
    commands = sum(1 for line in proc.stderr.splitlines() if ">>>" in line)
    m = SUMMARY.search(proc.stderr)
    return wall, commands, int(m.group(2)) if m else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load0 = os.getloadavg()
    rows = []
    for i in range(args.rounds):
        name = f"{os.environ.get('RIGKIT_HARNESS_PREFIX', 'rkb-')}conv{i}"  # this session's prefix only
        with hostctl.lock():
            hostctl.host_down(name)
        hostctl.host_up(name, "nspawn")
        try:
            first = deploy(name, "--reboot")
            drift, _ = run(name, "drift", "-i", "inventory/sandbox.py")
            probe, proc = run(name, "deploy", "-i", "inventory/sandbox.py", "--no-smoke")
            if not PROBE.search(proc.stderr) or "$ pyinfra" in proc.stderr:
                raise SystemExit(f"the converged re-run did not take the probe path:\n{proc.stderr[-3000:]}")
            full = deploy(name, "--full")
        finally:
            with hostctl.lock():
                hostctl.host_down(name)
        rows.append((first, drift, probe, full))
        print(f"round {i + 1}: first {first[0]:.1f} s, {first[1]} commands, {first[2]} changed; drift {drift:.2f} s; "
              f"converged re-run (probe) {probe:.2f} s; --full {full[0]:.1f} s, {full[1]} commands, {full[2]} changed",
              flush=True)
    med = statistics.median
    f_wall, f_cmd = med(r[0][0] for r in rows), med(r[0][1] for r in rows)
    d_wall, p_wall = med(r[1] for r in rows), med(r[2] for r in rows)
    a_wall, a_cmd = med(r[3][0] for r in rows), med(r[3][1] for r in rows)
    print(f"median of {args.rounds}: first deploy {f_wall:.1f} s / {f_cmd:.0f} remote commands; rigkit drift "
          f"{d_wall:.2f} s; converged re-run (probe path) {p_wall:.2f} s; pyinfra's converged run (--full) "
          f"{a_wall:.1f} s / {a_cmd:.0f} remote commands, {med(r[3][2] for r in rows):.0f} changed")
    print(f"converged re-run / drift: {p_wall / d_wall:.2f} (target <= 1.5); converged re-run / first deploy: "
          f"{p_wall / f_wall:.3f} (target <= 0.05); --full / first deploy {a_wall / f_wall:.2f}")
    load = os.getloadavg()
    print(f"load average (1, 5, 15 min) before {' '.join(f'{x:.2f}' for x in load0)}, after "
          f"{' '.join(f'{x:.2f}' for x in load)} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
