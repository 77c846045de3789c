"""Helpers for the tests that run the real llama-swap 250 (tests/unit/test_llama_swap_*.py): the
binary (built from the vendored source or the Go module by tests/harness/llama_swap_release.py,
cached; a failure to build is a test failure naming the block, never a skip), free loopback ports,
HTTP requests, a running llama-swap (``LlamaSwap``), command lines of the fake model server
(``data/llama_swap/fake_member.py``) and its VRAM convention's reader.

Waits poll state (the log, ``/running``, the requests in flight) until it holds; their deadlines
(:data:`HANG_S`) only guard a hang, so a slow machine never fails a test that a fast one passes."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data" / "llama_swap"
FAKE_MEMBER = DATA / "fake_member.py"

sys.path.insert(0, str(ROOT / "tests" / "harness"))
import hostctl  # noqa: E402,F401  (fixes RIGKIT_HARNESS_CACHE to the real cache before the suite moves RIGKIT_CACHE)

sys.path.insert(0, str(DATA))
from fake_member import vram_in_use_mib  # noqa: E402

#: How long a wait for a state polls before it calls the state never reached: a hang guard only.
HANG_S = 60.0


def build_binary() -> str:
    """The real llama-swap 250's path, or ``pytest.fail`` with the BLOCKED text of every source."""
    import pytest

    proc = subprocess.run([sys.executable, str(ROOT / "tests/harness/llama_swap_release.py"), "--print-binary"],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail("BLOCKED — the real llama-swap could not be built:\n" + proc.stderr[-2000:], pytrace=False)
    return proc.stdout.strip().splitlines()[-1]


def free_port() -> int:
    """A TCP port the OS just handed out on 127.0.0.1 (closed again; small race)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_pair() -> int:
    """P such that P and P+1 were both free just now (for ``startPort``)."""
    for _ in range(50):
        p = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p + 1))
            except OSError:
                continue
        return p
    raise AssertionError("no two consecutive free ports")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def vram_mib(gpu_dir: str) -> int:
    """Sum of live ``procs/<pid>.mib`` entries (the sandbox's fake nvidia-smi's convention)."""
    return vram_in_use_mib(gpu_dir)


def member_cmd(port, name: str, *extra: str) -> str:
    """A ``cmd`` line running the fake model server (llama-swap splits it without a shell)."""
    return " ".join([sys.executable, str(FAKE_MEMBER), "--port", str(port), "--name", name] + list(extra))


def request(port: int, method: str, path: str, body=None, timeout: float = 30.0,
            headers: Optional[Dict[str, str]] = None) -> Tuple[int, bytes, Dict[str, str]]:
    """One HTTP request to 127.0.0.1:port on a fresh connection; returns (status, body, headers)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        return r.status, r.read(), {k.lower(): v for k, v in r.getheaders()}
    finally:
        conn.close()


def chat(port: int, model: str, **extra):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    body.update(extra)
    return request(port, "POST", "/v1/chat/completions", body)


def logged_error(output: str) -> Optional[str]:
    """The ``error="..."`` value of llama-swap's last ``ERROR`` log line (Go's slog text quoting undone)."""
    found = re.findall(r' ERROR .*? error=("(?:[^"\\]|\\.)*"|\S+)', output)
    if not found:
        return None
    v = found[-1]
    return json.loads(v) if v.startswith('"') else v


def run_config(binary: str, config: str, env: Optional[Dict[str, str]] = None,
               extra: Optional[List[str]] = None, timeout: float = 20) -> subprocess.CompletedProcess:
    """``llama-swap -config F -listen 127.0.0.1:1`` for a config that must fail before it listens."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([binary, "-config", config, "-listen", "127.0.0.1:1"] + (extra or []),
                          capture_output=True, text=True, env=e, timeout=timeout)


class LlamaSwap:
    """A running real llama-swap (``llama-swap -config F -listen 127.0.0.1:PORT [args]``)."""

    def __init__(self, binary: str, workdir: str, config_text: str, env: Optional[Dict[str, str]] = None,
                 args: Optional[List[str]] = None) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.config = os.path.join(workdir, "config.yaml")
        with open(self.config, "w") as f:
            f.write(config_text)
        self.logfile = os.path.join(workdir, "llama-swap.log")
        e = dict(os.environ)
        e.update(env or {})
        self._log = open(self.logfile, "wb")
        self.proc = subprocess.Popen(
            [binary, "-config", self.config, "-listen", "127.0.0.1:%d" % self.port] + (args or []),
            stdout=self._log, stderr=subprocess.STDOUT, env=e, cwd=workdir,
        )
        deadline = time.monotonic() + HANG_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("llama-swap exited %s:\n%s" % (self.proc.returncode, self.output()))
            if port_open(self.port):
                return
            time.sleep(0.05)
        raise AssertionError("llama-swap did not listen:\n" + self.output())

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        with open(self.logfile, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_output(self, text: str, timeout: float = HANG_S) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert time.monotonic() < deadline, "no %r in:\n%s" % (text, self.output())
            time.sleep(0.05)

    def get(self, path: str, **kw):
        return request(self.port, "GET", path, **kw)

    def post(self, path: str, body=None, **kw):
        return request(self.port, "POST", path, body, **kw)

    def running(self) -> Dict[str, str]:
        st, body, _ = self.get("/running")
        assert st == 200, body
        return {r["model"]: r["state"] for r in json.loads(body)["running"]}

    def running_entries(self) -> Dict[str, dict]:
        return {r["model"]: r for r in json.loads(self.get("/running")[1])["running"]}

    def wait_running(self, want: Dict[str, str], timeout: float = HANG_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.running() == want:
                return
            time.sleep(0.05)
        raise AssertionError("running is %r, wanted %r\n%s" % (self.running(), want, self.output()))

    def inflight(self) -> List[dict]:
        """The requests llama-swap has in flight now, each as its tracker lists it (``model``,
        ``req_path``, ...): the snapshot its ``/api/events`` stream sends first (server/apigroup.go
        handleAPIEvents; a request counts from before it waits for its member, server/inflight.go)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", "/api/events")
            r = conn.getresponse()
            assert r.status == 200, r.status
            while True:
                line = r.readline()
                assert line, "/api/events ended before its in-flight snapshot"
                if not line.startswith(b"data:"):
                    continue
                msg = json.loads(line[5:])
                if msg["type"] == "inflight":
                    update = json.loads(msg["data"])
                    if update["operation"] == "snapshot":
                        return update.get("requests") or []
        finally:
            conn.close()

    def wait_inflight(self, model: str, n: int, timeout: float = HANG_S) -> None:
        """Wait until ``n`` requests for ``model`` are in flight in llama-swap."""
        deadline = time.monotonic() + timeout
        while sum(r.get("model") == model for r in self.inflight()) != n:
            assert time.monotonic() < deadline, "not %d requests for %s in flight: %r\n%s" % (
                n, model, self.inflight(), self.output())
            time.sleep(0.05)

    def stop(self) -> int:
        if self._log.closed:
            return self.proc.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
