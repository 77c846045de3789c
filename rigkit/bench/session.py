"""One bench session: what ``rigkit bench`` (:mod:`rigkit.cli.bench`) and a window's bench
(:mod:`rigkit.host.window.bench`) both run — the same rules from the target to the summary.

Given a target, the host's bench settings (``spec.bench`` as a dict), the preset and workloads,
and an energy reader, a :class:`BenchSession`:

1. :meth:`~BenchSession.prepare`: probes the engine (:func:`rigkit.bench.context.probe_engine`;
   nothing answering at all is :class:`TargetUnreachable`), picks the preset (``auto``: ``rig``
   when the server's context fits it), sizes it with the host's settings (:func:`applied_settings`;
   command-line values win), measures characters per token (on the quoting prompt too, when
   quoting runs and the server tokenizes), builds the workloads, marks those the server cannot run
   (:func:`rigkit.bench.workloads.mark_unrunnable`: NOT-RUN, not FAIL) and gathers the context;
2. :meth:`~BenchSession.run`: runs them (:func:`rigkit.bench.runner.run_workloads`, the
   energy meter over the reader: idle draw first) into ``requests.jsonl`` and returns the
   summary (:func:`rigkit.bench.runner.build_summary`).

:func:`not_run_summary` is the summary of a session that sends nothing (the member is not loaded).
The callers only find the target and write what the session returns (the control side draws
the chart; the agent has no matplotlib).

The two callers used to size the preset by different rules: ``rigkit bench`` applied the
host's settings to any preset when the operator had set them (a value other than the rig
preset's figure), a window only to ``rig``; a window also sent workloads the server's context
could not hold (HTTP 400, FAIL) where ``rigkit bench`` reported them NOT-RUN, and read
``sampled_temperature`` without the 0.7 fallback for an unset value. The session keeps
``rigkit bench``'s rules (``notes/one-piece.md`` says why).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from rigkit.bench.context import Target, measure_chars_per_token, probe_engine
from rigkit.bench.energy import EnergyMeter
from rigkit.bench.metrics import ACCEPTANCE_FLOOR
from rigkit.bench.results import summarize_workload
from rigkit.bench.runner import build_summary, new_run_id, regression_doubt, run_workloads
from rigkit.bench.workloads import (DEFAULT_WORKLOADS, PRESETS, Preset, Workload, build_quoting_prompt, build_workloads,
                                    make_document, mark_unrunnable, quoting_sizes)

#: The host's bench settings (``spec.bench``) that size the workloads, each with the rig
#: preset's own figure for it (``BenchSpec``'s defaults are these figures; a unit test holds
#: them together).
SIZING: dict[str, Callable[[Preset], Any]] = {
    "quoting_prompt_tokens": lambda p: p.quoting_tokens,
    "max_tokens": lambda p: p.chat_max_tokens,
    "reasoning_effort": lambda p: (p.extra_body.get("chat_template_kwargs") or {}).get("reasoning_effort"),
}

#: Context keys taken from the engine's probe (:func:`rigkit.bench.context.probe_engine`).
ENGINE_KEYS = ("engine", "engine_version", "model", "model_path", "quantization", "n_ctx", "speculative")

#: Temperature of the sampled chat workload when the settings name none.
SAMPLED_TEMPERATURE = 0.7
#: Stall timeout (s) when neither the command line nor the settings name one.
STALL_TIMEOUT_S = 120.0


class TargetUnreachable(Exception):
    """The target answered nothing at all (no engine probe, no ``/v1/models``); the message
    names it."""


def applied_settings(settings: Mapping[str, Any] | None, preset_name: str) -> dict[str, Any]:
    """The host's bench settings (:data:`SIZING` keys of ``spec.bench`` as a dict) that apply to
    ``preset_name``: a setting applies when it is not the rig preset's own figure (the settings'
    defaults are those figures, and the spec materialises its defaults, so a value equal to it
    is the rig's figure, not a choice for a small server) — for ``rig`` that is every setting
    (the figure applied again changes nothing). So a small server is not sent the rig's
    29k-token prompt and 8192-token budgets, and an operator's own choice reaches every preset.
    ``{}`` without settings. Command-line values still win over what this returns."""
    if not settings:
        return {}
    rig = PRESETS["rig"]
    return {k: settings[k] for k, figure in SIZING.items()
            if k in settings and (preset_name == "rig" or settings[k] != figure(rig))}


def sized_preset(preset_name: str, settings: Mapping[str, Any] | None, *,
                 quoting_tokens: int | None = None,
                 max_tokens: int | None = None) -> tuple[Preset, int | None, int | None]:
    """``(preset, quoting_tokens, max_tokens)``: :data:`PRESETS` ``[preset_name]`` with the
    settings that apply (:func:`applied_settings`) — ``reasoning_effort`` in its ``extra_body``
    (none: no ``chat_template_kwargs``), the token figures (tokens) returned for
    :func:`rigkit.bench.workloads.build_workloads`, the command line's own (not None) first."""
    preset = PRESETS[preset_name]
    for key, value in applied_settings(settings, preset_name).items():
        if key == "quoting_prompt_tokens":
            quoting_tokens = quoting_tokens or value
        elif key == "max_tokens":
            max_tokens = max_tokens or value
        elif key == "reasoning_effort":
            preset = dataclasses.replace(preset, extra_body={
                "chat_template_kwargs": {"reasoning_effort": value}} if value else {})
    return preset, quoting_tokens, max_tokens


