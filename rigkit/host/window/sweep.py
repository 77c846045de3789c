"""The sweep inside a window (``rigkit window --sweep dflash_tokens=...``): for each draft length,
install the tenant's ``.env`` rendered for it on the control side (the plan carries them; the
host renders nothing), start the tenant clean, warm it up, and measure each workload at each
context size from the shortest up, journalling every cell (:mod:`rigkit.host.window.sweepgrid`
has the grid's rules). An engine that dies on a cell is that setting's crash point: the tenant is
torn down, the next start is probed with a real completion and restarted while it still answers
500 (up to :data:`STARTS` starts), and the sweep goes on with the next setting. The deployed
``.env`` is kept in the window's folder and put back by the restore, whatever happens.

The plan's ``sweep`` (built by :func:`rigkit.bench.sweep.plan_sweep`)::

    {"param": "dflash_tokens", "settings": [{"value": 9, "env": ".env text"}],
     "contexts": [tokens, ascending], "workloads": ["chat-greedy", "quoting"],
     "runs": int (requests per cell), "max_tokens": int, "max_model_len": int,
     "max_minutes": float | None, "resume": bool, "guard": str (said once: the guard is lifted)}

and the journal's ``sweep``: the grid (``param``, ``settings`` as values, ``contexts``,
``workloads``), ``cells`` (:mod:`rigkit.host.window.sweepgrid`), ``starts`` (``{setting:
[{"attempt", "healthy_s", "probe"}]}``), ``current`` (the cell being measured: ``setting``,
``workload``, ``context``, ``started``; None between cells), ``resumed_from`` (window id or None),
``stopped`` (why it ended before the grid was done, or None).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from rigkit.host import atomic, envfile
from rigkit.host.bench.client import ChatSession, stream_chat
from rigkit.host.bench.context import Target, measure_chars_per_token
from rigkit.host.bench.workloads import (CHAT_PROMPTS, TEMPLATE_TOKENS, build_quoting_prompt, make_document,
                                         verbatim_check)
from rigkit.host.journal import StepFailed, now_iso
from rigkit.host.window.sweepgrid import classify, crash_point, pending
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
                   tenant_active: bool, window_id: str) -> dict[str, Any]:
    """The journal cell (:mod:`rigkit.host.window.sweepgrid`) of ``results``
    (:class:`rigkit.host.bench.client.RequestResult`, in order; the first failed one ends the cell):
    medians of the answered requests, status by :func:`~rigkit.host.window.sweepgrid.classify`."""
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
    if status != "ok":
        cell.update(decode_tps=None, prefill_tps=None, ttft_s=None, tokens_per_chunk=None)
        cell["error"] = (f"{bad.error_kind}: {bad.error}" if bad else "the tenant's unit is gone") + \
            ("" if tenant_active else " (the tenant's unit is no longer active)")
    passages = [(e, r.answer) for e, r in zip(expected, results) if e is not None and r.ok]
    if passages:
        cell["verbatim_passed"] = sum(verbatim_check(e, a).passed for e, a in passages)
    return cell


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
        self.data = data
        self.t0 = time.monotonic()
        self.dirty = False  # an engine crashed since the last clean start
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
        after a teardown. Returns the detail; raises StepFailed when every start still fails."""
        attempts = self.data["starts"].setdefault(label, [])
        for attempt in range(1, STARTS + 1):
            self.w.checkpoint()
            self.stop_tenant()
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
        """Measure one cell (``runs`` requests) and journal it."""
        t = self.target()
        results, expected = [], []
        self.data["current"] = {"setting": setting, "workload": workload, "context": context, "started": now_iso()}
        self.j.save()
        with ChatSession() as session:
            for i in range(int(self.sp.get("runs", 3))):
                self.w.checkpoint()
                payload, passage = cell_payload(workload, context, int(self.sp["max_tokens"]), cpt,
                                                f"{self.j.data['id']}-{setting}-{context}", i, t.model,
                                                self.sp.get("extra_body"))
                r = stream_chat(t.chat_url, payload, api_key=t.api_key, session=session,
                                stall_timeout_s=float(self.sp.get("stall_timeout_s", 120)))
                results.append(r)
                expected.append(passage)
                if not r.ok:
                    break
        active = unit_state(self.plan["tenant_unit"]) == "active"
        if results and not results[-1].ok and active:
            time.sleep(1)  # a dead engine's container takes a moment to go
            active = unit_state(self.plan["tenant_unit"]) == "active"
        cell = summarize_cell(setting, workload, context, results, expected, active, self.j.data["id"])
        self.data["cells"].append(cell)
        self.data["current"] = None
        self.j.save()
        return cell

    def setting(self, value: int, env: str) -> str:
        """One setting: install its .env, start clean, warm up, measure its pending cells."""
        label = f"{self.grid['param']}={value}"
        todo = [(ctx, w) for s, ctx, w in pending(self.grid, self.data["cells"]) if s == value]
        self.install_env(env)
        try:
            started = self.start_clean(label)
        except StepFailed:
            self.dirty = True  # left in an unknown state: the deployed .env must be shown to start
            raise
        self.j.step(f"warmup:{label}", self.w.warmup, fatal=False)
        cpt, _ = measure_chars_per_token(self.target(), "".join(make_document(2000, 3)))
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
            self.j.step(f"sweep:{self.grid['param']}={s['value']}", lambda s=s: self.setting(s["value"], s["env"]),
                        fatal=False)
        if self.dirty:
            self.j.step("sweep:recover", self.recover, fatal=False)

    def recover(self) -> str:
        """The deployed .env back, one clean start (restarted while it answers 500), then stopped."""
        detail = self.w.r_restore_env()
        started = self.start_clean("deployed")
        self.stop_tenant()
        return f"{detail}; {started}; stopped again"
