"""How long ``rigkit --help`` takes, this checkout beside another revision, measured in one run.

Not a test: prints figures. Each round runs ``rigkit --help`` (the console script's ``main()``, which
imports pyinfra's CLI package as every command does) once per tree, alternating, in a fresh
interpreter of this checkout's venv with ``PYTHONPATH`` set to the tree; the figure is the median
wall time of ``--runs`` rounds and the ratio of this checkout's median to the base's. The base
revision is ``git archive``d into a temporary folder (it needs the same venv: its dependencies
unchanged). Both trees share the machine's load at the same moments, so the ratio holds better
than either figure on a shared machine.

Issue 64 asks the CLI's imports at module level where ``rigkit --help`` stays within 1.2x of before.

Run: ``.venv/bin/python benchmarks/cli_help_time.py --base REV [--runs 5]``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELP = "import sys; sys.argv = ['rigkit', '--help']; from rigkit.cli.main import main; main()"


def once(tree: Path) -> float:
    """Seconds of one ``rigkit --help`` with ``tree``'s ``rigkit`` first on the path."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", HELP], cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare with (e.g. main)")
    parser.add_argument("--runs", type=int, default=5, help="rounds (each runs both trees once)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rigkit-help-") as folder:
        base = Path(folder)
        archive = subprocess.run(["git", "archive", args.base], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        trees = {f"base ({args.base})": base, "this checkout": ROOT}
        once(base), once(ROOT)  # warm: the page cache and the .pyc files of both
        times: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.runs):
            for name, tree in trees.items():
                times[name].append(once(tree))
    for name, ts in times.items():
        print(f"{name}: median {statistics.median(ts):.3f} s of {len(ts)} ({', '.join(f'{t:.2f}' for t in ts)})")
    ratio = statistics.median(times["this checkout"]) / statistics.median(times[f"base ({args.base})"])
    print(f"ratio: {ratio:.2f}x")


if __name__ == "__main__":
    main()
