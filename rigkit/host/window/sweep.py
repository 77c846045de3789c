"""The sweep inside a window (``rigkit window --sweep KEY=...``), one runner for both keys.

``dflash_tokens``: for each draft length, install the tenant's ``.env`` rendered for it on the
control side (the plan carries them; the host renders nothing), start the tenant clean, warm it
up, and measure each workload at each context size from the shortest up, journalling every cell
(:mod:`rigkit.common.sweepgrid` has the grid's rules). An engine that dies on a cell is that
setting's crash point: the tenant is torn down, the next start is probed with a real completion and
restarted while it still answers 500 (up to :data:`STARTS` starts), and the sweep goes on with the
next setting. The deployed ``.env`` is kept in the window's folder and put back by the restore,
whatever happens.

``power_limit`` (issue 31): the tenant is started clean once on its deployed ``.env`` and warmed up,
the card's idle draw is measured, then for each limit (W) ``nvidia-smi --id=N --power-limit=W``
(:func:`rigkit.host.powerlimit.set_limit`, the healer's own command) and ``enforced.power.limit`` read
back, and the same cells measured. Every limit was checked against the card's range by the
window's preflight (:func:`preflight_problem`) before anything changed. Before the first limit is
set the journal records ``changed.power_limit`` (``{"index", "declared_w", "enforced_before_w"}``:
the host config's ``power.limit_w``, what the healer keeps), and the restore's ``restore-power``
step (:func:`restore_power`) sets the declared limit again and reads it back, whatever happens — a
crash, ``--abort``, a killed unit then ``--restore``. The power healer stands down meanwhile: the
window holds the host lock and its journal is open (:mod:`rigkit.host.standdown`).

A power-limit sweep measures every request's energy (:class:`rigkit.bench.energy.EnergyMeter`,
the card's counter or sampled ``power.draw``, the idle draw once before the first cell); a
draft-length sweep's cells carry no energy (``energy_note`` "not measured").

The plan's ``sweep`` (built by :func:`rigkit.report.sweep.plan_sweep`)::

    {"param": "dflash_tokens" | "power_limit",
     "settings": [{"value": 9, "env": ".env text"}] | [{"value": 300}],
     "declared_w": W (the spec's gpu_power_limit_w),
     "contexts": [tokens, ascending], "workloads": ["chat-greedy", "quoting"],
     "runs": int (requests per cell), "max_tokens": int, "max_model_len": int,
     "max_minutes": float | None, "resume": bool, "guard": str (said once: what the sweep changes)}

and the journal's ``sweep``: the grid (``param``, ``settings`` as values, ``contexts``,
``workloads``), ``cells`` (:mod:`rigkit.common.sweepgrid`), ``starts`` (``{setting:
[{"attempt", "healthy_s", "probe"}]}``), ``current`` (the cell being measured: ``setting``,
``workload``, ``context``, ``started``; None between cells), ``resumed_from`` (window id or None),
``stopped`` (why it ended before the grid was done, or None), ``energy`` (the meter:
:meth:`~rigkit.bench.energy.EnergyMeter.describe`, the idle draw), ``declared_w`` (W) and
``limits`` (``{"300": {"set_w", "enforced_w", "at"}}``: each limit as read back).
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from rigkit.common import atomic, envfile, gpu, powerlimit
from rigkit.host import gpu as host_gpu
from rigkit.host import powerlimit as host_powerlimit
from rigkit.bench import metrics as spec_metrics
from rigkit.bench.client import ChatSession, stream_chat
from rigkit.bench.energy import EnergyMeter, summarize_energy
from rigkit.bench.nvml import EnergyReader
from rigkit.bench.context import Target, measure_chars_per_token
from rigkit.bench.workloads import CHAT_PROMPTS, TEMPLATE_TOKENS, build_quoting_prompt, make_document, verbatim_check
from rigkit.host.journal import Journal, StepFailed, now_iso
from rigkit.common.sweepgrid import classify, crash_point, pending
from rigkit.host.window.system import sh, unit_state

#: Starts of the tenant per setting before it is given up: the first, and two restarts while a
#: start still answers 500 (the seeds: "until restarted, sometimes twice").
STARTS = 3
#: The passage the quoting workload asks for, at most (tokens); capped at half of ``max_tokens``.
QUOTE_TOKENS = 1500


def cell_payload(workload: str, context: int, max_tokens: int, chars_per_token: float, nonce: str, run: int,
                 model: str | None, extra_body: dict | None = None) -> tuple[dict, str | None]:
    """``(chat body, expected passage or None)`` for one request of ``workload`` at ``context``
    tokens: the prompt takes ``context - max_tokens - TEMPLATE_TOKENS`` tokens (sized with
    ``chars_per_token``), so prompt plus answer fill the context. ``chat-greedy``/``chat-sampled``:
    a generated document, then one of the chat prompts (``run`` picks it); ``quoting``: the
    bench's quoting prompt with a passage of ``min(1500, max_tokens // 2)`` tokens. The nonce
    comes first (no prefix-cache hit). Raises ValueError for another workload or a context with
    no room for a prompt."""
    n_prompt = context - max_tokens - TEMPLATE_TOKENS
    if n_prompt < 64:
        raise ValueError(f"context {context}: no room for a prompt with max_tokens {max_tokens}")
    body: dict[str, Any] = {"max_tokens": max_tokens, **(extra_body or {})}
    if model:
        body["model"] = model
    if workload == "quoting":
        prompt, passage = build_quoting_prompt(f"{nonce}-q{run}", n_prompt, max(8, min(QUOTE_TOKENS, max_tokens // 2)),
                                               chars_per_token)
        return {**body, "temperature": 0.0, "messages": [{"role": "user", "content": prompt}]}, passage
    if workload not in ("chat-greedy", "chat-sampled"):
        raise ValueError(f"unknown sweep workload {workload!r}")
    pid, question = CHAT_PROMPTS[run % len(CHAT_PROMPTS)]
    head = f"Run {nonce}-{workload}-{run}.\nA document for context; the question follows it.\n\n"
    tail = f"\n\n{question}"
    filler = "".join(make_document(max(int(n_prompt * chars_per_token) - len(head) - len(tail), 1), 11 + run))
    body["temperature"] = 0.0 if workload == "chat-greedy" else 0.7
    if workload == "chat-sampled":
        body["seed"] = 1000 + run
    return {**body, "messages": [{"role": "user", "content": head + filler + tail}]}, None


def summarize_cell(setting: int, workload: str, context: int, results: list, expected: list,
                   tenant_active: bool, window_id: str, energy: dict[str, Any] | None = None,
                   enforced_w: float | None = None, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The journal cell (:mod:`rigkit.common.sweepgrid`) of ``results``
    (:class:`rigkit.bench.client.RequestResult`, in order; the first failed one ends the cell):
    medians of the answered requests, status by :func:`~rigkit.common.sweepgrid.classify`;
    ``energy`` is :func:`rigkit.bench.energy.summarize_energy` of its requests (None: not
    measured), ``enforced_w`` the power limit read back before it (W), ``spec`` speculative decoding's
    counters differenced around the cell (:func:`rigkit.bench.metrics.spec_delta`; None: not read)."""
    ok = [r for r in results if r.ok]
    bad = next((r for r in results if not r.ok), None)
    status = classify(bad.error_kind if bad else None, tenant_active)

    def med(name: str) -> float | None:
        vals = [getattr(r, name) for r in ok if getattr(r, name) is not None]
        return round(statistics.median(vals), 3) if vals else None

    cell = {"setting": setting, "workload": workload, "context": context, "status": status,
            "decode_tps": med("decode_tps"), "prefill_tps": med("prefill_tps"), "ttft_s": med("ttft_s"),
            "tokens_per_chunk": med("tokens_per_chunk"), "prompt_tokens": med("prompt_tokens"),
            "runs": len(ok), "error": None, "window": window_id, "measured": now_iso()}
    e = energy or {}
    cell.update({"energy_j": e.get("joules"), "avg_w": e.get("avg_w"), "tok_per_j": e.get("tok_per_j"),
                 "j_per_token": e.get("j_per_token"), "power_modelled": e.get("power_modelled"),
                 "energy_note": e.get("note") if energy else "not measured", "enforced_w": enforced_w})
    sd = spec or {}
    clean = bool(spec) and not sd.get("mixed")
    cell.update({"acceptance_rate": sd.get("acceptance_rate") if clean else None,
                 "acceptance_length": sd.get("acceptance_length") if clean else None,
                 "acceptance_by_position": (sd.get("by_position") or {}) if clean else {},
                 "acceptance_mixed": sd.get("mixed") if spec else None})
    if status != "ok":
        cell.update(decode_tps=None, prefill_tps=None, ttft_s=None, tokens_per_chunk=None)
        cell["error"] = (f"{bad.error_kind}: {bad.error}" if bad else "the tenant's unit is gone") + \
            ("" if tenant_active else " (the tenant's unit is no longer active)")
    passages = [(e, r.answer) for e, r in zip(expected, results) if e is not None and r.ok]
    if passages:
        cell["verbatim_passed"] = sum(verbatim_check(e, a).passed for e, a in passages)
    return cell


