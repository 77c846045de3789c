"""``rigkit report``: the rig at a glance — one static HTML page for the whole inventory.

The page (``index.html`` in the output folder, with ``runs/`` beside it) opens from disk or from
any web server: no network, no CDN, no JavaScript; CSS inline, charts inline SVG written by
matplotlib through :mod:`rigkit.report.chart`, HTML by Jinja2 with autoescape on (like
coverage.py's and pytest-html's reports: one folder).

Per host: the drift state now (run live with :func:`rigkit.drift.check`, every host at once
through pyinfra's own parallel connections, or read from a saved ``rigkit drift --json``
document, :func:`rigkit.drift.run.read_document`), the GPU's power limit and driver/CUDA as the
host enforces them, llama-swap's live members and any hold, the last window's journal, the last sweep of each key (:mod:`rigkit.report.sweep`: table, frontier,
recommendation, chart). Per
member: its bench history from the results folder (every ``summary.json`` whose context names
that host and member: ``rigkit bench --host``, the deploy's smoke), decode and prefill tok/s,
TTFT and tok/J (the GPU's energy, issue 31) over time against the member's baseline (``bench.baseline``) and the reference figures
DESIGN.md gives for the real rig (:data:`REFERENCES`); every point links to its run's files,
copied under ``runs/<host>/<member>/<run id>/``; each run's row shows its energy
(:func:`energy_cells`: the idle draw apart, tok/J and J/token per workload) and speculative decoding's
acceptance (:func:`spec_cells`: per workload and per draft position; mixed, or none on the member).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from rigkit.drift.severity import tally

#: DESIGN.md "The rig": the operator's figures, per member kind and metric (tok/s).
REFERENCES: dict[str, dict[str, dict[str, float]]] = {
    "hyperqwen": {"decode_tps": {"rig chat greedy": 118.0, "rig chat T=0.7": 123.0,
                                 "rig quoting 29k": 237.6},
                  "prefill_tps": {"rig quoting 29k": 1210.0}},
    "gguf-baseline": {"decode_tps": {"rig llama.cpp baseline": 42.0},
                      "prefill_tps": {"rig llama.cpp baseline": 250.0}},
}
RUN_FILES = ("summary.json", "requests.jsonl", "chart.png")


@dataclass
class Run:
    """One bench run found in the results folder: ``time`` (aware datetime, the summary's
    ``timestamp``), ``run_id``, ``folder`` (where it was found), ``summary`` (the loaded
    ``summary.json``), ``href`` (its copy in the report, relative to ``index.html``) and
    ``extra`` (the run's other copied files: ``[{name, href}]``)."""

    time: datetime
    run_id: str
    folder: str
    summary: dict[str, Any]
    href: str = ""
    extra: list[dict[str, str]] = field(default_factory=list)


@dataclass
class MemberView:
    """What the page shows of one member: ``runs`` (oldest first), ``chart`` (inline SVG or
    None), ``references`` and ``baseline`` (``{metric: {label: tok/s}}``), ``kind``."""

    name: str
    kind: str
    runs: list[Run] = field(default_factory=list)
    chart: str | None = None
    references: dict[str, dict[str, float]] = field(default_factory=dict)
    baseline: dict[str, dict[str, float]] = field(default_factory=dict)
    baseline_note: str | None = None


def member_kind(name: str, member: Any) -> str:
    """``hyperqwen``, ``gguf-baseline``, ``strata`` or ``other``: which DESIGN.md tenant a
    member is (its ``service``, else its name)."""
    service = getattr(member, "service", None)
    if service == "hyperqwen" or name == "hyperqwen":
        return "hyperqwen"
    if name in ("gguf-baseline", "strata"):
        return name
    return "other"


def find_runs(results_dir: str) -> dict[tuple[str, str], list[Run]]:
    """Every ``summary.json`` under ``results_dir`` whose ``context`` names a ``host`` and a
    ``member``, grouped by ``(host, member)``, oldest first. Files that are not summaries of
    rigkit bench (unreadable, no ``timestamp``/``workloads``) are skipped."""
    out: dict[tuple[str, str], list[Run]] = {}
    if not os.path.isdir(results_dir):
        return out
    for root, _dirs, files in os.walk(results_dir):
        if "summary.json" not in files:
            continue
        try:
            with open(os.path.join(root, "summary.json"), encoding="utf-8") as fh:
                s = json.load(fh)
            ctx = s.get("context") or {}
            when = datetime.fromisoformat(str(s["timestamp"]).replace("Z", "+00:00"))
            if not isinstance(s.get("workloads"), dict) or not ctx.get("host") or not ctx.get("member"):
                continue
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        out.setdefault((str(ctx["host"]), str(ctx["member"])), []).append(
            Run(when, str(s.get("run_id") or os.path.basename(root)), root, s))
    for runs in out.values():
        runs.sort(key=lambda r: r.time)
    return out


def _baseline(path: str | None) -> tuple[dict[str, dict[str, float]], str | None]:
    if not path:
        return {}, None
    from rigkit.bench.results import load_baseline

    try:
        b = load_baseline(path)
    except ValueError as exc:
        return {}, str(exc)
    out: dict[str, dict[str, float]] = {}
    for name, w in (b.get("workloads") or {}).items():
        for metric in ("decode_tps", "prefill_tps", "ttft_s"):
            s = ((w or {}).get("metrics") or {}).get(metric)
            if s and s.get("median") is not None:
                out.setdefault(metric, {})[name] = float(s["median"])
    return out, f"dashed: the baseline {path} (bench.baseline)"


def _compared_with(runs: list[Run]) -> tuple[dict[str, dict[str, float]], str | None]:
    """The baselines a member's runs were judged against, for the history's dashed lines when no
    ``bench.baseline`` is set: per series (:func:`rigkit.report.chart.series_key`), the baseline
    file the series' latest run's verdict names (``rigkit bench``'s default: the last comparable
    run), read again; ``({metric: {series: median}}, note)``, ``({}, None)`` when none did."""
    from rigkit.bench.results import load_baseline
    from rigkit.report.chart import series_key

    out: dict[str, dict[str, float]] = {}
    files: set[str] = set()
    for run in sorted(runs, key=lambda r: r.time):  # the latest run's baseline wins
        s = run.summary
        info = {"preset": s.get("preset"), "power_limit_w": (s.get("context") or {}).get("power_limit_w")}
        for wl, verdict in (s.get("verdicts") or {}).items():
            path = (verdict or {}).get("baseline")
            w = (s.get("workloads") or {}).get(wl)
            if not path or w is None:
                continue
            try:
                bw = (load_baseline(path).get("workloads") or {}).get(wl) or {}
            except ValueError:
                continue
            key = series_key(wl, w, info)
            for metric in ("decode_tps", "prefill_tps", "ttft_s"):
                m = (bw.get("metrics") or {}).get(metric)
                if m and m.get("median") is not None:
                    out.setdefault(metric, {})[key] = float(m["median"])
                    files.add(path)
    if not out:
        return {}, None
    return out, ("dashed: the baseline each series was last judged against (" +
                 ", ".join(sorted(files)) + ")")


def _svg_inline(path: str) -> str:
    """The ``<svg>`` element of a matplotlib SVG file (its XML prolog and DOCTYPE dropped)."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    return text[text.index("<svg"):]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def build_members(host: str, spec: Any, runs: dict[tuple[str, str], list[Run]],
                  out_dir: str) -> list[MemberView]:
    """The member views of ``host``: runs copied under ``out_dir/runs/``, one history SVG each
    (``out_dir/charts/<host>-<member>.svg``, also inlined in the page)."""
    from matplotlib import rc_context

    from rigkit.report.chart import write_history_svg

    members = getattr(getattr(spec, "llama_swap", None), "members", {}) or {}
    base_path = getattr(getattr(spec, "bench", None), "baseline", None)
    views = []
    for name in sorted(members):
        kind = member_kind(name, members[name])
        v = MemberView(name, kind, references=REFERENCES.get(kind, {}))
        v.baseline, v.baseline_note = _baseline(base_path)
        if not base_path:
            v.baseline, v.baseline_note = _compared_with(runs.get((host, name), []))
        for run in runs.get((host, name), []):
            rel = os.path.join("runs", _safe(host), _safe(name), _safe(run.run_id))
            os.makedirs(os.path.join(out_dir, rel), exist_ok=True)
            for f in RUN_FILES:
                src = os.path.join(run.folder, f)
                if os.path.isfile(src):
                    shutil.copyfile(src, os.path.join(out_dir, rel, f))
            run.href = f"{rel}/summary.json"
            v.runs.append(run)
        if v.runs:
            chart = os.path.join(out_dir, "charts", f"{_safe(host)}-{_safe(name)}.svg")
            os.makedirs(os.path.dirname(chart), exist_ok=True)
            # text as text (no glyph defs repeated per chart) and ids salted per chart, so
            # several SVGs inlined in one page never share an id
            with rc_context({"svg.fonttype": "none", "svg.hashsalt": f"{host}/{name}"}):
                drawn = write_history_svg(
                    chart, f"{host} / {name}: bench history",
                    [{"time": r.time, "href": r.href, "run_id": r.run_id,
                      "workloads": r.summary.get("workloads") or {},
                      "preset": r.summary.get("preset"),
                      "power_limit_w": (r.summary.get("context") or {}).get("power_limit_w")}
                     for r in v.runs],
                    references=v.references, baseline=v.baseline)
            if drawn:
                v.chart = _svg_inline(chart)
        views.append(v)
    return views


def verdict_cells(run: Run) -> list[dict[str, Any]]:
    """A run's verdicts for its row of the runs table, the warm-up's own included: ``[{workload, verdict,
    reasons (words, written in the page — a WARN's reason is read, not hovered for), baseline (the file it
    was judged against and why it was that one: the last steady run, the unstable ones passed over, or
    given; None without one), impossible (the workload's figures above what the run can carry, marked and
    left out of its figures: :func:`rigkit.bench.results.implausible_figures`, in words)}]``."""
    from rigkit.bench.runner import impossible_lines

    verdicts = run.summary.get("verdicts") or {}
    workloads = run.summary.get("workloads") or {}
    return [{"workload": n, "verdict": str(v.get("verdict")), "reasons": "; ".join(v.get("reasons") or []),
             "baseline": (f"{v['baseline']} ({v.get('baseline_why') or 'given'})" if v.get("baseline") else None),
             "impossible": [ln.strip() for ln in impossible_lines((workloads.get(n) or {}).get("implausible") or [])]}
            for n, v in verdicts.items()]


def spec_cells(run: Run) -> list[tuple[str, str, str]]:
    """``[(workload, text, title)]`` of a run's speculative decoding (each workload's ``spec_decode``,
    :func:`rigkit.bench.metrics.spec_delta`): ``acceptance 21.4% · 2.50 tokens/step · by draft position
    0 60% · 1 36% …``; ``MIXED: 1 request not the bench's moved the counters`` (no figure); the long
    workload's collapse with its window; a member without speculative decoding, or counters not read (and
    why), said once (``("", "no speculative decoding on this member", why)``)."""
    from rigkit.bench.metrics import NO_SPEC

    out: list[tuple[str, str, str]] = []
    notes: set[str] = set()
    for name, w in (run.summary.get("workloads") or {}).items():
        sd = (w or {}).get("spec_decode")
        if not sd:
            note = (w or {}).get("spec_decode_note")
            if note and note not in notes:
                out.append(("", "no speculative decoding on this member" if note == NO_SPEC else f"not read: {note}",
                            note))
                notes.add(note)
            continue
        if sd.get("mixed"):
            out.append((name, f"MIXED: {sd['foreign_requests']} request(s) not the bench's moved the counters",
                        f"vllm:request_success_total rose by {sd['requests']}, the bench sent {sd['own_requests']}: "
                        "no acceptance figure"))
            continue
        rate = sd.get("acceptance_rate")
        text = (f"acceptance {100 * rate:.1f}% · " if rate is not None else "") + f"{sd['acceptance_length']:.2f} tokens/step"
        pos = sd.get("by_position") or {}
        if pos:
            text += " · by draft position " + " ".join(f"{p}:{100 * r:.0f}%" for p, r in pos.items())
        fell = sd.get("collapse")
        if fell:
            text += (f" · FELL to {100 * fell['acceptance_rate']:.1f}% in window {fell['window']} "
                     f"(tokens {fell['from_token']}-{fell['to_token']})")
        out.append((name, text, f"{sd['drafts']} drafts, {sd['draft_tokens']} draft tokens, {sd['accepted']} accepted "
                    "(vLLM's counters, differenced around the workload)"))
    return out


def energy_cells(run: Run) -> list[tuple[str, str, str]]:
    """``[(label, text, title)]`` of a run's energy (rigkit.bench.energy): the idle draw
    first (``idle``, ``32.0 W``: measured apart, never subtracted), then per measured workload
    ``0.52 tok/J · 1.92 J/token · 118 W``, or ``tok/J n/a — not power-modelled`` with the draw
    when it stayed at the idle level (the joules are not the engine's work); ``[]`` for a run
    without energy figures."""
    energy = run.summary.get("energy") or {}
    out: list[tuple[str, str, str]] = []
    if not energy.get("method"):
        if energy.get("unavailable"):
            out.append(("energy", "not measured", str(energy["unavailable"])))
        return out
    idle = energy.get("idle") or {}
    if idle.get("avg_w") is not None:
        out.append(("idle", f"{idle['avg_w']:.1f} W", f"idle draw over {idle.get('seconds')} s "
                    "before the run, measured apart (not subtracted)"))
    for name, w in (run.summary.get("workloads") or {}).items():
        e = (w or {}).get("energy") or {}
        if e.get("tok_per_j") is None:
            continue
        if e.get("power_modelled") is False:  # the card's resting draw: no tok/J to show
            text = f"tok/J n/a — not power-modelled (draw {e['avg_w']:.0f} W, the idle level)"
        else:
            text = f"{e['tok_per_j']:.3g} tok/J · {e['j_per_token']:.3g} J/token · {e['avg_w']:.0f} W"
        out.append((name, text, f"{e['joules']} J over {e['seconds']} s ({energy.get('method_words')})"
                    + (f"; {e['note']}" if e.get("note") else "")))
    return out


def drift_live(host_specs: list[Any], inventory: str, token: Any, plan: bool = False) -> dict[str, Any]:
    """Run drift now on every host at once and return its document, read back
    (:func:`rigkit.drift.run.read_document`); ``token``: the command's HF token
    (:func:`rigkit.spec.secrets.hf_token`) or None."""
    from rigkit.drift.run import check, document, dumps_document, read_document

    states: dict[str, Any] = {}
    findings, codes = check(host_specs, inventory, token, plan=plan, states=states)
    records = document(findings, codes, [hs.name for hs in host_specs], inventory, states)
    return read_document(dumps_document(records), "rigkit drift")


def drift_from_file(path: str) -> dict[str, Any]:
    """The document of a saved ``rigkit drift --json``; raises ValueError naming the file."""
    from rigkit.drift.run import read_document

    try:
        with open(path, encoding="utf-8") as fh:
            return read_document(fh.read(), path)
    except OSError as exc:
        raise ValueError(f"--drift {path}: cannot read ({exc.strerror})") from None


TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>rigkit report · {{ inventory }}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 1rem 1.5rem; color: #1a202c; }
h1 { font-size: 1.4rem; margin-bottom: .2rem; } h2 { border-bottom: 2px solid #cbd5e0; padding-bottom: .2rem; margin-top: 2rem; }
h3 { margin-bottom: .3rem; } .meta { color: #4a5568; font-size: .9rem; }
table { border-collapse: collapse; margin: .4rem 0 1rem; font-size: .88rem; }
th, td { border: 1px solid #e2e8f0; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f7fafc; }
.status { font-weight: 600; padding: .1rem .5rem; border-radius: 3px; }
.clean { background: #c6f6d5; } .drift { background: #fefcbf; } .not-checked, .FAIL { background: #fed7d7; }
.PASS { background: #c6f6d5; } .WARN, .not-comparable { background: #fefcbf; } .NOT-RUN, .no-baseline { background: #edf2f7; }
.chart svg { max-width: 100%; height: auto; } .none { color: #718096; font-style: italic; }
.verdict { margin-bottom: .35rem; overflow-wrap: anywhere; } .verdict .why { color: #2d3748; }
.verdict .baseline { color: #4a5568; font-size: .82rem; } .verdict .impossible { color: #9b2c2c; font-size: .82rem; }
</style>
</head>
<body>
<h1>rigkit report</h1>
<p class="meta">inventory <code>{{ inventory }}</code> · {{ hosts|length }} host(s) · generated {{ generated }} ·
drift {{ drift_source }}{% if drift_generated %} ({{ drift_generated }}){% endif %}</p>
<table id="summary"><tr><th>host</th><th>drift</th><th>exit</th><th>power limit (enforced)</th><th>driver / CUDA</th><th>live members</th><th>bench runs</th></tr>
{% for h in hosts %}<tr><td><a href="#host-{{ h.anchor }}">{{ h.name }}</a></td>
<td><span class="status {{ h.status|replace(' ', '-') }}">{{ h.status }}</span></td><td>{{ h.exit_code }}</td>
<td>{{ h.power }}</td><td>{{ h.versions }}</td><td>{{ h.live }}</td><td>{{ h.n_runs }}</td></tr>
{% endfor %}</table>
{% if fleet %}<section class="fleet" id="fleet"><h2>fleet</h2>
<p class="meta">each rig's newest smoke against the other rigs' (their median and spread), with the bench's own noise rules: an outlier is beyond every other rig's requests and more than 15% from their median</p>
<table class="fleet-table"><tr><th>member / workload</th><th>figure</th><th>fleet median (spread)</th><th>rigs</th><th>outliers</th></tr>
{% for e in fleet %}<tr data-fleet="{{ e.member }}/{{ e.workload }}/{{ e.metric }}"><td>{{ e.member }} / {{ e.workload }}</td><td>{{ e.metric }}</td>
<td>{{ '%.1f'|format(e.fleet.median) }} ({{ '%.1f'|format(e.fleet.low) }}-{{ '%.1f'|format(e.fleet.high) }})</td>
<td>{% for r in e.rigs %}<span class="status {{ r.verdict or '' }}" title="{{ r.reason or '' }}">{{ r.host }} {{ '%.1f'|format(r.median) }}</span> {% endfor %}</td>
<td>{% for o in e.outliers %}<div class="outlier status FAIL">{{ o }}</div>{% endfor %}{% if e.note %}<span class="none">{{ e.note }}</span>{% elif not e.outliers %}none{% endif %}</td></tr>
{% endfor %}</table></section>{% endif %}
{% for h in hosts %}
<section class="host" id="host-{{ h.anchor }}" data-host="{{ h.name }}">
<h2>{{ h.name }} <span class="status {{ h.status|replace(' ', '-') }}">{{ h.status }}</span></h2>
<table class="state">
<tr><th>drift</th><td>{{ h.status }}: {{ h.tally }} (exit {{ h.exit_code }})</td></tr>
<tr><th>GPU</th><td>{{ h.gpu }}</td></tr>
<tr><th>power limit</th><td>{{ h.power }}</td></tr>
<tr><th>driver / CUDA</th><td>{{ h.versions }}</td></tr>
<tr><th>llama-swap live members</th><td>{{ h.live }}</td></tr>
<tr><th>generation</th><td>{{ h.generation }}</td></tr>
<tr><th>hold</th><td>{{ h.hold }}</td></tr>
<tr><th>host lock</th><td>{{ h.lock }}</td></tr>
<tr><th>power-limit healer</th><td>{{ h.healer }}</td></tr>
<tr><th>last window</th><td>{{ h.window }}</td></tr>
</table>
{% for sw in h.sweeps %}<section class="sweep" id="sweep-{{ h.anchor }}-{{ sw.param }}" data-sweep="{{ sw.window }}">
<h3>{{ h.name }} / {{ sw.title }} (window {{ sw.window }})</h3>
<table class="sweep-table"><tr><th>{{ sw.param }}</th><th>workload</th>{% for c in sw.contexts %}<th>{{ c }} tokens</th>{% endfor %}</tr>
{% for row in sw.rows %}<tr><td>{{ row.setting }}</td><td>{{ row.workload }}</td>{% for t in row.cells %}<td class="{{ 'FAIL' if t == 'CRASH' else '' }}">{{ t }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% if sw.param == 'power_limit' %}<table class="frontier"><tr><th>power limit (W)</th><th>decode tok/s</th><th>tok/J</th><th>J/token</th><th>average W</th><th>enforced W</th></tr>
{% for f in sw.frontier %}<tr><td>{{ f.setting }}</td><td>{{ f.decode_tps }}</td><td>{{ f.tok_per_j }}</td><td>{{ f.j_per_token }}</td><td>{{ f.avg_w }}</td><td>{{ f.enforced_w }}</td></tr>
{% endfor %}</table>{% else %}<table class="frontier"><tr><th>{{ sw.param }}</th><th>longest context survived</th><th>crashed at</th><th>speculative decoding's acceptance there</th></tr>
{% for f in sw.frontier %}<tr><td>{{ f.setting }}</td><td>{{ f.survived }}</td><td>{{ f.crashed_at }}</td><td class="acceptance">{{ f.acceptance }}</td></tr>
{% endfor %}</table>{% endif %}
<p class="recommendation">{{ sw.recommendation }}</p>
{% if sw.group_data %}<p>to declare it (nothing was applied): <code>{{ sw.group_data }}</code></p>{% endif %}
{% if sw.warning %}<p class="status WARN">WARNING: {{ sw.warning }}</p>{% endif %}
{% if sw.chart %}<figure class="chart" data-chart="{{ h.name }}/sweep-{{ sw.param }}">{{ sw.chart|safe }}
<figcaption class="meta">{{ sw.caption }}</figcaption></figure>{% endif %}
</section>{% endfor %}
{% if h.findings %}<h3>findings</h3>
<table class="findings"><tr><th>kind</th><th>item</th><th>declared</th><th>actual</th><th>severity</th></tr>
{% for f in h.findings %}<tr class="{{ f.severity }}"><td>{{ f.kind }}</td><td>{{ f.item }}</td><td>{{ f.declared }}</td><td>{{ f.actual }}</td><td>{{ f.severity }}</td></tr>
{% endfor %}</table>{% endif %}
{% for m in h.members %}
<section class="member" id="member-{{ h.anchor }}-{{ m.name }}" data-member="{{ m.name }}">
<h3>{{ h.name }} / {{ m.name }}</h3>
{% if m.chart %}<figure class="chart" data-chart="{{ h.name }}/{{ m.name }}">{{ m.chart|safe }}
<figcaption class="meta">{% if m.runs|length == 1 %}one run: a bar per workload and its settings (max_tokens, power limit, preset), the value on it{% else %}median per run, a line per workload and its settings (max_tokens, power limit, preset: runs of different settings are never joined); x: the run's time (UTC){% endif %}; hollow or hatched: chunk-count estimates; red: failed runs
{%- if m.baseline %}; dashed: the baseline{% endif %}
{%- if m.references %}; dotted: DESIGN.md's figures for the real rig{% endif %}; tok/J only where the energy was the engine's work (else n/a: not power-modelled); speculative decoding's acceptance (accepted / drafted tokens) and tokens per verify step from vLLM's counters, none for a workload other requests mixed into. Each point links to its run's files.</figcaption></figure>
{% elif m.runs %}<p class="none">nothing measured in {{ m.runs|length }} run(s) of {{ m.name }} on {{ h.name }}: see the verdicts</p>
{% else %}<p class="none">no bench run of {{ m.name }} on {{ h.name }} in the results folder</p>{% endif %}
{% if m.baseline_note %}<p class="meta">{{ m.baseline_note }}</p>{% endif %}
{% if m.runs %}<table class="runs"><tr><th>time (UTC)</th><th>run</th><th>preset</th><th>verdicts</th><th>energy (GPU)</th><th>speculative decoding</th><th>files</th></tr>
{% for r in m.runs|reverse %}<tr><td>{{ r.time.strftime('%Y-%m-%d %H:%M:%S') }}</td><td>{{ r.run_id }}</td><td>{{ r.summary.preset }}</td>
<td>{% for c in verdict_cells(r) %}<div class="verdict" data-workload="{{ c.workload }}"><span class="status {{ c.verdict|replace(' ', '-') }}">{{ c.workload }}: {{ c.verdict }}</span>
{%- if c.reasons %} <span class="why">{{ c.reasons }}</span>{% endif %}
{%- if c.baseline %}<br><span class="baseline">baseline: {{ c.baseline }}</span>{% endif %}
{%- for line in c.impossible %}<br><span class="impossible">{{ line }}</span>{% endfor %}</div>{% endfor %}</td>
<td>{% for n, text, why in energy_cells(r) %}<span class="energy" data-energy="{{ n }}" title="{{ why }}">{{ n }}: {{ text }}</span> {% endfor %}</td>
<td>{% for n, text, why in spec_cells(r) %}<div class="spec" data-spec="{{ n }}" title="{{ why }}">{% if n %}{{ n }}: {% endif %}{{ text }}</div>{% endfor %}</td>
<td><a href="{{ r.href }}">summary.json</a>{% for f in r.extra %} · <a href="{{ f.href }}">{{ f.name }}</a>{% endfor %}</td></tr>
{% endfor %}</table>{% endif %}
</section>
{% endfor %}
</section>
{% endfor %}
</body>
</html>
"""


def sweep_view(host: str, results_dir: str, out_dir: str, param: str = "dflash_tokens") -> dict[str, Any] | None:
    """The last ``param`` sweep of ``host`` in ``results_dir`` (:func:`rigkit.report.sweep.find_results`) for
    the page: the table (decode tok/s or CRASH per setting × workload × context), the frontier (a draft
    length's longest context survived and speculative decoding's acceptance per workload there; a power limit's decode tok/s, tok/J, J/token, average and
    enforced W), the recommendation, its group_data line and warning, the chart (inline SVG, also
    written to ``out_dir/charts/<host>-sweep-<param>.svg``); None when the host has no such sweep."""
    from matplotlib import rc_context

    from rigkit.report.sweep import cell_text, find_results, write_chart

    found = [r for r in find_results(results_dir).get(host) or [] if r["grid"]["param"] == param]
    if not found:
        return None
    res = found[-1]
    grid, front, rec = res["grid"], res["frontier"], res["recommendation"]
    by = {(c["setting"], c["workload"], c["context"]): c for c in res["cells"]}
    rows = [{"setting": s, "workload": w,
             "cells": [cell_text(by.get((s, w, c)), front[str(s)]["crashed_at"], c) for c in grid["contexts"]]}
            for s in grid["settings"] for w in grid["workloads"]]
    chart = os.path.join(out_dir, "charts", f"{_safe(host)}-sweep-{param}.svg")
    os.makedirs(os.path.dirname(chart), exist_ok=True)
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": f"{host}/sweep/{param}"}):
        drawn = write_chart(chart, res)
    power = param == "power_limit"
    frontier = ([{"setting": s, **{k: "-" if front[str(s)].get(k) is None else front[str(s)][k]
                                   for k in ("decode_tps", "tok_per_j", "j_per_token", "avg_w", "enforced_w")}}
                 for s in grid["settings"]] if power else
                [{"setting": s, "survived": f"{front[str(s)]['survived']} tokens" if front[str(s)]["survived"]
                  else "none", "crashed_at": front[str(s)]["crashed_at"] or "-",
                  "acceptance": ", ".join(f"{w} {100 * r:.0f}%" for w, r in (front[str(s)].get("acceptance") or {}).items())
                  or "-"} for s in grid["settings"]])
    return {"window": res.get("window"), "param": grid["param"], "contexts": grid["contexts"], "rows": rows,
            "title": "power-limit sweep" if power else "HyperQwen sweep",
            "caption": ("decode tok/s and tok/J (geometric means over the cells) by power limit; ringed: the "
                        "recommended limit." if power else "decode tok/s (median per cell) by draft length, one line "
                        "per context; red crosses: where the engine died."),
            "frontier": frontier,
            "recommendation": (f"recommendation: {rec['reason']}" + ("" if power else f" ({rec['decode_tps']} tok/s)")
                               if rec["setting"] is not None else f"recommendation: none — {rec['reason']}"),
            "group_data": res.get("group_data"), "warning": rec.get("warning"),
            "chart": _svg_inline(chart) if drawn else None}


def sweep_views(host: str, results_dir: str, out_dir: str) -> list[dict[str, Any]]:
    """The last sweep of each key (:data:`rigkit.report.sweep.SWEEPABLE`) of ``host``, as :func:`sweep_view`."""
    from rigkit.report.sweep import SWEEPABLE

    return [v for v in (sweep_view(host, results_dir, out_dir, k) for k in SWEEPABLE) if v]


def _fmt_w(v: Any) -> str:
    return f"{float(v):g} W" if isinstance(v, (int, float)) else "unknown"


def host_view(name: str, drift: dict[str, Any] | None, members: list[MemberView]) -> dict[str, Any]:
    """The template's values for one host from its drift status record (None: not in the
    drift document) and its member views. Strings only — the template escapes them."""
    st = (drift or {}).get("state") or {}
    gpu = st.get("gpu") or {}
    live = st.get("llama_swap_live") or {}
    window = st.get("window")
    hold = st.get("hold")
    gen = st.get("generation")
    lock = st.get("lock") or {}
    if gpu.get("state") == "ok":
        power = (f"{_fmt_w(gpu.get('power_limit_w'))} (enforced {_fmt_w(gpu.get('power_enforced_w'))};"
                 f" declared {_fmt_w(gpu.get('declared_power_limit_w'))}; default "
                 f"{_fmt_w(gpu.get('power_default_w'))}, range {_fmt_w(gpu.get('power_min_w'))}–"
                 f"{_fmt_w(gpu.get('power_max_w'))})")
        versions = (f"driver {gpu.get('driver') or 'unknown'} (declared {gpu.get('declared_driver')})"
                    f" / CUDA {st.get('cuda') or 'unknown'} (declared {st.get('declared_cuda')})")
        gpu_text = gpu.get("name") or "unknown"
    else:
        power = versions = gpu_text = ("not read (host not reached)" if drift and not st else
                                       f"nvidia-smi: {gpu.get('state') or 'not read'}")
    members_text = ", ".join(live.get("members") or []) or "none"
    if live.get("live_config_as_declared") is False:
        members_text += " (as declared; the live config differs — see the findings)"
    return {
        "name": name, "anchor": _safe(name),
        "status": (drift or {}).get("status") or "not checked",
        "exit_code": (drift or {}).get("exit_code", "n/a"),
        "tally": tally([str(r.get("severity")) for r in (drift or {}).get("records") or []]),
        "findings": (drift or {}).get("records") or [],
        "gpu": gpu_text, "power": power, "versions": versions,
        "live": members_text if st else "unknown (host not reached)",
        "generation": (f"{gen['current']} ({gen.get('time')}, {gen.get('operator')}, {gen.get('reason')}); drift "
                       f"compared with {'the spec' if gen.get('compared_with') == 'spec' else gen.get('compared_with')}" if gen else
                       "none recorded" if st else "unknown (host not reached)"),
        "hold": json.dumps(hold, sort_keys=True) if hold else "none",
        "lock": ("held by " + json.dumps(lock.get("holder"), sort_keys=True)) if lock.get("held") else
                ("free (a dead holder's record is left)" if lock.get("stale") else "free"),
        "window": (", ".join(f"{k} {v}" for k, v in window.items() if v is not None)
                   if window else "none run (no journal)"),
        "healer": healer_text(st.get("power_healer"), bool(st)),
        "members": members,
        "n_runs": sum(len(m.runs) for m in members),
    }


def healer_text(healer: dict[str, Any] | None, reached: bool = True) -> str:
    """The power-limit healer's line (drift's state ``power_healer``, :func:`rigkit.drift.run.power_healer_state`):
    its last re-application (``re-applied 420 W at <time> (enforced 350 W before; 1 in all)``, or the
    failure's message) and its last check's result."""
    if not reached:
        return "unknown (host not reached)"
    if not healer:
        return "never ran"
    last = healer.get("last_reapply")
    check = healer.get("last_check") or {}
    text = (f"re-applied {_fmt_w(last.get('to_w'))} at {last.get('at')} (enforced {_fmt_w(last.get('from_w'))} before; "
            f"{healer.get('reapplies', 0)} in all)" if last and last.get("ok") else
            f"last re-application failed at {last.get('at')}: {last.get('message')}" if last else "never re-applied")
    return text + f"; last check {check.get('at')}: {check.get('result')}" if check else text


def write_report(host_specs: list[Any], inventory: str, out_dir: str, results_dir: str,
                 drift_doc: dict[str, Any], drift_source: str, fleet: list[dict[str, Any]] | None = None) -> str:
    """Write ``out_dir/index.html`` (+ ``runs/``, ``charts/``) and return its path.

    + host_specs: the inventory's hosts (``name``, ``spec``), in order.
    + drift_doc: :func:`rigkit.drift.run.read_document`'s shape.
    + drift_source: how the drift state was had, for the page (``run live`` / the file).
    + fleet: the fleet comparison (:func:`rigkit.report.fleet.fleet_comparison`), shown when given.

    Raises OSError when the folder cannot be written.
    """
    from jinja2 import Environment, StrictUndefined

    os.makedirs(out_dir, exist_ok=True)
    for sub in ("runs", "charts"):
        shutil.rmtree(os.path.join(out_dir, sub), ignore_errors=True)
    runs = find_runs(results_dir)
    hosts = []
    for hs in host_specs:
        members = build_members(hs.name, hs.spec, runs, out_dir)
        for m in members:
            for r in m.runs:
                base = r.href.rsplit("/", 1)[0]
                r.extra = [{"name": f, "href": f"{base}/{f}"} for f in RUN_FILES[1:]
                           if os.path.isfile(os.path.join(out_dir, base, f))]
        view = host_view(hs.name, drift_doc["hosts"].get(hs.name), members)
        view["sweeps"] = sweep_views(hs.name, results_dir, out_dir)
        hosts.append(view)
    env = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=False)
    page = env.from_string(TEMPLATE).render(
        inventory=inventory, hosts=hosts, verdict_cells=verdict_cells, energy_cells=energy_cells,
        spec_cells=spec_cells, fleet=fleet or [],
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        drift_source=drift_source, drift_generated=(drift_doc.get("run") or {}).get("generated"))
    path = os.path.join(out_dir, "index.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path


__all__ = ["REFERENCES", "drift_from_file", "drift_live", "find_runs", "host_view", "write_report"]
