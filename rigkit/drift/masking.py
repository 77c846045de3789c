"""Secrets out of drift's output: :func:`mask` for one string, :func:`masked` for findings — the one
place drift's findings are masked, where they leave the check (:func:`rigkit.drift.run.check`,
before anything prints or serialises them); :mod:`rigkit.drift.compare` stays pure and masks
nothing. ``rigkit generations --diff`` masks its diffs with :func:`mask` too."""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

_SECRET_ASSIGN = re.compile(
    r"(?i)(\b[A-Z0-9_.-]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|APIKEY)[A-Z0-9_.-]*[\"']?\s*[=:]\s*[\"']?)([^\s\"',}]+)")
_SECRET_FLAG = re.compile(r"(?i)(--(?:api-key|token|hf-token|password)[= ])(\S+)")
_BEARER = re.compile(r"(?i)(\bBearer\s+)(\S+)")


def mask(text: str | None, secrets: list[str] | tuple[str, ...] = ()) -> str | None:
    """``text`` with secret values replaced by ``***``: each known value in ``secrets`` (e.g. the
    HF token at hand), then the value of any assignment (``KEY=v``, ``key: v``) whose name the spec
    calls a secret's (:func:`rigkit.spec.secrets.secret_name`: ``HF_TOKEN``, ``VLLM_API_KEY``, not
    ``DFLASH_TOKENS`` or ``max_tokens``), ``--api-key v``/``--token v`` flags, ``Bearer v`` and
    hf-token-shaped words (:data:`rigkit.spec.secrets.HF_TOKEN_RE`, the one shape). An ``${...}``
    reference is kept (it names, not holds, a secret)."""
    from rigkit.spec.secrets import HF_TOKEN_RE, secret_name

    if text is None:
        return None
    for value in secrets:
        if value and len(value) >= 4:
            text = text.replace(value, MASK)

    def keep_refs(m: re.Match) -> str:
        value = m.group(2)
        if value.startswith("${") or value.startswith("$") or value == MASK:
            return m.group(0)
        return m.group(1) + MASK

    def keep_named(m: re.Match) -> str:
        name = m.group(1).rstrip(" \t\"'=:")
        return keep_refs(m) if secret_name(name) else m.group(0)

    text = _SECRET_ASSIGN.sub(keep_named, text)
    text = _SECRET_FLAG.sub(keep_refs, text)
    text = _BEARER.sub(keep_refs, text)
    return HF_TOKEN_RE.sub(MASK, text)


def masked(findings: list[Any], secrets: list[str] | tuple[str, ...] = ()) -> list[Any]:
    """``findings`` (:class:`rigkit.drift.compare.Finding`) with :func:`mask` applied to each string
    they carry (``item``, ``declared``, ``actual``, ``diff``); changed in place and returned."""
    for f in findings:
        f.item = mask(f.item, secrets)
        f.declared = mask(f.declared, secrets)
        f.actual = mask(f.actual, secrets)
        f.diff = mask(f.diff, secrets)
    return findings
