"""The bench's charts (matplotlib): one run's tok/s per workload against its baseline (PNG
beside the results), and a member's history over runs (SVG, for ``rigkit report``).

Drawn on a bare :class:`matplotlib.figure.Figure` with the Agg/SVG canvases, so no pyplot state
and no display backend are touched (works headless, in tests and on any host).

What a run's chart shows, per panel (decode tok/s, prefill tok/s, TTFT s, tok/J from the
workload's ``energy``; a panel with no value in any workload is left out): a bar per workload centred on its label (the median), each
request's value as a point over it (the spread, not only a whisker), the baseline's median
beside it when the baseline has that workload; a chunk-count estimate hatched and labelled
``estimate``; tok/J only where the energy was the engine's work — a draw that stayed at the
idle level is ``tok/J n/a``, the reason (not power-modelled) written in its column; a failed workload marked ``FAILED`` with its error kind at its label, a workload
not run marked ``not run``; a warm-up that failed or did not run gets its own column, marked.

Two rules keep a picture from saying what was not measured (issue 27): a failed workload is a
shaded column with its label placed in axes coordinates — no mark sits at 0 (or at any other
value) on the value axis; and a decode bar counted one way is never drawn beside a baseline
counted the other way (a chunk-count estimate against usage, or the reverse): the baseline
bar is left out and the panel says ``baseline counted, not comparable``. In a member's
history the line joins only counted points (estimates stay hollow, unjoined) and a failed run
is a red vertical rule at its time, not a point at a value.
"""

from __future__ import annotations

import json
import os
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rigkit.bench.results import implausible_figures

PANELS = (("decode_tps", "decode tok/s"), ("prefill_tps", "prefill tok/s"), ("ttft_s", "TTFT s"),
          ("tok_per_j", "tok/J (GPU energy)"))
#: Figures read from a workload's ``energy`` object (rigkit.bench.energy), not its ``metrics``.
ENERGY_METRICS = ("tok_per_j", "j_per_token", "avg_w")
RUN_COLOUR, BASE_COLOUR, FAIL_COLOUR, MUTED = "#2b6cb0", "#a0aec0", "#c53030", "#718096"


#: Speculative decoding's figures (a workload's ``spec_decode``, :func:`rigkit.bench.metrics.spec_delta`):
#: history metric → its key there. None for a mixed workload (other requests moved the counters).
SPEC_METRICS = {"spec_acceptance_rate": "acceptance_rate", "spec_acceptance_length": "acceptance_length"}


def _median(summary: dict[str, Any] | None, metric: str) -> float | None:
    if metric in SPEC_METRICS:
        sd = (summary or {}).get("spec_decode") or {}
        return None if sd.get("mixed") or (summary or {}).get("status", "ok") != "ok" else sd.get(SPEC_METRICS[metric])
    if metric in ENERGY_METRICS:
        energy = (summary or {}).get("energy") or {}
        if energy.get("power_modelled") is False and metric in ("tok_per_j", "j_per_token"):
            return None  # the card's resting draw, not the engine's work: no tok/J (n/a, the reason drawn)
        value = energy.get(metric)
        return value if (summary or {}).get("status", "ok") == "ok" else None
    s = ((summary or {}).get("metrics") or {}).get(metric)
    if not s or (summary or {}).get("status", "ok") != "ok":
        return None
    return s["median"]


def _num(v: float) -> str:
    """A figure for a label: thousands separated above 100, 1 decimal above 1, else 3."""
    return f"{v:,.0f}" if abs(v) >= 100 else (f"{v:.1f}" if abs(v) >= 1 else f"{v:.3f}")


