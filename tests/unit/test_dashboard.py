"""The dashboard and the scrape config ``rigkit render`` writes (issue 66): every panel's query parsed by a real
PromQL parser, and every metric it names written by someone — rigkit's writers, node_exporter, llama-swap v250
(read from its vendored source) or vLLM (its source file, cited) — so a query naming a metric nobody writes
fails here; the scrape config never goes through llama-swap's ``/upstream/``.

The PromQL parser is ``promql-parser`` 0.11.0 (PyPI; the Python binding of GreptimeTeam's Rust ``promql-parser``
crate, which follows Prometheus' own grammar). promtool 2.42.0 has no command that parses a bare query
(``promtool check rules`` parses rule files; the rules are checked that way in test_promfile.py).
"""
from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import promql_parser
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.report import dashboard, scrape
from rigkit.spec.validate import spec_from_dict

ROOT = Path(__file__).resolve().parents[2]
LLAMA_SWAP_SRC = ROOT.parent / "shared" / "vendor" / "llama-swap" / "llama-swap-60226b63776e.tar.gz"

#: vLLM's series as its Prometheus logger registers them: ``vllm/v1/metrics/loggers.py`` (vllm-project/vllm,
#: commit 005a810bc40faa25b8870fbc8559c3462581eee3, ``PrometheusStatLogger.__init__``): name → kind. A counter is
#: exposed with ``_total``, a histogram as ``_bucket``/``_sum``/``_count`` (prometheus_client's exposition).
VLLM_FAMILIES = {
    "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge",
    "vllm:gpu_cache_usage_perc": "gauge", "vllm:kv_cache_usage_perc": "gauge",
    "vllm:gpu_prefix_cache_queries": "counter", "vllm:gpu_prefix_cache_hits": "counter",
    "vllm:prefix_cache_queries": "counter", "vllm:prefix_cache_hits": "counter",
    "vllm:num_preemptions": "counter", "vllm:prompt_tokens": "counter", "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:request_prompt_tokens": "histogram", "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram", "vllm:request_max_num_generation_tokens": "histogram",
    "vllm:request_params_n": "histogram", "vllm:request_params_max_tokens": "histogram",
    "vllm:time_to_first_token_seconds": "histogram", "vllm:time_per_output_token_seconds": "histogram",
    "vllm:time_per_prefill_token_request_seconds": "histogram", "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram", "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram", "vllm:request_decode_time_seconds": "histogram",
    "vllm:cache_config_info": "gauge",
}
#: node_exporter's own textfile series (collector/textfile.go) and Prometheus' synthetic ``up`` per target.
NODE_AND_PROMETHEUS = {"node_textfile_scrape_error", "node_textfile_mtime_seconds", "up"}
#: The bench's speculative-decoding families (issue 65), written by rigkit/report/prometheus.py's spec families:
#: the dashboard's acceptance panels must find each among rigkit's names.
ACCEPTANCE = {"rigkit_bench_spec_acceptance_rate", "rigkit_bench_spec_acceptance_length",
              "rigkit_bench_spec_acceptance_rate_by_position", "rigkit_bench_spec_acceptance_mixed"}


def exposed(family: str, kind: str) -> set[str]:
    """The sample names a family of ``kind`` is exposed as (prometheus_client's text format)."""
    if kind == "counter":
        return {family + "_total"}
    if kind == "histogram":
        return {family + s for s in ("_bucket", "_sum", "_count")}
    return {family}


def rigkit_names() -> set[str]:
    """Every series rigkit's writers name, from their source: the string literals ``"rigkit_…"`` of
    ``rigkit/report/prometheus.py`` (drift, bench) and ``rigkit/host/promfile.py`` (the agent's parts), a
    ``CounterMetricFamily`` exposed with ``_total``."""
    out: set[str] = set()
    for rel in ("rigkit/report/prometheus.py", "rigkit/host/promfile.py"):
        text = (ROOT / rel).read_text()
        counters = set(re.findall(r'CounterMetricFamily\(\s*"(rigkit_\w+)"', text))
        for name in re.findall(r'"(rigkit_[a-z_]+)"', text):
            out |= exposed(name, "counter" if name in counters else "gauge")
    return out


def llama_swap_names() -> set[str]:
    """llama-swap v250's ``/metrics`` series, read from its vendored source (``internal/perf/prometheus.go``:
    every ``llamaswap_…`` name it prints)."""
    with tarfile.open(LLAMA_SWAP_SRC) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("internal/perf/prometheus.go"))
        text = tar.extractfile(member).read().decode()
    return set(re.findall(r"\b(llamaswap_[a-z_]+)\b", text))


def known_names() -> dict[str, str]:
    """``{sample name: who writes it}``."""
    out = {n: "rigkit" for n in rigkit_names()}
    out |= {n: "llama-swap v250" for n in llama_swap_names()}
    for fam, kind in VLLM_FAMILIES.items():
        out |= {n: "vLLM" for n in exposed(fam, kind)}
    out |= {n: "node_exporter/Prometheus" for n in NODE_AND_PROMETHEUS}
    return out


