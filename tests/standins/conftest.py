"""Fixtures for the llama-swap stand-in tests: the built tarball and zipapp, the VRAM
stand-in's directory and a factory of running stand-ins (helpers in standin_helpers.py)."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import build_llama_swap  # noqa: E402
from standin_helpers import LlamaSwap  # noqa: E402


@pytest.fixture(scope="session")
def tarball(tmp_path_factory) -> str:
    """The release tarball, built once per session."""
    return build_llama_swap.build_tarball(str(tmp_path_factory.mktemp("dist")))


@pytest.fixture(scope="session")
def standin_bin(tarball, tmp_path_factory) -> str:
    """Path of the ``llama-swap`` executable extracted from the tarball."""
    import tarfile

    d = tmp_path_factory.mktemp("bin")
    with tarfile.open(tarball) as tf:
        tf.extract("llama-swap", str(d))
    return str(d / "llama-swap")


@pytest.fixture
def gpu_dir(tmp_path) -> str:
    d = tmp_path / "fake-gpu"
    (d / "procs").mkdir(parents=True)
    return str(d)


@pytest.fixture
def run_standin(standin_bin, tmp_path, gpu_dir):
    """Factory: ``run_standin(config_text, **env)`` → LlamaSwap; all stopped at teardown.

    Sets the test seam ``RIGKIT_STANDIN_HEALTH_POLL_S=0.1`` and the VRAM dir."""
    started = []

    def start(config_text: str, **env: str) -> LlamaSwap:
        e = {"RIGKIT_FAKE_GPU_DIR": gpu_dir, "RIGKIT_STANDIN_HEALTH_POLL_S": "0.1"}
        e.update(env)
        ls = LlamaSwap(standin_bin, tempfile.mkdtemp(dir=str(tmp_path)), config_text, e)
        started.append(ls)
        return ls

    yield start
    for ls in started:
        ls.stop()