def preflight_problem(plan: dict[str, Any]) -> str | None:
    """Why a ``power_limit`` sweep must not open its window (the window's preflight refuses it,
    nothing touched), or None: the host config names no declared limit, the card's range cannot be
    read, or a limit lies outside ``power.min_limit``..``power.max_limit``
    (:func:`rigkit.common.gpu.power_limit_problem`). None for any other plan."""
    sp = plan.get("sweep") or {}
    if sp.get("param") != "power_limit":
        return None
    if plan.get("power_limit_w") is None:
        return "the host config names no power.limit_w (re-run the deploy): the sweep could not put it back"
    index = int(plan.get("power_index") or 0)
    g, why = gpu.card(gpu.query(), index)
    if g is None:
        return f"--sweep power_limit: GPU {index}'s power range cannot be read ({why})"
    for s in sp["settings"]:
        problem = gpu.power_limit_problem(s["value"], g.get("power_min_w"), g.get("power_max_w"), f"GPU {index}",
                                          field="--sweep power_limit")
        if problem:
            return problem
    if g.get("power_min_w") is None or g.get("power_max_w") is None:
        return f"--sweep power_limit: GPU {index} reports no power.min_limit/power.max_limit; its range is never assumed"
    return None


def restore_power(j: Journal) -> str:
    """The restore's ``restore-power`` step: set the declared limit recorded in ``changed.power_limit``
    again (:func:`rigkit.host.powerlimit.set_limit`) and read ``enforced.power.limit`` back; clears the
    record when it holds. Raises StepFailed when it cannot be set or does not read back."""
    rec = j.data["changed"].get("power_limit")
    if not rec:
        return "the GPU power limit untouched (no limit was set)"
    index, want = int(rec["index"]), float(rec["declared_w"])
    ok, detail = host_powerlimit.set_limit(index, want)
    if not ok:
        raise StepFailed(f"putting the declared {want:g} W back on GPU {index} failed: {detail}")
    enforced, why = host_gpu.enforced_w(index)
    problem = powerlimit.read_back_problem(index, want, enforced, why)
    if problem:
        raise StepFailed(f"putting the declared limit back: {problem}")
    j.data["changed"]["power_limit"] = None
    j.save()
    return (f"GPU {index} enforces the declared {want:g} W again (enforced.power.limit read back; "
            f"{rec.get('enforced_before_w')} W before the window)")


