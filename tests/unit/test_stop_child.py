"""rigkit.deploy.run.stop_child: a pyinfra run rigkit leaves (an interrupt of rigkit itself) is stopped and
reaped before anything else deploys the same host."""

from __future__ import annotations

import subprocess
import sys
import time

from rigkit.deploy import run


def _child(tmp_path, ignore_int: bool) -> subprocess.Popen:
    ready = tmp_path / "ready"
    code = ("import signal, sys, time, pathlib\n"
            + ("signal.signal(signal.SIGINT, signal.SIG_IGN)\n" if ignore_int else
               f"signal.signal(signal.SIGINT, lambda *a: (pathlib.Path({str(tmp_path / 'got')!r}).write_text('int'), sys.exit(3)))\n")
            + f"pathlib.Path({str(ready)!r}).write_text('up')\ntime.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", code])
    for _ in range(400):  # bounded: the child says it has installed its handler
        if ready.exists():
            return p
        time.sleep(0.05)
    p.kill()
    raise AssertionError("the child never started")


def test_a_running_pyinfra_gets_a_sigint_and_is_reaped(tmp_path):
    p = _child(tmp_path, ignore_int=False)
    assert run.stop_child(p, grace_s=20) == 3
    assert (tmp_path / "got").read_text() == "int" and p.poll() == 3


def test_one_that_ignores_sigint_is_terminated(tmp_path):
    p = _child(tmp_path, ignore_int=True)
    assert run.stop_child(p, grace_s=0.5) == -15  # SIGTERM after the grace
    assert p.poll() is not None


def test_one_already_ended_is_only_reaped(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert run.stop_child(p) == 0
