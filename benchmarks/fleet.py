"""Fleet cost: `rigkit drift` and a converged `rigkit deploy --no-smoke` on 1 host vs N hosts.

The claim measured: pyinfra reaches the hosts of one run in parallel (and drift starts its
per-host plans at once), so N hosts cost far less than N times one host. Not a test (keep it out
of the suite: it builds sandbox hosts and takes minutes); prints figures.

What it does: brings up N nspawn sandbox hosts named ``<prefix>f0`` … (``--prefix``, default
``r16-``, so it never touches another session's hosts), writes a fleet inventory under
``out/fleet/`` that declares them all exactly as ``inventory/sandbox.py`` declares one (it runs
that file once per host name), deploys them once (``--reboot``: the first deploy, not timed),
then times, ``--runs`` times each, on the first host alone and on all N: ``rigkit drift``
(pyinfra's ``--dry`` plan included) and ``rigkit deploy --no-smoke`` (converged: 0 changed,
checked). Wall seconds and CPU seconds (user + system of every process it started, from
``getrusage(RUSAGE_CHILDREN)``; the sandbox hosts' own processes are not children and are not
counted) are printed as medians, with the N/1 wall ratio (target <= 2 for N = 4 on a 2-core
machine) and the load average before and after, so a run on a machine busy with other work
can be read for what it is. The hosts are removed at the end unless ``--keep``.

usage: python benchmarks/fleet.py [--hosts 4] [--runs 3] [--prefix r16-] [--keep]
(root, from the project root; `make sandbox-fixtures` first)
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import hostctl  # noqa: E402

SUMMARY = re.compile(r"^(\S+): (\d+) operations: (\d+) changed", re.M)
INVENTORY = '''"""Fleet inventory for benchmarks/fleet.py: inventory/sandbox.py once per host name."""
import os
import runpy

sandbox = []
for _name in {names!r}:
    os.environ["RIGKIT_SANDBOX_HOST"] = _name
    sandbox += runpy.run_path({sandbox!r})["sandbox"]
'''


def write_inventory(names: list[str]) -> str:
    """Write ``out/fleet/fleet_<n>.py`` declaring ``names``; returns its path (relative)."""
    out = ROOT / "out" / "fleet"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"fleet_{len(names)}.py"
    path.write_text(INVENTORY.format(names=names, sandbox=str(ROOT / "inventory" / "sandbox.py")))
    return str(path.relative_to(ROOT))


def timed(cmd: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, float, subprocess.CompletedProcess]:
    """``(wall s, CPU s of the children, result)`` of ``cmd`` run from the project root with
    the sandbox hub's token; SystemExit naming the command when its exit status is not in ``ok``."""
    env = {**os.environ, "HF_TOKEN": hostctl.hub_token()}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}")
    return wall, cpu, proc


def rigkit(*args: str) -> list[str]:
    return [str(ROOT / ".venv" / "bin" / "rigkit"), *args]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prefix", default="r16-")
    ap.add_argument("--keep", action="store_true", help="leave the hosts up")
    a = ap.parse_args()
    names = [f"{a.prefix}f{i}" for i in range(a.hosts)]
    one, fleet = write_inventory(names[:1]), write_inventory(names)
    load0 = os.getloadavg()
    try:
        for n in names:
            hostctl.host_up(n, "nspawn")
        wall, _, _ = timed(rigkit("deploy", "-i", fleet, "--reboot", "--no-smoke"))
        print(f"first deploy of {a.hosts} hosts (not timed for the comparison): {wall:.1f} s", flush=True)
        for _ in range(3):  # converge (a first run may leave post-reboot steps), untimed
            _, _, proc = timed(rigkit("deploy", "-i", fleet, "--no-smoke"))
            if not any(int(m.group(3)) for m in SUMMARY.finditer(proc.stdout + proc.stderr)):
                break
        rows: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for r in range(a.runs):
            for label, inv, n in (("1 host", one, 1), (f"{a.hosts} hosts", fleet, a.hosts)):
                w, c, _ = timed(rigkit("drift", "-i", inv), ok=(0, 3))
                rows.setdefault(("drift", n), []).append((w, c))
                w2, c2, proc = timed(rigkit("deploy", "-i", inv, "--no-smoke"))
                changed = [int(m.group(3)) for m in SUMMARY.finditer(proc.stdout + proc.stderr)]
                if len(changed) != n:
                    raise SystemExit(f"deploy on {label}: {len(changed)} host summaries, expected {n}\n"
                                     f"{proc.stdout[-2000:]}")
                rows.setdefault(("deploy", n), []).append((w2, c2))
                note = "" if not any(changed) else f" (NOT converged: {sum(changed)} operations changed)"
                print(f"run {r + 1}, {label}: drift {w:.1f} s wall / {c:.1f} s CPU; converged deploy "
                      f"{w2:.1f} s wall / {c2:.1f} s CPU{note}", flush=True)
    finally:
        if not a.keep:
            for n in names:
                with hostctl.lock():
                    hostctl.host_down(n)
    med = statistics.median
    for what in ("drift", "deploy"):
        w1, c1 = med(x[0] for x in rows[(what, 1)]), med(x[1] for x in rows[(what, 1)])
        wn, cn = med(x[0] for x in rows[(what, a.hosts)]), med(x[1] for x in rows[(what, a.hosts)])
        name = "rigkit drift" if what == "drift" else "rigkit deploy --no-smoke (converged)"
        print(f"{name}, median of {a.runs}: 1 host {w1:.1f} s wall / {c1:.1f} s CPU; {a.hosts} hosts "
              f"{wn:.1f} s wall / {cn:.1f} s CPU -> wall ratio {wn / w1:.2f} (target <= 2), "
              f"CPU ratio {cn / c1:.2f}")
    print(f"load average (1, 5, 15 min) before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, after "
          f"{os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
