"""Fixtures of the tests that run the real llama-swap 250 (helpers in llama_swap_live.py; imported
lazily so the rest of the unit tier never builds or imports it)."""

from __future__ import annotations

import tempfile

import pytest


@pytest.fixture(scope="session")
def llama_swap_bin() -> str:
    """The real llama-swap 250 (built and cached; a build failure fails the test with BLOCKED)."""
    from .llama_swap_live import build_binary

    return build_binary()


@pytest.fixture
def gpu_dir(tmp_path) -> str:
    d = tmp_path / "fake-gpu"
    (d / "procs").mkdir(parents=True)
    return str(d)


@pytest.fixture
def run_llama_swap(llama_swap_bin, tmp_path, gpu_dir):
    """Factory: ``run_llama_swap(config_text, args=[...], **env)`` → a running LlamaSwap; all are
    stopped (SIGTERM) at teardown. Members see ``RIGKIT_FAKE_GPU_DIR``: the test's VRAM dir."""
    from .llama_swap_live import LlamaSwap

    started = []

    def start(config_text: str, args=None, **env: str):
        e = {"RIGKIT_FAKE_GPU_DIR": gpu_dir}
        e.update(env)
        ls = LlamaSwap(llama_swap_bin, tempfile.mkdtemp(dir=str(tmp_path)), config_text, e, args)
        started.append(ls)
        return ls

    yield start
    for ls in started:
        ls.stop()
