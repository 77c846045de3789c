"""The GPU power limit set on this host: :func:`set_limit` runs :func:`rigkit.common.powerlimit.set_argv`
(the one set command; the tolerance, the card and the read-back rule are :mod:`rigkit.common.powerlimit`).
Used by the healer (:mod:`rigkit.host.power`) and a power-limit sweep and its restore
(:mod:`rigkit.host.window.sweep`)."""

from __future__ import annotations

import subprocess

from rigkit.common.powerlimit import set_argv


def set_limit(index: int, watts: float, timeout_s: float = 30.0) -> tuple[bool, str]:
    """Run :func:`set_argv` on this host. Returns ``(True, its output)`` on exit 0, else
    ``(False, why)`` (not found, no answer within ``timeout_s`` s, or its exit code and output)."""
    argv = set_argv(index, watts)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return False, "nvidia-smi not found"
    except subprocess.TimeoutExpired:
        return False, f"nvidia-smi did not answer within {timeout_s:g} s"
    text = " ".join((proc.stdout + proc.stderr).split())
    if proc.returncode:
        return False, f"`{' '.join(argv)}` exited {proc.returncode}: {text}"
    return True, text
