"""``KEY=VALUE`` env files, one reader: the secret ``hyperqwen.env`` (``VLLM_API_KEY``), ``hf.env``
(``HF_TOKEN``) and compose's ``.env``. Format as docker compose reads it: ``#`` comment lines,
blank lines, an optional ``export``, a value optionally in single or double quotes."""

from __future__ import annotations

import os
from pathlib import Path


def parse_env_text(text: str) -> dict[str, str]:
    """``{KEY: value}`` from env-file text (quotes stripped, comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        if key.startswith("export "):
            key = key[len("export "):].strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key] = value
    return out


def read_env_file(path: str | os.PathLike) -> dict[str, str]:
    """:func:`parse_env_text` of the file at ``path``; ``{}`` when it cannot be read."""
    try:
        return parse_env_text(Path(path).read_text())
    except OSError:
        return {}


def read_value(path: str | os.PathLike, key: str) -> str | None:
    """One key of an env file, or None when the file or the key is missing or the value empty.
    Callers never print the value of a secret."""
    return read_env_file(path).get(key) or None
