"""The fleet comparison of ``rigkit report`` (issue 67): rigs with the same spec should give the same
figures, so each rig's latest smoke is judged against the *other* rigs' — the fleet's median and spread —
with the bench's own noise rules (:func:`rigkit.bench.results.compare_speed`), and a rig beyond the others'
noise (a slow PCIe link, a throttling card, a cap not applied) is named as the outlier with its figure.

- **Which runs**: per host and member, the newest run in the results folder
  (:func:`rigkit.report.page.find_runs`); per workload, its compared figures
  (:func:`rigkit.bench.results.compared_metrics`: decode tok/s, and prefill for ``quoting``).
- **Which rigs are compared together**: the same member, workload, preset, ``max_tokens`` and hardware
  context (:data:`rigkit.bench.context.CONTEXT_KEYS`: GPU, driver, power limit, engine, model, …) — the
  settings a baseline must share (:func:`rigkit.bench.results.same_settings`) less the host.
- **The fleet's figures** (a group of at least :data:`MIN_RIGS` rigs): the median of the rigs' medians,
  and their spread (lowest and highest rig median).
- **Each rig's verdict**: ``compare_speed(rig, others)`` where *others* pools the other rigs' runs: the
  median of their medians, the lowest of their minima, the highest of their maxima (so one noisy rig
  among them widens the band and an outlier must be beyond every one of them); its CV is the rig's own
  check (an unstable rig is a WARN, never an outlier). An outlier is a ``FAIL`` (every request slower
  than every request of the others and more than 15% below their median: ``slow``) or the mirror image
  (``fast``: every request faster, more than 15% above).
"""

from __future__ import annotations

import statistics
from typing import Any

from rigkit.bench.context import CONTEXT_KEYS
from rigkit.bench.results import FASTER, MAX_CV, compare_speed, compared_metrics

#: Fewest rigs in a group for a fleet comparison: the rig and at least two others (one other rig is a
#: baseline, not a fleet: which of two is the odd one cannot be told).
MIN_RIGS = 3


def _rig(host: str, run: Any, metric: str, stats: dict[str, Any]) -> dict[str, Any]:
    return {"host": host, "run": run.run_id, "median": stats["median"], "min": stats.get("min", stats["median"]),
            "max": stats.get("max", stats["median"]), "n": stats.get("n", 1), "cv": stats.get("cv")}


def groups(runs: dict[tuple[str, str], list[Any]], hosts: list[str]) -> dict[tuple, list[dict[str, Any]]]:
    """``{(member, workload, metric, preset, max_tokens, context values): [rig figures]}`` from ``runs``
    (:func:`rigkit.report.page.find_runs`'s ``{(host, member): [Run, oldest first]}``), each of ``hosts``'
    newest run per member; a rig's figures: ``{host, run, median, min, max, n, cv}`` of one metric."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    for (host, member), host_runs in runs.items():
        if host not in hosts or not host_runs:
            continue
        run = host_runs[-1]
        ctx = run.summary.get("context") or {}
        for name, w in (run.summary.get("workloads") or {}).items():
            if not isinstance(w, dict):
                continue
            for metric in compared_metrics(name):
                stats = (w.get("metrics") or {}).get(metric)
                if not stats or stats.get("median") is None:
                    continue
                key = (member, name, metric, run.summary.get("preset"), w.get("max_tokens"),
                       tuple(str(ctx.get(k)) for k in CONTEXT_KEYS))
                out.setdefault(key, []).append(_rig(host, run, metric, stats))
    return out


def judge(rigs: list[dict[str, Any]], unit: str = "decode") -> list[dict[str, Any]]:
    """Each rig of one group against the others pooled (module doc), in the rigs' order: the rig's
    figures plus ``verdict`` (``PASS``/``WARN``/``FAIL``, the bench's), ``reason`` and ``outlier``
    (``"slow"``, ``"fast"`` or None). ``rigs``: at least :data:`MIN_RIGS` (ValueError otherwise)."""
    if len(rigs) < MIN_RIGS:
        raise ValueError(f"a fleet comparison needs at least {MIN_RIGS} rigs, got {len(rigs)}")
    out = []
    for i, rig in enumerate(rigs):
        others = rigs[:i] + rigs[i + 1:]
        pooled = {"median": statistics.median(o["median"] for o in others), "min": min(o["min"] for o in others),
                  "max": max(o["max"] for o in others), "n": sum(o["n"] for o in others)}
        label, reason = compare_speed(rig, pooled, unit)
        fast = (label == "WARN" and (rig.get("cv") or 0) <= MAX_CV and rig["median"] > FASTER * pooled["median"]
                and rig["min"] > pooled["max"])
        out.append({**rig, "verdict": label, "reason": reason,
                    "outlier": "slow" if label == "FAIL" else "fast" if fast else None})
    return out


def fleet_comparison(runs: dict[tuple[str, str], list[Any]], hosts: list[str]) -> list[dict[str, Any]]:
    """The fleet comparison of ``hosts`` (inventory order) from ``runs`` (:func:`groups`'s input): one entry
    per group, sorted by member, workload and metric::

        {"member", "workload", "metric", "preset", "max_tokens", "rigs": [judge's rigs; not judged: their
         figures with verdict, reason and outlier None], "fleet": {"median", "low", "high", "n_rigs"}, "outliers": ["host 12.3 tok/s, slow: …"],
         "note": "too few rigs …" or None}

    A group of fewer than :data:`MIN_RIGS` rigs is listed with its figures and ``note``, not judged."""
    out = []
    for key, rigs in sorted(groups(runs, hosts).items(), key=lambda kv: tuple(map(str, kv[0][:3]))):
        member, workload, metric, preset, max_tokens, _ctx = key
        rigs.sort(key=lambda r: hosts.index(r["host"]))
        medians = [r["median"] for r in rigs]
        entry: dict[str, Any] = {"member": member, "workload": workload, "metric": metric, "preset": preset,
                                 "max_tokens": max_tokens,
                                 "fleet": {"median": statistics.median(medians), "low": min(medians),
                                           "high": max(medians), "n_rigs": len(rigs)},
                                 "outliers": [], "note": None}
        if len(rigs) < MIN_RIGS:
            entry["rigs"] = [{**r, "verdict": None, "reason": None, "outlier": None} for r in rigs]  # judge's shape
            entry["note"] = f"{len(rigs)} rig(s) with these settings: a fleet comparison needs {MIN_RIGS}"
        else:
            entry["rigs"] = judge(rigs, "decode" if metric == "decode_tps" else "prefill")
            entry["outliers"] = [f"{r['host']} {r['median']:.1f} tok/s, {r['outlier']}: {r['reason']}"
                                 for r in entry["rigs"] if r["outlier"]]
        out.append(entry)
    return out


def lines(comparison: list[dict[str, Any]]) -> list[str]:
    """The comparison in words, one line per group and one per outlier (``rigkit report``'s stderr)."""
    out = []
    for e in comparison:
        f = e["fleet"]
        head = (f"fleet {e['member']}/{e['workload']} {e['metric']}: median {f['median']:.1f} tok/s over "
                f"{f['n_rigs']} rigs (spread {f['low']:.1f}-{f['high']:.1f})")
        out.append(head + (f"; {e['note']}" if e["note"] else "; no outlier" if not e["outliers"] else ""))
        out += [f"  outlier: {o}" for o in e["outliers"]]
    return out
