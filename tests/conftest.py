"""Shared test settings: the llama-swap schema URL points at the copy beside the checkout
(DESIGN.md "Testing with real parts"; the sha256 is still checked), and the cache is per run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("RIGKIT_SHARED", ROOT.parent / "shared"))
SCHEMA_COPY = SHARED / "data" / "llama-swap" / "config-schema.json"


@pytest.fixture(scope="session", autouse=True)
def _schema_url_and_cache(tmp_path_factory):
    if not os.environ.get("RIGKIT_LLAMA_SWAP_SCHEMA_URL") and SCHEMA_COPY.is_file():
        os.environ["RIGKIT_LLAMA_SWAP_SCHEMA_URL"] = SCHEMA_COPY.as_uri()
    os.environ.setdefault("RIGKIT_CACHE", str(tmp_path_factory.mktemp("rigkit-cache")))
    yield
