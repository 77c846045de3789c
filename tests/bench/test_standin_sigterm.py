"""The stand-in HyperQwen engine ends at once on a SIGTERM while it is still loading (``boot_delay_s``), as
vLLM's api_server does: ``setup_server`` installs a SIGTERM handler raising ``KeyboardInterrupt("terminated")``
before it builds the engine ("Interrupt server on sigterm while initializing",
``vllm/entrypoints/openai/api_server.py``). The stand-in used to leave SIGTERM at its default there, which
the container's PID 1 ignores: each stop of a tenant still loading waited out compose's 30 s grace period.

As a local process (not a PID 1) the default would end it too, so the test tells the two apart by how it
ended: exit 130 (an uncaught KeyboardInterrupt's status) with the stand-in's line, not killed by the signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from rigkit.remote import free_port

from .standin import STUB


def test_a_sigterm_while_loading_ends_the_engine_as_vllm_s_handler_does(tmp_path):
    control = tmp_path / "control"
    control.mkdir()
    (control / "boot_delay_s").write_text("3600")  # never healthy on its own
    proc = subprocess.Popen([sys.executable, str(STUB), "--kind", "vllm", "--port", str(free_port()),
                             "--alias", "hq", "--control-dir", str(control)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})
    # the premise: it is loading (its first line says so) and has not bound its port
    assert proc.stdout.readline().startswith("(sandbox) loading the engine for 3600 s"), proc.stderr.read()
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=60)  # a bound on a hang; it ends within milliseconds
    finally:
        proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert "(sandbox) terminated while loading the engine" in err


def _gated(tmp_path) -> tuple[subprocess.Popen, object]:
    """The stand-in with ``boot_delay_s`` a FIFO (the gate test_lock.py holds a race's holder with), started
    and seen waiting on it (its first line)."""
    control = tmp_path / "control"
    control.mkdir()
    gate = control / "boot_delay_s"
    os.mkfifo(gate)
    proc = subprocess.Popen([sys.executable, str(STUB), "--kind", "vllm", "--port", str(free_port()),
                             "--alias", "hq", "--control-dir", str(control)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.stdout.readline() == "(sandbox) loading the engine until boot_delay_s is written (a FIFO)\n"
    return proc, gate


def test_a_gated_engine_listens_only_once_the_test_writes_the_gate(tmp_path):
    proc, gate = _gated(tmp_path)
    try:
        with open(gate, "w") as f:  # blocks until the engine reads: it is waiting on the gate
            f.write("0")
        assert proc.stdout.readline().startswith("(sandbox) loading the engine for 0 s")
        assert proc.stdout.readline().startswith("main: server is listening on http://")
    finally:
        proc.kill()
        proc.communicate(timeout=60)


def test_a_sigterm_while_waiting_on_the_gate_ends_the_engine_as_while_loading(tmp_path):
    proc, _gate = _gated(tmp_path)
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=60)  # a bound on a hang; it ends within milliseconds
    finally:
        proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert "(sandbox) terminated while loading the engine" in err
