"""The bench inside a window: the bench's measuring core (:mod:`rigkit.bench`) run against the
tenant on ``127.0.0.1:<tenant_port>``, as ``rigkit bench`` runs it (the chart is drawn on the control
side: the agent has no matplotlib)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

from rigkit.common import envfile, gpu
from rigkit.bench import runner
from rigkit.bench.context import Target, measure_chars_per_token, probe_engine
from rigkit.bench.energy import EnergyMeter
from rigkit.bench.nvml import EnergyReader
from rigkit.bench.workloads import (PRESETS, WORKLOAD_NAMES, build_quoting_prompt, build_workloads, make_document,
                                    quoting_sizes)


def host_context() -> dict:
    """GPU context of this host (:func:`rigkit.common.gpu.bench_context` of :func:`rigkit.common.gpu.query`):
    ``gpu``, ``driver``, ``power_limit_w`` (W), ``memory_total_gib`` (GiB), ``gpu_count``; {} when it fails."""
    return gpu.bench_context(gpu.query())


def run_bench(plan: dict, preset_name: str, journal: dict, checkpoint: Callable[[], None]) -> dict:
    """Run the bench preset ``preset_name`` (:data:`rigkit.bench.workloads.PRESETS`) against the
    tenant on ``127.0.0.1:tenant_port``, the way ``rigkit bench`` does (warm-up workload first,
    tokens from usage), with the host context and this GPU's energy (idle draw first, then per
    request: :class:`rigkit.bench.energy.EnergyMeter` over :class:`rigkit.bench.nvml.EnergyReader`: the card's counter, else sampled power.draw). Writes ``requests.jsonl`` and ``summary.json``
    to ``<results_dir>/bench-<preset>/`` and returns the summary (``rigkit bench``'s format)."""
    settings = plan.get("bench_settings") or {}
    base = f"http://127.0.0.1:{plan['tenant_port']}"
    target = Target(chat_url=f"{base}/v1/chat/completions", aux_base=base, model=plan["tenant_model"],
                    label=f"{plan['host']}/{plan['tenant']} standalone 127.0.0.1:{plan['tenant_port']} "
                          f"(window {journal['id']})",
                    api_key=envfile.read_value(plan["api_key_file"], "VLLM_API_KEY"))
    preset = PRESETS[preset_name]
    quoting_tokens = max_tokens = None
    if preset_name == "rig":
        quoting_tokens = settings.get("quoting_prompt_tokens")
        max_tokens = settings.get("max_tokens")
        effort = settings.get("reasoning_effort")
        preset = dataclasses.replace(preset, extra_body={"chat_template_kwargs": {"reasoning_effort": effort}}
                                     if effort else {})
    engine = probe_engine(target)
    cpt, cpt_source = measure_chars_per_token(target, "".join(make_document(2000, 3)))
    quoting_cpt = cpt
    if cpt_source == "tokenize":
        n_tok, quote_tok = quoting_sizes(preset, quoting_tokens)
        quoting_cpt, _ = measure_chars_per_token(target, build_quoting_prompt("calibration", n_tok, quote_tok, cpt)[0])
    run_id = runner.new_run_id()
    out_dir = Path(journal["results_dir"]) / f"bench-{preset_name}"
    out_dir.mkdir(parents=True, exist_ok=True)
    wls = build_workloads(preset, list(WORKLOAD_NAMES), model=target.model, nonce=run_id, chars_per_token=cpt,
                          chat_max_tokens=max_tokens, quoting_tokens=quoting_tokens,
                          sampled_temperature=float(settings.get("sampled_temperature", 0.7)),
                          quoting_chars_per_token=quoting_cpt)
    context = {k: engine.get(k) for k in ("engine", "engine_version", "model", "model_path", "quantization",
                                          "n_ctx", "speculative")}
    context["model"] = context["model"] or target.model
    context.update({"host": plan["host"], "member": plan["tenant"], "path": "window (standalone, no proxy)",
                    "window_id": journal["id"], "boot_to_healthy_s": journal.get("boot_to_healthy_s"),
                    "warmup_script": journal.get("warmup")})
    context.update({k: v for k, v in host_context().items() if v is not None})
    context.update({k: v for k, v in (plan.get("context") or {}).items() if v is not None})
    context.update({"chars_per_token": round(cpt, 3), "chars_per_token_source": cpt_source,
                    "quoting_chars_per_token": round(quoting_cpt, 3), "gpu": context.get("gpu"),
                    "driver": context.get("driver"), "power_limit_w": context.get("power_limit_w")})

    def progress(_name: str, _done: int, _n: int) -> None:
        checkpoint()

    meter = EnergyMeter(EnergyReader(), where=f"{plan['host']} (this host's GPU)")
    try:
        summaries, warnings = runner.run_workloads(target, wls, run_id=run_id, out_dir=str(out_dir),
                                                   stall_timeout_s=float(settings.get("stall_timeout_s", 120.0)),
                                                   progress=progress, meter=meter)
    finally:
        meter.close()
    summary = runner.build_summary(run_id, target, context, summaries, [], warnings, preset_name,
                                   energy=meter.describe())
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
