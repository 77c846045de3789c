"""The rig's Grafana dashboard (issue 66), built with grafana-foundation-sdk's Python builders (Grafana's own
maintained library for dashboards as code, Apache-2.0; Grafana itself is AGPL and neither vendored nor run).

:data:`PANELS` is the one list of what the dashboard shows — drift, the power limit and its healer, generations
and holds, the host lock and window, each member's decode/prefill tok/s, TTFT, J/token and speculative
acceptance over time, the last verdicts, and the engines' own metrics (llama-swap's ``/metrics``, vLLM's) —
each panel a title, a kind, a unit and its PromQL queries. :func:`dashboard_json` builds the JSON Grafana
imports (Dashboards → New → Import); ``rigkit render`` writes it as ``grafana/rigkit.json``.
:func:`queries` lists every query: tests/unit/test_dashboard.py parses each with ``promql-parser`` (the
Python binding of GreptimeTeam's Rust PromQL parser) and checks every metric it names against those rigkit,
node_exporter, llama-swap v250 and vLLM write.

Metric names: rigkit's own (``rigkit/report/prometheus.py``, ``rigkit/host/promfile.py``; notes/metrics.md),
the bench's acceptance figures (``rigkit_bench_spec_acceptance_*``, the bench's spec families), llama-swap
v250's ``internal/perf/prometheus.go`` (``llamaswap_*``), vLLM's ``vllm/v1/metrics/loggers.py`` (``vllm:*``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

#: The dashboard's uid (stable: a re-import replaces the same dashboard) and its datasource variable.
UID = "rigkit-rig"
DATASOURCE_VAR = "datasource"


@dataclass(frozen=True)
class Panel:
    """One panel: ``kind`` ``"timeseries"``, ``"stat"`` or ``"table"`` (instant queries, one row per series);
    ``unit`` Grafana's unit id (``"watts"``, ``"s"``, ``"none"``…); ``queries`` ``(PromQL, legend)`` pairs;
    ``width`` in Grafana's 24-column grid."""

    title: str
    kind: str
    unit: str
    queries: tuple[tuple[str, str], ...]
    description: str = ""
    width: int = 12


BY_MEMBER = "{{instance}} {{member}} {{workload}}"

