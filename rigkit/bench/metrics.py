"""vLLM's speculative-decoding counters from ``/metrics`` (Prometheus text format).

Source: vLLM ``docs/features/speculative_decoding/acceptance_metrics.md`` and
``vllm/benchmarks/serve.py`` (``fetch_spec_decode_metrics``): scrape before and after a
workload, sum each ``vllm:spec_decode_*_total`` counter over its label sets, difference them.

- acceptance length = 1 + Δaccepted / Δdrafts (tokens emitted per verify step, bonus included)
- acceptance rate   = Δaccepted / Δdraft_tokens
"""

from __future__ import annotations

import re
from typing import Any

import requests

COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_counters(text: str) -> dict[str, float]:
    """Sum the :data:`COUNTERS` over label sets in a Prometheus exposition ``text``.
    Returns ``{key: value}`` for the counters present (missing series are left out)."""
    wanted = {v: k for k, v in COUNTERS.items()}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if not m or m.group(1) not in wanted:
            continue
        try:
            val = float(m.group(3))
        except ValueError:
            continue
        key = wanted[m.group(1)]
        out[key] = out.get(key, 0.0) + val
    return out


def scrape(base_url: str, headers: dict[str, str] | None = None,
           timeout_s: float = 5.0) -> tuple[dict[str, float] | None, str | None]:
    """GET ``base_url/metrics``; return ``(counters, None)`` or ``(None, why skipped)``.
    Never raises: an unreachable or non-vLLM endpoint is a skip, not an error."""
    try:
        resp = requests.get(base_url.rstrip("/") + "/metrics", headers=headers or {},
                            timeout=timeout_s)
    except requests.RequestException as exc:
        return None, f"/metrics unreachable ({type(exc).__name__})"
    if resp.status_code != 200:
        return None, f"/metrics answered HTTP {resp.status_code}"
    counters = parse_counters(resp.text)
    if "drafts" not in counters or "accepted" not in counters:
        return None, "/metrics has no vllm:spec_decode counters"
    return counters, None


def spec_delta(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any] | None:
    """Acceptance figures for the interval between two scrapes, or None when either is
    missing or no drafts happened. Keys: ``drafts``, ``draft_tokens``, ``accepted``,
    ``acceptance_length`` (tokens per verify step), ``acceptance_rate`` (0–1)."""
    if not before or not after:
        return None
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}
    if d["drafts"] <= 0:
        return None
    return {
        "drafts": int(d["drafts"]), "draft_tokens": int(d["draft_tokens"]),
        "accepted": int(d["accepted"]),
        "acceptance_length": round(1 + d["accepted"] / d["drafts"], 3),
        "acceptance_rate": round(d["accepted"] / d["draft_tokens"], 4) if d["draft_tokens"] else None,
    }