class Sweep:
    """The sweep of one window (:class:`rigkit.host.window.steps.Window` ``w``): journalled in
    ``w.j.data["sweep"]``; see the module doc."""

    def __init__(self, window) -> None:
        self.w = window
        self.j = window.j
        self.plan = window.plan
        self.sp = self.plan["sweep"]
        self.grid = {"param": self.sp["param"], "settings": [s["value"] for s in self.sp["settings"]],
                     "contexts": list(self.sp["contexts"]), "workloads": list(self.sp["workloads"])}
        data = self.j.data.setdefault("sweep", {})
        data.update({k: v for k, v in self.grid.items()})
        data.setdefault("cells", [])
        data.setdefault("starts", {})
        data.setdefault("resumed_from", None)
        data["stopped"] = None
        data["current"] = None
        data["max_model_len"] = self.sp.get("max_model_len")
        data["declared_w"] = self.plan.get("power_limit_w", self.sp.get("declared_w"))
        data.setdefault("limits", {})
        self.data = data
        self.t0 = time.monotonic()
        self.dirty = False  # an engine crashed since the last clean start
        self.running = False  # power_limit: the tenant runs, started clean and warmed up
        self.cpt: float | None = None
        self.enforced: float | None = None  # power_limit: the limit read back for the cells now measured
        # energy is what a power-limit sweep is for; a draft-length sweep measures speed and survival only
        # (two readings per request added 13 s to the sandbox's draft-length tests); NVML stays open for
        # the sweep's process (rigkit.bench.nvml.EnergyReader)
        self.meter = (EnergyMeter(EnergyReader(), where=f"{self.plan.get('host')} (this host's GPU)")
                      if self.grid["param"] == "power_limit" else None)
        self.j.save()

    # the tenant's .env -------------------------------------------------------------------
    def install_env(self, text: str) -> None:
        """Install ``text`` as the tenant's ``.env`` (same mode and owner as the deployed one, atomic);
        the first install keeps the deployed file in the window's folder (``changed.tenant_env``)."""
        path = Path(self.plan["tenant_env"])
        changed = self.j.data["changed"]
        if not changed.get("tenant_env"):
            st = path.stat()
            backup = Path(self.j.data["results_dir"]) / "deployed.env"
            backup.parent.mkdir(parents=True, exist_ok=True)
            backup.write_bytes(path.read_bytes())
            os.chmod(backup, 0o600)
            changed["tenant_env"] = {"path": str(path), "backup": str(backup), "mode": st.st_mode & 0o7777,
                                     "uid": st.st_uid, "gid": st.st_gid}
            self.j.save()
        rec = changed["tenant_env"]
        atomic.write_bytes(path, text.encode(), rec["mode"], (rec["uid"], rec["gid"]))

    # starting clean ----------------------------------------------------------------------
    def stop_tenant(self) -> None:
        unit = self.plan["tenant_unit"]
        sh("systemctl", "stop", unit, check=True, timeout=float(self.plan["timeouts"].get("tenant_stop_s", 120)))
        sh("systemctl", "reset-failed", unit)

    def target(self) -> Target:
        p = self.plan
        base = f"http://127.0.0.1:{p['tenant_port']}"
        return Target(chat_url=f"{base}/v1/chat/completions", aux_base=base, model=p["tenant_model"],
                      label=f"{p['host']}/{p['tenant']} standalone (window {self.j.data['id']} sweep)",
                      api_key=envfile.read_value(p["api_key_file"], "VLLM_API_KEY"))

    def probe(self) -> str | None:
        """One short real completion; None when it answered, else why not."""
        t = self.target()
        r = stream_chat(t.chat_url, {"model": t.model, "max_tokens": 8, "temperature": 0,
                                     "messages": [{"role": "user", "content": "Say OK."}]},
                        api_key=t.api_key, stall_timeout_s=60)
        return None if r.ok else f"{r.error_kind}: {r.error}"

    def start_clean(self, label: str) -> str:
        """Start the tenant until a real completion answers: up to :data:`STARTS` starts, each
        after a teardown and the GPU's memory back near idle (:meth:`Window.wait_vram_idle`). Returns the detail; raises StepFailed when every start still fails."""
        attempts = self.data["starts"].setdefault(label, [])
        for attempt in range(1, STARTS + 1):
            self.w.checkpoint()
            self.stop_tenant()
            self.w.wait_vram_idle(f"{label} start {attempt}")  # the last start's memory freed first
            self.j.data["changed"]["tenant_started"] = True
            self.j.save()
            self.w._t_start = time.monotonic()
            sh("systemctl", "start", self.plan["tenant_unit"], check=True, timeout=120)
            rec: dict[str, Any] = {"attempt": attempt, "healthy_s": None, "probe": None}
            attempts.append(rec)
            try:
                self.w.healthy()
                rec["healthy_s"] = self.j.data.get("boot_to_healthy_s")
                rec["probe"] = self.probe() or "ok"
            except StepFailed as exc:
                rec["probe"] = str(exc)
            self.j.save()
            if rec["probe"] == "ok":
                self.dirty = False
                return f"start {attempt}: healthy after {rec['healthy_s']} s, a real completion answered"
            self.j.note(f"sweep {label}: start {attempt} of {STARTS} did not answer ({rec['probe'][:200]})"
                        + ("; tearing it down and starting again" if attempt < STARTS else ""))
        raise StepFailed(f"{self.plan['tenant']} did not answer a completion after {STARTS} starts "
                         f"({label}; last: {attempts[-1]['probe'][:200]})")

    # the grid ----------------------------------------------------------------------------
    def over_budget(self) -> bool:
        m = self.sp.get("max_minutes")
        return m is not None and time.monotonic() - self.t0 >= float(m) * 60

    def measure(self, setting: int, context: int, workload: str, cpt: float) -> dict[str, Any]:
        """Measure one cell (``runs`` requests, each with its energy) and journal it."""
        t = self.target()
        results, expected, records = [], [], []
        self.data["current"] = {"setting": setting, "workload": workload, "context": context, "started": now_iso()}
        self.j.save()
        before, _why = spec_metrics.scrape(t.aux_base, t.headers())  # the tenant alone, no llama-swap: nothing to swap
        with ChatSession() as session:
            for i in range(int(self.sp.get("runs", 3))):
                self.w.checkpoint()
                payload, passage = cell_payload(workload, context, int(self.sp["max_tokens"]), cpt,
                                                f"{self.j.data['id']}-{setting}-{context}", i, t.model,
                                                self.sp.get("extra_body"))
                with self.meter.measure() if self.meter else nullcontext() as span:
                    r = stream_chat(t.chat_url, payload, api_key=t.api_key, session=session,
                                    stall_timeout_s=float(self.sp.get("stall_timeout_s", 120)))
                if span is not None:
                    records.append({"ok": r.ok, "completion_tokens": r.completion_tokens, **span.record()})
                results.append(r)
                expected.append(passage)
                if not r.ok:
                    break
        active = unit_state(self.plan["tenant_unit"]) == "active"
        if results and not results[-1].ok and active:
            time.sleep(1)  # a dead engine's container takes a moment to go
            active = unit_state(self.plan["tenant_unit"]) == "active"
        energy = None
        if self.meter:
            idle = self.meter.idle_span.avg_w if self.meter.idle_span is not None else None
            energy = summarize_energy(records, idle, self.meter.method)
        after = spec_metrics.scrape(t.aux_base, t.headers())[0] if before and active else None
        cell = summarize_cell(setting, workload, context, results, expected, active, self.j.data["id"],
                              energy, self.enforced, spec_metrics.spec_delta(before, after, own_requests=len(results)))
        self.data["cells"].append(cell)
        self.data["current"] = None
        self.j.save()
        return cell

    def apply_limit(self, value: int) -> str:
        """Set GPU ``power_index``'s limit to ``value`` W and read ``enforced.power.limit`` back;
        ``changed.power_limit`` is journalled before the first change. Raises StepFailed when it
        cannot be set or does not hold."""
        index = int(self.plan.get("power_index") or 0)
        changed = self.j.data["changed"]
        if not changed.get("power_limit"):
            before, _ = host_gpu.enforced_w(index)
            changed["power_limit"] = {"index": index, "declared_w": float(self.plan["power_limit_w"]),
                                      "enforced_before_w": before}
            self.j.save()
        ok, detail = host_powerlimit.set_limit(index, value)
        if not ok:
            raise StepFailed(f"setting GPU {index} to {value} W failed: {detail}")
        enforced, why = host_gpu.enforced_w(index)
        self.data["limits"][str(value)] = {"set_w": value, "enforced_w": enforced, "at": now_iso()}
        self.j.save()
        problem = powerlimit.read_back_problem(index, value, enforced, why)
        if problem:
            raise StepFailed(problem)
        self.enforced = enforced
        return f"GPU {index} enforces {enforced:g} W"

    def ready(self, label: str, env: str | None) -> str:
        """The tenant ready for ``label``'s cells: for a draft length its .env installed and a clean
        start; for a power limit one clean start on the deployed .env, kept while it lives. Warmed up
        after each start; the idle draw measured once, before the first cell."""
        if self.grid["param"] == "power_limit" and self.running and unit_state(self.plan["tenant_unit"]) == "active":
            return "the tenant runs on (started clean earlier)"
        if env is not None:
            self.install_env(env)
        try:
            started = self.start_clean(label if env is not None else "deployed .env")
        except StepFailed:
            self.dirty = True  # left in an unknown state: the deployed .env must be shown to start
            raise
        self.j.step(f"warmup:{label}", self.w.warmup, fatal=False)
        self.cpt, _ = measure_chars_per_token(self.target(), "".join(make_document(2000, 3)))
        if self.meter and self.meter.idle_span is None:
            span = self.meter.idle()
            self.data["energy"] = self.meter.describe()
            self.j.save()
            if span.joules is not None:
                started += f"; idle draw {span.avg_w:.1f} W over {span.seconds:.1f} s (shown apart)"
        self.running = True
        return started

    def setting(self, value: int, env: str | None) -> str:
        """One setting: the tenant ready (:meth:`ready`), a power limit set (:meth:`apply_limit`),
        then its pending cells measured."""
        label = f"{self.grid['param']}={value}"
        todo = [(ctx, w) for s, ctx, w in pending(self.grid, self.data["cells"]) if s == value]
        started = self.ready(label, env)
        if self.grid["param"] == "power_limit":
            started += "; " + self.apply_limit(value)
        cpt = self.cpt
        done = []
        for ctx, w in todo:
            if self.over_budget():
                self.data["stopped"] = (f"time budget of {self.sp['max_minutes']:g} min spent; "
                                        f"{len(pending(self.grid, self.data['cells']))} cell(s) left for --resume")
                self.j.save()
                break
            cell = self.measure(value, ctx, w, cpt)
            done.append(cell)
            if cell["status"] == "crashed":
                self.dirty = True
                self.j.note(f"sweep {label}: the engine died at {ctx} tokens on {w} ({cell['error'][:200]}); "
                            "tearing it down, no longer context is tried at this setting")
                self.stop_tenant()
                self.running = False
                break
        crash = crash_point(self.data["cells"], value)
        return (f"{started}; {len(done)} cell(s) measured"
                + (f"; crashed at {crash} tokens" if crash is not None else "; survived every context tried"))

    def run(self) -> None:
        """Every setting with cells left, in order; then, when the last engine crashed, one clean
        start on the deployed .env (the engine must be shown to recover before the window closes)."""
        self.j.note(self.sp["guard"])
        for s in self.sp["settings"]:
            if self.data["stopped"]:
                break
            if not any(p[0] == s["value"] for p in pending(self.grid, self.data["cells"])):
                continue
            if self.over_budget():
                self.data["stopped"] = (f"time budget of {self.sp['max_minutes']:g} min spent; "
                                        f"{len(pending(self.grid, self.data['cells']))} cell(s) left for --resume")
                self.j.save()
                break
            self.w.checkpoint()
            self.j.step(f"sweep:{self.grid['param']}={s['value']}",
                        lambda s=s: self.setting(s["value"], s.get("env")), fatal=False)
        if self.dirty:
            self.j.step("sweep:recover", self.recover, fatal=False)

    def recover(self) -> str:
        """The deployed .env back, one clean start (restarted while it answers 500), then stopped."""
        detail = self.w.r_restore_env()
        started = self.start_clean("deployed")
        self.stop_tenant()
        return f"{detail}; {started}; stopped again"