#: Rows of panels, in order: ``(row title, panels)``.
PANELS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    ("The rig", (
        Panel("Drift findings", "stat", "none",
              (("rigkit_drift_found", "{{host}}"),),
              "rigkit drift --metrics (cron on the control machine): findings of the last probe, 0 when clean", 6),
        Panel("Drift by kind", "timeseries", "none",
              (("sum by (host, kind, severity) (rigkit_drift_findings)", "{{host}} {{kind}} {{severity}}"),),
              "what drifted, by finding kind", 6),
        Panel("Power limit (W)", "timeseries", "watts",
              (("rigkit_power_limit_declared_watts", "declared {{instance}}"),
               ("rigkit_power_limit_enforced_watts", "enforced {{instance}}")),
              "the declared limit and the one the card enforces at the healer's last check", 6),
        Panel("Power healer", "timeseries", "none",
              (("increase(rigkit_power_limit_reapplies_total[1h])", "re-applied in 1 h {{instance}}"),
               ("rigkit_power_check_result == 1", "{{result}} {{instance}}")),
              "re-applications by rigkit-power.timer, and its last check's result", 6),
        Panel("Generations", "timeseries", "none",
              (("rigkit_generation_current", "current {{instance}}"),
               ("rigkit_generation_last_failed", "last failed {{instance}}"),
               ("rigkit_generations_failed", "failed kept {{instance}}")),
              "the current generation, and changes put back", 8),
        Panel("Holds", "stat", "none",
              (("rigkit_generation_hold", "hold {{instance}}"), ("rigkit_generation_held", "held at {{instance}}")),
              "a hold (a rollback by hand) keeps the deploy from re-activating", 8),
        Panel("Host lock and window", "timeseries", "none",
              (("rigkit_lock_held", "lock held {{instance}}"),
               ("rigkit_lock_holder_info == 1", "holder {{kind}} {{instance}}"),
               ("rigkit_window_open", "window open {{instance}}")),
              "the one host lock (/var/lib/rigkit/rig.lock) and a measuring window", 8),
    )),
    ("Serving (rigkit's smoke and bench)", (
        Panel("Decode (tok/s)", "timeseries", "none",
              (("rigkit_bench_decode_tokens_per_second", BY_MEMBER),), "median decode rate of the last smoke"),
        Panel("Prefill (tok/s)", "timeseries", "none",
              (("rigkit_bench_prefill_tokens_per_second", BY_MEMBER),), "median prefill rate of the last smoke"),
        Panel("TTFT", "timeseries", "s",
              (("rigkit_bench_ttft_seconds", BY_MEMBER),), "median time to first token of the last smoke"),
        Panel("Energy per token (J)", "timeseries", "none",
              (("rigkit_bench_energy_joules_per_token", BY_MEMBER),),
              "absent when the bench calls the run not power-modelled"),
        Panel("Speculative acceptance", "timeseries", "percentunit",
              (("rigkit_bench_spec_acceptance_rate", BY_MEMBER),
               ("rigkit_bench_spec_acceptance_mixed", "mixed " + BY_MEMBER)),
              "accepted / drafted tokens (the mixed workload apart)"),
        Panel("Acceptance length and by position", "timeseries", "none",
              (("rigkit_bench_spec_acceptance_length", "length " + BY_MEMBER),
               ("rigkit_bench_spec_acceptance_rate_by_position", "pos {{position}} " + BY_MEMBER)),
              "mean accepted tokens per step, and the acceptance rate at each draft position"),
        Panel("Last verdicts", "table", "none",
              (("rigkit_bench_verdict == 1", ""),), "each member's and workload's last verdict", 24),
    )),
    ("Engines", (
        Panel("GPU (llama-swap)", "timeseries", "watts",
              (("llamaswap_gpu_power_draw_watts", "draw {{instance}}"),),
              "llama-swap v250's /metrics (internal/perf/prometheus.go)", 8),
        Panel("GPU memory (llama-swap)", "timeseries", "bytes",
              (("llamaswap_gpu_memory_used_bytes", "used {{instance}}"),
               ("llamaswap_gpu_memory_total_bytes", "total {{instance}}")), "", 8),
        Panel("vLLM tokens (tok/s)", "timeseries", "none",
              (("rate(vllm:generation_tokens_total[5m])", "generated {{model_name}}"),
               ("rate(vllm:prompt_tokens_total[5m])", "prompt {{model_name}}")),
              "vLLM's own counters, scraped from the member's port (never through llama-swap)", 8),
        Panel("vLLM TTFT p50", "timeseries", "s",
              (("histogram_quantile(0.5, sum by (le, model_name) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
                "{{model_name}}"),), "", 8),
        Panel("vLLM KV cache", "timeseries", "percentunit",
              (("vllm:kv_cache_usage_perc", "{{model_name}}"),), "", 8),
        Panel("Scrapes", "stat", "none",
              (("up", "{{job}} {{instance}}"), ("node_textfile_scrape_error", "textfile error {{instance}}")),
              "0 for a target down (a vLLM member that is not running is down, never started by a scrape)", 8),
    )),
)


def queries() -> list[str]:
    """Every PromQL expression of :data:`PANELS`, in order."""
    return [expr for _row, panels in PANELS for p in panels for expr, _legend in p.queries]


def _panel(p: Panel, x: int, y: int):
    from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
    from grafana_foundation_sdk.models.dashboard import DataSourceRef, GridPos

    builder = {"timeseries": timeseries.Panel, "stat": stat.Panel, "table": table.Panel}[p.kind]()
    builder = (builder.title(p.title).description(p.description).unit(p.unit)
               .datasource(DataSourceRef(type_val="prometheus", uid="${" + DATASOURCE_VAR + "}"))
               .grid_pos(GridPos(h=8, w=p.width, x=x, y=y)))
    for n, (expr, legend) in enumerate(p.queries):
        q = prometheus.Dataquery().expr(expr).ref_id(chr(ord("A") + n))
        if legend:
            q = q.legend_format(legend)
        if p.kind == "table":
            q = q.instant().format("table")
        builder = builder.with_target(q)
    return builder


def dashboard_json() -> str:
    """The dashboard as Grafana's import JSON (sorted keys, 2-space indent, trailing newline): a
    ``datasource`` variable of type prometheus, one row per :data:`PANELS` entry. Deterministic: the same
    text on every call."""
    from grafana_foundation_sdk.builders import dashboard
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    b = (dashboard.Dashboard("rigkit: the rig").uid(UID).tags(["rigkit"]).refresh("1m").time("now-24h", "now")
         .with_variable(dashboard.DatasourceVariable(DATASOURCE_VAR).label("Prometheus").type("prometheus")))
    y = 0
    for row, panels in PANELS:
        b = b.with_row(dashboard.Row(row))
        y += 1
        x = 0
        for p in panels:
            if x + p.width > 24:
                x, y = 0, y + 8
            b = b.with_panel(_panel(p, x, y))
            x += p.width
        y += 8
    return json.dumps(json.loads(JSONEncoder(sort_keys=True).encode(b.build())), indent=2, sort_keys=True) + "\n"