def names_in(expr: str) -> set[str]:
    """The metric names ``expr`` selects, by the parser's AST (vector selectors, also under ranges and
    functions; a ``{__name__="…"}`` matcher counts)."""
    found: set[str] = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                found.add(node.name)
            for m in node.matchers.matchers:
                if m.name == "__name__":
                    found.add(m.value)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def test_the_sources_of_names_are_read():
    """The premise: each source yields what it is known to write (a parse that found nothing would pass
    every query below vacuously)."""
    rk, ls = rigkit_names(), llama_swap_names()
    assert {"rigkit_drift_found", "rigkit_power_limit_reapplies_total", "rigkit_bench_verdict",
            "rigkit_generation_current", "rigkit_lock_held"} | ACCEPTANCE <= rk, sorted(rk)
    assert "rigkit_power_limit_reapplies" not in rk  # a counter is exposed with _total only
    assert {"llamaswap_gpu_power_draw_watts", "llamaswap_gpu_memory_used_bytes"} <= ls, sorted(ls)


def test_every_query_parses_and_names_only_written_metrics():
    known = known_names()
    qs = dashboard.queries()
    assert len(qs) >= 30
    unknown, by = [], {}
    for expr in qs:
        names = names_in(expr)
        assert names, f"{expr}: selects no metric"
        for n in names:
            if n not in known:
                unknown.append(f"{expr!r}: {n}")
            by.setdefault(known.get(n, "?"), set()).add(n)
    assert not unknown, "queries naming a metric nobody writes:\n" + "\n".join(unknown)
    # the dashboard shows each writer's part: rigkit's state, the bench's figures, both engines
    assert {"rigkit", "llama-swap v250", "vLLM"} <= set(by) and ACCEPTANCE & by["rigkit"], by


@given(st.sampled_from(["rigkit_no_such_metric", "vllm:no_such_total", "llamaswap_gpu_nothing"]),
       st.sampled_from(["{}", "rate({}[5m])", "sum by (host) ({})", "{} == 1"]))
@settings(max_examples=12, deadline=None)
def test_a_query_naming_an_unwritten_metric_is_caught(name, shape):
    expr = shape.format(name)
    assert names_in(expr) == {name} and name not in known_names()


def test_a_broken_query_is_refused_by_the_parser():
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(rigkit_drift_found[5m])")


def test_the_dashboard_json_is_grafanas_shape_and_stable():
    text = dashboard.dashboard_json()
    assert text == dashboard.dashboard_json()
    d = json.loads(text)
    assert d["uid"] == dashboard.UID and d["title"]
    [var] = d["templating"]["list"]
    assert var["type"] == "datasource" and var["query"] == "prometheus"
    panels = [p for p in d["panels"] if p["type"] != "row"]
    assert [p["title"] for p in panels] == [p.title for _r, ps in dashboard.PANELS for p in ps]
    assert [t["expr"] for p in panels for t in p["targets"]] == dashboard.queries()
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24


SANDBOXISH = {"metrics_textfile_dir": "/var/lib/prometheus/node-exporter"}


def test_the_scrape_config_scrapes_each_vllm_member_on_its_own_port_never_through_llama_swap():
    spec = spec_from_dict(SANDBOXISH | {"node_exporter": {"listen_address": "192.168.1.20", "port": 9101}})
    cfg = scrape.scrape_config(spec, "rig")
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {"rigkit-node", "rigkit-llama-swap", "rigkit-vllm"}
    assert jobs["rigkit-node"]["static_configs"] == [{"targets": ["192.168.1.20:9101"], "labels": {"host": "rig"}}]
    assert jobs["rigkit-llama-swap"]["metrics_path"] == "/metrics"
    assert jobs["rigkit-llama-swap"]["static_configs"][0]["targets"] == [f"127.0.0.1:{spec.llama_swap.port}"]
    assert jobs["rigkit-vllm"]["static_configs"] == [
        {"targets": [f"127.0.0.1:{spec.hyperqwen.port}"], "labels": {"host": "rig", "member": "hyperqwen"}}]
    text = yaml.safe_dump(cfg)
    assert "/upstream/" not in text and str(spec.llama_swap.port) not in jobs["rigkit-vllm"]["static_configs"][0]["targets"][0]
    assert cfg["rule_files"] == ["rigkit.rules.yml"]


@pytest.mark.slow  # rigkit render runs the real validators
def test_rigkit_render_writes_the_monitoring_files(tmp_path):
    import subprocess
    import sys

    # the CLI in a process of its own (rigkit's main() gevent-patches the process it runs in)
    proc = subprocess.run([str(Path(sys.executable).parent / "rigkit"), "render", "-i", "inventory/rig.py", "--out",
                           str(tmp_path), "--data", 'metrics_textfile_dir="/var/lib/prometheus/node-exporter"'],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 1: a validator could not run offline
    cfg = yaml.safe_load((tmp_path / scrape.SCRAPE_PATH).read_text())
    assert [j["job_name"] for j in cfg["scrape_configs"]][0] == "rigkit-node"
    assert (tmp_path / scrape.RULES_PATH).read_text() == scrape.RULES_FILE.read_text()
    assert json.loads((tmp_path / scrape.DASHBOARD_PATH).read_text())["uid"] == dashboard.UID
    # not host files: the manifest lists only what the deploy uploads
    listed = {e["path"] for e in json.loads((tmp_path / "manifest.json").read_text())}
    assert "/etc/conf.d/prometheus-node-exporter" in listed
    assert not any(p.startswith(("/prometheus", "/grafana")) for p in listed)
