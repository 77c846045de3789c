"""Tenant windows on the host (DESIGN.md "Lifecycle", the *window* state): measure a tenant
outside the proxy, then always come back to *steady*.

Runs in the host agent (``rigkit-agent window ...``): standard library and ``requests`` only,
plus the bench client (:mod:`rigkit.host.bench.client`, ``workloads``, ``results``, ``context``;
the chart is drawn on the control machine, see :func:`_bench_runner`). The control side
(:mod:`rigkit.window_cli`) builds a *plan* from the spec and hands it to ``window start``.

Sub-commands (``rigkit-agent window CMD``; run as root):

- ``start`` — read the plan (JSON) on stdin, refuse while a window is open, write a fresh
  journal and launch ``window run`` as the transient unit ``rigkit-window.service``
  (``systemd-run --collect``: the window lives on without the SSH session that started it).
- ``run`` — the window itself (inside the unit): preflight, pause the declared timers, stop
  llama-swap, confirm the VRAM is free, start ``hyperqwen.service``, wait for ``/health``
  (boot-to-healthy in s), warm it up (``bench/warmup.sh``'s recipe), run the bench presets;
  then restore, whatever happened.
- ``abort`` — ask a running window to end early (SIGTERM to its main process; it restores).
- ``restore`` — replay the restore from the journal when a window was left open (its unit
  killed, a reboot), as the same transient unit (``restore-run``); nothing when none is open.
- ``follow`` — print the journal as one JSON line each time it changes, until the window is
  over and its unit gone (what ``rigkit window`` reads over SSH).
- ``status`` — print the journal (``null`` when there is none).

The journal (``/var/lib/rigkit/window.json``, written atomically after every change; a copy
with the bench results in ``/var/lib/rigkit/windows/<id>/``) is a JSON object::

    {"version": 1, "id": "20261020T101500Z-ab12cd", "tenant": "hyperqwen",
     "state": "preflight|open|restoring|restored|restore-failed|closed",
     "outcome": null|"ok"|"failed"|"aborted"|"refused"|"interrupted",
     "error": null|str, "started": UTC ISO, "ended": UTC ISO|null, "boot_id": str,
     "unit": "rigkit-window.service", "plan": {...}, "results_dir": str,
     "timers_active_before": [str], "proxy_was_active": bool|null,
     "changed": {"timers": [str], "proxy_stopped": bool, "tenant_started": bool},
     "boot_to_healthy_s": float|null, "warmup": {...}|null,
     "bench": {preset: {"dir", "exit_code", "verdicts", "status"}},
     "steps": [{"name", "phase": "window|restore", "started": UTC ISO, "duration_s": float|null,
                "status": "running|ok|failed|skipped", "detail": str}],
     "restores": int, "notes": [str]}

The window is *open* (keeper and watchdog stand down, the deploy refuses) while ``state`` is
anything but ``closed`` (preflight refused, nothing touched) or ``restored``. ``changed`` says
what the window did that restore has not undone yet: the source of :func:`expected_deviations`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from rigkit import paths

JOURNAL = Path(paths.WINDOW_JOURNAL)
WINDOWS_DIR = Path(paths.STATE_DIR) / "windows"
UNIT = "rigkit-window"
CLOSED_STATES = ("closed", "restored")
JOURNAL_VERSION = 1
#: How long a transient window unit may take to restore after a stop request (s).
STOP_TIMEOUT_S = 1800


class Refused(Exception):
    """Preflight said no; nothing was touched. The message names every reason."""


class StepFailed(Exception):
    """A window step failed; the message says which and why. Restore follows."""


class Interrupted(BaseException):
    """SIGTERM/SIGINT/SIGHUP reached the window (``rigkit window --abort``, Ctrl-C on the
    control side, ``systemctl stop``). A BaseException so no ``except Exception`` swallows it."""


# ------------------------------------------------------------------------------------ journal
def now_iso() -> str:
    """UTC now, ISO 8601 with seconds (``2026-10-20T10:15:00+00:00``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_journal(path: str | os.PathLike = JOURNAL) -> dict | None:
    """The window journal at ``path`` as a dict (format: module doc), or None when there is no
    such file. Raises ValueError (naming the path) when it is not a JSON object."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{p}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: not a JSON object")
    return data


def is_open(journal: dict | None) -> bool:
    """True when ``journal`` describes an open window: any ``state`` but ``closed``/``restored``
    (the contract the keeper, the watchdog and the deploy's preflight read)."""
    return bool(journal) and journal.get("state") not in (None, *CLOSED_STATES)


def expected_deviations(journal: dict | None) -> list[str]:
    """What differs from *steady* because a window is open, and is not drift.

    One string per deviation, ``"<what> <observed state>: <why>"`` — the first word a unit
    name, or ``:PORT``: ``"hyperqwen.service active: ..."``, ``"llama-swap.service inactive: ..."``,
    ``":8080 closed: ..."``, ``"<timer> inactive: ..."``. Empty when no window is open. Derived
    from ``journal["changed"]`` (what the window did and restore has not undone yet) and the
    plan's unit names and ports.
    """
    if not is_open(journal):
        return []
    plan = journal.get("plan") or {}
    changed = journal.get("changed") or {}
    wid = journal.get("id", "?")
    tenant_unit = plan.get("tenant_unit", "hyperqwen.service")
    proxy_unit = plan.get("proxy_unit", "llama-swap.service")
    out: list[str] = []
    if changed.get("tenant_started"):
        out.append(f"{tenant_unit} active: window {wid} swapped the tenant in "
                   f"(:{plan.get('tenant_port', 18020)} serves {plan.get('tenant', 'hyperqwen')})")
    if changed.get("proxy_stopped"):
        out.append(f"{proxy_unit} inactive: window {wid} stopped the proxy")
        out.append(f":{plan.get('proxy_port', 8080)} closed: window {wid} stopped the proxy "
                   f"({plan.get('resident', 'the resident')} not loaded)")
    for timer in changed.get("timers") or []:
        out.append(f"{timer} inactive: window {wid} paused it")
    return out


class Journal:
    """The journal file plus the in-memory dict; every change is saved atomically
    (temp file, fsync, rename)."""

    def __init__(self, data: dict, path: Path = JOURNAL) -> None:
        self.data = data
        self.path = path

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.data, fh, indent=1)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        if self.data.get("state") in CLOSED_STATES + ("restore-failed",) and self.data.get("results_dir"):
            archive = Path(self.data["results_dir"]) / "journal.json"
            archive.parent.mkdir(parents=True, exist_ok=True)
            archive.write_text(json.dumps(self.data, indent=1) + "\n")

    def set(self, **kw: Any) -> None:
        self.data.update(kw)
        self.save()

    def note(self, text: str) -> None:
        self.data.setdefault("notes", []).append(f"{now_iso()} {text}")
        self.save()

    def step(self, name: str, fn: Callable[[], str | None], phase: str = "window",
             fatal: bool = True) -> str | None:
        """Run ``fn`` as step ``name``: journalled ``running`` first, then ``ok`` (``fn``'s
        return value is the detail) or ``failed`` with the error. Re-raises when ``fatal``
        (:class:`Interrupted` always)."""
        rec = {"name": name, "phase": phase, "started": now_iso(), "duration_s": None,
               "status": "running", "detail": ""}
        self.data.setdefault("steps", []).append(rec)
        self.save()
        t0 = time.monotonic()
        try:
            detail = fn()
        except Interrupted:
            rec.update(status="failed", detail="interrupted (abort requested)",
                       duration_s=round(time.monotonic() - t0, 3))
            self.save()
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is journalled
            msg = str(exc) if isinstance(exc, (StepFailed, Refused)) else f"{type(exc).__name__}: {exc}"
            rec.update(status="failed", detail=msg, duration_s=round(time.monotonic() - t0, 3))
            self.save()
            if fatal:
                raise
            return None
        rec.update(status="ok", detail=detail or "", duration_s=round(time.monotonic() - t0, 3))
        self.save()
        return detail


# --------------------------------------------------------------------------------- host probes
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


def boot_id() -> str:
    """``/proc/sys/kernel/random/boot_id`` (changes with every boot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def established_clients(port: int) -> list[str]:
    """Established TCP connections *to* local ``port`` (``/proc/net/tcp`` and ``tcp6``, state
    01), as ``"REMOTE_IP:PORT"`` strings: the proxy's clients. Connections the proxy opens to its
    members use other local ports and are not counted."""
    out = []
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 4 or f[3] != "01":
                continue
            local_port = int(f[1].rsplit(":", 1)[1], 16)
            if local_port != port:
                continue
            rip, rport = f[2].rsplit(":", 1)
            out.append(f"{_hex_ip(rip)}:{int(rport, 16)}")
    return out


def _hex_ip(h: str) -> str:
    """An address from /proc/net/tcp{,6} (little-endian hex words) as text."""
    import ipaddress

    raw = bytes.fromhex(h)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return str(ip.ipv4_mapped)
    return str(ip)


def gpu_memory_mib() -> tuple[float, float]:
    """``(used, total)`` MiB of GPU 0 from ``nvidia-smi --query-gpu=memory.used,memory.total
    --format=csv,noheader,nounits``. Raises StepFailed when nvidia-smi fails."""
    proc = sh("nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits",
              timeout=30)
    if proc.returncode != 0:
        raise StepFailed(f"nvidia-smi exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:300]}")
    used, total = (float(x) for x in proc.stdout.strip().splitlines()[0].split(","))
    return used, total


def port_open(port: int, host: str = "127.0.0.1", timeout_s: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def read_api_key(path: str) -> str | None:
    """``VLLM_API_KEY`` from the secret file (``KEY=VALUE`` lines), or None. Never printed."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("VLLM_API_KEY="):
                return line.split("=", 1)[1].strip().strip('"').strip("'") or None
    except OSError:
        return None
    return None


# ------------------------------------------------------------------------------------ the window
class Window:
    """One window run (or a restore replay) against ``journal``."""

    def __init__(self, journal: Journal) -> None:
        self.j = journal
        self.plan: dict = journal.data["plan"]
        self.interruptible = True
        self.interrupts = 0

    # signals ---------------------------------------------------------------------------
    def install_signals(self) -> None:
        def handler(signum, _frame):
            self.interrupts += 1
            if self.interruptible:
                self.interruptible = False
                raise Interrupted(signal.Signals(signum).name)
            # during restore: note it, keep restoring
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, handler)

    def checkpoint(self) -> None:
        """Raise Interrupted if an abort arrived while signals could not raise."""
        if self.interrupts and self.interruptible:
            self.interruptible = False
            raise Interrupted("abort requested")

    # the steps -------------------------------------------------------------------------
    def preflight(self) -> str:
        p = self.plan
        busy = []
        locks = [f for f in p.get("lock_files") or [] if os.path.exists(f)]
        clients = established_clients(int(p["proxy_port"]))
        if locks:
            busy.append(f"lock file(s) present: {', '.join(locks)} (a session holds the GPU)")
        if clients:
            busy.append(f"llama-swap (:{p['proxy_port']}) has {len(clients)} established client "
                        f"connection(s), from {', '.join(sorted(clients))}")
        if busy and p.get("force"):
            self.j.note("preflight overridden by --force: " + "; ".join(busy))
            busy = []
        used, total = gpu_memory_mib()
        need = float(p["tenant_vram_gib"])
        reserve = float(p.get("vram_reserve_gib", 0))
        if need + reserve > total / 1024:
            raise Refused(f"{p['tenant']} needs {need:g} GiB + {reserve:g} GiB reserve; the GPU has "
                          f"{total / 1024:.2f} GiB (nvidia-smi memory.total)")
        if busy:
            raise Refused("; ".join(busy) + "; run again when it is released, or pass --force")
        return (f"no client connections on :{p['proxy_port']}; lock files absent: "
                f"{', '.join(p.get('lock_files') or []) or '(none declared)'}; "
                f"{p['tenant']} {need:g} GiB + {reserve:g} GiB reserve fits {total / 1024:.2f} GiB")

    def pause_timers(self) -> str:
        declared = list(self.plan.get("paused_timers") or [])
        active = [t for t in declared if unit_state(t) == "active"]
        self.j.set(timers_active_before=active)
        changed = self.j.data["changed"]
        for t in active:
            changed["timers"].append(t)
            self.j.save()
            sh("systemctl", "stop", t, check=True)
        # let a job the timer already started finish (an agent mid-request)
        drained = self._drain(active, float(self.plan["timeouts"].get("timer_drain_s", 60)))
        inactive = [t for t in declared if t not in active]
        return (f"paused {', '.join(active) or 'none'}" + (f"; not active before: {', '.join(inactive)}" if inactive else "")
                + (f"; {drained}" if drained else ""))

    def _drain(self, timers: list[str], timeout_s: float) -> str:
        services = []
        for t in timers:
            trig = sh("systemctl", "show", "-p", "Triggers", "--value", t).stdout.split()
            services += trig
        end = time.monotonic() + timeout_s
        busy = [s for s in services if unit_state(s) in ("active", "activating", "deactivating")]
        while busy and time.monotonic() < end:
            time.sleep(0.5)
            busy = [s for s in busy if unit_state(s) in ("active", "activating", "deactivating")]
        if busy:
            return f"still running after {timeout_s:g} s (left alone): {', '.join(busy)}"
        return ""

    def stop_proxy(self) -> str:
        unit, port = self.plan["proxy_unit"], int(self.plan["proxy_port"])
        was = unit_state(unit)
        self.j.set(proxy_was_active=was == "active")
        self.j.data["changed"]["proxy_stopped"] = True
        self.j.save()
        sh("systemctl", "stop", unit, check=True, timeout=180)
        end = time.monotonic() + float(self.plan["timeouts"].get("proxy_s", 60))
        while port_open(port):
            if time.monotonic() > end:
                raise StepFailed(f":{port} still accepts connections after stopping {unit}")
            time.sleep(0.2)
        return f"{unit} stopped (was {was}); :{port} closed"

    def vram_free(self) -> str:
        need_mib = float(self.plan["tenant_vram_gib"]) * 1024
        timeout = float(self.plan["timeouts"].get("vram_free_s", 60))
        end = time.monotonic() + timeout
        while True:
            used, total = gpu_memory_mib()
            if total - used >= need_mib:
                return (f"{(total - used) / 1024:.2f} GiB free of {total / 1024:.2f} GiB "
                        f"(used {used:.0f} MiB); {self.plan['tenant']} needs {need_mib / 1024:g} GiB")
            if time.monotonic() > end:
                raise StepFailed(f"only {(total - used) / 1024:.2f} GiB of {total / 1024:.2f} GiB free after "
                                 f"{timeout:g} s (used {used:.0f} MiB; nvidia-smi --query-compute-apps "
                                 f"says who); {self.plan['tenant']} needs {need_mib / 1024:g} GiB")
            self.checkpoint()
            time.sleep(0.5)

    def start_tenant(self) -> str:
        unit = self.plan["tenant_unit"]
        self.j.data["changed"]["tenant_started"] = True
        self.j.save()
        self._t_start = time.monotonic()
        sh("systemctl", "reset-failed", unit)
        sh("systemctl", "start", unit, check=True, timeout=120)
        return f"systemctl start {unit}"

    def healthy(self) -> str:
        import requests

        p = self.plan
        url = f"http://127.0.0.1:{p['tenant_port']}/health"
        timeout = float(p["timeouts"].get("healthy_s", 900))
        t0 = getattr(self, "_t_start", time.monotonic())
        end = t0 + timeout
        last = "no answer yet"
        while True:
            try:
                r = requests.get(url, timeout=5)
                if r.status_code == 200:
                    s = round(time.monotonic() - t0, 2)
                    self.j.set(boot_to_healthy_s=s)
                    return f"{url} 200 after {s} s (boot to healthy)"
                last = f"HTTP {r.status_code}"
            except requests.RequestException as exc:
                last = type(exc).__name__
            state = unit_state(p["tenant_unit"])
            if state not in ("active", "activating"):
                raise StepFailed(f"{p['tenant_unit']} is {state} before {url} answered 200 "
                                 f"(the tenant exited; see journalctl -u {p['tenant_unit']})")
            if time.monotonic() > end:
                raise StepFailed(f"{p['tenant']} not healthy after {timeout:g} s ({url}: {last})")
            self.checkpoint()
            time.sleep(0.5)

    def warmup(self) -> str:
        """HyperQwen's ``bench/warmup.sh``: ``/health``, then 2 requests of 128 prompt / 128
        output tokens at concurrency 1, then 8 of 256/256 at concurrency 4, greedy,
        ``ignore_eos``, the API key as bearer. A failure is journalled, not fatal."""
        import requests

        p = self.plan
        base = f"http://127.0.0.1:{p['tenant_port']}"
        key = read_api_key(p["api_key_file"])
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        timeout = float(p["timeouts"].get("warmup_s", 600))
        rng = random.Random(7)
        words = "the of and to in is was for on with as by at from that this it be are".split()
        t0 = time.monotonic()

        def one(n_in: int, n_out: int) -> tuple[bool, str, int]:
            prompt = " ".join(rng.choice(words) for _ in range(n_in))
            body = {"model": p["tenant_model"], "prompt": prompt, "max_tokens": n_out, "temperature": 0,
                    "ignore_eos": True}
            try:
                r = requests.post(f"{base}/v1/completions", json=body, headers=headers, timeout=timeout)
            except requests.RequestException as exc:
                return False, type(exc).__name__, 0
            if r.status_code != 200:
                return False, f"HTTP {r.status_code}", 0
            return True, "", int(((r.json() or {}).get("usage") or {}).get("completion_tokens") or 0)

        health = requests.get(f"{base}/health", timeout=10).status_code
        results = []
        for n, conc, size in ((2, 1, 128), (8, 4, 256)):
            self.checkpoint()
            with ThreadPoolExecutor(max_workers=conc) as pool:
                results += list(pool.map(lambda _i, s=size: one(s, s), range(n)))
        failed = [r[1] for r in results if not r[0]]
        info = {"health": health, "requests": len(results), "failed": len(failed),
                "completion_tokens": sum(r[2] for r in results), "duration_s": round(time.monotonic() - t0, 2)}
        self.j.set(warmup=info)
        if failed:
            raise StepFailed(f"warm-up: {len(failed)} of {len(results)} requests failed ({failed[0]}); "
                             "logged, not fatal")
        return (f"{len(results)} requests (2 x 128/128 at concurrency 1, 8 x 256/256 at concurrency 4), "
                f"{info['completion_tokens']} tokens in {info['duration_s']} s")

    def bench(self, preset_name: str) -> str:
        state = unit_state(self.plan["tenant_unit"])
        if state != "active":  # it died during the warm-up or an earlier preset
            raise StepFailed(f"{self.plan['tenant_unit']} is {state} before bench {preset_name} "
                             f"(the engine exited; see journalctl -u {self.plan['tenant_unit']})")
        summary = run_bench(self.plan, preset_name, self.j.data, self.checkpoint)
        out = Path(self.j.data["results_dir"]) / f"bench-{preset_name}"
        verdicts = {n: v["verdict"] for n, v in summary["verdicts"].items()}
        ordered = [("warmup", summary.get("warmup")), *summary["workloads"].items()]
        # the cause first: a workload that failed, not one left unrun because of it
        failed = {n: w.get("error") for n, w in ordered if w and w.get("status") not in ("ok", "not-run")} or \
            {n: w.get("error") for n, w in ordered if w and w.get("status") != "ok"}
        self.j.data.setdefault("bench", {})[preset_name] = {
            "dir": str(out), "exit_code": summary["exit_code"], "verdicts": verdicts,
            "status": "failed" if failed else "ok"}
        self.j.save()
        if failed:
            name, err = next(iter(failed.items()))
            end = time.monotonic() + 2  # a dead engine's unit takes a moment to go inactive
            state = unit_state(self.plan["tenant_unit"])
            while state == "active" and time.monotonic() < end:
                time.sleep(0.2)
                state = unit_state(self.plan["tenant_unit"])
            raise StepFailed(f"bench {preset_name}: {name} failed: {err} ({self.plan['tenant_unit']} {state})")
        return f"results in {out}; verdicts: " + ", ".join(f"{n} {v}" for n, v in verdicts.items())

    # restore ---------------------------------------------------------------------------
    def restore(self) -> bool:
        """Stop the tenant, start the proxy, wait for the resident, verify it with a real
        completion through the proxy, resume the timers that were active. Every sub-step runs
        even when an earlier one failed. Returns True when all succeeded."""
        self.interruptible = False
        self.j.set(state="restoring", restores=int(self.j.data.get("restores") or 0) + 1)
        ok = True
        for name, fn in (("stop-tenant", self.r_stop_tenant), ("start-proxy", self.r_start_proxy),
                         ("resident-ready", self.r_resident_ready), ("verify-resident", self.r_verify),
                         ("resume-timers", self.r_resume_timers)):
            self.j.step(name, fn, phase="restore", fatal=False)
            ok = ok and self.j.data["steps"][-1]["status"] == "ok"
        self.j.set(state="restored" if ok else "restore-failed", ended=now_iso())
        if self.interrupts:
            self.j.note(f"{self.interrupts} abort request(s) arrived during restore; restore went on")
        return ok

    def r_stop_tenant(self) -> str:
        unit = self.plan["tenant_unit"]
        state = unit_state(unit)
        sh("systemctl", "stop", unit, check=True, timeout=float(self.plan["timeouts"].get("tenant_stop_s", 120)))
        # an engine that died, or compose's exit status on SIGTERM, leaves the unit "failed";
        # steady has it inactive
        sh("systemctl", "reset-failed", unit)
        self.j.data["changed"]["tenant_started"] = False
        self.j.save()
        port = int(self.plan["tenant_port"])
        end = time.monotonic() + 30
        while port_open(port) and time.monotonic() < end:
            time.sleep(0.2)
        if port_open(port):
            raise StepFailed(f":{port} still open after stopping {unit}")
        return f"{unit} stopped (was {state}); :{port} closed"

    def r_start_proxy(self) -> str:
        unit, port = self.plan["proxy_unit"], int(self.plan["proxy_port"])
        # a failed proxy, or one stopped and started often ("start request repeated too quickly"),
        # refuses to start until its failure and start-limit counters are reset
        sh("systemctl", "reset-failed", unit)
        sh("systemctl", "start", unit, check=True, timeout=180)
        end = time.monotonic() + float(self.plan["timeouts"].get("proxy_s", 60))
        while not port_open(port):
            if unit_state(unit) not in ("active", "activating"):
                raise StepFailed(f"{unit} is {unit_state(unit)} (journalctl -u {unit})")
            if time.monotonic() > end:
                raise StepFailed(f"{unit} started but :{port} does not accept connections")
            time.sleep(0.2)
        self.j.data["changed"]["proxy_stopped"] = False
        self.j.save()
        return f"{unit} active; :{port} open"

    def r_resident_ready(self) -> str:
        import requests

        p = self.plan
        base = f"http://127.0.0.1:{p['proxy_port']}"
        timeout = float(p["timeouts"].get("resident_s", 300))
        t0 = time.monotonic()
        last = "not listed"
        while time.monotonic() - t0 < timeout:
            try:
                running = requests.get(f"{base}/running", timeout=10).json().get("running", [])
                st = next((m.get("state") for m in running if m.get("model") == p["resident"]), None)
                if st == "ready":
                    return f"{p['resident']} ready after {time.monotonic() - t0:.1f} s"
                last = st or "not listed"
            except (requests.RequestException, ValueError) as exc:
                last = type(exc).__name__
            state = unit_state(p["proxy_unit"])
            if state not in ("active", "activating"):
                raise StepFailed(f"{p['proxy_unit']} is {state}; {p['resident']} cannot come back through it")
            time.sleep(0.5)
        raise StepFailed(f"{p['resident']} not ready after {timeout:g} s (GET {base}/running: {last})")

    def r_verify(self) -> str:
        import requests

        p = self.plan
        url = f"http://127.0.0.1:{p['proxy_port']}/v1/chat/completions"
        body = {"model": p["resident"], "max_tokens": 4, "temperature": 0,
                "messages": [{"role": "user", "content": "Say OK."}]}
        r = requests.post(url, json=body, timeout=float(p["timeouts"].get("resident_s", 300)))
        if r.status_code != 200:
            raise StepFailed(f"POST {url} (model {p['resident']}) answered HTTP {r.status_code}: {r.text[:200]}")
        n = ((r.json() or {}).get("usage") or {}).get("completion_tokens")
        if not n:
            raise StepFailed(f"POST {url} (model {p['resident']}): no completion tokens in the answer")
        return f"{p['resident']} answered a real completion through :{p['proxy_port']} ({n} tokens)"

    def r_resume_timers(self) -> str:
        timers = list(self.j.data.get("timers_active_before") or [])
        failed = []
        for t in timers:
            if sh("systemctl", "start", t).returncode != 0:
                failed.append(t)
                continue
            if t in self.j.data["changed"]["timers"]:
                self.j.data["changed"]["timers"].remove(t)
                self.j.save()
        if failed:
            raise StepFailed(f"could not start {', '.join(failed)}")
        return f"resumed {', '.join(timers) or 'none (none was active)'}"

    # the whole window ------------------------------------------------------------------
    def run(self) -> int:
        """The window: steps, then restore. Returns 0 (clean, restored, bench verdicts OK) or 1."""
        self.install_signals()
        j = self.j
        touched = False
        try:
            try:
                j.step("preflight", self.preflight)
            except Refused as exc:
                j.set(state="closed", outcome="refused", error=str(exc), ended=now_iso())
                return 1
            touched = True
            j.set(state="open")
            j.step("pause-timers", self.pause_timers)
            j.step("stop-proxy", self.stop_proxy)
            j.step("vram-free", self.vram_free)
            j.step("start-tenant", self.start_tenant)
            j.step("healthy", self.healthy)
            j.step("warmup", self.warmup, fatal=False)
            for preset in self.plan.get("bench") or []:
                self.checkpoint()
                j.step(f"bench:{preset}", lambda pr=preset: self.bench(pr))
            self.checkpoint()
            j.set(outcome="ok")
        except Interrupted as exc:
            if sh("systemctl", "is-system-running").stdout.strip() == "stopping":
                j.set(outcome="interrupted", error="the host is shutting down; the window stays open: "
                      "run `rigkit window --restore` once it is back")
                return 1
            j.set(outcome="aborted", error=f"abort requested ({exc})")
        except StepFailed as exc:
            self.interruptible = False
            j.set(outcome="failed", error=str(exc))
        except Exception as exc:  # noqa: BLE001 - restore whatever happened
            self.interruptible = False
            j.set(outcome="failed", error=f"{type(exc).__name__}: {exc}")
            j.note(traceback.format_exc()[-1500:])
        finally:
            self.interruptible = False
            if touched and j.data.get("outcome") != "interrupted":
                self.restore()
            elif not touched and j.data.get("state") == "preflight":
                # nothing was touched (preflight itself failed or was interrupted): close it
                j.set(state="closed", outcome=j.data.get("outcome") or "failed", ended=now_iso())
        benches_ok = all(b.get("exit_code") == 0 for b in (j.data.get("bench") or {}).values())
        return 0 if j.data.get("outcome") == "ok" and j.data.get("state") == "restored" and benches_ok else 1


