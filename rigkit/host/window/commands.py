"""The window's sub-commands (``rigkit-agent window CMD``, run as root; see :mod:`rigkit.host.window`).
Every one that changes the serving state holds the host lock (:mod:`rigkit.host.lock`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from rigkit.host.config import ConfigError, HostConfig
from rigkit.host.config import load as load_config
from rigkit.host.lock import LockHeld, RigLock
from rigkit.host.journal import Journal, now_iso
from rigkit.common.journal import JOURNAL_VERSION, is_open, read_journal
from rigkit.host.window.steps import Window, boot_id
from rigkit.host.window.system import sh, unit_state

UNIT = "rigkit-window"
#: How long a transient window unit may take to restore after a stop request (s).
STOP_TIMEOUT_S = 1800
#: How long the window unit waits for ``window start`` to let go of the host lock (s).
LOCK_TAKEOVER_S = 30.0


def _agent_argv() -> list[str]:
    """How to run this agent again (the same interpreter and module), for ``systemd-run``."""
    return [sys.executable, "-m", "rigkit.host"]


RELAUNCH_S = 10.0  # how long a window start retries while the last window's unit is still being unloaded


def _launch(args: list[str], description: str) -> subprocess.CompletedProcess:
    """``systemd-run --unit=rigkit-window --collect`` of ``rigkit-agent window ARGS``. A transient
    unit that has just stopped stays loaded until systemd collects it, and ``systemd-run`` refuses a
    name still loaded (``Unit rigkit-window.service was already loaded or has a fragment file``),
    which a window started right after another met; such a start is retried for up to
    :data:`RELAUNCH_S` s. (Asking ``systemctl show`` about the unit meanwhile is no way to wait: it
    loads the unit from its transient file and keeps it from being collected.)"""
    end = time.monotonic() + RELAUNCH_S
    while True:
        sh("systemctl", "reset-failed", f"{UNIT}.service")
        proc = sh("systemd-run", f"--unit={UNIT}", "--collect", f"--description={description}",
                  "-p", f"TimeoutStopSec={STOP_TIMEOUT_S}", "-p", "KillMode=mixed",
                  *_agent_argv(), "window", *args)
        if proc.returncode == 0 or "already loaded" not in proc.stderr or time.monotonic() >= end:
            return proc
        time.sleep(0.5)


def _unit_running() -> bool:
    return unit_state(f"{UNIT}.service") in ("active", "activating", "deactivating")


def with_host_config(plan: dict, cfg: HostConfig) -> dict:
    """``plan`` (from the control side: tenant, presets, force, timeouts, bench settings, VRAM
    figures, and the timers to pause and lock files of this run's spec) completed with what the host
    config says of this host — ports, units, the resident, the API key file, rigkit's own units, the
    declared power limit (``power_limit_w``, W, and ``power_index``: what a power-limit sweep puts
    back) — which wins (``vram_idle``: ``{"timeout_s", "idle_mib", "index"}`` from its ``vram``, which
    the waits for the GPU's memory read). ``paused_timers``/``lock_files`` come from the host config only when the plan has none (the
    operator may name others for one window with ``rigkit window --data``)."""
    tenant = cfg.get("tenants", plan["tenant"])
    power = cfg.data.get("power") or {}
    return {"paused_timers": list(cfg.get("paused_timers")), "lock_files": list(cfg.get("lock_files")),
            **plan, "tenant_unit": tenant["unit"], "tenant_port": tenant["port"], "tenant_model": tenant["model"],
            "tenant_env": tenant.get("env"),
            "proxy_unit": cfg.get("llama_swap", "unit"), "proxy_port": cfg.proxy_port,
            "resident": cfg.resident, "api_key_file": str(cfg.path("api_key_file")), "own_units": cfg.own_units,
            "vram_idle": dict(zip(("timeout_s", "idle_mib", "index"), cfg.vram_idle)),
            "power_limit_w": power.get("limit_w"), "power_index": power.get("index", 0)}


def cmd_start(plan: dict, cfg: HostConfig, journal_path: Path) -> int:
    """Under the host lock: refuse while a window is open, its unit runs or the lock is held (exit
    1, naming the holder); else write a fresh journal for ``plan`` and launch the window unit, which
    takes the lock over for the window's whole duration. Prints ``{"id": ...}``."""
    lock = RigLock(cfg.path("lock"), f"window start ({plan.get('tenant')})")
    try:
        lock.acquire()
    except LockHeld as exc:
        print(f"window: {exc}", file=sys.stderr)
        return 1
    try:
        try:
            old = read_journal(journal_path)
        except ValueError as exc:
            print(f"window: {exc}; move it away after checking the rig by hand", file=sys.stderr)
            return 1
        if _unit_running():
            print(f"window: {UNIT}.service is running (window {old.get('id') if old else '?'}); "
                  "follow it with `rigkit window --follow`, or end it with `rigkit window --abort`", file=sys.stderr)
            return 1
        if is_open(old):
            print(f"window: window {old.get('id')} was left open (state {old.get('state')!r}, since "
                  f"{old.get('started')}); run `rigkit window --restore` first", file=sys.stderr)
            return 1
        plan = with_host_config(plan, cfg)
        carried, resumed_from = [], None
        if plan.get("sweep"):
            if not plan.get("tenant_env"):
                print(f"window: {cfg.source} names no tenants.{plan['tenant']}.env (re-run the deploy: a sweep "
                      "installs its settings there)", file=sys.stderr)
                return 1
            if plan["sweep"].get("resume"):
                prev = (old or {}).get("sweep")
                if not prev or prev.get("param") != plan["sweep"]["param"]:
                    print(f"window: --resume: no {plan['sweep']['param']} sweep journal on this host (the last "
                          f"window, {(old or {}).get('id') or 'none'}, ran no such sweep); run it without --resume",
                          file=sys.stderr)
                    return 2
                carried, resumed_from = list(prev.get("cells") or []), old.get("id")
        wid = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
        data = {"version": JOURNAL_VERSION, "id": wid, "tenant": plan["tenant"], "state": "preflight",
                "outcome": None, "error": None, "started": now_iso(), "ended": None, "boot_id": boot_id(),
                "unit": f"{UNIT}.service", "plan": plan, "results_dir": str(cfg.path("windows_dir") / wid),
                "timers_active_before": [], "proxy_was_active": None,
                "changed": {"timers": [], "proxy_stopped": False, "tenant_started": False},
                "boot_to_healthy_s": None, "warmup": None, "bench": {}, "steps": [], "restores": 0,
                "notes": [f"{now_iso()} {w}" for w in lock.warnings]}
        if plan.get("sweep"):
            data["changed"]["tenant_env"] = None
            data["sweep"] = {"cells": carried, "resumed_from": resumed_from, "starts": {}}
        Journal(data, journal_path).save()
        proc = _launch(["run"], f"rigkit window {wid} ({plan['tenant']})")
        if proc.returncode != 0:
            Journal(data, journal_path).set(state="closed", outcome="failed", ended=now_iso(),
                                            error=f"systemd-run failed: {proc.stderr.strip()[-300:]}")
            print(f"window: systemd-run failed: {proc.stderr.strip()}", file=sys.stderr)
            return 1
    finally:
        lock.release()
    print(json.dumps({"id": wid}))
    return 0


def _take_over(cfg: HostConfig, journal: Journal, what: str) -> RigLock | None:
    """The host lock for the window unit (``cmd_start`` lets go of it just after launching the
    unit, so wait a little); None — journalled — when someone else holds it."""
    lock = RigLock(cfg.path("lock"), what)
    try:
        lock.acquire(wait_s=LOCK_TAKEOVER_S)
    except LockHeld as exc:
        journal.note(f"{exc}")
        return None
    for w in lock.warnings:
        journal.note(w)
    return lock


def cmd_run(cfg: HostConfig, journal_path: Path) -> int:
    """The window unit's main: take the host lock, run the window (steps, then restore), let go."""
    j = read_journal(journal_path)
    if j is None:
        print("window: no journal", file=sys.stderr)
        return 1
    journal = Journal(j, journal_path)
    lock = _take_over(cfg, journal, f"window {j.get('id')} ({j.get('tenant')})")
    if lock is None:
        journal.set(state="closed", outcome="refused", ended=now_iso(),
                    error="the rig lock is held by someone else; nothing was touched (see notes)")
        return 1
    try:
        return Window(journal).run()
    finally:
        lock.release()


def cmd_restore(journal_path: Path) -> int:
    """Replay the restore of an open window as the window unit; abort a running window instead
    (it restores itself). Changes nothing when no window is open. Prints one JSON line
    ``{"action": "none"|"abort"|"restore", "id": ...}``."""
    if _unit_running():
        return cmd_abort(journal_path)
    try:
        j = read_journal(journal_path)
    except ValueError as exc:
        print(f"window: {exc}", file=sys.stderr)
        return 1
    if not is_open(j):
        print(json.dumps({"action": "none", "id": (j or {}).get("id"), "state": (j or {}).get("state")}))
        return 0
    Journal(j, journal_path).note(f"restore replayed (boot {boot_id()}, window started on boot {j.get('boot_id')})")
    proc = _launch(["restore-run"], f"rigkit window {j.get('id')} restore")
    if proc.returncode != 0:
        print(f"window: systemd-run failed: {proc.stderr.strip()}", file=sys.stderr)
        return 1
    print(json.dumps({"action": "restore", "id": j.get("id")}))
    return 0


def cmd_restore_run(cfg: HostConfig, journal_path: Path) -> int:
    """The restore replay's main (in the window unit): under the host lock, restore an open window."""
    j = read_journal(journal_path)
    if not is_open(j):
        return 0
    journal = Journal(j, journal_path)
    lock = _take_over(cfg, journal, f"window {j.get('id')} restore")
    if lock is None:
        return 1
    try:
        w = Window(journal)
        w.install_signals()
        for st in j.get("steps") or []:
            if st.get("status") == "running":
                st.update(status="failed", detail="the window's unit ended while this step ran")
        if j.get("outcome") is None:
            w.j.set(outcome="interrupted", error=j.get("error") or "the window's unit ended before it restored")
        cur = (j.get("sweep") or {}).get("current")
        if cur:
            j["sweep"]["current"] = None
            w.j.note(f"sweep: the cell {cur['setting']} / {cur['workload']} / {cur['context']} tokens (started "
                     f"{cur['started']}) was cut short and is not journalled; --resume measures it")
        return 0 if w.restore() else 1
    finally:
        lock.release()


def cmd_abort(journal_path: Path) -> int:
    """SIGTERM to the running window's main process (it restores); a replayed restore when the
    unit is gone but the window is open; nothing otherwise. Prints one JSON line."""
    j = None
    try:
        j = read_journal(journal_path)
    except ValueError:
        pass
    if _unit_running():
        sh("systemctl", "kill", "--kill-whom=main", "--signal=SIGTERM", f"{UNIT}.service", check=True)
        print(json.dumps({"action": "abort", "id": (j or {}).get("id")}))
        return 0
    if is_open(j):
        return cmd_restore(journal_path)
    print(json.dumps({"action": "none", "id": (j or {}).get("id"), "state": (j or {}).get("state")}))
    return 0


def cmd_follow(journal_path: Path, interval_s: float = 0.25, wait_start_s: float = 10.0) -> int:
    """Print the journal as one compact JSON line whenever it changes, until the window unit has
    ended (or, when it is not running, at once if the journal is closed and after
    ``wait_start_s`` s otherwise); then exit 0."""
    last = None
    t0 = time.monotonic()
    seen_running = False
    while True:
        try:
            j = read_journal(journal_path)
        except ValueError:
            j = None
        text = json.dumps(j, sort_keys=True) if j is not None else "null"
        if text != last:
            print(text, flush=True)
            last = text
        running = _unit_running()
        seen_running = seen_running or running
        if not running and (not is_open(j) or seen_running or time.monotonic() - t0 > wait_start_s):
            # over; or the unit died and left the journal open (``restore`` replays it)
            return 0
        time.sleep(interval_s)


def main(argv: list[str]) -> int:
    """``rigkit-agent window {start,run,abort,restore,restore-run,follow,status}`` (the journal path
    and everything else of this host from the host config)."""
    import argparse

    ap = argparse.ArgumentParser(prog="rigkit-agent window", description="tenant windows on the host")
    ap.add_argument("cmd", choices=["start", "run", "abort", "restore", "restore-run", "follow", "status"])
    ap.add_argument("--journal", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        cfg = load_config()
    except ConfigError as exc:
        print(f"window: {exc}", file=sys.stderr)
        return 1
    jp = Path(args.journal) if args.journal else cfg.path("window_journal")
    if args.cmd == "start":
        try:
            plan = json.loads(sys.stdin.read())
        except ValueError as exc:
            print(f"window: the plan on stdin is not JSON ({exc})", file=sys.stderr)
            return 2
        return cmd_start(plan, cfg, jp)
    if args.cmd == "status":
        try:
            print(json.dumps(read_journal(jp)))
        except ValueError as exc:
            print(f"window: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "run":
        return cmd_run(cfg, jp)
    if args.cmd == "restore-run":
        return cmd_restore_run(cfg, jp)
    return {"abort": cmd_abort, "restore": cmd_restore, "follow": cmd_follow}[args.cmd](jp)
