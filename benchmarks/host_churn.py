"""Host churn on the sandbox: what bringing converged copies up and down costs lanes that run at once.

Each of L lanes (processes started together, default 3, as `make test` runs) does R rounds (default 2)
of what a module with a converged host does around its tests: ``hostctl.host_up(name,
copy_of=ROOT)`` (copy, re-personalize, boot to SSH) then ``hostctl.host_down(name)`` under
``hostctl.lock()`` (tests/harness/conftest.py ``_remove_hosts``). Prints per lane and in total: wall
seconds, seconds spent waiting for the harness lock and holding it. ``--harness DIR`` runs another
checkout's tests/harness (e.g. the main branch's, for a before/after on one machine, back to back).

``--hold S`` keeps each host up S seconds (its module's tests); ``--spares`` copies each lane's next root
meanwhile (``hostctl.copy_spare``, as a lane of `make test` does). Hosts are named
``<RIGKIT_HARNESS_PREFIX>ch<lane>-h`` (default ``rkb-``), so a session touches only its own.

usage: python benchmarks/host_churn.py [--lanes 3] [--rounds 2] [--hold 0] [--spares] [--root GOLDEN_ROOT] [--harness DIR]
       (root; `make sandbox-fixtures` first; without --root the golden copy is built or found)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lane(harness: str, root: str, i: int, rounds: int, hold: float, spares: bool, start, out) -> None:
    sys.path.insert(0, harness)
    import hostctl

    plain_lock, stats = hostctl.lock, {"wait_s": 0.0, "held_s": 0.0}

    @contextmanager
    def timed_lock():
        t0 = time.monotonic()
        with plain_lock():
            t1 = time.monotonic()
            stats["wait_s"] += t1 - t0
            try:
                yield
            finally:
                stats["held_s"] += time.monotonic() - t1

    hostctl.lock = timed_lock
    os.environ["RIGKIT_HARNESS_PREFIX"] = os.environ.get("RIGKIT_HARNESS_PREFIX", "rkb-") + f"ch{i}-"
    name = os.environ["RIGKIT_HARNESS_PREFIX"] + "h"
    start.wait()
    t0, ups, downs = time.monotonic(), [], []
    for _ in range(rounds):
        t = time.monotonic()
        hostctl.host_up(name, copy_of=Path(root))
        ups.append(time.monotonic() - t)
        if spares:
            hostctl.copy_spare(Path(root))
        time.sleep(hold)  # a module's tests on the host
        t = time.monotonic()
        with hostctl.lock():
            hostctl.host_down(name)
        downs.append(time.monotonic() - t)
    if spares:  # the last one, never used
        hostctl.drop_spares(os.environ["RIGKIT_HARNESS_PREFIX"])
    out.put({"lane": i, "wall_s": time.monotonic() - t0, "up_s": ups, "down_s": downs, **stats})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lanes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--root", help="a powered-off host's root to copy (default: the golden copy)")
    ap.add_argument("--harness", default=str(ROOT / "tests" / "harness"))
    ap.add_argument("--hold", type=float, default=0.0, help="seconds each host stays up (a module's tests)")
    ap.add_argument("--spares", action="store_true", help="copy each lane's next root while a host is up "
                    "(hostctl.copy_spare, as a lane of `make test` does)")
    args = ap.parse_args()
    root = args.root
    if not root:
        sys.path.insert(0, str(ROOT / "tests" / "harness"))
        import golden

        root = str(golden.ensure().root)
    mp = multiprocessing.get_context("spawn")  # each lane imports --harness's hostctl afresh
    start, out = mp.Event(), mp.Queue()
    procs = [mp.Process(target=lane, args=(args.harness, root, i, args.rounds, args.hold, args.spares, start, out))
             for i in range(args.lanes)]
    for p in procs:
        p.start()
    t0 = time.monotonic()
    start.set()
    recs = sorted((out.get() for _ in procs), key=lambda r: r["lane"])
    for p in procs:
        p.join()
    for r in recs:
        print(f"lane {r['lane']}: {r['wall_s']:6.1f} s wall; up {' '.join(f'{x:.1f}' for x in r['up_s'])} s, "
              f"down {' '.join(f'{x:.1f}' for x in r['down_s'])} s; lock waited {r['wait_s']:.1f} s, held {r['held_s']:.1f} s")
    summary = {"harness": args.harness, "lanes": args.lanes, "rounds": args.rounds, "hold_s": args.hold,
               "spares": args.spares, "wall_s": round(time.monotonic() - t0, 1),
               "lane_wall_s_median": round(statistics.median(r["wall_s"] for r in recs), 1),
               "lock_wait_s_total": round(sum(r["wait_s"] for r in recs), 1),
               "lock_held_s_total": round(sum(r["held_s"] for r in recs), 1)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
