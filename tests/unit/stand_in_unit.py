"""The tenant's unit for the window's host-side unit tests: ``systemctl start/stop/reset-failed`` and
``is-active`` played by the HyperQwen stand-in (tests/harness/stubs/openai_stub.py) as a local
process on a free port; a subclass says how a start launches it (:meth:`StandInUnit.launch`)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

STUBS = Path(__file__).resolve().parents[2] / "tests" / "harness" / "stubs"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandInUnit:
    """The unit's commands, as :mod:`rigkit.host.window.system`'s ``sh`` and ``unit_state``."""

    def __init__(self, control: Path) -> None:
        self.control, self.proc, self.port, self.starts = control, None, free_port(), 0

    def stand_in(self, env: dict[str, str]) -> subprocess.Popen:
        """Start the stand-in engine (vLLM's kind, alias ``m``) with ``env`` added to this process's."""
        import os

        return subprocess.Popen([sys.executable, str(STUBS / "openai_stub.py"), "--kind", "vllm", "--port",
                                 str(self.port), "--alias", "m", "--control-dir", str(self.control)],
                                env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def launch(self) -> subprocess.Popen:
        """What ``systemctl start`` runs (the subclass's)."""
        raise NotImplementedError

    def sh(self, *argv, timeout=120.0, check=False):
        if argv[:2] == ("systemctl", "start"):
            self.starts += 1
            self.proc = self.launch()
        elif argv[:2] == ("systemctl", "stop") and self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None
        return subprocess.CompletedProcess(argv, 0, "", "")

    def state(self, unit):
        return "active" if self.proc and self.proc.poll() is None else "inactive"
