"""The catch-all: pyinfra's own plan, ``pyinfra INVENTORY deploy.py --dry --json --limit HOST``
(its stable, documented output; the in-process route needs ``pyinfra_cli`` internals), one
subprocess per host, and the operations in it that would still change something
(:func:`plan_findings`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rigkit.drift.compare import Finding
from rigkit.operations.generations import RECORD_OP

PROJECT = Path(__file__).resolve().parents[2]


def start_plan(inventory: str, hosts: list[str], cwd: str | None = None) -> subprocess.Popen:
    """Start ``pyinfra INVENTORY deploy.py --dry --json --limit H...`` (stdout: the JSON plan;
    stderr: pyinfra's log). The project root goes on ``PYTHONPATH`` as ``rigkit deploy`` does."""
    pyinfra = str(Path(sys.executable).parent / "pyinfra")
    cmd = [pyinfra, inventory, str(PROJECT / "deploy.py"), "--dry", "--json"]
    for name in hosts:
        cmd += ["--limit", name]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")])),
           "NO_COLOR": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, env=env, cwd=cwd)


def finish_plan(proc: subprocess.Popen, timeout_s: float = 900) -> tuple[dict[str, Any] | None, str]:
    """Wait for :func:`start_plan`; returns ``(plan | None, why not)``."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, f"pyinfra --dry did not finish within {timeout_s:g} s"
    try:
        return json.loads(stdout), ""
    except ValueError:
        lines = stderr.strip().splitlines()
        start = next((i for i, ln in enumerate(lines) if "pyinfra error" in ln or "Error" in ln), max(0, len(lines) - 3))
        why = " ".join(ln.strip() for ln in lines[start:start + 6]).replace("--> ", "")
        return None, f"pyinfra --dry exited {proc.returncode} without a plan: {why}"


def plan_findings(host: str, plan: dict[str, Any] | None) -> list[Finding]:
    """pyinfra's ``--dry --json`` plan for ``host``: each operation that would change something
    is drift (kind ``plan``, item its name, e.g. ``Host agent | Sync the agent wheelhouse``): each row
    names an operation that would itself change the host.

    Operations gated on ``_if`` are not reported: they land in ``hosts_with_conditional_change`` on
    *every* run, converged or not (pyinfra evaluates the condition when it runs), and the plan does not
    say which operation they are gated on, so a row for one would point at whatever else changes
    nearby. What would trigger one is a change of its own, already a row.

    The generation record (:data:`GENERATION_OP`) is not reported either: it changes rigkit's own
    record of the host, not the rig; that the host is no longer as its current generation recorded
    it (a wire-in since the last deploy, a changed spec) is on drift's generation line
    (``spec_is_current``).
    """
    if plan is None:
        return []
    return [Finding(host, "plan", name, "no change", "the deploy would change this")
            for op in plan.get("plan", [])
            if host in (op.get("hosts_with_change") or [])
            for name in [" | ".join(op.get("names") or []) or op.get("name") or op.get("op_hash", "?")]
            if name != GENERATION_OP]


#: The plan's name of the deploy's last operation (roles/generation.py).
GENERATION_OP = f"Generation | {RECORD_OP}"