def _setting(settings: Mapping[str, Any] | None, key: str, default: Any) -> Any:
    value = (settings or {}).get(key)
    return default if value is None else value


def workload_names(names: list[str] | None, warmup: bool = True) -> list[str]:
    """The workloads to run, in order: ``names`` (None or empty:
    :data:`rigkit.bench.workloads.DEFAULT_WORKLOADS`), after the discarded warm-up unless
    ``warmup`` is False."""
    return (["warmup"] if warmup else []) + list(names or DEFAULT_WORKLOADS)


@dataclass
class BenchSession:
    """One bench run against ``target`` (see the module doc).

    + settings: the host's ``spec.bench`` as a dict (``BenchSpec.model_dump()``; None: a bare
      URL, no host): sizing (:func:`applied_settings`), ``sampled_temperature`` (default
      :data:`SAMPLED_TEMPERATURE`), ``stall_timeout_s`` (s, default :data:`STALL_TIMEOUT_S`).
    + preset: a :data:`rigkit.bench.workloads.PRESETS` name or ``auto``.
    + workloads, warmup: what to run (:func:`workload_names`).
    + quoting_tokens, max_tokens (tokens), stall_timeout_s (s): the command line's values, over
      the settings (None: not given).
    + health_budget_s (s), repeat_unstable, acceptance_floor (0–1): :func:`rigkit.bench.runner.run_workloads`'s.
    + baselines: summaries to judge against (``[]``: none; the window judges against none).
    + context: the caller's context (host, GPU, window…), over the engine's and under the
      measured characters per token.
    + say: where to write the session's notes for the operator (the preset picked, a workload
      NOT-RUN, the energy method); None: nowhere.
    """

    target: Target
    settings: Mapping[str, Any] | None = None
    preset: str = "auto"
    workloads: list[str] | None = None
    warmup: bool = True
    quoting_tokens: int | None = None
    max_tokens: int | None = None
    stall_timeout_s: float | None = None
    health_budget_s: float = 120.0
    repeat_unstable: int = 0
    acceptance_floor: float = ACCEPTANCE_FLOOR
    baselines: list[dict[str, Any]] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    run_id: str = field(default_factory=new_run_id)
    say: Callable[[str], None] | None = None
    #: set by :meth:`prepare`: the workloads to send and the summary's context
    planned: list[Workload] = field(default_factory=list, init=False)
    measured_context: dict[str, Any] = field(default_factory=dict, init=False)

    def _say(self, text: str) -> None:
        if self.say is not None:
            self.say(text)

    def prepare(self) -> None:
        """Probe the engine, size the preset and build the workloads (the module doc's step 1).
        Raises :class:`TargetUnreachable` when the target answers nothing at all."""
        import requests

        target = self.target
        engine = probe_engine(target)
        if engine["model"] is None and engine["engine"] is None:
            try:
                requests.get(target.aux_base + "/v1/models", headers=target.headers(), timeout=5)
            except requests.RequestException as exc:
                raise TargetUnreachable(f"{target.label}: not reachable ({type(exc).__name__})") from None
        if target.model is None:
            target.model = engine["model"]
        n_ctx = engine.get("n_ctx")
        if self.preset == "auto":
            self.preset = "rig" if (n_ctx or 0) >= PRESETS["rig"].min_context_tokens else "small"
            self._say(f"preset: {self.preset} (server context {n_ctx or 'unknown'} tokens per request; "
                      f"the rig preset needs {PRESETS['rig'].min_context_tokens})")
        # the preset first, then the host's bench settings on top, then the command line
        preset, quoting_tokens, max_tokens = sized_preset(
            self.preset, self.settings, quoting_tokens=self.quoting_tokens, max_tokens=self.max_tokens)
        self.stall_timeout_s = self.stall_timeout_s or _setting(self.settings, "stall_timeout_s",
                                                                STALL_TIMEOUT_S)
        names = workload_names(self.workloads, self.warmup)
        cpt, cpt_source = measure_chars_per_token(target, "".join(make_document(2000, 3)))
        quoting_cpt = cpt
        if "quoting" in names and cpt_source == "tokenize":
            # calibrate on the quoting prompt itself (its instructions tokenise differently)
            n_tok, quote_tok = quoting_sizes(preset, quoting_tokens)
            probe = build_quoting_prompt("calibration", n_tok, quote_tok, cpt)[0]
            quoting_cpt, _ = measure_chars_per_token(target, probe)
        self.planned = build_workloads(
            preset, names, model=target.model, nonce=self.run_id, chars_per_token=cpt,
            chat_max_tokens=max_tokens, quoting_tokens=quoting_tokens,
            sampled_temperature=float(_setting(self.settings, "sampled_temperature", SAMPLED_TEMPERATURE)),
            quoting_chars_per_token=quoting_cpt)
        mark_unrunnable(self.planned, n_ctx=n_ctx, n_params=engine.get("n_params"),
                        chars_per_token=cpt, quoting_chars_per_token=quoting_cpt)
        for wl in self.planned:
            if wl.not_run:
                self._say(f"{wl.name}: NOT-RUN — {wl.not_run}")
        context = {k: engine.get(k) for k in ENGINE_KEYS}
        context["model"] = context["model"] or target.model
        context.update(self.context)
        context.update({"chars_per_token": round(cpt, 3), "chars_per_token_source": cpt_source,
                        "quoting_chars_per_token": round(quoting_cpt, 3),
                        "gpu": context.get("gpu"), "driver": context.get("driver"),
                        "power_limit_w": context.get("power_limit_w")})
        self.measured_context = context

    @property
    def total_requests(self) -> int:
        """Requests the prepared workloads send (before any is measured again)."""
        return sum(len(w.requests) for w in self.planned)

    def run(self, out_dir: str, *, read_energy: Callable[[], dict[str, Any]] | None = None,
            where: str = "this host", energy_unavailable: str | None = None,
            progress: Callable[[str, int, int], None] | None = None,
            warn: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Run the prepared workloads (:meth:`prepare` first) into ``out_dir/requests.jsonl``
        and return the summary (:func:`rigkit.bench.runner.build_summary`).

        + read_energy: the GPU's reader (:class:`rigkit.bench.nvml.EnergyReader`, or the agent's
          over SSH) for :class:`rigkit.bench.energy.EnergyMeter` (``where``: the words for
          it); None: energy not measured, ``energy_unavailable`` saying why.
        + progress(workload, done, total), warn(text): as :func:`rigkit.bench.runner.run_workloads`.

        Raises RuntimeError before :meth:`prepare`.
        """
        if not self.measured_context:
            raise RuntimeError("BenchSession.run before prepare(): nothing planned")
        meter = None
        energy: dict[str, Any] | None = {"method": None, "unavailable": energy_unavailable or "no reader"}
        if read_energy is not None:
            meter = EnergyMeter(read_energy, where=where)
            if meter.start():
                why = f"; no counter: {meter.counter_unavailable}" if meter.counter_unavailable else ""
                self._say(f"energy: {meter.method} ({meter.source}){why}; measuring the idle draw first")
        summaries, warnings = run_workloads(
            self.target, self.planned, run_id=self.run_id, out_dir=out_dir,
            stall_timeout_s=self.stall_timeout_s or STALL_TIMEOUT_S,
            health_budget_s=self.health_budget_s, progress=progress, warn=warn, meter=meter,
            repeat_unstable=self.repeat_unstable, acceptance_floor=self.acceptance_floor,
            doubt=regression_doubt(self.measured_context, self.baselines, self.preset))
        return build_summary(self.run_id, self.target, self.measured_context, summaries,
                             self.baselines, warnings, self.preset,
                             energy=meter.describe() if meter else energy)


def not_run_summary(target: Target, context: dict[str, Any], names: list[str], why: str,
                    preset: str, run_id: str | None = None) -> dict[str, Any]:
    """The summary of a session that sends nothing: every workload of ``names``
    (:func:`workload_names`) NOT-RUN with ``why`` (the warm-up kept apart, as discarded).
    ``preset`` ``auto`` is recorded as ``none`` (no server was asked)."""
    summaries = {}
    for n in names:
        summaries[n] = summarize_workload(n, [], not_run=why, skipped=True)
        summaries[n]["discarded"] = n == "warmup"
    return build_summary(run_id or new_run_id(), target, dict(context), summaries, [], [],
                         preset if preset != "auto" else "none")
