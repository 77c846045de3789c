"""Where secrets come from — named, never shown (DESIGN.md "Secrets").

The HF token comes from ``HF_TOKEN`` or the file hf itself uses on the control machine, and
lands only in ``/etc/rigkit/secrets/hf.env`` on the host. Messages name a secret's key and its
source, never its value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def hf_token_file(env: Mapping[str, str] | None = None) -> Path:
    """The token file huggingface-hub reads: ``$HF_TOKEN_PATH``, else ``$HF_HOME/token``, else
    ``$XDG_CACHE_HOME/huggingface/token``, else ``~/.cache/huggingface/token``
    (huggingface_hub ``constants.HF_TOKEN_PATH``)."""
    env = os.environ if env is None else env
    if env.get("HF_TOKEN_PATH"):
        return Path(env["HF_TOKEN_PATH"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "token"
    cache = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "huggingface" / "token"


def hf_token_source(env: Mapping[str, str] | None = None) -> str | None:
    """Where the HF token would come from, as words (``"environment variable HF_TOKEN"`` or
    ``"file /root/.cache/huggingface/token"``), or None when there is none. Reads the file's
    size only, never prints or returns the value."""
    env = os.environ if env is None else env
    if env.get("HF_TOKEN", "").strip():
        return "environment variable HF_TOKEN"
    path = hf_token_file(env)
    try:
        if path.is_file() and path.stat().st_size > 0:
            return f"file {path}"
    except OSError:
        return None
    return None


def read_hf_token(env: Mapping[str, str] | None = None) -> str | None:
    """The HF token's value for the deploy to install on the host, or None. Callers must wrap
    it (pyinfra ``HiddenValue``) before it reaches an operation."""
    env = os.environ if env is None else env
    if env.get("HF_TOKEN", "").strip():
        return env["HF_TOKEN"].strip()
    path = hf_token_file(env)
    if path.is_file():
        value = path.read_text().strip()
        return value or None
    return None