# ------------------------------------------------------------------------------------- bench
def _bench_runner():
    """:mod:`rigkit.host.bench.runner` (it imports matplotlib only to draw ``chart.png``, which the
    window leaves to the control side: the agent's wheelhouse has no matplotlib)."""
    from rigkit.host.bench import runner

    return runner


def host_context() -> dict:
    """GPU context from ``nvidia-smi`` on this host (:data:`rigkit.host.bench.context.NVIDIA_SMI_QUERY`):
    ``gpu``, ``driver``, ``power_limit_w`` (W), ``memory_total_gib`` (GiB), ``gpu_count``; {} when
    it fails."""
    from rigkit.host.bench.context import NVIDIA_SMI_QUERY, parse_nvidia_smi

    proc = subprocess.run(NVIDIA_SMI_QUERY, shell=True, capture_output=True, text=True, timeout=30)
    try:
        return parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else {}
    except ValueError:
        return {}


def run_bench(plan: dict, preset_name: str, journal: dict, checkpoint: Callable[[], None]) -> dict:
    """Run the bench preset ``preset_name`` (:data:`rigkit.host.bench.workloads.PRESETS`) against the
    tenant on ``127.0.0.1:tenant_port``, the way ``rigkit bench`` does (warm-up workload first,
    tokens from usage), with the host context. Writes ``requests.jsonl`` and ``summary.json``
    to ``<results_dir>/bench-<preset>/`` and returns the summary (``rigkit bench``'s format)."""
    import dataclasses

    from rigkit.host.bench.context import Target, measure_chars_per_token, probe_engine
    from rigkit.host.bench.workloads import (PRESETS, WORKLOAD_NAMES, build_quoting_prompt, build_workloads,
                                        make_document, quoting_sizes)

    runner = _bench_runner()
    settings = plan.get("bench_settings") or {}
    base = f"http://127.0.0.1:{plan['tenant_port']}"
    target = Target(chat_url=f"{base}/v1/chat/completions", aux_base=base, model=plan["tenant_model"],
                    label=f"{plan['host']}/{plan['tenant']} standalone 127.0.0.1:{plan['tenant_port']} "
                          f"(window {journal['id']})",
                    api_key=read_api_key(plan["api_key_file"]))
    preset = PRESETS[preset_name]
    quoting_tokens = max_tokens = None
    if preset_name == "rig":
        quoting_tokens = settings.get("quoting_prompt_tokens")
        max_tokens = settings.get("max_tokens")
        effort = settings.get("reasoning_effort")
        preset = dataclasses.replace(preset, extra_body={"chat_template_kwargs": {"reasoning_effort": effort}}
                                     if effort else {})
    engine = probe_engine(target)
    cpt, cpt_source = measure_chars_per_token(target, "".join(make_document(2000, 3)))
    quoting_cpt = cpt
    if cpt_source == "tokenize":
        n_tok, quote_tok = quoting_sizes(preset, quoting_tokens)
        quoting_cpt, _ = measure_chars_per_token(target, build_quoting_prompt("calibration", n_tok, quote_tok, cpt)[0])
    run_id = runner.new_run_id()
    out_dir = Path(journal["results_dir"]) / f"bench-{preset_name}"
    out_dir.mkdir(parents=True, exist_ok=True)
    wls = build_workloads(preset, list(WORKLOAD_NAMES), model=target.model, nonce=run_id, chars_per_token=cpt,
                          chat_max_tokens=max_tokens, quoting_tokens=quoting_tokens,
                          sampled_temperature=float(settings.get("sampled_temperature", 0.7)),
                          quoting_chars_per_token=quoting_cpt)
    context = {k: engine.get(k) for k in ("engine", "engine_version", "model", "model_path", "quantization",
                                          "n_ctx", "speculative")}
    context["model"] = context["model"] or target.model
    context.update({"host": plan["host"], "member": plan["tenant"], "path": "window (standalone, no proxy)",
                    "window_id": journal["id"], "boot_to_healthy_s": journal.get("boot_to_healthy_s"),
                    "warmup_script": journal.get("warmup")})
    context.update({k: v for k, v in host_context().items() if v is not None})
    context.update({k: v for k, v in (plan.get("context") or {}).items() if v is not None})
    context.update({"chars_per_token": round(cpt, 3), "chars_per_token_source": cpt_source,
                    "quoting_chars_per_token": round(quoting_cpt, 3), "gpu": context.get("gpu"),
                    "driver": context.get("driver"), "power_limit_w": context.get("power_limit_w")})

    def progress(_name: str, _done: int, _n: int) -> None:
        checkpoint()

    summaries, warnings = runner.run_workloads(target, wls, run_id=run_id, out_dir=str(out_dir),
                                               stall_timeout_s=float(settings.get("stall_timeout_s", 120.0)),
                                               progress=progress)
    summary = runner.build_summary(run_id, target, context, summaries, [], warnings, preset_name)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


