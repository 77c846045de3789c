"""Fixtures for the model lock and fetch: the test hub (:mod:`tests.hub.server`) on 127.0.0.1
with a token, a lock of the rig's four models against it, and an isolated host layout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# tests.hub is imported by its full name (it also runs as `python -m tests.hub.server` from the
# checkout), so the checkout goes on sys.path here; pytest's rootdir-relative import puts only
# tests/ there.
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.hub.server import HubServer  # noqa: E402

from .helpers import TOKEN, model_sources, xet_requests  # noqa: E402


@pytest.fixture(scope="session")
def hub_server(tmp_path_factory):
    server = HubServer(tmp_path_factory.mktemp("hub") / "repos", token=TOKEN).start()
    yield server
    server.stop()


@pytest.fixture
def hub(hub_server, monkeypatch, tmp_path):
    """The running hub, reset (no faults, empty log, original commits); ``HF_ENDPOINT`` points at
    it and huggingface-hub finds no token of the machine's own (``HF_HOME`` is empty).

    The hub advertises Xet for every LFS file; at teardown no request of the test may have taken
    the Xet path (the token route, the CAS): every fetch test runs on the LFS bridge, the rig's
    path (notes/hub-xet.md). A test that takes it on purpose clears the log."""
    hub_server.hub.reset()
    monkeypatch.setenv("HF_ENDPOINT", hub_server.endpoint)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    yield hub_server
    xet = [f"{r['method']} {r['path']}" for r in xet_requests(hub_server)]
    hub_server.hub.reset()
    assert xet == [], f"requests on the Xet path, not the rig's: {xet}"


@pytest.fixture(scope="session")
def lock(hub_server):
    """The lock of :func:`model_sources` against the test hub (as ``rigkit models lock`` writes it)."""
    from rigkit.lockfile.hub import lock_models

    result, skipped = lock_models(model_sources(), endpoint=hub_server.endpoint, token=TOKEN)
    assert skipped == []
    return result


@pytest.fixture
def host(tmp_path):
    """An isolated host layout: models root, state dir, and the secret file holding the token."""
    root = tmp_path / "host"
    secrets = root / "etc/rigkit/secrets"
    secrets.mkdir(parents=True)
    token_file = secrets / "hf.env"
    token_file.write_text(f"HF_TOKEN={TOKEN}\n")
    os.chmod(token_file, 0o600)
    return {"models_root": root / "srv/models", "state_dir": root / "var/lib/rigkit", "token_file": token_file}
