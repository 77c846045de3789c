"""``rigkit models lock`` records what the VRAM estimate needs (issue 46): each GGUF file's header,
read from the hub by range requests — never the whole file — and each model's config.json summary."""

from __future__ import annotations

import re

import pytest

from tests.hub import repos

from .helpers import TOKEN, bridge_path, model_sources, repo_bytes


def test_the_lock_carries_each_gguf_header_read_by_ranges_only(hub, tmp_path):
    import gguf

    from rigkit.lockfile.document import LockDocument
    from rigkit.lockfile.hub import lock_models
    from tests.unit.gguf_py_oracle import gguf_py_summary

    result, _ = lock_models(model_sources(), endpoint=hub.endpoint, token=TOKEN)
    LockDocument.model_validate(result)
    for name, repo, path in (("gguf-baseline", repos.GGUF, "Qwen3.8-27B-Q4_K_M.gguf"),
                             ("strata", repos.STRATA, "strata-coder-Q4_K_M.gguf")):
        data = repo_bytes(hub, repo, path)
        local = tmp_path / path
        local.write_bytes(data)
        entry = result["models"][name]
        assert entry["gguf"] == {path: gguf_py_summary(gguf.GGUFReader(str(local)))}
        # every byte request for the file's content was a range, and together far less than the file
        gets = [r for r in hub.hub.requests("GET") if r["path"] == bridge_path(hub, repo, path)]
        assert gets and all(r["range"] and r["status"] == 206 for r in gets), gets
        fetched = sum(int(b) - int(a) + 1 for r in gets for a, b in [re.match(r"bytes=(\d+)-(\d+)", r["range"]).groups()])
        # one range: the first 64 KiB hold the whole header
        assert len(gets) == 1 and fetched == entry["header_bytes_fetched"] == 65536 < len(data) == entry["total_bytes"]
        assert entry["gguf"][path]["header_bytes"] <= fetched
    # the models without a GGUF carry their config.json summary instead
    assert result["models"]["hyperqwen"]["config"]["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
    assert result["models"]["hyperqwen-dflash2"]["config"]["layer_types"] == ["full_attention"]
    assert "gguf" not in result["models"]["hyperqwen"]


def test_the_sandbox_lock_is_what_models_lock_writes_against_the_hub_fixture(lock):
    """inventory/sandbox.lock.json is `rigkit models lock` of the sandbox's models (the spec's
    defaults pointed at tests/hub, :func:`model_sources`) against the test hub, its models section
    entry for entry: re-lock after changing tests/hub/repos.py or what the lock records."""
    import json
    from pathlib import Path

    sandbox = Path(__file__).resolve().parents[2] / "inventory" / "sandbox.lock.json"
    assert json.loads(sandbox.read_text())["models"] == lock["models"]
    assert set(lock["models"]["strata"]["gguf"]) == {"strata-coder-Q4_K_M.gguf"}
    assert lock["models"]["hyperqwen"]["config"]["linear"]["conv_kernel"] == 4


@pytest.mark.parametrize("bad", [b"PK\x03\x04" + bytes(100), b"GGUF\x09\x00\x00\x00" + bytes(100)])
def test_a_gguf_file_whose_header_cannot_be_read_fails_the_lock_naming_it(bad):
    from rigkit.spec.gguf_header import HeaderError, read_header

    with pytest.raises(HeaderError, match=r"at byte 0, magic: not a GGUF file|at byte 4, version: .*version 9"):
        read_header(lambda a, b: bad[a:b + 1], len(bad))