# --------------------------------------------------------------------------------- commands
def _agent_bin() -> str:
    exe = Path(sys.argv[0])
    return str(exe.resolve()) if exe.name == "rigkit-agent" and exe.exists() else paths.AGENT_BIN


def _launch(args: list[str], description: str) -> subprocess.CompletedProcess:
    """``systemd-run --unit=rigkit-window --collect`` of ``rigkit-agent window ARGS``."""
    sh("systemctl", "reset-failed", f"{UNIT}.service")
    return sh("systemd-run", f"--unit={UNIT}", "--collect", f"--description={description}",
              "-p", f"TimeoutStopSec={STOP_TIMEOUT_S}", "-p", "KillMode=mixed",
              _agent_bin(), "window", *args)


def _unit_running() -> bool:
    return unit_state(f"{UNIT}.service") in ("active", "activating", "deactivating")


def cmd_start(plan: dict, journal_path: Path = JOURNAL) -> int:
    """Write a fresh journal for ``plan`` and launch the window unit. 0 launched; 1 refused (a
    window is open or its unit runs) or systemd-run failed. Prints the journal id."""
    try:
        old = read_journal(journal_path)
    except ValueError as exc:
        print(f"window: {exc}; move it away after checking the rig by hand", file=sys.stderr)
        return 1
    if _unit_running():
        print(f"window: {UNIT}.service is running (window {old.get('id') if old else '?'}); "
              "follow it with `rigkit window --host NAME --follow`, or end it with --abort", file=sys.stderr)
        return 1
    if is_open(old):
        print(f"window: window {old.get('id')} was left open (state {old.get('state')!r}, since "
              f"{old.get('started')}); run `rigkit window --restore` first", file=sys.stderr)
        return 1
    wid = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    data = {"version": JOURNAL_VERSION, "id": wid, "tenant": plan["tenant"], "state": "preflight",
            "outcome": None, "error": None, "started": now_iso(), "ended": None, "boot_id": boot_id(),
            "unit": f"{UNIT}.service", "plan": plan, "results_dir": str(WINDOWS_DIR / wid),
            "timers_active_before": [], "proxy_was_active": None,
            "changed": {"timers": [], "proxy_stopped": False, "tenant_started": False},
            "boot_to_healthy_s": None, "warmup": None, "bench": {}, "steps": [], "restores": 0, "notes": []}
    Journal(data, journal_path).save()
    proc = _launch(["run"], f"rigkit window {wid} ({plan['tenant']})")
    if proc.returncode != 0:
        Journal(data, journal_path).set(state="closed", outcome="failed", ended=now_iso(),
                                        error=f"systemd-run failed: {proc.stderr.strip()[-300:]}")
        print(f"window: systemd-run failed: {proc.stderr.strip()}", file=sys.stderr)
        return 1
    print(json.dumps({"id": wid}))
    return 0


