"""Drift's probe against pyinfra's own plan on a converged sandbox host, one batch of breakages at a
time (:data:`rigkit.drift.coverage.COVERAGE`): apply the batch under the host lock (the agent's
timers stand down, so nothing undoes a breakage meanwhile), run ``rigkit drift --json --plan`` once
(one probe and one ``pyinfra --dry``, at once), put everything back, and judge with
:func:`rigkit.drift.coverage.agreement`, and the deploy's path choice with
:func:`rigkit.deploy.converged.path_agreement` (every breakage takes the full run, the converged host
the probe path). Used by tests/harness/test_drift.py (a sample) and
benchmarks/drift_coverage.py (the whole table)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import hostctl  # noqa: E402

from rigkit.deploy import converged as path_choice  # noqa: E402
from rigkit.drift import coverage  # noqa: E402
from rigkit.common.lock import LEASE_ENV  # noqa: E402

LEASE = "t-cov"  # coverage.LOCK_HOLDER's lease: the plan's preflight treats the held lock as its own


@dataclass
class Batch:
    """One batch's outcome: its rows, the probe's findings ``(kind, item, severity)``, the plan's
    rows, the problems :func:`rigkit.drift.coverage.agreement` found, drift's exit code and wall s."""

    rows: list
    findings: list = field(default_factory=list)
    plan_rows: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    exit_code: int | None = None
    seconds: float = 0.0
    output: str = ""


