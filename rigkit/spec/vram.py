"""Will it fit? Each member's GPU memory from its model files (as the lock records them) and its arguments.

Pure functions: the inputs are the lock's metadata (:mod:`rigkit.spec.gguf_header` for a GGUF,
:func:`hf_config_summary` for a ``config.json``) and the member's arguments; nothing is read here.
Sizes are bytes inside, GiB (2**30, as nvidia-smi's MiB / 1024) at the edges.

**llama.cpp** (Strata, the GGUF baseline): weights + KV cache + compute buffer.

- Weights: the tensors of the offloaded layers (``--n-gpu-layers N``: llama.cpp puts layers
  ``il >= n_layer + 1 - N`` and, for ``N >= 1``, the output layer on the card; ``token_embd`` stays
  on the host — ``llama-model.cpp`` ``load_tensors``, ``i_gpu_start``); all of them without ``-ngl``.
- KV cache (``llama-kv-cache.cpp``): per attention layer and cell, ``ggml_row_size(type_k,
  n_head_kv × key_length) + ggml_row_size(type_v, n_head_kv × value_length)`` (``-ctk/-ctv``,
  block sizes from ggml's ``type_traits``: ``rigkit.spec.gguf_header.GGML_TYPES``). Cells
  (``llama-context.cpp``): with ``--parallel N``
  and no ``--kv-unified``, N streams of ``pad(n_ctx / N, 256)`` cells; unified (llama-server's default
  when ``--parallel`` is not given: 4 slots sharing one cache) ``pad(n_ctx, 256)``. Sliding-window
  layers (``llama-kv-cache-iswa.cpp``) keep ``min(cells, pad(n_swa × streams + n_ubatch, 256))``
  unless ``--swa-full``. Recurrent layers of a hybrid model (``llama-memory-recurrent.cpp``, F32)
  keep per sequence ``(conv_kernel − 1) × (inner + 2 × groups × state)`` + ``state × inner`` floats
  (``llama-hparams.cpp`` ``n_embd_r``/``n_embd_s``). A quantized V cache needs flash attention
  (llama.cpp refuses ``--flash-attn off`` with it: "quantized V cache requires flash_attn").
  Weights and KV cache are the same on any backend; ``tests/unit/test_vram_llamacpp.py`` holds
  them to the real llama.cpp's own report on the CPU backend (exact to its 0.01 MiB print), sliding
  windows included (a tiny gemma3); the recurrent formula is not checked against a real run.
- Compute buffer: :func:`compute_buffer_bound`, a bound, not a measurement (see there).

**vLLM** (HyperQwen): vLLM takes ``gpu_memory_utilization × card`` by construction
(``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``: the KV cache gets
``requested_memory − (weights + peak activation + non-torch memory)``) and refuses to start when one
request of ``max_model_len`` tokens needs more KV cache than that (``vllm/v1/core/kv_cache_utils.py``
``check_enough_kv_cache_memory``, summing each layer's ``max_memory_usage_bytes``). Per layer
(``vllm/v1/kv_cache_interface.py``): ``FullAttentionSpec`` ``cdiv(max_model_len, block_size) ×
page``, page = ``block_size × num_kv_heads × (head_size + head_size_v) × dtype_bytes``;
``SlidingWindowSpec`` ``(cdiv(min(window − 1 + max_num_batched_tokens, max_model_len), block_size)
+ 1) × page``; ``MambaSpec`` (a linear-attention / Gated DeltaNet layer) ``page × (1 +
num_speculative_blocks)`` with its state shapes from ``vllm/model_executor/layers/mamba/mamba_utils.py``
``gated_delta_net_state_shape`` (conv ``(conv_kernel − 1 + num_spec) × (2 × k_heads × k_dim + v_heads ×
v_dim)`` in the model dtype, temporal ``v_heads × v_dim × k_dim`` in ``mamba_ssm_dtype``). In a hybrid
model the attention block grows until its page holds a Mamba state, and the Mamba page is padded
to it (``vllm/platforms/interface.py`` ``_align_hybrid_block_size``: ``16 × cdiv(mamba_page, 16 ×
attn_page_per_token)``). The drafter's layers get their own cache at the same ``max_model_len``.
The check here is a necessary condition: weights + KV cache at ``max_model_len`` must fit in
``gpu_memory_utilization × card``, judged with an fp8 KV cache (the stack picks its own KV dtype).

**What it cannot predict**: allocator workspaces and activations that exist only at run time —
vLLM's profile-run peak and CUDA graphs, the marlin GEMM workspace (the seeds' ``marlin_gemm``
allocation failure with ``DFLASH_TOKENS=15`` at 20k context happened inside a budget that fitted),
cuBLAS/cuDNN workspaces, the CUDA context itself (~250 MiB, outside ``vram_gib``'s reserve).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rigkit import hints
from rigkit.spec import llama_server_args as _llama_table

#: The cache types llama.cpp's ``--cache-type-k/-v`` accept (``common/arg.cpp`` ``kv_cache_types``), as the
#: table generated from its parser lists them (:mod:`rigkit.spec.llama_server_args`).
CACHE_TYPES = tuple(next(o for o in _llama_table.OPTIONS if "--cache-type-k" in o["names"])["choices"])
GIB = 1 << 30
MIB = 1 << 20
#: llama.cpp pads the context of each KV stream to this many cells (``llama-context.cpp``).
N_CTX_PAD = 256
#: vLLM's attention block size on a 3090 (FlashAttention's kernel block alignment, ``CacheConfig.block_size`` default).
VLLM_BLOCK = 16
#: vLLM's default ``max_num_batched_tokens`` for online serving (``vllm/engine/arg_utils.py``), used for sliding windows.
VLLM_BATCHED_TOKENS = 8192
#: Sliding-window patterns llama.cpp sets in code, not from the file (``llama-model.cpp`` ``load_hparams``:
#: ``LLM_ARCH_GEMMA3`` ``hparams.set_swa_pattern(6)``: five SWA layers, then one dense). Seen on the real
#: llama.cpp here (``load_tensors: layer 5 … is_swa = 0``; tests/unit/test_vram_llamacpp.py). An
#: architecture with a sliding window and no known pattern is counted as all dense: an upper bound.
SWA_PATTERN_BY_ARCH = {"gemma3": 6}
_TORCH_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1,
                "fp8_e5m2": 1, "int8": 1}


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


def gib(n_bytes: float) -> float:
    """Bytes → GiB (2**30)."""
    return n_bytes / GIB


def size(n_bytes: float) -> str:
    """Bytes as the operator reads them: ``"14.90 GiB"``, or ``"12.5 MiB"`` below 0.1 GiB."""
    return f"{n_bytes / GIB:.2f} GiB" if n_bytes >= GIB / 10 else f"{n_bytes / MIB:.1f} MiB"


# --------------------------------------------------------------------------------------- llama.cpp


@dataclass(frozen=True)
class LlamaArgs:
    """The llama-server arguments that size its memory (llama.cpp ``common/arg.cpp`` names).

    ``n_ctx`` tokens (0 = the model's trained context), ``n_parallel`` slots (``None`` = not
    given: llama-server's auto, 4 slots on one unified cache), ``kv_unified``, ``cache_type_k``/
    ``_v`` (ggml type names, lower case), ``flash_attn`` on/off/auto, ``n_gpu_layers`` (``None`` =
    all), ``n_ubatch``, ``swa_full``, ``kv_offload``."""

    n_ctx: int
    n_parallel: int | None = None
    kv_unified: bool = False
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: str = "auto"
    n_gpu_layers: int | None = None
    n_ubatch: int = 512
    swa_full: bool = False
    kv_offload: bool = True


def parse_llama_args(argv: list[str], ctx_size: int | None = None) -> LlamaArgs:
    """:class:`LlamaArgs` from a llama-server argument list, read by llama.cpp's own table
    (:func:`rigkit.spec.llama_server.read`: later options win, as llama.cpp's parser does). ``ctx_size``
    is the spec's ``ctx_size`` (rigkit puts ``--ctx-size`` before the operator's ``args``; one there is
    refused by the spec check). A word the table does not know is passed over (the spec check warns).
    Raises ``ValueError`` with llama-server's own message where it would refuse the line (a value that is
    not a number, a cache type it does not know: :data:`CACHE_TYPES`)."""
    from rigkit.spec import llama_server as reader

    words = (["--ctx-size", str(ctx_size)] if ctx_size is not None else []) + list(argv)
    try:
        given = reader.read(words, unknown="skip")
    except reader.Exit as exc:
        raise ValueError(exc.stderr.strip().split("\n\nusage:", 1)[0].strip() or "llama-server would exit") from None
    v: dict[str, object] = {g.key: g.value for g in given if g.key is not None}
    n_parallel = v.get("--parallel")
    n_parallel = n_parallel if isinstance(n_parallel, int) and n_parallel > 0 else None
    unified = v["--kv-unified"] if "--kv-unified" in v else n_parallel is None
    layers = v.get("--gpu-layers")
    return LlamaArgs(n_ctx=int(v.get("--ctx-size") or 0), n_parallel=n_parallel, kv_unified=bool(unified),
                     cache_type_k=str(v.get("--cache-type-k", "f16")).lower(),
                     cache_type_v=str(v.get("--cache-type-v", "f16")).lower(),
                     flash_attn=str(v.get("--flash-attn", "auto")),
                     n_gpu_layers=layers if isinstance(layers, int) and layers >= 0 else None,
                     n_ubatch=int(v.get("--ubatch-size") or 512), swa_full=bool(v.get("--swa-full", False)),
                     kv_offload=bool(v.get("--kv-offload", True)))


def row_bytes(type_name: str, n: int) -> int:
    """``ggml_row_size``: bytes of ``n`` values of ggml type ``type_name`` (``f16``, ``q8_0``, …, any
    case; block and type sizes from ggml's ``type_traits``, :data:`rigkit.spec.gguf_header.GGML_TYPES`).
    Raises ``ValueError`` for an unknown or removed type or an ``n`` that is not a whole number of its blocks."""
    from rigkit.spec.gguf_header import GGML_TYPES

    found = [(blck, size) for name, blck, size in GGML_TYPES if blck and name.lower() == type_name.lower()]
    if not found:
        raise ValueError(f"unknown cache type {type_name!r}")
    block, size = found[0]
    if n % block:
        raise ValueError(f"cache type {type_name} stores blocks of {block} values; a row of {n} is not a whole number")
    return n // block * size


def _per_layer(value: int | list[int], n_layer: int) -> list[int]:
    return list(value) if isinstance(value, list) else [int(value)] * n_layer


def _layer_kinds(h: dict[str, Any]) -> list[str]:
    """``attention``, ``swa`` or ``recurrent`` for each layer of a GGUF header summary."""
    n = h["block_count"]
    kv = _per_layer(h["head_count_kv"], n)
    interval = h.get("full_attention_interval")
    kinds = []
    pattern = h.get("sliding_window_pattern", SWA_PATTERN_BY_ARCH.get(h.get("architecture", "")))
    for il in range(n):
        if interval and (il + 1) % interval != 0 or (h.get("ssm") and kv[il] == 0):
            kinds.append("recurrent")
        elif h.get("sliding_window") and isinstance(pattern, list) and il < len(pattern) and pattern[il]:
            kinds.append("swa")
        elif h.get("sliding_window") and isinstance(pattern, int) and pattern > 1 and il % pattern < pattern - 1:
            kinds.append("swa")  # llama-hparams.cpp set_swa_pattern(n): the n-th layer of each n is dense
        else:
            kinds.append("attention")
    return kinds


def kv_cells(a: LlamaArgs, n_ctx_train: int) -> tuple[int, int]:
    """``(streams, cells per stream)`` of llama.cpp's KV cache for these arguments."""
    n_ctx = a.n_ctx or n_ctx_train
    n_seq = a.n_parallel or 4
    if a.kv_unified:
        return 1, _pad(n_ctx, N_CTX_PAD)
    return n_seq, _pad(max(n_ctx // n_seq, 1), N_CTX_PAD)


@dataclass
class LlamaEstimate:
    """Bytes of one llama.cpp server: ``weights_total``/``kv_total`` as llama.cpp's load log reports
    them on any backend (every layer), ``weights_gpu``/``kv_gpu``/``compute_gpu`` on the card;
    ``k_bytes``/``v_bytes`` the K and V parts of ``kv_total``; ``recurrent_bytes`` hybrid state;
    ``n_ctx`` the context llama.cpp allocates (padded), ``problems`` what llama.cpp would refuse."""

    weights_total: int
    weights_gpu: int
    k_bytes: int
    v_bytes: int
    recurrent_bytes: int
    kv_gpu: int
    compute_gpu: int
    n_ctx: int
    problems: list[str] = field(default_factory=list)

    @property
    def kv_total(self) -> int:
        return self.k_bytes + self.v_bytes + self.recurrent_bytes

    @property
    def gpu_total(self) -> int:
        return self.weights_gpu + self.kv_gpu + self.compute_gpu


def compute_buffer_bound(h: dict[str, Any], a: LlamaArgs, n_kv: int) -> int:
    """A bound on llama.cpp's compute buffer (bytes) on the card, for ``n_kv`` cells per stream.

    The compute buffer holds the graph of one ubatch (``n_ubatch`` tokens), sized once by
    ``sched_reserve`` with every token an output (``llama-context.cpp`` ``graph_reserve``) and laid out
    by ggml-alloc, which reuses a tensor's memory once its last reader is done. The largest live
    tensors, all F32 (``llama-graph.cpp``): the logits ``n_vocab × n_ubatch``; without flash attention
    the attention scores ``n_kv × n_ubatch × n_head`` (``build_attn_mha``: ``kq = ggml_mul_mat(k, q)``
    and its softmax); the FFN's ``gate``/``up``/``down`` ``n_ff × n_ubatch`` each; the residual stream
    and norms ``n_embd × n_ubatch`` a few times; with flash attention on a quantized cache, the K and
    V views cast to F16 (``n_kv × n_embd_kv``); the attention mask ``n_kv × n_ubatch`` (``build_attn_inp_kq_mask``,
    F16 with flash attention, F32 without: counted at 4 bytes). The sum of all of them at once is a bound ggml-alloc's
    reuse stays under; ``tests/unit/test_vram_llamacpp.py`` holds it above the CPU backend's
    measured buffer. The CUDA backend's own extra (cuBLAS workspace, the FA kernels' temporaries)
    is among what this module cannot predict."""
    n_layer = h["block_count"]
    n_head = max(_per_layer(h["head_count"], n_layer))
    n_kv_head = max(_per_layer(h["head_count_kv"], n_layer)) or 1
    n_embd = h["embedding_length"]
    ff = h.get("feed_forward_length") or 4 * n_embd
    n_ff = max(ff) if isinstance(ff, list) else ff
    ub = a.n_ubatch
    fa = a.flash_attn != "off" or a.cache_type_v not in ("f16", "f32", "bf16")
    logits = h["vocab_size"] * ub * 4
    scores = 0 if fa else 2 * n_kv * ub * n_head * 4
    ffn = 3 * n_ff * ub * 4
    stream = 6 * max(n_embd, n_head * h["key_length"]) * ub * 4
    casts = 2 * n_kv * n_kv_head * max(h["key_length"], h["value_length"]) * 2 if fa else 0
    mask = n_kv * ub * 4
    return logits + scores + ffn + stream + casts + mask


def llamacpp_estimate(h: dict[str, Any], a: LlamaArgs) -> LlamaEstimate:
    """Weights, KV cache and compute buffer of llama.cpp serving the GGUF whose header summary is
    ``h`` with arguments ``a`` (see the module doc for the formulas and their sources)."""
    n_layer = h["block_count"]
    problems = []
    fa_needed = a.cache_type_v not in ("f16", "f32", "bf16")
    if fa_needed and a.flash_attn == "off":
        problems.append(f"--cache-type-v {a.cache_type_v} needs flash attention; llama.cpp refuses it with "
                        "--flash-attn off (\"quantized V cache requires flash_attn\")")
    ngl = n_layer + 1 if a.n_gpu_layers is None else max(a.n_gpu_layers, 0)
    i_gpu_start = max(n_layer + 1 - ngl, 0)
    tb = h["tensor_bytes"]
    layers = tb["layers"]
    weights_total = sum(layers) + tb["input"] + tb["output"]
    weights_gpu = sum(layers[i_gpu_start:])
    if ngl >= 1:
        weights_gpu += tb["output"] + (tb["input"] if tb.get("tied_output") else 0)
    streams, cells = kv_cells(a, h.get("context_length") or 0)
    kinds = _layer_kinds(h)
    kv_heads = _per_layer(h["head_count_kv"], n_layer)
    k_bytes = v_bytes = rec = kv_gpu = 0
    for il, kind in enumerate(kinds):
        if kind == "recurrent":
            s = h["ssm"]
            r = (s["conv_kernel"] - 1) * (s["inner_size"] + 2 * s.get("group_count", 0) * s["state_size"])
            per_seq = (r + s["state_size"] * s["inner_size"]) * 4
            layer = per_seq * max(a.n_parallel or 4, 1)
            rec += layer
        else:
            c = cells
            if kind == "swa" and not a.swa_full:
                c = min(cells, _pad(h["sliding_window"] * (a.n_parallel or 4 if a.kv_unified else 1) + a.n_ubatch,
                                    N_CTX_PAD))
            kb = row_bytes(a.cache_type_k, kv_heads[il] * h["key_length"]) * c * streams
            vb = row_bytes(a.cache_type_v, kv_heads[il] * h["value_length"]) * c * streams
            k_bytes += kb
            v_bytes += vb
            layer = kb + vb
        if il >= i_gpu_start and a.kv_offload:
            kv_gpu += layer
    compute = compute_buffer_bound(h, a, cells) if ngl >= 1 else 0
    return LlamaEstimate(weights_total=weights_total, weights_gpu=weights_gpu, k_bytes=k_bytes, v_bytes=v_bytes,
                         recurrent_bytes=rec, kv_gpu=kv_gpu, compute_gpu=compute, n_ctx=streams * cells,
                         problems=problems)


def largest_llamacpp_ctx(h: dict[str, Any], a: LlamaArgs, budget_bytes: int) -> int:
    """The largest ``--ctx-size`` (a multiple of 256, llama.cpp's padding) whose estimate fits
    ``budget_bytes`` on the card; 0 when not even 256 tokens do."""
    from dataclasses import replace

    streams = 1 if a.kv_unified else (a.n_parallel or 4)
    step = N_CTX_PAD * streams

    return largest_fitting(lambda n: llamacpp_estimate(h, replace(a, n_ctx=n)).gpu_total <= budget_bytes, step)


def largest_fitting(fits: Any, step: int) -> int:
    """The largest multiple of ``step`` (tokens) for which ``fits(tokens)`` holds, 0 when ``step``
    does not fit; ``fits`` must be monotonic (more tokens never fit where fewer did not). Doubling,
    then bisection: O(log n) estimates, up to ``step`` × 2**24."""
    if not fits(step):
        return 0
    lo, hi = 1, 2
    while fits(hi * step) and hi < 1 << 24:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid * step) else (lo, mid)
    return lo * step


# ---------------------------------------------------------------------------------------------- vLLM


def hf_config_summary(config: dict[str, Any]) -> dict[str, Any]:
    """What the estimate needs of a Hugging Face ``config.json`` (a multimodal one's ``text_config``
    read as the model), a plain dict for the lock:

    ``model_type``, ``num_hidden_layers``, ``layer_types`` (one of ``full_attention``,
    ``sliding_attention``, ``linear_attention`` per layer: the config's own list, else every
    ``full_attention_interval``-th layer full and the rest linear, else all full), ``num_key_value_heads``,
    ``head_dim`` (else ``hidden_size / num_attention_heads``), ``dtype`` (``dtype`` or ``torch_dtype``),
    ``sliding_window``, ``max_position_embeddings``, and for linear-attention layers ``linear``:
    ``{conv_kernel, num_key_heads, num_value_heads, key_head_dim, value_head_dim}`` and
    ``mamba_ssm_dtype``. Raises ``ValueError`` naming the keys missing."""
    text = dict(config.get("text_config") or {})
    merged = {**{k: v for k, v in config.items() if k != "text_config"}, **text}
    missing = [k for k in ("num_hidden_layers", "num_attention_heads") if k not in merged]
    if missing:
        raise ValueError(f"config.json has no {', '.join(missing)}: cannot size its KV cache")
    n = int(merged["num_hidden_layers"])
    types = merged.get("layer_types")
    if not types:
        interval = merged.get("full_attention_interval")
        types = [("full_attention" if (i + 1) % interval == 0 else "linear_attention") for i in range(n)] \
            if interval else ["full_attention"] * n
    types = ["sliding_attention" if t in ("sliding_attention", "sliding_window") else t for t in types][:n]
    heads = int(merged["num_attention_heads"])
    out: dict[str, Any] = {
        "model_type": str(merged.get("model_type", "")),
        "num_hidden_layers": n,
        "layer_types": types,
        "num_key_value_heads": int(merged.get("num_key_value_heads") or heads),
        "head_dim": int(merged.get("head_dim") or int(merged.get("hidden_size", 0)) // heads),
        "dtype": str(merged.get("dtype") or merged.get("torch_dtype") or "bfloat16"),
        "max_position_embeddings": int(merged.get("max_position_embeddings") or 0),
    }
    if merged.get("sliding_window") and "sliding_attention" in types:
        out["sliding_window"] = int(merged["sliding_window"])
    if "linear_attention" in types:
        keys = {"conv_kernel": "linear_conv_kernel_dim", "num_key_heads": "linear_num_key_heads",
                "num_value_heads": "linear_num_value_heads", "key_head_dim": "linear_key_head_dim",
                "value_head_dim": "linear_value_head_dim"}
        absent = [v for v in keys.values() if v not in merged]
        if absent:
            raise ValueError(f"config.json has linear-attention layers but no {', '.join(absent)}")
        out["linear"] = {k: int(merged[v]) for k, v in keys.items()}
        out["mamba_ssm_dtype"] = str(merged.get("mamba_ssm_dtype") or out["dtype"])
    return out


def _dtype_bytes(name: str) -> int:
    try:
        return _TORCH_BYTES[name.removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}") from None


def vllm_pages(c: dict[str, Any], kv_cache_dtype: str = "auto", num_spec: int = 0,
               block_size: int = VLLM_BLOCK) -> dict[str, int]:
    """vLLM's page sizes for a model (:func:`hf_config_summary` ``c``): ``{"block_size": tokens,
    "attn_page": bytes of one block of one attention layer, "mamba_page": bytes of one
    linear-attention state (padded to the attention page in a hybrid), "mamba_page_raw"}``.

    ``kv_cache_dtype`` ``auto`` = the model's dtype, ``fp8*`` = 1 byte; ``num_spec`` the speculative
    tokens (they widen the conv state)."""
    kv_bytes = _dtype_bytes(c["dtype"] if kv_cache_dtype == "auto" else kv_cache_dtype)
    per_token = 2 * c["num_key_value_heads"] * c["head_dim"] * kv_bytes
    mamba = 0
    if "linear" in c:
        lin = c["linear"]
        conv_dim = 2 * lin["num_key_heads"] * lin["key_head_dim"] + lin["num_value_heads"] * lin["value_head_dim"]
        conv = (lin["conv_kernel"] - 1 + num_spec) * conv_dim * _dtype_bytes(c["dtype"])
        temporal = lin["num_value_heads"] * lin["value_head_dim"] * lin["key_head_dim"] * _dtype_bytes(c["mamba_ssm_dtype"])
        mamba = conv + temporal
        if "full_attention" in c["layer_types"] or "sliding_attention" in c["layer_types"]:
            block_size = max(block_size, VLLM_BLOCK * math.ceil(mamba / (VLLM_BLOCK * per_token)))
    attn_page = block_size * per_token
    padded = max(mamba, attn_page) if mamba and attn_page >= mamba else mamba
    return {"block_size": block_size, "attn_page": attn_page, "mamba_page": padded, "mamba_page_raw": mamba}


def vllm_kv_bytes(c: dict[str, Any], max_model_len: int, kv_cache_dtype: str = "auto", num_spec: int = 0,
                  prefix_cache: bool = False) -> int:
    """KV cache (and linear-attention state) vLLM needs for one request of ``max_model_len`` tokens:
    the sum of each layer's ``max_memory_usage_bytes`` (``check_enough_kv_cache_memory``). With
    ``prefix_cache`` a hybrid model's Mamba cache runs in ``align`` mode (vLLM's default for hybrid
    models with prefix caching on), one more state page per request: ``page × (2 + num_spec)``."""
    p = vllm_pages(c, kv_cache_dtype, num_spec)
    bs = p["block_size"]
    total = 0
    for kind in c["layer_types"]:
        if kind == "full_attention":
            total += -(-max_model_len // bs) * p["attn_page"]
        elif kind == "sliding_attention":
            tokens = min(c.get("sliding_window", max_model_len) - 1 + VLLM_BATCHED_TOKENS, max_model_len)
            total += (-(-tokens // bs) + 1) * p["attn_page"]
        else:
            total += p["mamba_page"] * ((2 if prefix_cache else 1) + num_spec)
    return total


@dataclass
class VllmEstimate:
    """Bytes of vLLM serving a model (+ drafter): ``weights`` (the safetensors' sizes), ``kv`` at
    ``max_model_len`` (target and drafter), ``budget`` (``gpu_memory_utilization × card``)."""

    weights: int
    kv: int
    budget: int

    @property
    def total(self) -> int:
        return self.weights + self.kv


def vllm_estimate(models: list[tuple[dict[str, Any], int]], max_model_len: int, budget: int,
                  kv_cache_dtype: str = "auto", num_spec: int = 0, prefix_cache: bool = False) -> VllmEstimate:
    """``models``: ``(config summary, safetensors bytes)`` of the target and its drafter."""
    weights = sum(w for _, w in models)
    kv = sum(vllm_kv_bytes(c, max_model_len, kv_cache_dtype, num_spec, prefix_cache) for c, _ in models)
    return VllmEstimate(weights=weights, kv=kv, budget=budget)


def largest_vllm_len(models: list[tuple[dict[str, Any], int]], budget: int, kv_cache_dtype: str = "auto",
                     num_spec: int = 0, step: int = 1024, prefix_cache: bool = False) -> int:
    """The largest ``max_model_len`` (a multiple of ``step``) whose weights + KV cache fit ``budget``."""
    return largest_fitting(
        lambda n: vllm_estimate(models, n, budget, kv_cache_dtype, num_spec, prefix_cache).total <= budget, step)


# ------------------------------------------------------------------------------------ the members


@dataclass
class MemberFit:
    """One member's estimate beside its declared figure: ``member`` id, ``declared_gib`` (its
    ``vram_gib``, or HyperQwen's ``gpu_memory_utilization × gpu_vram_gib``), ``estimate_gib`` (None
    when the lock has nothing to go on: ``detail`` says why), ``detail`` (the parts), ``error`` (it
    cannot fit the card: exit 2, naming the largest context that would) and ``warning`` (the
    declared figure is below the estimate)."""

    member: str
    declared_gib: float | None
    estimate_gib: float | None
    detail: str
    error: str | None = None
    warning: str | None = None


def _fmt_tokens(n: int) -> str:
    return f"{n:,} tokens" if n else "not even the smallest context"


def _llamacpp_fit(mid: str, key: str, server: Any, entry: dict[str, Any] | None, declared: float | None,
                  usable: float) -> MemberFit:
    header = ((entry or {}).get("gguf") or {}).get(server.model_file or "")
    if header is None:
        return MemberFit(mid, declared, None, f"no GGUF header for {server.model_file!r} in the lock "
                                              f"(re-lock with `{hints.command('models lock')}`)")
    try:
        from rigkit.paths import PLACEHOLDER_PREFIX

        args = parse_llama_args([a for a in (server.args or []) if PLACEHOLDER_PREFIX not in a], server.ctx_size)
        est = llamacpp_estimate(header, args)
    except ValueError as exc:
        return MemberFit(mid, declared, None, f"cannot estimate: {exc}", error=f"{key}.args: {exc}")
    n_ctx = args.n_ctx or header.get("context_length") or 0
    detail = (f"{size(est.weights_gpu)} weights + {size(est.kv_gpu)} KV cache at {n_ctx:,} tokens "
              f"({args.cache_type_k}/{args.cache_type_v}, {'unified' if args.kv_unified else f'{args.n_parallel} slots'})"
              f" + ≤{size(est.compute_gpu)} compute buffer")
    fit = MemberFit(mid, declared, round(gib(est.gpu_total), 3), detail)
    if est.problems:
        fit.error = f"{key}.args: " + "; ".join(est.problems)
    elif gib(est.gpu_total) > usable:
        most = largest_llamacpp_ctx(header, args, int(usable * GIB))
        fit.error = (f"{key}.ctx_size: {mid} --ctx-size {n_ctx} needs {size(est.kv_gpu)} of KV cache beside "
                     f"{size(est.weights_gpu)} of weights and ≤{size(est.compute_gpu)} of compute buffer; "
                     f"the card has {usable:g} GiB (gpu_vram_gib − vram_reserve_gib): at most {_fmt_tokens(most)}")
    elif declared is not None and declared < fit.estimate_gib:
        fit.warning = (f"llama_swap.members.{mid}.vram_gib: {declared:g} GiB declared, below the estimate "
                       f"{fit.estimate_gib:g} GiB ({detail}); the co-load check uses the estimate")
    return fit


def _hyperqwen_fit(mid: str, spec: Any, models: dict[str, Any], declared: float) -> MemberFit:
    hq = spec.hyperqwen
    target = models.get("hyperqwen") or {}
    draft_on = hq.spec == "dflash2" and hq.dflash2_drafter
    parts = [("hyperqwen", target)] + ([("hyperqwen-dflash2", models.get("hyperqwen-dflash2") or {})] if draft_on else [])
    missing = [name for name, e in parts if not e.get("config")]
    if missing:
        return MemberFit(mid, declared, None, f"no config.json summary for {', '.join(missing)} in the lock "
                                              f"(re-lock with `{hints.command('models lock')}`)")
    pairs = [(e["config"], sum(f["size"] for f in e["files"] if f["path"].endswith(".safetensors"))) for _, e in parts]
    num_spec = hq.dflash_tokens if draft_on else 0
    budget = int(hq.gpu_memory_utilization * spec.gpu_vram_gib * GIB)
    # The stack's KV cache dtype is its own (its KV knob; "CTX huge 240k with the KVarN cache",
    # notes/hyperqwen.md): the refusal is judged at the smallest cache vLLM offers (fp8, 1 byte),
    # so it fires only when no KV setting could fit; the model dtype's figure is shown beside it.
    pc = hq.prefix_cache
    est = vllm_estimate(pairs, hq.max_model_len, budget, kv_cache_dtype="fp8", num_spec=num_spec, prefix_cache=pc)
    full = vllm_estimate(pairs, hq.max_model_len, budget, kv_cache_dtype="auto", num_spec=num_spec, prefix_cache=pc)
    detail = (f"{size(est.weights)} weights{' (+ drafter)' if draft_on else ''} + {size(est.kv)} KV cache/state at "
              f"max_model_len {hq.max_model_len:,} with an fp8 KV cache ({size(full.kv)} at "
              f"{pairs[0][0]['dtype']}); vLLM takes gpu_memory_utilization {hq.gpu_memory_utilization} × "
              f"{spec.gpu_vram_gib:g} GiB = {size(budget)}")
    fit = MemberFit(mid, declared, round(gib(est.total), 3), detail)
    if est.total > budget:
        most = largest_vllm_len(pairs, budget, kv_cache_dtype="fp8", num_spec=num_spec, prefix_cache=pc)
        fit.error = (f"hyperqwen.max_model_len: {hq.max_model_len} needs {size(est.kv)} of KV cache (fp8) beside "
                     f"{size(est.weights)} of weights; vLLM gets gpu_memory_utilization "
                     f"{hq.gpu_memory_utilization} × {spec.gpu_vram_gib:g} GiB = {size(budget)}, before "
                     f"activations: at most {_fmt_tokens(most)}")
    return fit


def member_fits(spec: Any, lock: dict[str, Any]) -> list[MemberFit]:
    """Each llama-swap member rigkit derives (``service`` set, or an operator's declared with
    ``llamacpp``: the same estimate as Strata's) estimated from the lock's metadata, beside its declared
    figure; an operator's own member with its own ``cmd`` is not estimated."""
    from rigkit.spec.members import hyperqwen_vram_gib, own_server

    models = lock.get("models", {})
    usable = spec.gpu_vram_gib - spec.vram_reserve_gib
    out = []
    for mid, m in spec.llama_swap.members.items():
        if m.service in ("strata", "gguf_baseline"):
            server = getattr(spec, m.service)
            out.append(_llamacpp_fit(mid, m.service, server, models.get(server.model), m.vram_gib, usable))
        elif m.service == "hyperqwen":
            out.append(_hyperqwen_fit(mid, spec, models, m.vram_gib or hyperqwen_vram_gib(spec)))
        elif m.llamacpp is not None and not m.cmd:
            server = own_server(mid, spec)
            out.append(_llamacpp_fit(mid, f"llama_swap.members.{mid}.llamacpp", server, models.get(server.model),
                                     m.vram_gib, usable))
    return out
