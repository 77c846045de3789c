"""Fixtures for the bench tests: the replay server and a real llama.cpp server (xllamacpp)
serving a tiny GGUF generated here, one thread, on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import requests

from rigkit.remote import free_port
from .replay import ReplayServer
from .tiny_gguf import write_tiny_gguf

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def no_local_gpu(monkeypatch):
    """This machine's nvidia-smi reads as missing (``rigkit bench --url`` on 127.0.0.1 reads the
    local GPU's energy), so a machine with a GPU runs these tests as one without does; a test
    that wants readings sets ``rigkit.common.gpu.query_energy`` itself."""
    from rigkit.common import gpu

    monkeypatch.setattr(gpu, "query_energy", lambda timeout_s=10.0: gpu.parse_energy("", 127))


@pytest.fixture(autouse=True)
def own_results(monkeypatch, tmp_path):
    """Each test's default baselines come from its own results folder (never the checkout's
    ``results/``), and a run too noisy to compare is not measured again unless a test asks
    (``--repeat-unstable``): a replay server answers as fast as this machine runs, so its
    decode spread is this machine's noise."""
    monkeypatch.setenv("RIGKIT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("RIGKIT_BENCH_REPEAT_UNSTABLE", "0")


@pytest.fixture
def replay():
    """A fresh :class:`ReplayServer` per test."""
    with ReplayServer() as srv:
        yield srv


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory) -> str:
    """Path of the tiny reasoning GGUF (``<think>Let me think about it</think>`` then a loop)."""
    return write_tiny_gguf(str(tmp_path_factory.mktemp("gguf") / "tiny-think.gguf"),
                           reasoning=True)


@pytest.fixture(scope="session")
def llama_server(tiny_gguf):
    """Base URL of xllamacpp's llama.cpp server on a free 127.0.0.1 port, one thread,
    started once per session; stopped with SIGTERM."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "llama_server.py"), "--model", tiny_gguf,
         "--port", str(port), "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama.cpp server exited {proc.returncode}: {proc.stdout.read()[-2000:]}")
            try:
                if requests.get(url + "/health", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama.cpp server not healthy after 30 s")
            time.sleep(0.05)
        # the first request after start is an outlier; take it here
        requests.post(url + "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}, timeout=30)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
