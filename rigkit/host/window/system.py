"""The window's two ways of asking the host something: a command (:func:`sh`) and a unit's state
(:func:`unit_state`). Their own module so the steps (:mod:`rigkit.host.window.steps`) and the sweep
(:mod:`rigkit.host.window.sweep`), which the steps run, both use them without importing each other."""

from __future__ import annotations

import subprocess

from rigkit.host.journal import StepFailed


def sh(*argv: str, timeout: float = 120.0, check: bool = False) -> subprocess.CompletedProcess:
    """Run ``argv`` (no shell), text output captured. ``check``: raise StepFailed naming the
    command and its stderr on a non-zero exit."""
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise StepFailed(f"`{' '.join(argv)}` exited {proc.returncode}: "
                         f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc


def unit_state(unit: str) -> str:
    """``systemctl is-active UNIT``: ``active``, ``inactive``, ``failed``, ``activating`` ..."""
    return sh("systemctl", "is-active", unit).stdout.strip() or "unknown"