def _columns(summary: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    cols = list(summary["workloads"].items())
    warm = summary.get("warmup")
    if warm and warm.get("status") != "ok":
        cols.insert(0, ("warmup", warm))
    return cols


def samples_from_jsonl(path: str) -> dict[str, dict[str, list[float]]]:
    """Per-request values of the measured (not discarded) requests in a ``requests.jsonl``:
    ``{workload: {metric: [values]}}`` for the metrics of :data:`PANELS`, from each workload's
    last ``attempt`` (the one its summary holds), less the figures its summary left out as impossible
    (:func:`rigkit.bench.results.implausible_figures`: a 146,318 tok/s point would flatten the panel);
    ``{}`` when the file is missing. Lines that are not JSON objects are skipped."""
    out: dict[str, dict[str, list[float]]] = {}
    try:
        fh = open(path, encoding="utf-8")
    except OSError:
        return out
    recs = []
    with fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and not rec.get("discarded") and rec.get("ok"):
                recs.append(rec)
    def attempt(rec: dict[str, Any]) -> int:
        return rec["attempt"] if isinstance(rec.get("attempt"), int) else 1

    last: dict[str, int] = {}
    for rec in recs:
        name = str(rec.get("workload"))
        last[name] = max(last.get(name, 1), attempt(rec))
    for rec in recs:
        name = str(rec.get("workload"))
        if attempt(rec) != last[name]:
            continue  # an unstable attempt measured again: the summary is the last attempt's
        per = out.setdefault(name, {})
        impossible = {m["metric"] for m in implausible_figures([rec])}  # left out of the summary: out here too
        for metric, _ in PANELS:
            if isinstance(rec.get(metric), (int, float)) and metric not in impossible:
                per.setdefault(metric, []).append(float(rec[metric]))
        joules, tokens = rec.get("energy_j"), rec.get("completion_tokens")
        if isinstance(joules, (int, float)) and joules > 0 and isinstance(tokens, int) and tokens:
            per.setdefault("tok_per_j", []).append(tokens / joules)
    return out


def draw_run(fig: Figure, summary: dict[str, Any], baseline: dict[str, Any] | None = None,
             samples: dict[str, dict[str, list[float]]] | None = None) -> list[str]:
    """Draw a run's panels on ``fig`` (see the module doc); returns the metrics drawn, in
    order (empty when no workload has a value: then only a note is drawn)."""
    cols = _columns(summary)
    samples = samples or {}
    bw = (baseline or {}).get("workloads") or {}
    drawn = [(m, label) for m, label in PANELS
             if any(_median(w, m) is not None for _, w in cols)]
    ctx = summary.get("context") or {}
    title = " · ".join(str(ctx[k]) for k in ("engine", "model", "quantization", "gpu")
                       if ctx.get(k))
    fig.suptitle(f"rigkit bench {summary.get('run_id', '')}\n{title}", fontsize=10)
    verdicts = summary.get("verdicts") or {}
    if not drawn:
        ax = fig.add_subplot(1, 1, 1)
        ax.set_axis_off()
        lines = [f"{n}: {verdicts.get(n, {}).get('verdict') or w.get('status')} — "
                 f"{(w.get('error') or '')[:90]}" for n, w in cols]
        ax.text(0.5, 0.5, "nothing measured\n" + "\n".join(lines), ha="center", va="center",
                fontsize=8, color=MUTED, wrap=True)
        return []
    base_label = "baseline"
    if baseline:
        bctx = baseline.get("context") or {}
        base_label = "baseline: " + (" ".join(str(bctx[k]) for k in ("engine", "model")
                                              if bctx.get(k)) or baseline.get("_file", ""))
    width = 0.38
    for i, (metric, label) in enumerate(drawn):
        ax = fig.add_subplot(len(drawn), 1, i + 1)
        top = max([v for _, w in cols for v in [_median(w, metric)] if v is not None]
                  + [max(samples.get(n, {}).get(metric) or [0]) for n, _ in cols]
                  + [_median(bw.get(n), metric) or 0 for n, _ in cols]) or 1.0
        seen: set[str] = set()
        for x, (name, w) in enumerate(cols):
            base = _median(bw.get(name), metric)
            cur = _median(w, metric)
            base_counts = (bw.get(name) or {}).get("counts")
            if (metric == "decode_tps" and base is not None and cur is not None
                    and w.get("counts") and base_counts and w.get("counts") != base_counts):
                # an estimate beside a count would read as a speed-up or a slowdown
                ax.annotate(f"baseline {base_counts}, not comparable", (x, 0.97),
                            xycoords=ax.get_xaxis_transform(), ha="center", va="top",
                            fontsize=7, color=MUTED, fontstyle="italic")
                base = None
            xc = x - width / 2 if base is not None else x  # centred on the label when alone
            unmodelled = (metric in ENERGY_METRICS and w.get("status") == "ok"
                          and (w.get("energy") or {}).get("power_modelled") is False)
            if cur is not None:
                estimate = w.get("counts") == "estimate" and metric == "decode_tps"
                lab = "this run (estimate)" if estimate else "this run"
                ax.bar(xc, cur, width, color="white" if estimate else RUN_COLOUR,
                       edgecolor=RUN_COLOUR, hatch="xx" if estimate else None,
                       label=lab if lab not in seen else None)
                seen.add(lab)
                pts = samples.get(name, {}).get(metric) or []
                if pts:
                    ax.scatter([xc] * len(pts), pts, s=14, color="#1a202c", zorder=3,
                               label="each request" if "pts" not in seen else None)
                    seen.add("pts")
                ax.annotate(f"{'~' if estimate else ''}{_num(cur)}" + (" estimate" if estimate else ""),
                            (xc, max([cur, *pts])), ha="center", va="bottom", fontsize=8,
                            xytext=(0, 3), textcoords="offset points")
            elif unmodelled:
                # measured, but at the card's idle draw: the joules are not the engine's work
                ax.annotate("tok/J n/a\nnot power-modelled:\ndraw at the idle level", (x, 0.5),
                            xycoords=ax.get_xaxis_transform(), ha="center", va="center",
                            color=MUTED, fontsize=7, fontstyle="italic")
            elif w.get("status") == "failed":
                # no value was measured: shade the column, place the words in axes coordinates
                ax.axvspan(x - 0.4, x + 0.4, color=FAIL_COLOUR, alpha=0.08, linewidth=0)
                ax.annotate(f"FAILED\n{w.get('error_kind') or ''}\nno value measured",
                            (x, 0.5), xycoords=ax.get_xaxis_transform(), ha="center",
                            va="center", color=FAIL_COLOUR, fontsize=8, fontweight="bold")
            elif w.get("status") == "not-run":
                ax.annotate("not run", (x, 0.5), xycoords=ax.get_xaxis_transform(),
                            ha="center", va="center", color=MUTED, fontsize=8,
                            fontstyle="italic")
            if base is not None:
                ax.bar(x + width / 2, base, width, color=BASE_COLOUR, hatch="//",
                       label=base_label if base_label not in seen else None)
                seen.add(base_label)
                ax.annotate(_num(base), (x + width / 2, base), ha="center", va="bottom",
                            fontsize=8, xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(list(range(len(cols))))
        ax.set_xticklabels([f"{n}\n{verdicts.get(n, {}).get('verdict', '')}" for n, _ in cols],
                           fontsize=8)
        ax.set_xlim(-0.6, len(cols) - 0.4)
        ax.set_ylim(0, top * 1.25)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize=7, framealpha=0.9)
    return [m for m, _ in drawn]


def write_chart(path: str, summary: dict[str, Any], baseline: dict[str, Any] | None = None,
                samples: dict[str, dict[str, list[float]]] | None = None,
                fmt: str = "png") -> list[str]:
    """Write a run's chart (:func:`draw_run`) to ``path`` as ``fmt`` (``png`` or ``svg``).
    ``samples``: per-request values (:func:`samples_from_jsonl`). Returns the metrics drawn.
    Raises OSError when the file cannot be written."""
    n = sum(1 for m, _ in PANELS if any(_median(w, m) is not None for _, w in _columns(summary)))
    fig = Figure(figsize=(8.5, 1.2 + 3.4 * max(n, 1)), dpi=100)
    FigureCanvasAgg(fig)
    drawn = draw_run(fig, summary, baseline, samples)
    fig.tight_layout()
    fig.savefig(path, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    return drawn


def write_outputs(out_dir: str, summary: dict[str, Any],
                  baselines: list[dict[str, Any]]) -> dict[str, str]:
    """Write ``summary.json`` and ``chart.png`` (against the verdict baseline of the first
    workload that has one, else the first baseline given; per-request points from the folder's
    ``requests.jsonl``). Returns name → path."""
    paths = {"requests": os.path.join(out_dir, "requests.jsonl"),
             "summary": os.path.join(out_dir, "summary.json"),
             "chart": os.path.join(out_dir, "chart.png")}
    with open(paths["summary"], "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2)
        fh.write("\n")
    files = [v.get("baseline") for v in summary["verdicts"].values() if v.get("baseline")]
    chosen = next((b for b in baselines if b.get("_file") in files), None) or \
        (baselines[0] if baselines else None)
    write_chart(paths["chart"], summary, chosen, samples_from_jsonl(paths["requests"]))
    return paths


#: The history panels: metric, label, and the DESIGN.md reference key of each workload.
HISTORY = (("decode_tps", "decode tok/s"), ("prefill_tps", "prefill tok/s"), ("ttft_s", "TTFT s"),
           ("tok_per_j", "tok/J"), ("spec_acceptance_rate", "spec. decoding acceptance (0-1)"),
           ("spec_acceptance_length", "tokens per verify step"))


def series_key(workload: str, summary: dict[str, Any] | None, run: dict[str, Any]) -> str:
    """The history line a workload's result belongs to: its name and the settings that change its
    figures — ``max_tokens`` (a 256-token smoke and a 48-token run decode differently: issue 39's
    false 3.5x tok/J drop), the power limit and the preset — e.g. ``chat-greedy · max_tokens 256
    · 420 W · small``; parts unknown are left out."""
    parts = [workload]
    mt = (summary or {}).get("max_tokens")
    if mt is not None:
        parts.append(f"max_tokens {mt}")
    pl = run.get("power_limit_w")
    if isinstance(pl, (int, float)):
        parts.append(f"{pl:g} W")
    if run.get("preset"):
        parts.append(str(run["preset"]))
    return " · ".join(parts)


def write_history_svg(path: str, title: str, runs: list[dict[str, Any]],
                      references: dict[str, dict[str, float]] | None = None,
                      baseline: dict[str, dict[str, float]] | None = None) -> int:
    """A member's bench history as one SVG: a panel per :data:`HISTORY` metric with a value, a
    line per series (:func:`series_key`: the workload and its settings, so runs of different
    ``max_tokens``, power limit or preset are never joined) over time (median per run; hollow
    markers for chunk-count estimates, a red cross at the time of a run whose workload failed),
    each series' baseline median as a dashed line of its colour and the reference figures
    (``references``: ``{metric: {label: value}}``, e.g. DESIGN.md's rig figures) as dotted
    lines. tok/J only where the energy was the engine's work (not at the idle draw). Each point
    is an SVG link (``<a href>``) to its run's files.

    A single run is drawn as bars (x: its series, the figures written on them; the run's time in
    the title), not as a time axis with one instant on it.

    + runs: ``[{"time": datetime, "href": str, "run_id": str, "workloads": {name: summary},
      "preset": str, "power_limit_w": float}]`` in any order.
    + baseline: ``{metric: {series key or workload: median}}``.

    Returns the number of panels drawn (0: nothing to draw, no file written). Raises OSError
    when the file cannot be written.
    """
    runs = sorted(runs, key=lambda r: r["time"])
    panels = [(m, label) for m, label in HISTORY
              if any(_median(w, m) is not None for r in runs for w in r["workloads"].values())]
    if not panels:
        return 0
    keyed = [{series_key(n, w, r): w for n, w in r["workloads"].items()} for r in runs]
    names = sorted({k for ks in keyed for k in ks})
    palette = ("#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#b7791f")
    colours = {n: palette[k % len(palette)] for k, n in enumerate(names)}

    def base_value(metric: str, key: str) -> float | None:
        values = (baseline or {}).get(metric) or {}
        return values.get(key, values.get(key.split(" · ")[0]))

    if len(runs) == 1:
        return _one_run_svg(path, title, runs[0], keyed[0], panels, colours, base_value, references)
    fig = Figure(figsize=(8.0, 1.1 + 2.6 * len(panels)), dpi=100)
    FigureCanvasAgg(fig)
    fig.suptitle(title, fontsize=10)
    for i, (metric, label) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        for name in names:
            colour = colours[name]

            def counted(w: dict[str, Any] | None) -> bool:
                return not (w.get("counts") == "estimate" and metric == "decode_tps")

            joined = [(r["time"], _median(k[name], metric)) for r, k in zip(runs, keyed)
                      if _median(k.get(name), metric) is not None and counted(k[name])]
            if joined:
                ax.plot([p[0] for p in joined], [p[1] for p in joined], color=colour,
                        linewidth=1, alpha=0.7, label=name)
            for r, k in zip(runs, keyed):
                w = k.get(name)
                v = _median(w, metric)
                if v is not None:
                    est = not counted(w)
                    (pt,) = ax.plot([r["time"]], [v], marker="o", linestyle="none", markersize=6,
                                    color=colour, markerfacecolor="white" if est else colour,
                                    label=f"{name} (estimate)" if est and not joined else None)
                    pt.set_url(r["href"])
                elif w and w.get("status") == "failed":
                    # no value: a rule at the run's time, the cross at the top of the panel
                    rule = ax.axvline(r["time"], color=FAIL_COLOUR, linestyle="--",
                                      linewidth=0.8, alpha=0.7)
                    rule.set_url(r["href"])
                    (pt,) = ax.plot([r["time"]], [0.95], marker="X", linestyle="none",
                                    color=FAIL_COLOUR, markersize=8,
                                    transform=ax.get_xaxis_transform())
                    pt.set_url(r["href"])
            value = base_value(metric, name)
            if value is not None:
                ax.axhline(value, color=colour, linestyle="--", linewidth=1,
                           label=f"baseline of {name}: {value:.3g}")
        for ref_label, value in ((references or {}).get(metric) or {}).items():
            ax.axhline(value, color=MUTED, linestyle=":", linewidth=1.2,
                       label=f"{ref_label} {value:g}")
        ax.set_ylabel(label)
        ax.set_xlabel("run time (UTC)", fontsize=7)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=6, framealpha=0.9)
        ax.tick_params(axis="x", labelsize=7)
        from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

        locator = AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    return len(panels)


def _one_run_svg(path, title, run, keyed, panels, colours, base_value, references) -> int:
    """:func:`write_history_svg` for one run: a row of bar panels, x the run's series, y the
    metric; the value written on each bar, the series' baseline as a dashed tick beside it, a
    failed workload marked at its label, the reference figures dotted."""
    names = sorted(keyed)
    fig = Figure(figsize=(max(8.0, 1.8 * len(panels)), 3.6), dpi=100)
    FigureCanvasAgg(fig)
    fig.suptitle(f"{title}\none run: {run['run_id']} at {run['time']:%Y-%m-%d %H:%M:%S} UTC",
                 fontsize=10)
    for i, (metric, label) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        top, labelled = 0.0, False
        for x, name in enumerate(names):
            w = keyed[name]
            v = _median(w, metric)
            if v is not None:
                est = w.get("counts") == "estimate" and metric == "decode_tps"
                bar = ax.bar(x, v, 0.6, color="white" if est else colours[name],
                             edgecolor=colours[name], hatch="xx" if est else None)
                bar[0].set_url(run["href"])
                ax.annotate(("~" if est else "") + _num(v), (x, v), ha="center", va="bottom",
                            fontsize=7, xytext=(0, 2), textcoords="offset points")
                top = max(top, v)
            elif w.get("status") == "failed":
                ax.annotate("FAILED", (x, 0.5), xycoords=ax.get_xaxis_transform(), ha="center",
                            va="center", color=FAIL_COLOUR, fontsize=7, fontweight="bold")
            elif metric == "tok_per_j" and (w.get("energy") or {}).get("power_modelled") is False:
                ax.annotate("n/a: not\npower-\nmodelled", (x, 0.5),
                            xycoords=ax.get_xaxis_transform(), ha="center", va="center",
                            color=MUTED, fontsize=6, fontstyle="italic")
            b = base_value(metric, name)
            if b is not None:
                ax.hlines(b, x - 0.4, x + 0.4, colors=MUTED, linestyles="--", linewidth=1.2,
                          label=None if labelled else "baseline")
                labelled = True
                top = max(top, b)
        for ref_label, value in ((references or {}).get(metric) or {}).items():
            ax.axhline(value, color=MUTED, linestyle=":", linewidth=1.0, label=f"{ref_label} {value:g}")
            top = max(top, value)
        ax.set_xticks(list(range(len(names))))
        ax.set_xticklabels([n.replace(" · ", "\n") for n in names], fontsize=6)
        ax.set_xlim(-0.6, len(names) - 0.4)
        ax.set_ylim(0, (top or 1.0) * 1.2)
        ax.set_title(label, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(axis="y", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="lower right", fontsize=5, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    return len(panels)
