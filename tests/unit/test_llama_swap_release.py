"""The llama-swap 250 build for the sandbox (tests/harness/llama_swap_release.py) trusts only the
pinned vendored tarball: a tarball whose sha256 is not the vendored README's is refused before
anything is extracted, and no later source is tried after it; a missing tarball is an ordinary
error that names the path. No Go build runs here (the build itself is proven by every test that
starts the binary, tests/unit/test_llama_swap_real.py)."""
from __future__ import annotations

import importlib.util
import io
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("llama_swap_release", ROOT / "tests/harness/llama_swap_release.py")
rel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rel)


def _tarball(path: Path) -> Path:
    data = b"module github.com/mostlygeek/llama-swap\n"
    with tarfile.open(path, "w:gz") as tf:
        ti = tarfile.TarInfo(f"{rel.SRC_NAME}/go.mod")
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    return path


def test_a_tarball_with_another_sha256_is_refused_naming_both_digests(tmp_path):
    bad = _tarball(tmp_path / "llama-swap-60226b63776e.tar.gz")
    with pytest.raises(rel.Tampered) as e:
        rel.build_from_vendored("go", bad, tmp_path)
    assert str(bad) in str(e.value) and rel.SRC_SHA256 in str(e.value) and "refusing" in str(e.value)
    assert not (tmp_path / rel.SRC_NAME).exists() and not (tmp_path / "llama-swap").exists()


def test_a_missing_tarball_names_the_path_and_the_variable(tmp_path):
    with pytest.raises(RuntimeError, match="no such file.*RIGKIT_LLAMA_SWAP_SRC"):
        rel.build_from_vendored("go", tmp_path / "absent.tar.gz", tmp_path)


def test_a_tampered_tarball_stops_the_build_before_any_later_source(tmp_path, monkeypatch):
    bad = _tarball(tmp_path / "bad.tar.gz")
    tried = []
    monkeypatch.setenv("RIGKIT_HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RIGKIT_LLAMA_SWAP_SRC", str(bad))
    monkeypatch.setenv("RIGKIT_LLAMA_SWAP_GIT", str(tmp_path / "upstream.git"))
    monkeypatch.setattr(rel, "build_key", lambda go: "k")
    monkeypatch.setattr(rel, "go_binary", lambda: "go")

    def refused_by_the_proxy(go, out):
        tried.append("proxy")
        raise RuntimeError("403 Forbidden: This module version is not available")

    monkeypatch.setattr(rel, "build_from_proxy", refused_by_the_proxy)
    monkeypatch.setattr(rel, "build_from_git", lambda *a: tried.append("git"))
    with pytest.raises(RuntimeError) as e:
        rel.binary_dir()
    lines = str(e.value).splitlines()
    assert tried == ["proxy"] and len(lines) == 2
    assert "403 Forbidden" in lines[0] and "refusing to build it" in lines[1]


def test_the_default_source_is_the_vendored_tarball_beside_the_checkout(monkeypatch):
    monkeypatch.delenv("RIGKIT_LLAMA_SWAP_SRC", raising=False)
    assert rel.vendored_source() == ROOT.parent / "shared/vendor/llama-swap/llama-swap-60226b63776e.tar.gz"
