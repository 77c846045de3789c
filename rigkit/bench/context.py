"""The context that makes two bench runs comparable, and the target being measured.

Sources: llama.cpp server README (``GET /props``: ``build_info``, ``model_path``,
``model_ftype``, ``default_generation_settings.n_ctx``; ``POST /tokenize``), vLLM's OpenAI
server (``GET /version``, ``GET /v1/models`` with ``max_model_len``, ``POST /tokenize``
answering ``count``), ``nvidia-smi --query-gpu=name,driver_version,power.limit,memory.total
--format=csv,noheader,nounits`` (W, MiB).

A baseline is compared only when every field of :data:`CONTEXT_KEYS` is known and equal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import requests

from rigkit.common.jsonfile import load_named

CONTEXT_KEYS = ("gpu", "driver", "power_limit_w", "engine", "engine_version", "model",
                "quantization", "speculative")
_QUANT = re.compile(r"(W\d+A\d+|I?Q\d_K(?:_[SML])?|IQ\d_[A-Z]+|Q\d_\d|BF16|F16|F32|FP8|AWQ|"
                    r"GPTQ|INT8|INT4)", re.IGNORECASE)


@dataclass
class Target:
    """Where to send requests.

    + chat_url: the full ``…/v1/chat/completions`` URL.
    + aux_base: base URL for ``/health``, ``/props``, ``/version``, ``/metrics``,
      ``/tokenize``, ``/v1/models`` (llama-swap: ``/upstream/<member>``).
    + model: the ``model`` field to send (None: leave it out).
    + label: what to show the operator (never holds the key).
    + api_key: sent as ``Authorization: Bearer``; excluded from ``repr``.
    + swap_base: llama-swap's base URL when the target is one of its members (``model`` names it):
      its ``/running`` is read before each request, so a request that carries a swap is named
      (None: not behind llama-swap).
    """

    chat_url: str
    aux_base: str
    label: str
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    swap_base: str | None = None

    def headers(self) -> dict[str, str]:
        """HTTP headers for side requests (the bearer key when there is one)."""
        from rigkit.bench.llama_swap import headers

        return headers(self.api_key)


def _get_json(url: str, headers: dict[str, str], timeout_s: float = 5.0) -> Any | None:
    try:
        resp = requests.get(url, headers=headers, timeout=timeout_s)
    except requests.RequestException:
        return None
    if resp.status_code != 200:
        return None
    try:
        return resp.json()
    except ValueError:
        return None


def quantization_from(*names: str | None) -> str | None:
    """First quantization tag (``W4A16``, ``Q4_K_M``, ``F32``…) found in ``names``."""
    for n in names:
        if n:
            m = _QUANT.search(n)
            if m:
                return m.group(1).upper()
    return None


def probe_engine(target: Target) -> dict[str, Any]:
    """Ask the server what it is. Returns ``engine`` (``llama.cpp`` / ``vllm`` / None),
    ``engine_version``, ``model`` (served id), ``model_path``, ``quantization``,
    ``n_ctx`` (tokens one request may use: llama.cpp's ``/props``
    ``default_generation_settings.n_ctx``, the slot's context — ``--ctx-size`` divided by the
    slots unless the KV cache is unified, capped at the model's training context; vLLM's
    ``max_model_len``), ``n_params`` (llama.cpp's ``/v1/models`` ``meta.n_params``),
    ``speculative``; unknown values are None. Never raises."""
    h = target.headers()
    base = target.aux_base.rstrip("/")
    out: dict[str, Any] = {"engine": None, "engine_version": None, "model": None,
                           "model_path": None, "quantization": None, "n_ctx": None,
                           "n_params": None, "speculative": None}
    models = _get_json(base + "/v1/models", h)
    first: dict[str, Any] = {}
    if isinstance(models, dict) and models.get("data"):
        first = models["data"][0] or {}
        out["model"] = first.get("id")
        meta = first.get("meta") if isinstance(first.get("meta"), dict) else {}
        out["n_ctx"] = first.get("max_model_len") or meta.get("n_ctx")
        if isinstance(meta.get("n_params"), int):
            out["n_params"] = meta["n_params"]
    props = _get_json(base + "/props", h)
    if isinstance(props, dict) and ("build_info" in props or "model_path" in props):
        out["engine"] = "llama.cpp"
        out["engine_version"] = props.get("build_info")
        out["model_path"] = props.get("model_path")
        dgs = props.get("default_generation_settings") or {}
        out["n_ctx"] = dgs.get("n_ctx") or out["n_ctx"]
        spec = (dgs.get("params") or {}).get("speculative.types")
        out["speculative"] = spec if spec else None
        ftype = (props.get("model_ftype") or "").replace("all ", "")
        out["quantization"] = quantization_from(out["model_path"], ftype)
    else:
        version = _get_json(base + "/version", h)
        if isinstance(version, dict) and "version" in version:
            out["engine"] = "vllm"
            out["engine_version"] = version["version"]
            out["model_path"] = first.get("root")
            out["quantization"] = quantization_from(first.get("root"), out["model"])
    return out


def measure_chars_per_token(target: Target, sample: str) -> tuple[float, str]:
    """Characters per token of the server's tokenizer on ``sample``, from ``POST /tokenize``
    (the body carries llama.cpp's ``content`` and vLLM's ``prompt``/``model``). Returns
    ``(ratio, "tokenize")`` or ``(4.0, "assumed")`` when the endpoint is missing."""
    body = {"content": sample, "prompt": sample}
    if target.model:
        body["model"] = target.model
    try:
        resp = requests.post(target.aux_base.rstrip("/") + "/tokenize", json=body,
                             headers=target.headers(), timeout=10)
        obj = resp.json() if resp.status_code == 200 else None
    except (requests.RequestException, ValueError):
        obj = None
    if isinstance(obj, dict):
        n = obj.get("count") or len(obj.get("tokens") or [])
        if n:
            return len(sample) / n, "tokenize"
    return 4.0, "assumed"


def load_context_file(path: str) -> dict[str, Any]:
    """Read a ``--context`` JSON file: an object whose keys override the measured context
    (e.g. ``{"gpu": "NVIDIA GeForce RTX 3090", "driver": "610.57", "power_limit_w": 420}``).
    Raises ValueError (message names the file) when it is not a JSON object."""
    obj = load_named(path, "--context")
    if not isinstance(obj, dict):
        raise ValueError(f"--context {path}: must be a JSON object")
    return obj


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) or isinstance(b, (int, float)):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return str(a) == str(b)


def comparable(current: dict[str, Any], baseline: dict[str, Any]) -> tuple[bool, str]:
    """Whether a baseline context matches: ``(True, "")`` or ``(False, reason)`` where
    reason is ``context unknown: k1, k2`` or ``context differs: k current vs baseline``."""
    unknown = [k for k in CONTEXT_KEYS if current.get(k) in (None, "")
               or baseline.get(k) in (None, "")]
    if unknown:
        return False, "context unknown: " + ", ".join(unknown)
    diff = [f"{k} {current[k]!s} vs {baseline[k]!s}" for k in CONTEXT_KEYS
            if not _same(current[k], baseline[k])]
    if diff:
        return False, "context differs: " + "; ".join(diff)
    return True, ""
