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


def _started(tmp_path, gate: bool) -> tuple[subprocess.Popen, object]:
    """The stand-in loading: ``boot_delay_s`` 3600 s (never healthy on its own), or with ``gate`` a FIFO (the gate
    test_lock.py holds a race's holder with), its first line read; returns the process and the control file."""
    control = tmp_path / "control"
    control.mkdir()
    delay = control / "boot_delay_s"
    if gate:
        os.mkfifo(delay)
    else:
        delay.write_text("3600")
    proc = subprocess.Popen([sys.executable, str(STUB), "--kind", "vllm", "--port", str(free_port()),
                             "--alias", "hq", "--control-dir", str(control)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"})
    return proc, delay


def _ends_on_sigterm_as_while_loading(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=60)  # a bound on a hang; it ends within milliseconds
    finally:
        proc.kill()
    assert proc.returncode == 130, (proc.returncode, err)
    assert "(sandbox) terminated while loading the engine" in err


def test_a_sigterm_while_loading_ends_the_engine_as_vllm_s_handler_does(tmp_path):
    proc, _delay = _started(tmp_path, gate=False)
    # the premise: it is loading (its first line says so) and has not bound its port
    assert proc.stdout.readline().startswith("(sandbox) loading the engine for 3600 s"), proc.stderr.read()
    _ends_on_sigterm_as_while_loading(proc)


def _gated(tmp_path) -> tuple[subprocess.Popen, object]:
    """The stand-in seen waiting on its ``boot_delay_s`` FIFO (its first line)."""
    proc, gate = _started(tmp_path, gate=True)
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
    _ends_on_sigterm_as_while_loading(proc)