def cmd_run(journal_path: Path = JOURNAL) -> int:
    j = read_journal(journal_path)
    if j is None:
        print("window: no journal", file=sys.stderr)
        return 1
    return Window(Journal(j, journal_path)).run()


def cmd_restore(journal_path: Path = JOURNAL) -> int:
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


def cmd_restore_run(journal_path: Path = JOURNAL) -> int:
    j = read_journal(journal_path)
    if not is_open(j):
        return 0
    w = Window(Journal(j, journal_path))
    w.install_signals()
    for st in j.get("steps") or []:
        if st.get("status") == "running":
            st.update(status="failed", detail="the window's unit ended while this step ran")
    if j.get("outcome") is None:
        w.j.set(outcome="interrupted", error=j.get("error") or "the window's unit ended before it restored")
    return 0 if w.restore() else 1


def cmd_abort(journal_path: Path = JOURNAL) -> int:
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


def cmd_follow(journal_path: Path = JOURNAL, interval_s: float = 0.25, wait_start_s: float = 10.0) -> int:
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
    """``rigkit-agent window {start,run,abort,restore,restore-run,follow,status}``."""
    import argparse

    ap = argparse.ArgumentParser(prog="rigkit-agent window", description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=["start", "run", "abort", "restore", "restore-run", "follow", "status"])
    ap.add_argument("--journal", default=str(JOURNAL), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    jp = Path(args.journal)
    if args.cmd == "start":
        try:
            plan = json.loads(sys.stdin.read())
        except ValueError as exc:
            print(f"window: the plan on stdin is not JSON ({exc})", file=sys.stderr)
            return 2
        return cmd_start(plan, jp)
    if args.cmd == "status":
        try:
            print(json.dumps(read_journal(jp)))
        except ValueError as exc:
            print(f"window: {exc}", file=sys.stderr)
            return 1
        return 0
    return {"run": cmd_run, "abort": cmd_abort, "restore": cmd_restore, "restore-run": cmd_restore_run,
            "follow": cmd_follow}[args.cmd](jp)
