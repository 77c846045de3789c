"""The llama.cpp estimate (rigkit.spec.vram) against the real llama.cpp's own report of its buffers.

llama.cpp (xllamacpp's embedded server, CPU backend) loads the sandbox's GGUF models — the hub
fixture's ``Qwen3.8-27B-Q4_K_M.gguf`` and ``strata-coder-Q4_K_M.gguf`` (tests/hub/repos.py: head
dimension 16, so f16 caches only: a quantized cache stores blocks of 32) and a wider one of the same
generator (head dimension 64, two KV heads of four: GQA) for q8_0/q4_0 caches, and a tiny gemma3
(sliding window 512, llama.cpp's own pattern of five SWA layers to one dense: two caches) — at several contexts,
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
import tempfile
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
    ("gemma3", 8192, 1, "f16", "auto", False),
    ("gemma3", 8192, 2, "q8_0", "enabled", False),
    ("gemma3", 4096, 3, "f16", "disabled", True),
    ("gemma3", 700, 1, "q4_0", "auto", False),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return make_models(tmp_path_factory.mktemp("gguf"))


def make_models(tmp: Path) -> dict[str, Path]:
    """The four GGUFs of :data:`CASES`, written into ``tmp``."""
    sys.path.insert(0, str(ROOT))
    from tests.bench.tiny_gguf import main as tiny_main
    from tests.hub.repos import GGUF, STRATA, repo_files

    files = repo_files(tmp)
    out = {"baseline": tmp / "baseline.gguf", "strata": tmp / "strata.gguf", "gqa": tmp / "gqa.gguf"}
    out["baseline"].write_bytes(files[GGUF]["Qwen3.8-27B-Q4_K_M.gguf"])
    out["strata"].write_bytes(files[STRATA]["strata-coder-Q4_K_M.gguf"])
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        tiny_main([str(out["gqa"]), "--n-embd", "256", "--n-layer", "3", "--n-head", "4", "--n-head-kv", "2",
                   "--n-ff", "512"])
    out["gemma3"] = tmp / "gemma3.gguf"
    write_tiny_gemma3(out["gemma3"])
    return out


def write_tiny_gemma3(path: Path, n_layer: int = 7, d: int = 128, n_head: int = 4, n_kv: int = 2, head: int = 32,
                      ff: int = 256, window: int = 512) -> None:
    """A tiny gemma3 GGUF (sliding window 512 tokens; llama.cpp's own pattern: five SWA layers, one
    dense) that llama.cpp loads: the tensors its gemma3 loader asks for, random weights, the
    tokenizer of tests/bench/tiny_gguf.py."""
    import gguf
    import numpy as np

    from tests.bench.tiny_gguf import add_tokenizer, build_vocab

    tokens, types, merges, _words, index = build_vocab()
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_context_length(32768)
    w.add_embedding_length(d)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head)
    w.add_value_length(head)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(window)
    w.add_rope_freq_base(10000.0)
    add_tokenizer(w, tokens, types, merges, index)
    rng = np.random.default_rng(0)

    def rnd(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    w.add_tensor("token_embd.weight", rnd(len(tokens), d))
    for i in range(n_layer):
        for name, size in (("attn_norm", d), ("attn_q_norm", head), ("attn_k_norm", head),
                           ("post_attention_norm", d), ("ffn_norm", d), ("post_ffw_norm", d)):
            w.add_tensor(f"blk.{i}.{name}.weight", np.ones(size, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", rnd(n_head * head, d))
        w.add_tensor(f"blk.{i}.attn_k.weight", rnd(n_kv * head, d))
        w.add_tensor(f"blk.{i}.attn_v.weight", rnd(n_kv * head, d))
        w.add_tensor(f"blk.{i}.attn_output.weight", rnd(d, n_head * head))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", rnd(ff, d))
        w.add_tensor(f"blk.{i}.ffn_up.weight", rnd(ff, d))
        w.add_tensor(f"blk.{i}.ffn_down.weight", rnd(d, ff))
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_report(model: Path, n_ctx: int, n_parallel: int, cache: str, flash: str, unified: bool) -> dict:
    """llama.cpp's own figures from its load log (the last load: the first is its fit probe)."""
    # stderr into a file: the helper waits until llama.cpp's asynchronous log has written the load's last
    # needed line there (tests/unit/llama_load.py), so no line is lost to the process' exit
    with tempfile.TemporaryFile("w+", errors="replace") as err:
        proc = subprocess.run([sys.executable, "-m", "tests.unit.llama_load", str(model), str(n_ctx), str(n_parallel),
                               cache, flash, "1" if unified else "0"], stdout=subprocess.PIPE, stderr=err, text=True,
                              errors="replace", timeout=180, cwd=ROOT)
        err.seek(0)
        log = proc.stdout + err.read()
    assert proc.returncode == 0 and "loaded" in proc.stdout, log[-3000:]
    last = log[log.rindex("load_tensors:"):]  # the real load
    weights = re.findall(r"load_tensors:\s+CPU model buffer size =\s+([\d.]+) MiB", log)[-1]
    caches = re.findall(r"llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+)/\d+ seqs\), "
                        r"K \((\w+)\):\s+([\d.]+) MiB, V \((\w+)\):\s+([\d.]+) MiB", last)
    compute = re.findall(r"sched_reserve:\s+CPU compute buffer size =\s+([\d.]+) MiB", last)
    assert caches and compute, "llama.cpp's load log lacks the KV cache or compute buffer line:\n" + last[-4000:]
    compute = compute[-1]
    # a model with sliding-window layers has two caches (llama_kv_cache_iswa: non-SWA, then SWA)
    return {"weights": float(weights), "cells": [int(c[1]) for c in caches], "k_type": caches[0][4],
            "k": sum(float(c[5]) for c in caches), "v_type": caches[0][6], "v": sum(float(c[7]) for c in caches),
            "compute": float(compute), "caches": len(caches)}


def agrees(ours_bytes: int, printed_mib: float, prints: int = 1) -> bool:
    """Exact to llama.cpp's two-decimal MiB print (0.005 MiB per figure summed), and within 1%."""
    ours = ours_bytes / MIB
    slack = 0.005 * prints + 1e-9
    return abs(ours - printed_mib) <= slack and abs(ours - printed_mib) <= 0.01 * max(ours, printed_mib) + slack


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
    assert (got["cells"][0] * streams, got["k_type"], got["v_type"]) == (est.n_ctx, cache, cache)
    assert got["caches"] == (2 if model == "gemma3" else 1)
    assert agrees(est.weights_total, got["weights"]), (est.weights_total / MIB, got["weights"])
    assert agrees(est.k_bytes, got["k"], got["caches"]), (est.k_bytes / MIB, got["k"])
    assert agrees(est.v_bytes, got["v"], got["caches"]), (est.v_bytes / MIB, got["v"])
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
