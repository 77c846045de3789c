"""Helpers for the llama-swap stand-in tests: free loopback ports, HTTP requests, a
running stand-in (``LlamaSwap``), fake-member command lines and the VRAM stand-in's
reader. Imported by ``conftest.py`` and ``test_llama_swap.py``."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_MEMBER = os.path.join(HERE, "fake_member.py")


def free_port() -> int:
    """A TCP port the OS just handed out on 127.0.0.1 (closed again; small race)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def vram_mib(gpu_dir: str) -> int:
    """Sum of live ``procs/<pid>.mib`` entries (the fake nvidia-smi's convention): the fake
    member's own reader."""
    from fake_member import vram_in_use_mib

    return vram_in_use_mib(gpu_dir)


def member_cmd(port: int, name: str, *extra: str) -> str:
    """A ``cmd`` line running the fake member (no shell involved)."""
    return " ".join([sys.executable, FAKE_MEMBER, "--port", str(port), "--name", name] + list(extra))


def request(port: int, method: str, path: str, body=None, timeout: float = 30.0) -> Tuple[int, bytes, Dict[str, str]]:
    """One HTTP request to 127.0.0.1:port; returns (status, body, headers)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        return r.status, r.read(), {k.lower(): v for k, v in r.getheaders()}
    finally:
        conn.close()


class LlamaSwap:
    """A running stand-in (``python -I -S llama-swap -config … -listen 127.0.0.1:port``)."""

    def __init__(self, binary: str, workdir: str, config_text: str, env: Optional[Dict[str, str]] = None) -> None:
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
            [sys.executable, "-I", "-S", binary, "-config", self.config, "-listen", "127.0.0.1:%d" % self.port],
            stdout=self._log, stderr=subprocess.STDOUT, env=e,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("stand-in exited %s:\n%s" % (self.proc.returncode, self.output()))
            if port_open(self.port):
                return
            time.sleep(0.05)
        raise AssertionError("stand-in did not listen:\n" + self.output())

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        with open(self.logfile, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def get(self, path: str, **kw):
        return request(self.port, "GET", path, **kw)

    def post(self, path: str, body=None, **kw):
        return request(self.port, "POST", path, body, **kw)

    def running(self) -> Dict[str, str]:
        st, body, _ = self.get("/running")
        assert st == 200
        return {r["model"]: r["state"] for r in json.loads(body)["running"]}

    def wait_running(self, want: Dict[str, str], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.running() == want:
                return
            time.sleep(0.05)
        raise AssertionError("running is %r, wanted %r\n%s" % (self.running(), want, self.output()))

    def stop(self) -> int:
        if self._log.closed:
            return self.proc.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode
