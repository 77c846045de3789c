"""What ``rigkit render`` writes for the operator's Prometheus and Grafana (issue 66), beside the host's files:
``prometheus/rigkit.yml`` (the scrape config), ``prometheus/rigkit.rules.yml`` (the alerts, shipped as
``rigkit/report/rigkit.rules.yml``) and ``grafana/rigkit.json`` (:mod:`rigkit.report.dashboard`).

The scrape config has three jobs, each target labelled with the inventory's ``host`` name:

- ``rigkit-node``: the rig's node_exporter (``node_exporter.listen_address``:``port``), serving rigkit's
  ``*.prom`` files from ``metrics_textfile_dir`` — only when that is set (then the deploy installs it);
- ``rigkit-llama-swap``: llama-swap's own ``GET /metrics`` (v250 ``internal/server/server.go``:
  ``mux.Handle("GET /metrics", …handleMetrics)``, its perf monitor's ``llamaswap_*`` gauges) — no model
  involved;
- ``rigkit-vllm``: each vLLM member's own ``/metrics`` **on the member's port, never through llama-swap**.
  llama-swap v250's ``/upstream/<model>/<path>`` (``internal/server/api.go`` ``handleUpstream``) pins the
  request to the model and hands it to the router, which starts the model's process when it is not running
  (and, in a ``swap: true`` group, stops the resident to make room): a scrape through it every 15 s would load
  HyperQwen and evict Strata. Its ``upstream.ignorePaths`` could refuse such paths while the model is not
  loaded (409), but only for a config that sets it; the member's own port needs nothing: while the member is
  not running the connection is refused, Prometheus records ``up 0``, and nothing starts. vLLM's
  ``/metrics`` needs no API key (its ``--api-key`` check guards the ``/v1`` routes only:
  ``vllm/entrypoints/openai/api_server.py``).

Every address is the rig's own loopback except node_exporter's (DESIGN.md "Reaching services"): the
config is for a Prometheus running on the rig; a Prometheus elsewhere reaches node_exporter alone (set
``node_exporter.listen_address`` to the rig's LAN address and scrape that job). The control machine's
``rigkit drift/bench --metrics`` files are served by the control machine's own node_exporter (docs/operating.md).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rigkit.spec import members as members_mod
from rigkit.spec.model import RigSpec

RULES_FILE = Path(__file__).with_name("rigkit.rules.yml")
#: Where ``rigkit render`` writes each file, relative to its ``--out`` folder.
SCRAPE_PATH, RULES_PATH, DASHBOARD_PATH = "prometheus/rigkit.yml", "prometheus/rigkit.rules.yml", "grafana/rigkit.json"
#: Members whose engine is vLLM (``service: hyperqwen``: HyperQwen's compose service ``single``).
VLLM_SERVICES = ("hyperqwen",)


def vllm_members(spec: RigSpec) -> dict[str, int]:
    """``{member id: port}`` of each vLLM member (staged or live: its port is scraped either way) with a fixed
    port."""
    return {mid: m.port for mid, m in members_mod.resolve_members(spec).items()
            if m.spec.service in VLLM_SERVICES and m.port is not None}


def scrape_config(spec: RigSpec, host: str) -> dict:
    """The ``scrape_configs`` (and ``rule_files``) for ``host`` (the inventory's name) as a dict: see the
    module's docstring for the jobs. Targets are ``HOST:PORT`` strings."""
    labels = {"host": host}
    jobs = []
    if spec.metrics_textfile_dir:
        jobs.append({"job_name": "rigkit-node",
                     "static_configs": [{"targets": [spec.node_exporter.listen], "labels": labels}]})
    jobs.append({"job_name": "rigkit-llama-swap", "metrics_path": "/metrics",
                 "static_configs": [{"targets": [f"127.0.0.1:{spec.llama_swap.port}"], "labels": labels}]})
    vllm = vllm_members(spec)
    if vllm:
        jobs.append({"job_name": "rigkit-vllm", "metrics_path": "/metrics",
                     "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": {**labels, "member": mid}}
                                        for mid, port in sorted(vllm.items())]})
    return {"rule_files": [Path(RULES_PATH).name], "scrape_configs": jobs}


def operator_files(spec: RigSpec, host: str) -> dict[str, str]:
    """``{path relative to rigkit render's --out: text}``: the scrape config, the alert rules and the
    dashboard."""
    from rigkit.report.dashboard import dashboard_json

    head = (f"# Rendered by rigkit for {host}: merge scrape_configs into your prometheus.yml (or include this\n"
            "# file's jobs); rule_files names the alerts beside it. Never scrape a member through llama-swap's\n"
            "# /upstream/<model>/: it loads the model (rigkit.report.scrape).\n")
    return {SCRAPE_PATH: head + yaml.safe_dump(scrape_config(spec, host), sort_keys=False),
            RULES_PATH: RULES_FILE.read_text(),
            DASHBOARD_PATH: dashboard_json()}
