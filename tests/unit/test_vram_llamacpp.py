"""The llama.cpp estimate (rigkit.spec.vram) against the real llama.cpp's own report of its buffers.

llama.cpp (xllamacpp's embedded server, CPU backend) loads the sandbox's GGUF models — the hub
fixture's ``Qwen3.8-27B-Q4_K_M.gguf`` and ``strata-coder-Q4_K_M.gguf`` (tests/hub/repos.py: head
dimension 16, so f16 caches only: a quantized cache stores blocks of 32) and a wider one of the same
generator (head dimension 64, two KV heads of four: GQA) for q8_0/q4_0 caches — at several contexts,
cache types, slot counts and flash-attention settings, and prints (``tests/unit/llama_load.py``):

    load_tensors:          CPU model buffer size =     7.51 MiB
    llama_kv_cache: size =    6.38 MiB (  8192 cells,   3 layers,  1/1 seqs), K (q8_0):    3.19 MiB, V (q8_0):    3.19 MiB
    sched_reserve:        CPU compute buffer size =    13.55 MiB

Weights and KV cache are the same on any backend: they must agree exactly, to the 0.005 MiB of
llama.cpp's two-decimal print (and within 1%). The compute buffer differs by backend: the bound of
:func:`rigkit.spec.vram.compute_buffer_bound` must hold over the CPU backend's measured one.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rigkit.spec.gguf_header import read_header
from rigkit.spec.vram import MIB, LlamaArgs, llamacpp_estimate, parse_llama_args

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

#: (model, --ctx-size, --parallel, cache type, flash attention, unified)
CASES = [
    ("baseline", 4096, 1, "f16", "auto", False),
    ("baseline", 16384, 1, "f16", "disabled", False),
    ("baseline", 5000, 3, "f16", "disabled", False),
    ("strata", 3000, 4, "f16", "enabled", True),
    ("strata", 300, 1, "f16", "auto", False),
    ("gqa", 4096, 1, "f16", "auto", False),
    ("gqa", 8192, 2, "q8_0", "enabled", False),
    ("gqa", 8192, 1, "q4_0", "auto", False),
    ("gqa", 16384, 1, "q8_0", "auto", False),
    ("gqa", 32768, 4, "q4_0", "enabled", True),
    ("gqa", 5000, 3, "f16", "disabled", False),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    sys.path.insert(0, str(ROOT))
    from tests.bench.tiny_gguf import main as tiny_main
    from tests.hub.repos import GGUF, STRATA, repo_files

    tmp = tmp_path_factory.mktemp("gguf")
    files = repo_files(tmp)
    out = {"baseline": tmp / "baseline.gguf", "strata": tmp / "strata.gguf", "gqa": tmp / "gqa.gguf"}
    out["baseline"].write_bytes(files[GGUF]["Qwen3.8-27B-Q4_K_M.gguf"])
    out["strata"].write_bytes(files[STRATA]["strata-coder-Q4_K_M.gguf"])
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        tiny_main([str(out["gqa"]), "--n-embd", "256", "--n-layer", "3", "--n-head", "4", "--n-head-kv", "2",
                   "--n-ff", "512"])
    return out


def llama_report(model: Path, n_ctx: int, n_parallel: int, cache: str, flash: str, unified: bool) -> dict:
    """llama.cpp's own figures from its load log (the last load: the first is its fit probe)."""
    proc = subprocess.run([sys.executable, "-m", "tests.unit.llama_load", str(model), str(n_ctx), str(n_parallel),
                           cache, flash, "1" if unified else "0"], capture_output=True, text=True, errors="replace",
                          timeout=120, cwd=ROOT)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "loaded" in proc.stdout, log[-3000:]
    weights = re.findall(r"load_tensors:\s+CPU model buffer size =\s+([\d.]+) MiB", log)[-1]
    kv = re.findall(r"llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+)/\d+ seqs\), "
                    r"K \((\w+)\):\s+([\d.]+) MiB, V \((\w+)\):\s+([\d.]+) MiB", log)[-1]
    compute = re.findall(r"sched_reserve:\s+CPU compute buffer size =\s+([\d.]+) MiB", log)[-1]
    return {"weights": float(weights), "cells": int(kv[1]), "k_type": kv[4], "k": float(kv[5]), "v_type": kv[6],
            "v": float(kv[7]), "compute": float(compute)}


def agrees(ours_bytes: int, printed_mib: float) -> bool:
    """Exact to llama.cpp's two-decimal MiB print, and within 1%."""
    ours = ours_bytes / MIB
    return abs(ours - printed_mib) <= 0.005 + 1e-9 and abs(ours - printed_mib) <= 0.01 * max(ours, printed_mib) + 0.005


@pytest.mark.parametrize(("model", "n_ctx", "n_parallel", "cache", "flash", "unified"), CASES,
                         ids=[f"{m}-c{c}-np{n}-{t}-fa_{f}{'-kvu' if u else ''}" for m, c, n, t, f, u in CASES])
def test_weights_and_kv_cache_agree_with_llama_cpps_report(models, model, n_ctx, n_parallel, cache, flash, unified):
    data = models[model].read_bytes()
    header, _ = read_header(lambda a, b: data[a:b + 1], len(data))
    argv = ["-np", str(n_parallel), "-ctk", cache, "-ctv", cache,
            "-fa", {"enabled": "on", "disabled": "off"}.get(flash, flash)] + (["--kv-unified"] if unified else [])
    args = parse_llama_args(argv, ctx_size=n_ctx)
    est = llamacpp_estimate(header, args)
    got = llama_report(models[model], n_ctx, n_parallel, cache, flash, unified)
    streams = 1 if unified else n_parallel
    assert (got["cells"] * streams, got["k_type"], got["v_type"]) == (est.n_ctx, cache, cache)
    assert agrees(est.weights_total, got["weights"]), (est.weights_total / MIB, got["weights"])
    assert agrees(est.k_bytes, got["k"]), (est.k_bytes / MIB, got["k"])
    assert agrees(est.v_bytes, got["v"]), (est.v_bytes / MIB, got["v"])
    assert est.problems == []
    assert est.compute_gpu >= got["compute"] * MIB, (est.compute_gpu / MIB, got["compute"])


def test_a_quantized_v_cache_without_flash_attention_is_refused_as_llama_cpp_refuses_it(models):
    proc = subprocess.run([sys.executable, "-m", "tests.unit.llama_load", str(models["gqa"]), "4096", "1", "q8_0",
                           "disabled"], capture_output=True, text=True, errors="replace", timeout=120, cwd=ROOT)
    assert "quantized V cache requires flash_attn to be enabled" in proc.stderr
    data = models["gqa"].read_bytes()
    header, _ = read_header(lambda a, b: data[a:b + 1], len(data))
    est = llamacpp_estimate(header, LlamaArgs(n_ctx=4096, n_parallel=1, cache_type_k="q8_0", cache_type_v="q8_0",
                                              flash_attn="off"))
    assert est.problems == ["--cache-type-v q8_0 needs flash attention; llama.cpp refuses it with --flash-attn off "
                            "(\"quantized V cache requires flash_attn\")"]
