"""``KEY=VALUE`` env files, one reader and one value writer (:func:`dotenv_value`, the renderer's and the
spec check's): the secret ``hyperqwen.env`` (``VLLM_API_KEY``), ``hf.env``
(``HF_TOKEN``) and compose's ``.env``. Format as docker compose reads it: ``#`` comment lines,
blank lines, an optional ``export``, a value optionally in single or double quotes."""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

_DOTENV_BARE = re.compile(r"^[A-Za-z0-9_./:,+@%=-]+$")


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


def dotenv_value(value: str) -> str:
    """A ``.env`` value written so that docker compose (compose-go's dotenv) reads back exactly
    ``value``, as does :func:`parse_env_text`: bare when it is only letters, digits and
    ``_ . / : , + @ % = -``; in single quotes (literal: no ``$`` interpolation, no ``#``
    comment, no escapes) otherwise; in double quotes when it holds a ``'`` but nothing double
    quotes would reinterpret. Raises ``ValueError`` (saying why) for a value no quoting carries:
    a control character, or a ``'`` together with ``"``, ``\\`` or ``$``."""
    if any(unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs") for ch in value):
        raise ValueError("a control character (a newline would start a new variable) cannot be written into .env")
    if _DOTENV_BARE.match(value):
        return value
    if "'" not in value:
        return f"'{value}'"
    if not any(ch in value for ch in '"\\$'):
        return f'"{value}"'
    raise ValueError("a value holding ' together with \", \\ or $ cannot be quoted so that compose reads it back "
                     "unchanged")
