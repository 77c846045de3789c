"""The coverage table, generated on a sandbox host: operation -> breakage -> finding -> the plan agrees.

For every row of :data:`rigkit.drift.coverage.COVERAGE`: a ``probe`` row's breakage is applied on a
copy of the converged sandbox host (golden.py), in batches of independent breakages (``--batch``,
default 8; an ``alone`` row in a batch of its own), under the host lock; ``rigkit drift --json
--plan`` runs once per batch (one probe and one ``pyinfra --dry`` at once); everything is put back;
:func:`rigkit.drift.coverage.agreement` judges the batch. The converged host is checked first and
last (both empty), and the deploy's path choice with it (:func:`rigkit.deploy.converged.path_agreement`:
every breakage sends the deploy to the full run, the converged host takes the probe path). With
``--deploy``, every batch is then applied again and repaired by the deploy itself
(``drift_agreement.repair_batch``: the full run taken, exit 0, drift clean after, the next deploy on
the probe path; ``rigkit deploy --reboot``, for the rows whose repair needs one). Prints the table as Markdown (notes/drift-coverage.md holds its last output) and,
per batch, the wall seconds and what disagreed; exits 1 when anything disagreed.

usage: python benchmarks/drift_coverage.py [--batch 8] [--out FILE] [--keep] [--deploy]
(root, from the project root; `make sandbox-fixtures` first; RIGKIT_HARNESS_* as for the tests)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "harness"))
os.environ.setdefault("RIGKIT_HARNESS_PREFIX", "rkc-")
import conftest  # noqa: E402  (the harness' host factory: a copy of the golden converged host)
import drift_agreement  # noqa: E402
import sandbox_project  # noqa: E402

from rigkit.drift import coverage  # noqa: E402


def cell(text: str) -> str:
    """``text`` for a Markdown table cell (pipes escaped, one line)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(results: dict[tuple[str, str], tuple[str, str, str]]) -> str:
    """The Markdown table: role, operation, how, breakage, the probe's findings, the plan agrees."""
    lines = ["| role | operation | how | breakage (sandbox) | probe finding(s) | plan |",
             "|---|---|---|---|---|---|"]
    for c in coverage.COVERAGE:
        found, plan, _ = results.get((c.role, c.op), ("", "", ""))
        if c.how == "probe" and c.breakage:
            what = f"`{cell(c.breakage)}`"
        elif c.how == "probe" and c.seen_with:
            what = f"with *{cell(c.seen_with)}*"
        else:
            what = "—"
        lines.append(f"| {c.role} | {cell(c.op)} | {c.how} | {what} | {cell(found or c.note)} | {cell(plan)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8, help="independent breakages per probe + plan")
    parser.add_argument("--out", help="also write the table to FILE")
    parser.add_argument("--keep", action="store_true", help="leave the host up")
    parser.add_argument("--deploy", action="store_true", help="then let the deploy repair every batch (issue 48)")
    args = parser.parse_args()
    project = sandbox_project.cwd()
    t0 = time.monotonic()
    host = conftest._up(conftest.PREFIX + "cov", "nspawn", converged=True)
    print(f"host {host.name} up (converged copy) in {time.monotonic() - t0:.1f} s", flush=True)
    results: dict[tuple[str, str], tuple[str, str, str]] = {}
    failed = 0
    try:
        first = drift_agreement.converged(host, project)
        print(f"converged: {first.seconds:.1f} s, problems: {first.problems or 'none'}", flush=True)
        failed += bool(first.problems)
        for n, rows in enumerate(coverage.batches(list(coverage.COVERAGE), args.batch), 1):
            b = drift_agreement.run_batch(host, rows, project)
            print(f"batch {n} ({len(rows)} breakages): {b.seconds:.1f} s, exit {b.exit_code}, "
                  f"problems: {len(b.problems)}", flush=True)
            for p in b.problems:
                print(f"  - {p}", flush=True)
            failed += bool(b.problems)
            counted = [(k, i) for k, i, s in b.findings if s == "drift" and k != "plan"]
            for c in rows:
                mine = sorted({f"{k} {i}" for k, i in counted if coverage.matches(c.findings, k, i)})
                plan = sorted(r for r in b.plan_rows if coverage.plan_matches(c.plan, r))
                bad = [p for p in b.problems if p.startswith(f"{c.role}: {c.op}:")]
                results[(c.role, c.op)] = ("; ".join(mine) or "NOT REPORTED",
                                           ("agrees: " if not bad else "DISAGREES: ") + "; ".join(plan or ["no row"]), "")
        last = drift_agreement.converged(host, project)
        print(f"converged again: {last.seconds:.1f} s, problems: {last.problems or 'none'}", flush=True)
        failed += bool(last.problems)
        if args.deploy:
            for n, rows in enumerate(coverage.batches(list(coverage.COVERAGE), args.batch), 1):
                r = drift_agreement.repair_batch(host, rows, project, "--reboot")
                print(f"repair {n} ({len(rows)} breakages): deploy {r.seconds:.1f} s, exit {r.exit_code}: {r.path}; "
                      f"drift after: exit {r.drift_after}; next deploy: {r.next_path}", flush=True)
                for p in r.problems:
                    print(f"  - {p}", flush=True)
                failed += bool(r.problems)
    finally:
        if not args.keep:
            conftest._remove_hosts([host])
    for c in coverage.COVERAGE:  # a probe row seen with another's breakage: that batch's plan rows
        if c.how == "probe" and c.seen_with and (c.role, c.seen_with) in results:
            found, plan, _ = results[(c.role, c.seen_with)]
            results[(c.role, c.op)] = (found, plan, "")
    text = table(results)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    probe_rows = sum(c.how == "probe" for c in coverage.COVERAGE)
    print(f"{len(coverage.COVERAGE)} operations: {probe_rows} seen by the probe, "
          f"{sum(c.how == 'gated' for c in coverage.COVERAGE)} gated, {sum(c.how == 'outside' for c in coverage.COVERAGE)} "
          f"outside, {len(coverage.PLAN_ONLY)} plan-only; {time.monotonic() - t0:.0f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
