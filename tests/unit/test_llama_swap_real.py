"""Every rendered llama-swap config loads in the real llama-swap v250 (built from its Go module by
tests/harness/llama_swap_release.py, cached; `make test` builds it before the suite; when it cannot be
built every test here fails with the BLOCKED text, there is no fallback) and lists every
declared member by its name in ``/v1/models`` — including specs whose values need quoting (a unicode
description outside the BMP, a member command with quotes). llama-swap itself ignores unknown keys,
so the schema check and the strict model stay; this proves the files parse the way llama-swap reads
them. No member is started: listing the models needs none."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from rigkit.render.files import render_llama_swap
from rigkit.spec.validate import spec_from_layers

pytestmark = pytest.mark.slow

SPECS = {
    "defaults": {},
    "hyperqwen wired in": {"llama_swap": {"members": {"hyperqwen": {"staged": False}}}},
    "quoting and unicode": {
        "llama_swap": {"port": 8090, "members": {"gguf-baseline": {"description": "baseline 🦙 — \"Q4_K_M\" #1: a|b"}}},
        "strata": {"args": ["--threads", "1", "--tags", "strata coder"]},  # one value with a space (--alias is rendered)
    },
}


@pytest.fixture(scope="module")
def llama_swap(llama_swap_bin) -> str:
    """The real binary (conftest.py): a build failure fails every test here with the BLOCKED text."""
    return llama_swap_bin


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _models(binary: str, config: Path) -> list[str]:
    port = _free_port()
    proc = subprocess.Popen([binary, "-config", str(config), "-listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        import requests

        end = time.monotonic() + 20
        while time.monotonic() < end:
            if proc.poll() is not None:
                pytest.fail(f"llama-swap exited {proc.returncode} on {config.name}:\n{proc.stdout.read()[-2000:]}")
            try:
                r = requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                if r.status_code == 200:
                    return sorted(m["id"] for m in r.json()["data"])
            except requests.RequestException:
                pass
            time.sleep(0.2)
        pytest.fail(f"llama-swap did not answer /v1/models on {config.name}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("staged", [False, True], ids=["live", "staged"])
def test_the_real_llama_swap_loads_each_rendered_config_and_lists_every_member(llama_swap, tmp_path, name, staged):
    spec = spec_from_layers([{"strata": {"model_file": "strata.gguf"}, "gguf_baseline": {"model_file": "q.gguf"}},
                             SPECS[name]])
    text = render_llama_swap(spec, staged=staged)
    config = tmp_path / "config.yaml"
    config.write_text(text)
    declared = sorted(mid for mid, m in spec.llama_swap.members.items() if staged or not m.staged)
    assert _models(llama_swap, config) == declared, text
    json.dumps(declared)  # plain ids
