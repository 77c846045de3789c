"""The vLLM estimate (rigkit.spec.vram) on published config.json files of the rig's family
(tests/unit/data/hf-configs/README.md), hybrid linear-attention layers included, held to what vLLM
logged for the 27B with DFlash; and properties of both estimators over generated arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.spec import llama_server
from rigkit.spec.vram import (GIB, LlamaArgs, hf_config_summary, largest_llamacpp_ctx, largest_vllm_len,
                              llamacpp_estimate, parse_llama_args, vllm_estimate, vllm_kv_bytes, vllm_pages)

DATA = Path(__file__).parent / "data" / "hf-configs"
QWEN35_27B = hf_config_summary(json.loads((DATA / "qwen3.5-27b.json").read_text()))
FLASH_NEXT = hf_config_summary(json.loads((DATA / "qwen3.8-flash-next.json").read_text()))


def test_the_published_27b_config_reads_as_48_linear_and_16_full_attention_layers():
    c = QWEN35_27B
    assert (c["num_hidden_layers"], c["num_key_value_heads"], c["head_dim"], c["dtype"]) == (64, 4, 256, "bfloat16")
    assert c["layer_types"].count("linear_attention") == 48 and c["layer_types"][3::4] == ["full_attention"] * 16
    assert c["linear"] == {"conv_kernel": 4, "num_key_heads": 16, "num_value_heads": 48, "key_head_dim": 128,
                           "value_head_dim": 128}
    assert c["mamba_ssm_dtype"] == "float32"


def test_the_hybrid_block_size_is_what_vllm_logged_for_the_27b_with_dflash():
    """vLLM grew the attention block to 832 tokens (page 832 × 4096 = 3,407,872 B) and padded the
    Mamba page by 1.09%; the native 16-token page is 65,536 B (the README's report)."""
    dense = {k: v for k, v in QWEN35_27B.items() if k not in ("linear", "mamba_ssm_dtype")}
    dense["layer_types"] = ["full_attention"] * 64
    assert vllm_pages(dense)["attn_page"] == 65_536
    p = vllm_pages(QWEN35_27B, num_spec=8)
    assert (p["block_size"], p["attn_page"], p["mamba_page"]) == (832, 3_407_872, 3_407_872)
    assert round(100 * (p["attn_page"] / p["mamba_page_raw"] - 1), 2) == 1.09
    # DFLASH_TOKENS 7 (the rig's default) lands on the same block
    assert vllm_pages(QWEN35_27B, num_spec=7)["block_size"] == 832
    # without speculation: 784, as a public vLLM study reports for Qwen3.8-27B on one GPU
    # ("block size là 544 (Qwen3-Next TP2) hoặc 784 (Qwen3.8-27B TP1)")
    assert vllm_pages(QWEN35_27B, num_spec=0)["block_size"] == 784


def test_the_27b_kv_cache_at_the_house_max_model_len():
    """65,536 tokens: 16 full-attention layers × cdiv(65536, 832) = 79 blocks × 3,407,872 B, plus 48
    Gated DeltaNet states of one padded page × (1 + 7 speculative blocks)."""
    kv = vllm_kv_bytes(QWEN35_27B, 65_536, num_spec=7)
    assert kv == 16 * 79 * 3_407_872 + 48 * 3_407_872 * 8
    assert round(kv / GIB, 2) == 5.23
    # prefix caching (the rig's PREFIX_CACHE=1): the align mode keeps one more state page per layer
    assert vllm_kv_bytes(QWEN35_27B, 65_536, num_spec=7, prefix_cache=True) == kv + 48 * 3_407_872


def test_a_max_model_len_too_long_for_the_card_names_the_longest_that_fits():
    weights = int(19.5 * 10**9)  # the W4A16 weights (notes/hyperqwen.md: ~19.5 GB)
    budget = int(0.92 * 24 * GIB)
    models = [(QWEN35_27B, weights)]
    assert vllm_estimate(models, 262_144, budget, num_spec=7).total > budget
    most = largest_vllm_len(models, budget, num_spec=7)
    assert vllm_estimate(models, most, budget, num_spec=7).total <= budget < \
        vllm_estimate(models, most + 1024, budget, num_spec=7).total


@settings(max_examples=40, deadline=None)
@given(config=st.sampled_from([QWEN35_27B, FLASH_NEXT]), n=st.integers(1, 1 << 20), extra=st.integers(1, 1 << 18),
       num_spec=st.integers(0, 15), dtype=st.sampled_from(["auto", "fp8"]))
def test_vllm_kv_grows_with_the_length_and_every_state_fits_a_page(config, n, extra, num_spec, dtype):
    assert vllm_kv_bytes(config, n, dtype, num_spec) <= vllm_kv_bytes(config, n + extra, dtype, num_spec)
    p = vllm_pages(config, dtype, num_spec)
    assert p["block_size"] % 16 == 0 and p["mamba_page_raw"] <= p["mamba_page"] == p["attn_page"]
    assert p["attn_page"] - p["mamba_page_raw"] < 16 * p["attn_page"] // p["block_size"]  # the least padding


HEADER = {  # a 27B-class dense GGUF: 64 layers, 8 KV heads of 128, ~16 GiB of weights
    "architecture": "qwen3", "block_count": 64, "context_length": 262_144, "embedding_length": 5120,
    "feed_forward_length": 25_600, "vocab_size": 151_936, "head_count": 64, "head_count_kv": 8, "key_length": 128,
    "value_length": 128, "tensor_bytes": {"layers": [250 * 2**20] * 64, "input": 400 * 2**20, "output": 400 * 2**20,
                                          "tied_output": False}, "tensor_types": {}, "header_bytes": 0}


@settings(max_examples=40, deadline=None)
@given(ctx=st.integers(256, 1 << 19), np_=st.none() | st.integers(1, 8), k=st.sampled_from(["f16", "q8_0", "q4_0"]),
       v=st.sampled_from(["f16", "q8_0", "q4_0"]), ngl=st.none() | st.integers(0, 70),
       budget_gib=st.floats(1, 80))
def test_llamacpp_estimate_properties(ctx, np_, k, v, ngl, budget_gib):
    argv = ["-ctk", k, "-ctv", v] + (["-np", str(np_)] if np_ else []) + (["-ngl", str(ngl)] if ngl is not None else [])
    a = parse_llama_args(argv, ctx)
    e = llamacpp_estimate(HEADER, a)
    # what the card holds never exceeds what llama.cpp holds in all
    assert e.weights_gpu <= e.weights_total and e.kv_gpu <= e.kv_total
    # the context is padded up, never down; more context never costs less
    assert e.n_ctx >= ctx - 256 * (np_ or 1) and e.n_ctx % 256 == 0
    bigger = llamacpp_estimate(HEADER, parse_llama_args(argv, ctx + 4096))
    assert bigger.kv_total >= e.kv_total and bigger.gpu_total >= e.gpu_total
    # the largest context named fits, and the next step does not
    budget = int(budget_gib * GIB)
    most = largest_llamacpp_ctx(HEADER, a, budget)
    from dataclasses import replace
    step = 256 * (1 if a.kv_unified else (a.n_parallel or 4))
    if most:
        assert llamacpp_estimate(HEADER, replace(a, n_ctx=most)).gpu_total <= budget
    if ngl != 0:  # -ngl 0: nothing on the card, every context fits
        assert llamacpp_estimate(HEADER, replace(a, n_ctx=most + step)).gpu_total > budget


@pytest.mark.parametrize(("argv", "want"), [
    ([], LlamaArgs(n_ctx=16384, kv_unified=True)),
    (["-c", "8192", "-np", "2"], LlamaArgs(n_ctx=8192, n_parallel=2)),
    (["--parallel", "2", "--kv-unified", "-fa", "on", "-ctk", "q8_0"],
     LlamaArgs(n_ctx=16384, n_parallel=2, kv_unified=True, flash_attn="on", cache_type_k="q8_0")),
    (["--n-gpu-layers", "99", "--flash-attn", "off", "--threads", "1"],
     LlamaArgs(n_ctx=16384, n_gpu_layers=99, flash_attn="off", kv_unified=True)),
    (["-ngl", "auto", "--no-kv-offload", "--swa-full", "-ub", "256"],
     LlamaArgs(n_ctx=16384, kv_unified=True, kv_offload=False, swa_full=True, n_ubatch=256)),
])
def test_llama_server_arguments_are_read_as_llama_cpp_reads_them(argv, want):
    assert parse_llama_args(argv, ctx_size=16384) == want


def test_a_non_numeric_context_names_the_option_as_llama_server_does():
    with pytest.raises(ValueError) as err:
        parse_llama_args(["-c", "lots"])
    assert str(err.value) == 'error while handling argument "-c": stoi'


@pytest.mark.parametrize("value", ["q3_k", "Q8_0"])  # llama.cpp compares the names as written (lower case)
def test_a_cache_type_llama_cpp_refuses_is_refused_with_its_message(value):
    with pytest.raises(ValueError) as err:
        parse_llama_args(["-ctv", value])
    assert str(err.value) == f'error while handling argument "-ctv": Unsupported cache type: {value}'
    assert value not in llama_server.ARGS["-ctv"][0]["choices"]  # the table's choices, from the parser


def test_the_issue_example_shape_strata_at_262144_is_refused_with_the_largest_that_fits():
    a = parse_llama_args(["--n-gpu-layers", "99", "-fa", "on"], 262_144)
    e = llamacpp_estimate(HEADER, a)
    usable = 23 * GIB
    assert e.gpu_total > usable
    most = largest_llamacpp_ctx(HEADER, a, usable)
    assert most % 256 == 0 and 0 < most < 262_144
