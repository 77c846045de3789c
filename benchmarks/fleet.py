"""Fleet cost: `rigkit drift` and a converged `rigkit deploy --no-smoke` on 1 host vs N hosts.

The claim measured: drift probes the hosts of one run in parallel (one SSH round trip each), and so
does the deploy, which on converged hosts takes the probe path (issue 48: every host's lock taken and
every host probed at once, pyinfra run on none), so N hosts cost far less than N times one host;
``--full`` times pyinfra's converged run too (the hosts deployed in parallel by pyinfra). Not a test (keep
it out of the suite: it builds sandbox hosts and takes minutes); prints figures.

What it does: brings up N nspawn sandbox hosts named ``<prefix>f0`` … (``--prefix``, default
``r16-``, so it never touches another session's hosts) as copies of the converged sandbox host
(tests/harness/golden.py, as the tests get theirs; ``--fresh``: unpacked and deployed from nothing
instead, ``--reboot``, not timed), each only while the machine still has ``--min-free-gib`` of
memory available (fewer hosts than asked are said so), writes a fleet inventory under
``out/fleet/`` that declares them all exactly as ``inventory/sandbox.py`` declares one (it runs
that file once per host name), then times, ``--runs`` times each, on the first host alone and on
all N: ``rigkit drift`` (the probe, its default; ``--plan`` adds pyinfra's plan) and ``rigkit deploy
--no-smoke`` (converged: every host's line says ``converged (probe)``, checked; with ``--full`` also
``rigkit deploy --no-smoke --full``: 0 changed, checked). Each host's memory (its cgroup's ``memory.current``)
is printed. Wall seconds and CPU seconds (user + system of every process it started, from
``getrusage(RUSAGE_CHILDREN)``; the sandbox hosts' own processes are not children and are not
counted) are printed as medians, with the N/1 wall ratio (targets on a 2-core machine: drift <= 2
for N = 8, the converged deploy <= 2 for N = 8 (issue 48), pyinfra's --full run <= 2 for N = 4) and the load average before and after, so a run on a machine busy with other work
can be read for what it is. The hosts' own CPU per command is printed too (issue 67: far less noisy than
wall on a shared machine): the CPU seconds each host's cgroup (:func:`host_cpu`) used while the command ran,
per host (the sum over the hosts it ran on, divided by their number) — sshd, sudo, the agent and the probe's
commands on the host, and the little the host's own services do meanwhile (an idle converged host: ~2 ms a
second here). The hosts are removed at the end unless ``--keep``; ``--reuse`` takes hosts a ``--keep`` left
up as they are (no golden copy made: the code under test reaches them through the untimed ``--full`` runs
first, which install its agent and stamp its build).

usage: python benchmarks/fleet.py [--hosts 4] [--runs 3] [--prefix r16-] [--fresh] [--plan] [--full] [--keep] [--reuse]
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
PROBE = re.compile(r"^(\S+): converged \(probe\): 0 changed", re.M)
INVENTORY = '''"""Fleet inventory for benchmarks/fleet.py: inventory/sandbox.py once per host name."""
import os
import runpy

sandbox = []
for _name in {names!r}:
    os.environ["RIGKIT_SANDBOX_HOST"] = _name
    sandbox += runpy.run_path({sandbox!r})["sandbox"]
'''


def write_inventory(names: list[str]) -> str:
    """Write ``out/fleet/fleet_<n>.py`` declaring ``names``; returns its (absolute) path."""
    out = ROOT / "out" / "fleet"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"fleet_{len(names)}.py"
    path.write_text(INVENTORY.format(names=names, sandbox=str(ROOT / "inventory" / "sandbox.py")))
    return str(path)


def timed(cmd: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, float, subprocess.CompletedProcess]:
    """``(wall s, CPU s of the children, result)`` of ``cmd`` run in the tests' sandbox project
    (tests/harness/sandbox_project.py: their declared group_data) with the sandbox hub's token; SystemExit naming the command when its exit status is not in ``ok``."""
    import sandbox_project  # the tests' declared data, the one the converged copies were deployed with

    env = {**os.environ, "HF_TOKEN": hostctl.hub_token()}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=sandbox_project.cwd(), env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}")
    return wall, cpu, proc


