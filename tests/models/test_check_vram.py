"""``rigkit check`` prints each member's VRAM estimate beside its declared figure, refuses (exit 2)
a context that cannot fit the card naming the largest that would, and warns where the declared
figure is below the estimate (issue 46). The lock is the sandbox's, its metadata swapped for
27B-class models' (a dense 64-layer GGUF for Strata; the published Qwen3.5-27B config.json and
19.5 GB of W4A16 weights for HyperQwen), so the figures are the rig's scale."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

SANDBOX_MODELS = {"hyperqwen-dflash2": {"repo_id": "rigkit-test/Qwen3.8-27B-DFlash2-W4A16"},
                  "gguf-baseline": {"repo_id": "rigkit-test/Qwen3.8-27B-GGUF"},
                  "strata": {"repo_id": "rigkit-test/Strata-Coder-GGUF"}}
STRATA_27B = {  # a 27B-class dense GGUF header: 64 layers, 8 KV heads of 128, 15 GiB of weights
    "architecture": "qwen3", "block_count": 64, "context_length": 262_144, "embedding_length": 5120,
    "feed_forward_length": 25_600, "vocab_size": 151_936, "head_count": 64, "head_count_kv": 8, "key_length": 128,
    "value_length": 128, "tensor_bytes": {"layers": [228 * 2**20] * 64, "input": 400 * 2**20,
                                          "output": 400 * 2**20, "tied_output": False},
    "tensor_types": {"Q4_K": 15 * 2**30}, "header_bytes": 6 * 2**20}


def _lab(tmp_path, host_data: dict) -> Path:
    from rigkit.spec.vram import hf_config_summary

    lock = json.loads((ROOT / "inventory" / "sandbox.lock.json").read_text())
    lock["models"]["strata"]["gguf"] = {"strata-coder-Q4_K_M.gguf": STRATA_27B}
    hq = lock["models"]["hyperqwen"]
    hq["config"] = hf_config_summary(json.loads((ROOT / "tests/unit/data/hf-configs/qwen3.5-27b.json").read_text()))
    for f in hq["files"]:
        if f["path"].endswith(".safetensors"):
            f["size"] = 9_750_000_000  # two shards: 19.5 GB (notes/hyperqwen.md)
    hq["total_bytes"] = sum(f["size"] for f in hq["files"])
    (tmp_path / "inventory").mkdir()
    data = {"ssh_hostname": "b", "models": SANDBOX_MODELS,
            "strata": {"model_file": "strata-coder-Q4_K_M.gguf", "args": ["--n-gpu-layers", "99", "-fa", "on"]},
            "gguf_baseline": {"model_file": "Qwen3.8-27B-Q4_K_M.gguf"}, **host_data}
    (tmp_path / "inventory" / "lab.py").write_text(f"hosts = [('box', {data!r})]\n")
    (tmp_path / "inventory" / "lab.lock.json").write_text(json.dumps(lock))
    return tmp_path


def _check(cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"} | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "rigkit", "check", "-i", "inventory/lab.py"], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


def test_check_prints_each_members_estimate_and_refuses_contexts_the_card_cannot_hold(tmp_path):
    from rigkit.spec.vram import GIB, largest_llamacpp_ctx, largest_vllm_len, parse_llama_args

    cwd = _lab(tmp_path, {"strata": {"model_file": "strata-coder-Q4_K_M.gguf", "ctx_size": 262144,
                                     "args": ["--n-gpu-layers", "99", "-fa", "on"]},
                          "hyperqwen": {"max_model_len": 262144}})
    proc = _check(cwd)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    most = largest_llamacpp_ctx(STRATA_27B, parse_llama_args(["--n-gpu-layers", "99", "-fa", "on"], 262144), 23 * GIB)
    assert re.search(r"strata\.ctx_size: strata --ctx-size 262144 needs 64\.00 GiB of KV cache beside 14\.64 GiB of "
                     r"weights and ≤[\d.]+ GiB of compute buffer; the card has 23 GiB \(gpu_vram_gib − "
                     rf"vram_reserve_gib\): at most {most:,} tokens", proc.stderr), proc.stderr
    assert "vram strata: estimate" in proc.stdout and "beside 21.6 GiB declared" in proc.stdout
    assert "vram gguf-baseline: estimate 0.046 GiB beside 17.5 GiB declared" in proc.stdout
    hq = re.search(r"hyperqwen\.max_model_len: 262144 needs ([\d.]+) GiB of KV cache \(fp8\) beside 18\.16 GiB of weights; vLLM "
                   r"gets gpu_memory_utilization 0\.92 × 24 GiB = 22\.08 GiB, before activations: at most ([\d,]+) tokens",
                   proc.stderr)
    assert hq, proc.stderr
    assert int(hq.group(2).replace(",", "")) < 262144
    assert "Traceback" not in proc.stderr


def test_check_warns_where_the_declared_figure_is_below_the_estimate_and_co_loads_with_the_larger(tmp_path):
    cwd = _lab(tmp_path, {"llama_swap": {"members": {"strata": {"vram_gib": 5.0}}}})
    proc = _check(cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"warn  llama_swap\.members\.strata\.vram_gib: 5 GiB declared, below the estimate [\d.]+ GiB", proc.stderr)
