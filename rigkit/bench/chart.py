"""The results chart: tok/s per workload against the baseline (PNG, matplotlib).

Drawn on a bare :class:`matplotlib.figure.Figure` with the Agg canvas, so no pyplot state and
no display backend are touched (works headless, in tests and on the host agent).
"""

from __future__ import annotations

import json
import os
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PANELS = (("decode_tps", "decode tok/s"), ("prefill_tps", "prefill tok/s"))


def _bar(summary: dict[str, Any] | None, metric: str) -> tuple[float, float, float] | None:
    s = ((summary or {}).get("metrics") or {}).get(metric)
    if not s or (summary or {}).get("status", "ok") != "ok":
        return None
    return s["median"], s["median"] - s["min"], s["max"] - s["median"]


def write_chart(path: str, summary: dict[str, Any], baseline: dict[str, Any] | None = None) -> None:
    """Write a PNG to ``path``: one panel per metric of :data:`PANELS`, a bar per workload
    (median, whiskers min–max) beside the baseline's median when ``baseline`` (a loaded
    summary) has that workload. Failed workloads are marked ``FAILED`` instead of a bar.
    Raises OSError when the file cannot be written."""
    names = [n for n, w in summary["workloads"].items()]
    fig = Figure(figsize=(8.5, 4.2 * len(PANELS)), dpi=100)
    FigureCanvasAgg(fig)
    ctx = summary.get("context") or {}
    title = " · ".join(str(ctx[k]) for k in ("engine", "model", "quantization", "gpu")
                       if ctx.get(k))
    fig.suptitle(f"rigkit bench {summary.get('run_id', '')}\n{title}", fontsize=10)
    base_label = "baseline"
    if baseline:
        bctx = baseline.get("context") or {}
        base_label = "baseline: " + (" ".join(str(bctx[k]) for k in ("engine", "model")
                                              if bctx.get(k)) or baseline.get("_file", ""))
    width = 0.38
    for i, (metric, label) in enumerate(PANELS):
        ax = fig.add_subplot(len(PANELS), 1, i + 1)
        xs = list(range(len(names)))
        for x, name in zip(xs, names):
            cur = _bar(summary["workloads"][name], metric)
            if cur:
                ax.bar(x - width / 2, cur[0], width, yerr=[[cur[1]], [cur[2]]], capsize=3,
                       color="#2b6cb0", label="this run" if x == xs[0] or not ax.get_legend_handles_labels()[0] else None)
                ax.annotate(f"{cur[0]:.0f}", (x - width / 2, cur[0] + cur[2]), ha="center",
                            va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
            elif summary["workloads"][name].get("status") != "ok":
                ax.annotate("FAILED", (x - width / 2, 0), ha="center", va="bottom",
                            color="#c53030", fontsize=9, fontweight="bold")
            base = _bar((baseline or {}).get("workloads", {}).get(name), metric)
            if base:
                ax.bar(x + width / 2, base[0], width, color="#a0aec0", hatch="//",
                       label=base_label if base_label not in ax.get_legend_handles_labels()[1] else None)
                ax.annotate(f"{base[0]:.0f}", (x + width / 2, base[0]), ha="center",
                            va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
        verdicts = summary.get("verdicts") or {}
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{n}\n{verdicts.get(n, {}).get('verdict', '')}" for n in names])
        ax.margins(y=0.18)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            ax.legend(loc="best", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, format="png")


def write_outputs(out_dir: str, summary: dict[str, Any],
                  baselines: list[dict[str, Any]]) -> dict[str, str]:
    """Write ``summary.json`` and ``chart.png`` (against the verdict baseline of the first
    workload that has one, else the first baseline given). Returns name → path."""
    paths = {"requests": os.path.join(out_dir, "requests.jsonl"),
             "summary": os.path.join(out_dir, "summary.json"),
             "chart": os.path.join(out_dir, "chart.png")}
    with open(paths["summary"], "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2)
        fh.write("\n")
    files = [v.get("baseline") for v in summary["verdicts"].values() if v.get("baseline")]
    chosen = next((b for b in baselines if b.get("_file") in files), None) or \
        (baselines[0] if baselines else None)
    write_chart(paths["chart"], summary, chosen)
    return paths
