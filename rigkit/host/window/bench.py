"""The bench inside a window: :class:`rigkit.bench.session.BenchSession` — the session ``rigkit
bench`` runs — against the tenant on ``127.0.0.1:<tenant_port>`` (the chart is drawn on the control
side: the agent has no matplotlib)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from rigkit.common import envfile, gpu
from rigkit.bench.context import Target
from rigkit.bench.session import BenchSession
from rigkit.bench.nvml import EnergyReader


def host_context() -> dict:
    """GPU context of this host (:func:`rigkit.common.gpu.bench_context` of :func:`rigkit.common.gpu.query`):
    ``gpu``, ``driver``, ``power_limit_w`` (W), ``memory_total_gib`` (GiB), ``gpu_count``; {} when it fails."""
    return gpu.bench_context(gpu.query())


def run_bench(plan: dict, preset_name: str, journal: dict, checkpoint: Callable[[], None]) -> dict:
    """Run the bench preset ``preset_name`` (:data:`rigkit.bench.workloads.PRESETS`) against the
    tenant on ``127.0.0.1:tenant_port`` through the bench session (every workload, the warm-up first,
    the host's ``bench_settings`` applied by ``rigkit bench``'s rules), with the host context and this
    GPU's energy (:class:`rigkit.bench.nvml.EnergyReader`: the card's counter, else sampled power.draw).
    Writes ``requests.jsonl`` and ``summary.json`` to ``<results_dir>/bench-<preset>/`` and returns the
    summary (``rigkit bench``'s format). Raises :class:`rigkit.bench.session.TargetUnreachable`
    when the tenant answers nothing."""
    base = f"http://127.0.0.1:{plan['tenant_port']}"
    target = Target(chat_url=f"{base}/v1/chat/completions", aux_base=base, model=plan["tenant_model"],
                    label=f"{plan['host']}/{plan['tenant']} standalone 127.0.0.1:{plan['tenant_port']} "
                          f"(window {journal['id']})",
                    api_key=envfile.read_value(plan["api_key_file"], "VLLM_API_KEY"))
    context = {"host": plan["host"], "member": plan["tenant"], "path": "window (standalone, no proxy)",
               "window_id": journal["id"], "boot_to_healthy_s": journal.get("boot_to_healthy_s"),
               "warmup_script": journal.get("warmup")}
    context.update({k: v for k, v in host_context().items() if v is not None})
    context.update({k: v for k, v in (plan.get("context") or {}).items() if v is not None})
    session = BenchSession(target, settings=plan.get("bench_settings") or {}, preset=preset_name,
                           context=context)
    session.prepare()
    out_dir = Path(journal["results_dir"]) / f"bench-{preset_name}"
    out_dir.mkdir(parents=True, exist_ok=True)

    def progress(_name: str, _done: int, _n: int) -> None:
        checkpoint()

    reader = EnergyReader()
    try:
        summary = session.run(str(out_dir), read_energy=reader, where=f"{plan['host']} (this host's GPU)",
                              progress=progress)
    finally:
        reader.close()
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
