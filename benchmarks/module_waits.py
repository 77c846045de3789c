"""Where a sandbox test module spends its wall time: CPU against wall, and the waits of each test.

Runs the given test modules in one pytest session, single lane (``-p no:xdist``), with this file loaded
as a pytest plugin (``-p module_waits``) that records, in the test process, every ``subprocess.run``
(its argv and wall seconds: the ``rigkit`` commands a test runs, its SSH commands, hostctl's steps) and
every ``time.sleep`` (the test's and the helpers' polls), each under the test that ran it (its setup and
teardown included), and after each test the CPU seconds of the module's sandbox hosts (their cgroups'
``cpuacct.usage``, ``tests/harness/hostctl.py`` ``host_cgroups``: the container's systemd, Docker, the
model servers). Prints per test: wall, the largest shares (``rigkit <command>`` by command, ``ssh``,
``sleep at <caller>``, the setup), then the session's wall beside its CPU (the test process and every
process it waited for, from ``getrusage(RUSAGE_CHILDREN)``; the hosts' cgroups): the part of the wall that
no CPU of ours explains is waiting (the host's services, SSH round trips, polls) or the machine's other
load (the load average is printed at the start and the end: say it with the figures).

The records go to ``--log`` (JSON lines: ``{"t", "d", "k": run|sleep|setup|call|teardown|cpu, "test",
"at", "cmd"}``) for a closer look. Harness modules need root and ``make sandbox-fixtures``; export
``RIGKIT_HARNESS_NET``/``_STATE``/``_PREFIX`` to run beside other sessions.

usage: .venv/bin/python benchmarks/module_waits.py [--log FILE] [--top 8] MODULE [MODULE ...]
(from the project root; e.g. tests/harness/test_generations.py)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV_LOG = "RIGKIT_MODULE_WAITS_LOG"


# ---------------------------------------------------------------- the plugin (in the pytest process)
def _caller() -> str:
    for fr in reversed(traceback.extract_stack()[:-2]):
        if "/tests/" in fr.filename:
            return f"{os.path.basename(fr.filename)}:{fr.lineno}"
    return "?"


def _install(log_path: str) -> None:
    import pytest

    log = open(log_path, "a", buffering=1)  # noqa: SIM115 - open for the whole session
    cur: dict = {"test": None}
    real_run, real_sleep = subprocess.run, time.sleep

    def write(**rec) -> None:
        log.write(json.dumps({"test": cur["test"], **rec}) + "\n")

    def run(*a, **k):
        t0 = time.time()
        try:
            return real_run(*a, **k)
        finally:
            argv = a[0] if a else k.get("args")
            cmd = argv if isinstance(argv, str) else " ".join(map(str, argv))
            write(t=t0, d=round(time.time() - t0, 3), k="run", at=_caller(), cmd=cmd[-400:])

    def sleep(s):
        t0 = time.time()
        real_sleep(s)
        write(t=t0, d=round(time.time() - t0, 3), k="sleep", at=_caller())

    subprocess.run, time.sleep = run, sleep

    def host_cpu_s() -> dict[str, float]:
        sys.path.insert(0, str(ROOT / "tests" / "harness"))
        try:
            import hostctl
        except Exception:  # noqa: BLE001 - no harness here: no hosts
            return {}
        out = {}
        for name in hostctl.all_hosts():
            for _mnt, d in hostctl.host_cgroups(name):
                f = d / "cpuacct.usage"
                if f.is_file():
                    out[name] = int(f.read_text()) / 1e9
        return out

    class Plugin:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            cur["test"] = item.nodeid
            yield
            write(t=time.time(), k="cpu", hosts=host_cpu_s())

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_setup(self, item):
            t0 = time.time()
            yield
            write(t=t0, d=round(time.time() - t0, 3), k="setup")

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_call(self, item):
            t0 = time.time()
            yield
            write(t=t0, d=round(time.time() - t0, 3), k="call")

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_teardown(self, item):
            t0 = time.time()
            yield
            write(t=t0, d=round(time.time() - t0, 3), k="teardown")

    Plugin.__name__ = "module_waits_probe"
    _PLUGINS.append(Plugin())


_PLUGINS: list = []


def pytest_configure(config):
    """pytest's hook (this file loaded with ``-p module_waits``): install the probe when the driver
    named a log (``$RIGKIT_MODULE_WAITS_LOG``)."""
    if os.environ.get(ENV_LOG) and not _PLUGINS:
        _install(os.environ[ENV_LOG])
        config.pluginmanager.register(_PLUGINS[0], "module_waits_probe")


# ---------------------------------------------------------------- the driver and its summary
def share_of(rec: dict) -> str:
    """The share a record counts under: ``rigkit <command>``, ``ssh``, the program's name, ``sleep at
    <file:line>``, or the phase (setup, teardown)."""
    if rec["k"] == "sleep":
        return f"sleep at {rec['at']}"
    if rec["k"] != "run":
        return rec["k"]
    words = rec["cmd"].split()
    prog = os.path.basename(words[0]) if words else "?"
    if prog == "rigkit" and len(words) > 1:
        return f"rigkit {words[1]}"
    return prog


def summarise(records: list[dict], top: int) -> list[str]:
    """Per test: its wall (setup + call + teardown) and its ``top`` largest shares (:func:`share_of`)."""
    lines = []
    tests = list(dict.fromkeys(r["test"] for r in records if r.get("test")))
    for t in tests:
        rs = [r for r in records if r.get("test") == t]
        wall = sum(r["d"] for r in rs if r["k"] in ("setup", "call", "teardown"))
        shares, counts = collections.Counter(), collections.Counter()
        for r in rs:
            if r["k"] in ("run", "sleep", "setup", "teardown"):
                shares[share_of(r)] += r["d"]
                counts[share_of(r)] += 1
        lines.append(f"{wall:7.1f} s  {t}")
        for name, s in shares.most_common(top):
            lines.append(f"          {s:7.1f} s  x{counts[name]:<3} {name}")
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="+")
    ap.add_argument("--log", default="module-waits.jsonl", help="the records, JSON lines [default: %(default)s]")
    ap.add_argument("--top", type=int, default=8, help="shares shown per test [default: %(default)s]")
    a = ap.parse_args(argv)
    log = Path(a.log).resolve()
    log.write_text("")
    env = {**os.environ, ENV_LOG: str(log),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")]))}
    load0 = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "module_waits", *a.modules],
                         cwd=ROOT, env=env)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    records = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]
    print("\n".join(summarise(records, a.top)))
    hosts: dict[str, float] = {}
    for r in records:
        if r["k"] == "cpu":
            hosts.update(r["hosts"])
    ours = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"\nwall {wall:.1f} s; CPU: {ours:.1f} s in the test process and what it waited for "
          f"(user {after.ru_utime - before.ru_utime:.1f}, sys {after.ru_stime - before.ru_stime:.1f}), "
          f"{sum(hosts.values()):.1f} s in the hosts' cgroups ({', '.join(f'{k} {v:.1f}' for k, v in sorted(hosts.items()))}); "
          f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} cores); "
          f"pytest exit {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
