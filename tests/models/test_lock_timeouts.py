"""Every hub request of the model lock runs under a connect and a read timeout (issue 62): a server
that stalls — before its answer, or mid-body as the one that held a lock 150 s did — ends the read
within the read timeout, and the lock's error names the host and the timeout.

The server is a stdlib HTTP server on 127.0.0.1 that stalls until the test's teardown releases it
(or 60 s pass): were there no timeout the client would wait for that release and then see a closed
connection, not a timeout."""

from __future__ import annotations

import http.server
import threading
from types import SimpleNamespace

import pytest

from rigkit.lockfile.errors import LockError
from rigkit.lockfile.hub import HUB_CONNECT_TIMEOUT_S, HUB_READ_TIMEOUT_S, hub_timeout, lock_models, model_metadata

READ_S = 0.5


@pytest.fixture
def stalling():
    """``start(mode)`` → ``"127.0.0.1:PORT"`` of a server that stalls: ``"before"`` any answer,
    ``"mid-body"`` after a 206's headers and its first 100 bytes of a promised 64 KiB."""
    release = threading.Event()
    servers = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.server.mode == "mid-body":
                self.send_response(206)
                self.send_header("Content-Length", "65536")
                self.send_header("Content-Range", "bytes 0-65535/1000000000")
                self.end_headers()
                self.wfile.write(b"GGUF" + bytes(96))
                self.wfile.flush()
            release.wait(60)

        def log_message(self, *args):
            pass

    def start(mode: str) -> str:
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        srv.daemon_threads = True
        srv.mode = mode
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"127.0.0.1:{srv.server_address[1]}"

    yield start
    release.set()
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def test_the_lock_states_its_timeouts():
    t = hub_timeout()
    assert (t.connect, t.read) == (HUB_CONNECT_TIMEOUT_S, HUB_READ_TIMEOUT_S) == (10.0, 30.0)


@pytest.mark.parametrize("mode", ["before", "mid-body"])
def test_a_header_read_from_a_stalled_server_ends_naming_the_host_and_the_timeout(stalling, mode):
    host = stalling(mode)
    api = SimpleNamespace(endpoint=f"http://{host}", token=False)
    files = [{"path": "m-Q4_K_M.gguf", "size": 1_000_000_000, "sha256": "0" * 64}]
    with pytest.raises(LockError) as err:
        model_metadata("strata", "owner/m", "a" * 40, files, api, timeout=hub_timeout(connect=1, read=READ_S))
    assert str(err.value) == (f"models.strata: owner/m@{'a' * 40}: m-Q4_K_M.gguf: header not readable: "
                              f"{host} sent nothing for {READ_S:g} s (read timeout)")


def test_a_stalled_model_info_ends_naming_the_host_and_the_timeout(stalling, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "")
    host = stalling("before")
    model = SimpleNamespace(repo_id="owner/m", revision="main", include=["*.gguf"], exclude=[], path="m", url=None)
    with pytest.raises(LockError, match=rf"^models\.m: owner/m@main: hub unreachable: {host} sent nothing for "
                                        rf"{READ_S:g} s \(read timeout\); HF_ENDPOINT="):
        lock_models({"m": model}, endpoint=f"http://{host}", token=False,
                    timeout=hub_timeout(connect=1, read=READ_S))


def test_every_request_of_a_lock_carries_the_timeout(monkeypatch):
    """model_info, config.json and each header range: all under the one timeout the lock was given."""
    seen = []
    t = hub_timeout(connect=2, read=3)

    class Api:
        endpoint, token = "http://127.0.0.1:9", False

        def model_info(self, repo_id, revision, files_metadata, timeout):
            seen.append(("model_info", timeout))
            raise LockError("stop")

    model = SimpleNamespace(repo_id="owner/m", revision="main", include=[], exclude=[], path="m", url=None)
    with pytest.raises(LockError):
        lock_models({"m": model}, api=Api(), timeout=t)

    class Session:
        def get(self, url, **kw):
            seen.append(("config.json", kw["timeout"]))
            raise OSError("stop")

        def stream(self, method, url, **kw):
            seen.append(("range", kw["timeout"]))
            raise OSError("stop")

    monkeypatch.setattr("huggingface_hub.utils.get_session", lambda: Session())
    for path in ("config.json", "m.gguf"):
        with pytest.raises(LockError):
            model_metadata("m", "owner/m", "a" * 40, [{"path": path, "size": 10**9, "sha256": "0" * 64}], Api(), t)
    assert seen == [("model_info", t), ("config.json", t), ("range", t)]