def drift_json(name: str, project: Path, *args: str, inventory: str = "inventory/sandbox.py",
               timeout: float = 300) -> tuple[int, list[dict], str]:
    """``python -m rigkit drift --json ARGS`` for sandbox host ``name`` (the sandbox hub's token as
    HF_TOKEN, the coverage lease): ``(exit code, finding records, stdout + stderr)``."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME")}
    env.update(RIGKIT_SANDBOX_HOST=name, HF_TOKEN=hostctl.hub_token(), HF_HOME="/nonexistent-hf-home",
               **{LEASE_ENV: LEASE})
    proc = subprocess.run([sys.executable, "-m", "rigkit", "drift", "-i", inventory, "--json", *args], cwd=project,
                          env=env, capture_output=True, text=True, timeout=timeout)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode, [r for r in records if r.get("kind") not in ("status", "run")], proc.stdout + proc.stderr


def hold_lock(host) -> None:
    """Hold the host lock (:data:`rigkit.drift.coverage.LOCK_HOLDER`) and wait until *it* holds it (a
    keeper's or the healer's run may hold it a moment first: "held" alone is not the coverage's lock)."""
    host.run(coverage.LOCK_HOLDER)
    host.wait_lock_held_by(coverage.LOCK_WHAT)


def release_lock(host) -> None:
    """Let go of the coverage's hold (:data:`rigkit.drift.coverage.LOCK_UNIT`), checking that it left no
    record behind (``HarnessHost.release_test_lock``)."""
    host.release_test_lock(coverage.LOCK_UNIT)


def run_batch(host, rows: list, project: Path) -> Batch:
    """Apply ``rows``' breakages on ``host`` under the host lock, probe and plan once, put them back
    (in reverse order, each restore run even when an earlier one failed), release the lock."""
    archive = hostctl.MANIFEST["archive_url"]
    out = Batch(rows=list(rows))
    hold_lock(host)
    try:
        for c in rows:
            host.run(c.breakage.replace("{archive}", archive))
        t0 = time.monotonic()
        out.exit_code, records, out.output = drift_json(host.name, project, "--plan")
        out.seconds = time.monotonic() - t0
    finally:
        failed = []
        for c in reversed(rows):
            r = host.run(c.restore, check=False)
            if r.returncode != 0:
                failed.append(f"{c.op}: `{c.restore}` exited {r.returncode}: {r.stderr.strip()[-200:]}")
        try:
            release_lock(host)
        except AssertionError as e:
            failed.append(str(e))
        if failed:
            raise AssertionError(f"{host.name}: restoring failed:\n" + "\n".join(failed))
    out.findings = [(r["kind"], r["item"], r["severity"]) for r in records]
    out.plan_rows = [r["item"] for r in records if r["kind"] == "plan" and r["severity"] == "drift"]
    out.problems = coverage.agreement(out.rows, out.findings, out.plan_rows)
    out.problems += path_choice.path_agreement(out.rows, out.findings, LEASE)  # the deploy's path choice (issue 48)
    if any(r["kind"] == "plan-failed" for r in records):
        out.problems.append("the plan failed: " + "; ".join(r["actual"] for r in records if r["kind"] == "plan-failed"))
    return out


def converged(host, project: Path) -> Batch:
    """The converged host: probe and plan once; both must be empty."""
    out = Batch(rows=[])
    t0 = time.monotonic()
    out.exit_code, records, out.output = drift_json(host.name, project, "--plan")
    out.seconds = time.monotonic() - t0
    out.findings = [(r["kind"], r["item"], r["severity"]) for r in records]
    out.plan_rows = [r["item"] for r in records if r["kind"] == "plan" and r["severity"] == "drift"]
    out.problems = coverage.agreement([], out.findings, out.plan_rows) + path_choice.path_agreement([], out.findings)
    return out


@dataclass
class Repair:
    """One batch repaired by the deploy (issue 48): the deploy's exit code and path line (``full run:
    …`` or ``converged (probe)``), drift's exit code after it, the next deploy's path line, the
    problems found, wall s of the repairing deploy."""

    rows: list
    exit_code: int | None = None
    path: str = ""
    drift_after: int | None = None
    next_path: str = ""
    problems: list = field(default_factory=list)
    seconds: float = 0.0
    output: str = ""


def deploy(name: str, project: Path, *args: str, inventory: str = "inventory/sandbox.py",
           timeout: float = 900) -> subprocess.CompletedProcess:
    """``python -m rigkit deploy --no-smoke ARGS`` for sandbox host ``name`` (the sandbox hub's token)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME")}
    env.update(RIGKIT_SANDBOX_HOST=name, HF_TOKEN=hostctl.hub_token(), HF_HOME="/nonexistent-hf-home")
    return subprocess.run([sys.executable, "-m", "rigkit", "deploy", "-i", inventory, "--no-smoke", *args], cwd=project,
                          env=env, capture_output=True, text=True, timeout=timeout)


def path_line(name: str, output: str) -> str:
    """The deploy's path line for host ``name`` (``converged (probe): …`` or ``full run: …``), or ""."""
    for line in output.splitlines():
        if line.startswith(f"{name}: converged (probe)") or line.startswith(f"{name}: full run: "):
            return line[len(name) + 2:]
    return ""


def repair_batch(host, rows: list, project: Path, *deploy_args: str) -> Repair:
    """Apply ``rows``' breakages on ``host`` under the host lock, release it, and let the deploy repair
    them: it must take the full run and exit 0, drift must then be clean and the next deploy take the
    probe path. Each row's restore runs afterwards only when drift still finds something (the
    deploy did not repair all)."""
    archive = hostctl.MANIFEST["archive_url"]
    out = Repair(rows=list(rows))
    hold_lock(host)
    try:
        for c in rows:
            host.run(c.breakage.replace("{archive}", archive))
    finally:
        release_lock(host)
    t0 = time.monotonic()
    proc = deploy(host.name, project, *deploy_args)
    out.seconds = time.monotonic() - t0
    out.exit_code, out.output = proc.returncode, proc.stdout + proc.stderr
    out.path = path_line(host.name, proc.stderr)
    if not out.path.startswith("full run: "):
        out.problems.append(f"the deploy did not take the full run: {out.path or 'no path line'}")
    if proc.returncode != 0:
        out.problems.append(f"the deploy exited {proc.returncode}")
    out.drift_after, records, text = drift_json(host.name, project)
    if out.drift_after != 0:
        out.problems.append("drift after the deploy: " + "; ".join(f"{r['kind']} {r['item']}" for r in records
                                                                      if r["severity"] in ("drift", "error")))
        for c in reversed(rows):
            host.run(c.restore, check=False)
    nxt = deploy(host.name, project, *deploy_args)
    out.next_path = path_line(host.name, nxt.stderr)
    if not out.next_path.startswith("converged (probe)"):
        out.problems.append(f"the next deploy did not take the probe path: {out.next_path or nxt.stderr[-500:]}")
    return out