def host_memory(name: str) -> int | None:
    """Bytes of memory host ``name``'s cgroup uses now (``memory.current``, cgroup v2; v1's
    ``memory.usage_in_bytes``), or None when neither can be read."""
    for _, d in hostctl.host_cgroups(name):
        for knob in ("memory.current", "memory.usage_in_bytes"):
            try:
                return int((d / knob).read_text())
            except (OSError, ValueError):
                continue
    return None


def host_cpu(name: str) -> float | None:
    """CPU seconds host ``name``'s cgroup has used since it started: cgroup v2's ``cpu.stat`` ``usage_usec``
    (present without the cpu controller: the kernel's Documentation/admin-guide/cgroup-v2.rst, "cpu.stat"),
    else v1 cpuacct's ``cpuacct.usage`` (ns); its processes and every cgroup below (the container's
    services, Docker's containers). None when neither can be read."""
    for _, d in hostctl.host_cgroups(name):
        try:
            for line in (d / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        except (OSError, ValueError):
            pass
        try:
            return int((d / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            continue
    return None


def hosts_cpu(names: list[str], before: dict[str, float | None] | None = None) -> dict[str, float | None]:
    """``{name: host_cpu(name)}``; with ``before`` (an earlier call's), each host's CPU seconds since then."""
    now = {n: host_cpu(n) for n in names}
    if before is None:
        return now
    return {n: (v - before[n]) if v is not None and before.get(n) is not None else None for n, v in now.items()}


def per_host(used: dict[str, float | None]) -> float:
    """The mean of the known figures of ``used`` (NaN when none is known)."""
    known = [v for v in used.values() if v is not None]
    return sum(known) / len(known) if known else float("nan")


def available_gib() -> float:
    """``MemAvailable`` of /proc/meminfo, GiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024 / 1024
    return 0.0


def rigkit(*args: str) -> list[str]:
    return [str(ROOT / ".venv" / "bin" / "rigkit"), *args]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prefix", default="r16-")
    ap.add_argument("--keep", action="store_true", help="leave the hosts up")
    ap.add_argument("--reuse", action="store_true", help="take the hosts a --keep left up as they are")
    ap.add_argument("--fresh", action="store_true", help="deploy fresh hosts instead of copying the converged one")
    ap.add_argument("--plan", action="store_true", help="time `rigkit drift --plan` (pyinfra's plan too)")
    ap.add_argument("--full", action="store_true", help="time `rigkit deploy --full` (pyinfra's converged run) too")
    ap.add_argument("--min-free-gib", type=float, default=3.0,
                    help="bring up another host only while this much memory is available")
    a = ap.parse_args()
    names = [f"{a.prefix}f{i}" for i in range(a.hosts)]
    load0 = os.getloadavg()
    up: list[str] = []
    try:
        for n in names:
            if available_gib() < a.min_free_gib:
                print(f"only {len(up)} of {a.hosts} hosts fit: {available_gib():.1f} GiB available, "
                      f"{a.min_free_gib:g} GiB kept free", flush=True)
                break
            if a.reuse and hostctl.read_meta(n):
                pass  # left up by an earlier --keep: the untimed --full runs below bring this code to it
            elif a.fresh:
                hostctl.host_up(n, "nspawn")
            else:
                import conftest  # the harness' host factory: a copy of the golden converged host

                conftest._up(n, "nspawn", converged=True)
            up.append(n)
        names = up
        one, fleet = write_inventory(names[:1]), write_inventory(names)
        if a.fresh:
            wall, _, _ = timed(rigkit("deploy", "-i", fleet, "--reboot", "--no-smoke"))
            print(f"first deploy of {len(names)} hosts (not timed for the comparison): {wall:.1f} s", flush=True)
        for _ in range(3):  # converge (a first run may leave post-reboot steps), untimed
            _, _, proc = timed(rigkit("deploy", "-i", fleet, "--no-smoke", "--full"))
            if not any(int(m.group(3)) for m in SUMMARY.finditer(proc.stdout + proc.stderr)):
                break
        rows: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for r in range(a.runs):
            for label, inv, n in (("1 host", one, 1), (f"{len(names)} hosts", fleet, len(names))):
                cpu0 = hosts_cpu(names[:n])
                w, c, _ = timed(rigkit("drift", "-i", inv, *(["--plan"] if a.plan else [])), ok=(0, 3))
                h = per_host(hosts_cpu(names[:n], cpu0))
                rows.setdefault(("drift", n), []).append((w, c, h))
                cpu0 = hosts_cpu(names[:n])
                w2, c2, proc = timed(rigkit("deploy", "-i", inv, "--no-smoke"))
                h2 = per_host(hosts_cpu(names[:n], cpu0))
                probed = PROBE.findall(proc.stderr)
                if len(probed) != n or "$ pyinfra" in proc.stderr:
                    raise SystemExit(f"deploy on {label}: {len(probed)} hosts on the probe path, expected {n}\n"
                                     f"{proc.stderr[-2000:]}")
                rows.setdefault(("deploy", n), []).append((w2, c2, h2))
                note = ""
                if a.full:
                    cpu0 = hosts_cpu(names[:n])
                    w3, c3, proc = timed(rigkit("deploy", "-i", inv, "--no-smoke", "--full"))
                    h3 = per_host(hosts_cpu(names[:n], cpu0))
                    changed = [int(m.group(3)) for m in SUMMARY.finditer(proc.stdout + proc.stderr)]
                    if len(changed) != n:
                        raise SystemExit(f"deploy --full on {label}: {len(changed)} host summaries, expected {n}\n"
                                         f"{proc.stdout[-2000:]}")
                    rows.setdefault(("full", n), []).append((w3, c3, h3))
                    note = (f"; --full {w3:.1f} s wall / {c3:.1f} s CPU / host CPU {h3 * 1000:.0f} ms a host"
                            + ("" if not any(changed) else f" (NOT converged: {sum(changed)} operations changed)"))
                print(f"run {r + 1}, {label}: drift {w:.1f} s wall / {c:.1f} s CPU / host CPU {h * 1000:.0f} ms a host; "
                      f"converged deploy (probe) {w2:.1f} s wall / {c2:.1f} s CPU / host CPU {h2 * 1000:.0f} ms a host{note}",
                      flush=True)
        memory = {n: host_memory(n) for n in names}
    finally:
        if not a.keep:
            for n in up:
                with hostctl.lock():
                    hostctl.host_down(n)
    a.hosts = len(names)
    known = [m for m in memory.values() if m is not None]
    print("hosts' memory: " + ", ".join(f"{n} {m / 2**30:.2f} GiB" if m is not None else f"{n} unknown"
                                        for n, m in memory.items())
          + (f"; {sum(known) / 2**30:.2f} GiB in all" if known else ""))
    med = statistics.median
    # drift: <= 2 for 8 hosts on 2 cores (issue "Drift in one round trip"); the converged deploy (the
    # probe path): <= 2 for 8 (issue 48); pyinfra's --full run: <= 2 for 4
    target = {"drift": "target <= 2", "deploy": "target <= 2 at 8 hosts",
              "full": "target <= 2 at 4 hosts; none at more"}
    for what in ("drift", "deploy", "full"):
        if (what, 1) not in rows:
            continue
        w1, c1, h1 = (med(x[i] for x in rows[(what, 1)]) for i in range(3))
        wn, cn, hn = (med(x[i] for x in rows[(what, a.hosts)]) for i in range(3))
        name = {"drift": "rigkit drift" + (" --plan" if a.plan else ""),
                "deploy": "rigkit deploy --no-smoke (converged: the probe path)",
                "full": "rigkit deploy --no-smoke --full (pyinfra's converged run)"}[what]
        print(f"{name}, median of {a.runs}: 1 host {w1:.1f} s wall / {c1:.1f} s CPU; {a.hosts} hosts "
              f"{wn:.1f} s wall / {cn:.1f} s CPU -> wall ratio {wn / w1:.2f} ({target[what]}), "
              f"CPU ratio {cn / c1:.2f}; host CPU a host {h1 * 1000:.0f} ms (1 host) / {hn * 1000:.0f} ms ({a.hosts} hosts)")
    print(f"load average (1, 5, 15 min) before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, after "
          f"{os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on "
          f"{os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
