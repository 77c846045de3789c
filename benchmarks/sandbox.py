"""How long the sandbox host takes to build, and the test suite's tiers.

Prints, as medians of N runs: a warm build of one nspawn host (root tarball and mirror cached:
unpack, personalize, boot to SSH) and of one chroot host; with --cold, one cold build of the root
tarball (debootstrap from Debian's mirror, cache emptied first); and, with --tiers, the wall time
of each test tier (`make test-fast`'s selection, the slow tier, the harness tier).

With --deploy, also the first deploy onto a fresh nspawn host (`rigkit deploy -i inventory/sandbox.py
--reboot --no-smoke`, wall seconds, median of N) and the converged second one. Which docker the hosts
run is the harness' choice (RIGKIT_HARNESS_DOCKER=real: the real engine and registry; else the
stand-in); the llama-swap deployed is the real v250 `make sandbox-fixtures` built.

usage: python benchmarks/sandbox.py [--runs 3] [--cold] [--tiers] [--deploy]   (root; `make sandbox-fixtures` first)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import hostctl  # noqa: E402


def warm_build(lane: str, runs: int) -> list[float]:
    """Seconds to bring up a fresh host of ``lane`` from the cached tarball, ``runs`` times."""
    out = []
    for i in range(runs):
        name = f"{os.environ.get('RIGKIT_HARNESS_PREFIX', 'rkb-')}{lane[:2]}{i}"
        with hostctl.lock():
            hostctl.host_down(name)
        t0 = time.monotonic()
        hostctl.host_up(name, lane)
        out.append(time.monotonic() - t0)
        with hostctl.lock():
            hostctl.host_down(name)
    return out


def first_deploy(runs: int) -> tuple[list[float], list[float]]:
    """(first, second) deploy wall seconds onto ``runs`` fresh nspawn hosts; a failed deploy raises."""
    first, second = [], []
    token = hostctl.hub_token()
    for i in range(runs):
        name = f"{os.environ.get('RIGKIT_HARNESS_PREFIX', 'rkb-')}bd{i}"
        with hostctl.lock():
            hostctl.host_down(name)
        hostctl.host_up(name, "nspawn")
        env = {**os.environ, "RIGKIT_SANDBOX_HOST": name, "HF_TOKEN": token}
        try:
            for extra, out in ((["--reboot"], first), ([], second)):
                t0 = time.monotonic()
                r = subprocess.run([str(ROOT / ".venv/bin/rigkit"), "deploy", "-i", "inventory/sandbox.py", "--no-smoke", *extra],
                                   cwd=ROOT, env=env, capture_output=True, text=True)
                out.append(time.monotonic() - t0)
                if r.returncode != 0:
                    raise SystemExit(f"deploy onto {name} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
        finally:
            with hostctl.lock():
                hostctl.host_down(name)
    return first, second


def cold_tarball() -> float:
    """Seconds for rootfs.sh with its cache emptied (debootstrap + making it look like Arch)."""
    for p in hostctl.CACHE.glob("rootfs-*.tar.zst"):
        p.unlink()
    shutil.rmtree(hostctl.CACHE / "debs", ignore_errors=True)
    t0 = time.monotonic()
    subprocess.run(["bash", str(ROOT / "tests/harness/rootfs.sh")], check=True, capture_output=True)
    return time.monotonic() - t0


def tier(marker: str) -> float:
    """Wall seconds of ``pytest -q -m MARKER`` (prefix rkb-, apart from other sessions' hosts)."""
    env = {**os.environ, "RIGKIT_HARNESS_PREFIX": "rkb-t"}
    t0 = time.monotonic()
    subprocess.run([str(ROOT / ".venv/bin/pytest"), "-q", "-m", marker], cwd=ROOT, env=env, capture_output=True)
    return time.monotonic() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also time a cold root tarball build (~1-2 min)")
    parser.add_argument("--tiers", action="store_true", help="also time the test tiers (~10 min)")
    parser.add_argument("--deploy", action="store_true", help="also time first and second deploys (~2 min a run)")
    args = parser.parse_args()
    hostctl.rootfs_tarball()  # make sure the warm figures are warm
    for lane in ("nspawn", "chroot"):
        times = warm_build(lane, args.runs)
        print(f"warm build, {lane} host: median {statistics.median(times):.1f} s "
              f"(min {min(times):.1f}, max {max(times):.1f}, n={len(times)})", flush=True)
    if args.deploy:
        docker = "real engine + registry" if hostctl.real_docker() else "docker stand-in"
        for label, times in zip(("first deploy", "second deploy"), first_deploy(args.runs)):
            print(f"{label} ({docker}): median {statistics.median(times):.1f} s "
                  f"(min {min(times):.1f}, max {max(times):.1f}, n={len(times)})", flush=True)
    if args.cold:
        print(f"cold root tarball (debootstrap): {cold_tarball():.1f} s", flush=True)
    if args.tiers:
        for marker in ("not slow and not harness", "slow and not harness", "harness"):
            print(f"tier `-m {marker}`: {tier(marker):.1f} s", flush=True)


if __name__ == "__main__":
    main()
