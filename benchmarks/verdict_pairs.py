"""Issue 39's "twenty pairs in a loop": two back-to-back `rigkit bench` runs of the same member and
settings, N times, on a converged sandbox host — do their verdicts ever disagree as FAIL and PASS? And
(issue 60) does the second run of a steady pair PASS?

Not a test (its figures are this machine's timing): prints one line per pair and a summary, and
writes them as JSON (``--json``). Each pair gets a fresh results folder, so its first run has no
earlier run to compare with and its second compares with the first **by default** (no
``--baseline``: the last steady comparable run in ``--results``) when the first is steady
(``rigkit.bench.results.unsteady``: n ≥ 3, CV ≤ 10%), and with none when it is not (an unstable run is
never a default baseline); the script checks the second chose so. A *steady pair* is one whose two runs
are both steady; the summary counts them and how many of their second runs said PASS. It also judges the first against the second (``rigkit.bench.results.verdict`` on the
two summaries, the roles swapped), so a pair "disagrees" when one direction says FAIL and the
other PASS. The runs are the post-deploy smoke's: ``--workload chat-greedy --preset small
--max-tokens 256`` through llama-swap against Strata (llama.cpp on the sandbox's CPU), the warm-up
first.

The host is a copy of the golden converged host (tests/harness/golden.py: built when its inputs
changed, minutes), named ``<RIGKIT_HARNESS_PREFIX>vp1``, removed at the end unless ``--keep``.

Each pair's line and the summary say the machine's load (``/proc/loadavg``'s 1-minute figure) at its start
and end: the sandbox's CPU llama.cpp server shares the machine's cores with everything else running, and
its own decode time for the same work follows that load (docs/bench.md "Why the sandbox's runs are rarely
steady"). ``--max-tokens`` (default 256, the smoke's) lengthens each request's decode.

usage: .venv/bin/python benchmarks/verdict_pairs.py [--pairs 20] [--max-tokens 256] [--json out/verdict-pairs.json]
(root, from the project root, with the harness variables exported; `make sandbox-fixtures` first)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import conftest as harness  # noqa: E402  (tests/harness/conftest.py: _up, the harness's own host bring-up)
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402

from rigkit.bench.results import load_baseline, unsteady, verdict  # noqa: E402

SMOKE = ["--workload", "chat-greedy", "--preset", "small", "--max-tokens", "256"]


def bench(name: str, results: Path, out: Path) -> tuple[int, dict, str]:
    """One ``rigkit bench`` of Strata on host ``name``: exit code, summary, stdout."""
    env = {**os.environ, "RIGKIT_SANDBOX_HOST": name, "HF_TOKEN": hostctl.hub_token()}
    proc = subprocess.run([sys.executable, "-m", "rigkit", "bench", "-i", "inventory/sandbox.py",
                           "--host", name, "--member", "strata", *SMOKE, "--results", str(results),
                           "--out", str(out)],
                          cwd=sandbox_project.cwd(), env=env, capture_output=True, text=True, timeout=900)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    return proc.returncode, summary, proc.stdout + proc.stderr[-2000:]


def decode_words(summary: dict) -> str:
    w = (summary.get("workloads") or {}).get("chat-greedy") or {}
    d = (w.get("metrics") or {}).get("decode_tps") or {}
    if not d:
        return f"{w.get('status')}: {w.get('error')}"
    cv = f"{100 * d['cv']:.1f}%" if d.get("cv") is not None else "n/a"
    return (f"decode {d['median']:.1f} tok/s (min {d['min']:.1f}, max {d['max']:.1f}, CV {cv}, "
            f"{w.get('attempts', 1)} attempt(s))")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--json", type=Path, help="write the pairs here")
    ap.add_argument("--keep", action="store_true", help="leave the host up")
    ap.add_argument("--max-tokens", type=int, default=256, help="max_tokens of each request (the smoke's: 256)")
    args = ap.parse_args()
    if args.max_tokens < 1 or args.pairs < 1:
        ap.error(f"--max-tokens {args.max_tokens} / --pairs {args.pairs}: each must be at least 1")
    SMOKE[-1] = str(args.max_tokens)
    loads: list[float] = []
    name = harness.PREFIX + "vp1"
    t0 = time.monotonic()
    host = harness._up(name, "nspawn", converged=True)
    print(f"{name} up (a copy of the golden host) in {time.monotonic() - t0:.0f} s", flush=True)
    pairs, disagreements, not_named, steady_pairs, steady_pass = [], 0, 0, 0, 0
    work = Path(tempfile.mkdtemp(prefix="rigkit-verdict-pairs-"))
    try:
        for k in range(1, args.pairs + 1):
            results = work / f"pair-{k:02d}"
            load0 = os.getloadavg()[0]
            rc1, s1, out1 = bench(name, results, results / "first")
            rc2, s2, out2 = bench(name, results, results / "second")
            load1 = os.getloadavg()[0]
            loads += [load0, load1]
            if not s1 or not s2:
                print(f"pair {k}: a run wrote no summary:\n{out1[-1500:]}\n{out2[-1500:]}")
                return 2
            v2 = s2["verdicts"]["chat-greedy"]
            shaky1 = unsteady("chat-greedy", s1["workloads"]["chat-greedy"])
            shaky2 = unsteady("chat-greedy", s2["workloads"]["chat-greedy"])
            # the first is the second's baseline exactly when it is steady
            named = v2.get("baseline") == (None if shaky1 else str(results / "first" / "summary.json"))
            not_named += not named
            steady_pair = not shaky1 and not shaky2
            steady_pairs += steady_pair
            steady_pass += steady_pair and v2["verdict"] == "PASS"
            # the first judged against the second: the same rule, the roles swapped
            b2 = load_baseline(str(results / "second" / "summary.json"))
            b2["_found"] = True
            v1 = verdict("chat-greedy", s1["workloads"]["chat-greedy"], s1["context"], [b2], s1["preset"])
            labels = {v2["verdict"], v1["verdict"]}
            clash = labels == {"FAIL", "PASS"}
            disagreements += clash
            row = {"pair": k, "first": decode_words(s1), "second": decode_words(s2),
                   "second_vs_first": v2["verdict"], "first_vs_second": v1["verdict"],
                   "second_reasons": v2["reasons"], "baseline_named": named,
                   "first_unsteady": shaky1, "second_unsteady": shaky2, "steady_pair": steady_pair,
                   "impossible": [len(s["workloads"]["chat-greedy"].get("implausible") or []) for s in (s1, s2)],
                   "exit_codes": [rc1, rc2], "disagree": clash, "load": [load0, load1]}
            pairs.append(row)
            print(f"pair {k:2d}: first {row['first']} · second {row['second']} · second vs first "
                  f"{v2['verdict']}, first vs second {v1['verdict']}"
                  + (" · steady pair" if steady_pair else f" · not steady: {shaky1 or shaky2}")
                  + (f" · impossible figures left out {row['impossible']}" if any(row["impossible"]) else "")
                  + ("" if named else " · WRONG BASELINE") + (" · DISAGREE" if clash else "")
                  + f" · load {load0:.1f}→{load1:.1f}",
                  flush=True)
    finally:
        if not args.keep:
            host.close()
            with hostctl.lock():
                hostctl.host_down(name)
    tally: dict[str, int] = {}
    for p in pairs:
        tally[p["second_vs_first"]] = tally.get(p["second_vs_first"], 0) + 1
    print(f"{len(pairs)} pairs in {time.monotonic() - t0:.0f} s: second vs first "
          + ", ".join(f"{v} {n}" for v, n in sorted(tally.items()))
          + f"; FAIL/PASS disagreements {disagreements}; steady pairs {steady_pairs}, their second PASS in "
          f"{steady_pass}; the second chose its baseline right (the first exactly when steady) in "
          f"{len(pairs) - not_named} of {len(pairs)}; max_tokens {args.max_tokens}; load (1-min) "
          + (f"{min(loads):.1f}-{max(loads):.1f}" if loads else "n/a"))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"pairs": pairs, "tally": tally, "disagreements": disagreements,
                                         "steady_pairs": steady_pairs, "steady_pairs_pass": steady_pass,
                                         "max_tokens": args.max_tokens},
                                        indent=1))
    return 1 if disagreements or not_named or steady_pass < steady_pairs else 0


if __name__ == "__main__":
    sys.exit(main())
