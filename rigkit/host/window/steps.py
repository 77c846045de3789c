"""The window's steps on the host (:class:`Window`): preflight, pause the declared timers, stop the
proxy, wait for free VRAM, start the tenant, wait for health, warm it up, bench; then restore,
whatever happened. Each step is journalled (:class:`rigkit.host.journal.Journal`)."""

from __future__ import annotations

import random
import signal
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rigkit.common import atomic, busy, envfile, gpu
from rigkit.host import busy as host_busy
from rigkit.host import crontab
from rigkit.host import gpu as host_gpu
from rigkit.host import net
from rigkit.bench import llama_swap
from rigkit.bench.session import TargetUnreachable
from rigkit.host.window.bench import run_bench
from rigkit.host.journal import Interrupted, Journal, Refused, StepFailed, now_iso
from rigkit.host.window.sweep import Sweep, preflight_problem, restore_power
from rigkit.host.window.system import sh, unit_state


def boot_id() -> str:
    """``/proc/sys/kernel/random/boot_id`` (changes with every boot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def gpu_memory_mib() -> tuple[float, float]:
    """``(used, total)`` MiB of GPU 0 (:func:`rigkit.common.gpu.query`). Raises StepFailed when
    nvidia-smi fails."""
    smi = gpu.query()
    if smi["state"] != "ok":
        raise StepFailed(f"nvidia-smi: {smi['state']}: {smi['message'][:300]}")
    g = smi["gpus"][0]
    return float(g["memory_used_mib"] or 0), float(g["memory_total_mib"] or 0)


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
        state = host_busy.read(int(p["proxy_port"]), p.get("own_units") or (), p.get("lock_files") or ())
        refused = busy.refusal(state)
        if refused and p.get("force"):
            self.j.note("preflight overridden by --force: " + "; ".join(busy.reasons(state)))
            refused = None
        used, total = gpu_memory_mib()
        need = float(p["tenant_vram_gib"])
        reserve = float(p.get("vram_reserve_gib", 0))
        if need + reserve > total / 1024:
            raise Refused(f"{p['tenant']} needs {need:g} GiB + {reserve:g} GiB reserve; the GPU has "
                          f"{total / 1024:.2f} GiB (nvidia-smi memory.total)")
        if refused:
            raise Refused(refused)
        refused = preflight_problem(p)  # a power-limit sweep: every limit within the card's range
        if refused:
            raise Refused(refused)
        detail = (f"no client connections on :{p['proxy_port']}; lock files absent: "
                  f"{', '.join(p.get('lock_files') or []) or '(none declared)'}; "
                  f"{p['tenant']} {need:g} GiB + {reserve:g} GiB reserve fits {total / 1024:.2f} GiB")
        return detail + self._cron_warning(int(p["proxy_port"]))

    def _cron_warning(self, port: int) -> str:
        """The user crontabs' entries that call the proxy (:func:`rigkit.host.crontab.proxy_callers`),
        journalled as a note and returned as the preflight's warning (a window warns about them:
        docs/operating.md "Cron jobs that call the proxy"); "" when none."""
        callers = crontab.proxy_callers(port)
        if not callers:
            return ""
        text = (f"warning: cron calls the proxy, and cron is not paused (rigkit never edits a crontab): "
                f"{'; '.join(callers)} — a run during this window gets connection refused on :{port}; "
                f"to pause it, make it a systemd timer and declare it in paused_timers")
        self.j.note(text)
        return "; " + text

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
        while net.port_open(port):
            if time.monotonic() > end:
                raise StepFailed(f":{port} still accepts connections after stopping {unit}")
            time.sleep(0.2)
        return f"{unit} stopped (was {was}); :{port} closed"

    # the GPU's memory back near idle (issue #30 item 4) ----------------------------------
    def wait_vram_idle(self, label: str) -> str:
        """Wait (:func:`rigkit.host.gpu.wait_idle`, bounds from the plan's ``vram_idle``: the host
        config's ``vram``) until the GPU's memory is back near idle; journal what was seen under
        ``vram_idle.<label>``. Returns the step's detail; raises StepFailed with the wait's message."""
        v = self.plan["vram_idle"]  # the deploy refuses while a window is open: no journal predates it
        try:
            seen = host_gpu.wait_idle(float(v["timeout_s"]), float(v["idle_mib"]), self.j.note, index=int(v["index"]))
        except host_gpu.VramBusy as exc:
            self.j.data.setdefault("vram_idle", {})[label] = exc.seen
            self.j.save()
            raise StepFailed(str(exc)) from None
        self.j.data.setdefault("vram_idle", {})[label] = seen
        self.j.save()
        held = (f"; held at first: {seen['first_used_mib']:g} MiB by {gpu.apps_text(seen['first_apps'])}"
                if seen["first_apps"] or seen["first_used_mib"] > seen["ceiling_mib"] else "")
        return (f"GPU memory near idle after {seen['waited_s']:g} s ({seen['used_mib']:g} MiB used, ceiling "
                f"{seen['ceiling_mib']:g} MiB, no compute app){held}")
    # ------------------------------------------------------------------------------------

    def vram_free(self) -> str:
        idle = self.wait_vram_idle("vram-free")
        need_mib = float(self.plan["tenant_vram_gib"]) * 1024
        timeout = float(self.plan["timeouts"].get("vram_free_s", 60))
        end = time.monotonic() + timeout
        while True:
            used, total = gpu_memory_mib()
            if total - used >= need_mib:
                return (f"{idle}; {(total - used) / 1024:.2f} GiB free of {total / 1024:.2f} GiB "
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
        key = envfile.read_value(p["api_key_file"], "VLLM_API_KEY")
        headers = llama_swap.headers(key)
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
        try:
            summary = run_bench(self.plan, preset_name, self.j.data, self.checkpoint)
        except TargetUnreachable as exc:
            raise StepFailed(f"bench {preset_name}: {exc}") from None
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
        """Stop the tenant, wait for its GPU memory to be released, start the proxy, wait for the
        resident, verify it with a real completion through the proxy, resume the timers that were
        active. Every sub-step runs even when an earlier one failed. Returns True when all succeeded."""
        self.interruptible = False
        self.j.set(state="restoring", restores=int(self.j.data.get("restores") or 0) + 1)
        ok = True
        steps = [("stop-tenant", self.r_stop_tenant), ("start-proxy", self.r_start_proxy),
                 ("resident-ready", self.r_resident_ready), ("verify-resident", self.r_verify),
                 ("resume-timers", self.r_resume_timers)]
        if self.j.data["changed"].get("tenant_env") or self.plan.get("sweep"):
            steps.insert(1, ("restore-env", self.r_restore_env))
        steps.insert(len(steps) - 4, ("vram-released", self.r_vram_released))
        if self.j.data["changed"].get("power_limit") or (self.plan.get("sweep") or {}).get("param") == "power_limit":
            steps.insert(1, ("restore-power", lambda: restore_power(self.j)))
        for name, fn in steps:
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
        while net.port_open(port) and time.monotonic() < end:
            time.sleep(0.2)
        if net.port_open(port):
            raise StepFailed(f":{port} still open after stopping {unit}")
        return f"{unit} stopped (was {state}); :{port} closed"

    def r_vram_released(self) -> str:
        """Before the proxy starts the resident: the tenant's memory released (:meth:`wait_vram_idle`).
        Not waited when the proxy already runs (it came back by itself, at a boot, with its resident
        loaded: that memory is the resident's, and the proxy is not started again)."""
        unit = self.plan["proxy_unit"]
        state = unit_state(unit)
        if state in ("active", "activating", "reloading"):
            return f"not waited: {unit} is already {state} (its resident holds the GPU's memory)"
        return self.wait_vram_idle("vram-released")

    def r_restore_env(self) -> str:
        """Put the deployed tenant ``.env`` back (a sweep installed its settings' files; the window's
        folder keeps the deployed one, ``changed.tenant_env``), same bytes, mode and owner."""
        rec = self.j.data["changed"].get("tenant_env")
        if not rec:
            return f"{self.plan.get('tenant_env', 'the .env')} untouched (no setting was installed)"
        data = Path(rec["backup"]).read_bytes()
        atomic.write_bytes(rec["path"], data, int(rec["mode"]), (int(rec["uid"]), int(rec["gid"])))
        if Path(rec["path"]).read_bytes() != data:
            raise StepFailed(f"{rec['path']} does not read back as the deployed file ({rec['backup']})")
        self.j.data["changed"]["tenant_env"] = None
        self.j.save()
        return f"{rec['path']} is the deployed file again ({len(data)} bytes, mode {int(rec['mode']):04o})"

    def r_start_proxy(self) -> str:
        unit, port = self.plan["proxy_unit"], int(self.plan["proxy_port"])
        # a failed proxy, or one stopped and started often ("start request repeated too quickly"),
        # refuses to start until its failure and start-limit counters are reset
        sh("systemctl", "reset-failed", unit)
        sh("systemctl", "start", unit, check=True, timeout=180)
        end = time.monotonic() + float(self.plan["timeouts"].get("proxy_s", 60))
        while not net.port_open(port):
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
                running = llama_swap.running(base, timeout_s=10)
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
        """The one confirmation (:mod:`rigkit.host.confirm`) of the generation the host is at: its
        services active, its power limit enforced, and a real completion to the resident through llama-swap (HTTP 200 with ``usage.completion_tokens`` > 0; sent once more when
        llama-swap's proxy lost it, an empty 502 — notes/issue-25-swap-502.md). A host with no
        generation recorded gets the completion alone."""
        from rigkit.host.confirm import ConfirmError, Probe, completion, confirm

        p = self.plan
        base = f"http://127.0.0.1:{p['proxy_port']}"
        timeout = float(p["timeouts"].get("resident_s", 300))
        record = self._generation()
        if record is None:
            key = envfile.read_value(p["api_key_file"], "VLLM_API_KEY") if p.get("api_key_file") else None
            try:
                said = completion(base, p["resident"], key, timeout)
            except ConfirmError as exc:
                raise StepFailed(str(exc)) from None
            return f"{p['resident']} answered a real completion through :{p['proxy_port']} ({said})"
        # not the files: a wire-in activation since the last deploy leaves the live config unlike the
        # recorded generation's, and the window put back the one file it changes (the tenant's .env) itself
        result = confirm(record, [], Probe(base, Path(p["api_key_file"])), timeout, log=lambda _m: None, files=False)
        if not result["confirmed"]:
            raise StepFailed(f"generation {record.get('n')} does not confirm: " + "; ".join(result["failed"]))
        said = next((ch["detail"] for ch in result["checks"] if ch["check"] == f"member {p['resident']}"), "")
        return (f"{p['resident']} answered a real completion through :{p['proxy_port']} ({said}); generation "
                f"{record.get('n')} confirmed: " + ", ".join(ch["check"] for ch in result["checks"]
                                                             if not ch["check"].startswith("member")))

    def _generation(self) -> dict | None:
        """The record of the host's current generation (:mod:`rigkit.host.generations`), or None."""
        from rigkit.host.config import ConfigError
        from rigkit.host.config import load as load_config
        from rigkit.host.generations import GenerationError, read_index, read_record

        try:
            root = load_config().path("generations")
            n = read_index(root)["current"]
            return read_record(root, n) if n is not None else None
        except (ConfigError, GenerationError, ValueError, OSError):
            return None

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
            if self.plan.get("sweep"):
                Sweep(self).run()
            else:
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
