"""Run workloads against a target and write the results folder.

A results folder holds ``requests.jsonl`` (one JSON object per request, warm-up included and
marked ``discarded``), ``summary.json`` (context, per-workload summaries, verdicts,
speed-ups, warnings) and ``chart.png``.

Failure policy (``notes/bench.md`` §4.11): the first failed request stops its workload, and
the failure is the workload's verdict — never averaged in. A failure that says the server is
unwell (connection refused, HTTP 5xx, engine dead, stalled or cut stream, an error inside the
stream) also ends the run: the remaining workloads are reported ``not-run``. A failure of one
request's own making (thinking ate the budget, empty answer, HTTP 4xx) moves on to the next
workload. After any failure ``/health`` is probed and its answer added to the message.

Server states (docs/bench.md "What the bench does with each stream"): a model still loading (llama.cpp answers 503
``{"error": {"message": "Loading model"}}`` on every endpoint until loaded, its server
README) or a 503/429 with ``Retry-After`` (RFC 9110 §10.2.3, §15.6.4; OpenAI's rate limits
answer 429) is not a dead engine: the request is sent again after ``Retry-After`` (else
``poll_s``) while the health budget lasts, and the wait is named in a warning; past the
budget the workload fails ``loading`` / ``rate-limited`` / ``unavailable``, never
``engine-dead``. A 5xx is called ``engine-dead`` only when its message says so or ``/health``
answers 503 without llama.cpp's ``Loading model`` (vLLM's ``/health`` is 503 with an empty
body after ``EngineDeadError``).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable

import requests

from rigkit.bench import metrics as spec_metrics
from rigkit.bench.client import ChatSession, RequestResult, stream_chat
from rigkit.bench.result import ABORT_KINDS, WAIT_KINDS, Happened, failed, failure_kind
from rigkit.bench.context import Target
from rigkit.bench.energy import IDLE_S, EnergyMeter, summarize_energy
from rigkit.bench.results import (MAX_CV, MIN_STEADY_N, SCHEMA_VERSION, compared_metrics, exit_code, speedups,
                                  summarize_workload, verdict)
from rigkit.bench.workloads import Workload, verbatim_check

#: How many more times ``rigkit bench`` measures an unstable workload before its verdict says WARN
#: unstable (its ``--repeat-unstable`` default).
REPEAT_UNSTABLE = 2
#: The least a retry waits (s), whatever ``Retry-After`` asks (``0`` included): a 429 with
#: ``Retry-After: 0`` once made 1,162 requests in 2 s.
RETRY_FLOOR_S = 1.0
#: The most retries of one request on a loading, rate-limited or unavailable server, whatever the
#: health budget.
MAX_RETRIES = 120
#: How many more times a request that carried a llama-swap swap is sent (each such request is kept out
#: of the figures: recorded ``discarded`` with its ``swap``, never in n or CV); past it the workload
#: fails ``swapping``.
SWAP_REMEASURE = 2


def unstable_metrics(name: str, summary: dict[str, Any]) -> dict[str, float]:
    """``{metric: cv}`` of the figures a verdict compares (decode tok/s; quoting also prefill)
    whose coefficient of variation is above :data:`MAX_CV` in a workload's summary."""
    out = {}
    for m in compared_metrics(name):
        s = (summary.get("metrics") or {}).get(m) or {}
        if s.get("cv") is not None and s["cv"] > MAX_CV:
            out[m] = round(s["cv"], 4)
    return out


def too_few_figures(name: str, summary: dict[str, Any]) -> str | None:
    """Why a workload's summary holds too few figures to be steady because some were left out — impossible
    (:func:`rigkit.bench.results.implausible_figures`: bunched by a buffer) or unmeasurable (the arrival times
    could not carry them: ``summary["unmeasurable"]``, :func:`rigkit.bench.results.summarize_workload`) — in
    words (``decode: 3 impossible of 4 figures, 1 left``; ``decode: 1 impossible and 3 unmeasurable of 4 figures, 0
    left``: under load one burst reaches the bench in one read, another in several), or
    None: only when the workload had at least :data:`rigkit.bench.results.MIN_STEADY_N` successful requests and
    a compared figure fell below that."""
    marks = summary.get("implausible") or []
    unmeasurable = summary.get("unmeasurable") or {}
    if not (marks or unmeasurable) or (summary.get("n") or 0) < MIN_STEADY_N:
        return None
    for m in compared_metrics(name):
        left = ((summary.get("metrics") or {}).get(m) or {}).get("n") or 0
        if left >= MIN_STEADY_N:
            continue
        word = "decode" if m == "decode_tps" else "prefill"
        out = sum(1 for x in marks if x["metric"] == m)
        k = int(unmeasurable[m].split(" of ", 1)[0]) if m in unmeasurable else 0  # "k of n requests: <reason>"
        why = " and ".join(f"{c} {kind}" for c, kind in ((out, "impossible"), (k, "unmeasurable")) if c)
        if why:
            return f"{word}: {why} of {summary['n']} figures, {left} left"
    return None


def regression_doubt(context: dict[str, Any], baselines: list[dict[str, Any]],
                     preset: str) -> Callable[[str, dict[str, Any]], str | None]:
    """The ``doubt`` for :func:`run_workloads`: the verdict's words when a workload's summary is, against
    the baseline it would be judged by, beyond the noise of both runs either way — a FAIL (below it) or the
    faster-beyond-the-noise WARN (above it: "a stale baseline"; the sandbox's pairs met two steady runs 21%
    apart, llama.cpp's own timings 1.4x apart: the shared host's load had moved) — else None. Either must
    hold when measured again."""
    def doubt(name: str, summary: dict[str, Any]) -> str | None:
        v = verdict(name, summary, context, baselines, preset)
        beyond = [r for r in v["reasons"] if "beyond the noise of both runs" in r and (" below " in r or " above " in r)]
        return f"{beyond[0].split(',')[0]} (confirming)" if v["verdict"] in ("FAIL", "WARN") and beyond else None
    return doubt


def new_run_id() -> str:
    """``YYYYmmddTHHMMSSZ-xxxxxx``: UTC time plus 6 random hex digits (also the prompt nonce)."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def probe_health(target: Target, timeout_s: float = 5.0) -> str:
    """One phrase about ``GET /health`` for failure messages, e.g. ``/health answers 503``
    or ``/health answers 503 Loading model`` (llama.cpp's body while loading, quoted)."""
    try:
        resp = requests.get(target.aux_base.rstrip("/") + "/health",
                            headers=target.headers(), timeout=timeout_s)
    except requests.RequestException as exc:
        return f"/health unreachable ({type(exc).__name__})"
    phrase = f"/health answers {resp.status_code}"
    if resp.status_code == 503 and "loading" in resp.text.lower():
        phrase += " Loading model"
    return phrase


def send_patiently(send: Callable[[], RequestResult], *, health_budget_s: float,
                   poll_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep, floor_s: float = RETRY_FLOOR_S,
                   max_retries: int = MAX_RETRIES) -> RequestResult:
    """``send()`` until its result is not one of :data:`WAIT_KINDS`, waiting ``Retry-After``
    (else ``poll_s``), at least ``floor_s`` seconds, between tries while ``health_budget_s`` seconds
    last and at most ``max_retries`` times (RFC 9110 §10.2.3 lets a server ask for 0 s; the floor
    keeps a server that does from being asked again at once, without end).

    A result after waits carries ``waited_s`` (the seconds the waits took by ``clock``) and a warning
    naming them (``waited 4.0 s over 4 retries before this request was served: the model was still
    loading (HTTP 503 …)``); when the budget or the retries run out, or a ``Retry-After`` asks for
    more than is left, the last failure is returned with the wait and the budget added to its message.
    """
    start = clock()
    waited = 0.0
    tries = 0
    first: str | None = None
    while True:
        r = send()
        if r.ok or r.error_kind not in WAIT_KINDS:
            if first:
                r.waited_s = round(waited, 3)
                r.warnings.append(f"waited {waited:.1f} s over {tries} retries before this request was "
                                  f"served: the server was {first}")
            return r
        first = first or f"{WAIT_KINDS[r.error_kind]}: {r.error}"
        wait = max(r.retry_after_s if r.retry_after_s is not None else poll_s, floor_s)
        left = health_budget_s - (clock() - start)
        if wait > left or tries >= max_retries:
            r.waited_s = round(waited, 3)
            if tries >= max_retries:
                asked = f"waited {waited:.1f} s over {tries} retries, the most the bench makes"
            elif r.retry_after_s is not None and wait > max(poll_s, floor_s):
                asked = f"its Retry-After {wait:g} s is more than the {max(left, 0):.0f} s left"
            else:
                asked = f"waited {waited:.1f} s over {tries} retries"
            r.error = (f"{r.error}; {WAIT_KINDS[r.error_kind]} — {asked} of the "
                       f"{health_budget_s:g} s health budget (not dead: rerun later or raise "
                       f"--health-budget)")
            return r
        t = clock()
        sleep(wait)
        waited += clock() - t
        tries += 1


def swap_state(target: Target, timeout_s: float = 5.0) -> str | None:
    """What llama-swap's ``/running`` says of ``target``'s member, when it is not serving it now —
    ``"starting"`` (a swap under way), ``"not running"`` (a request would load it), ``"stopping"`` —
    else None (ready, not behind llama-swap, or ``/running`` not answering). Source: llama-swap v250
    ``internal/server/api.go:333-351`` (``{"running": [{"model", "state", …}]}``, every process not
    stopped) and ``internal/process/process.go:13-21`` (states ``stopped``, ``starting``, ``ready``,
    ``stopping``, ``shutdown``)."""
    if not target.swap_base or not target.model:
        return None
    from rigkit.bench import llama_swap

    try:
        running = llama_swap.running(target.swap_base, timeout_s=timeout_s, api_key=target.api_key)
    except (requests.RequestException, ValueError, AttributeError):
        return None
    states = {str(m.get("model")): str(m.get("state")) for m in running if isinstance(m, dict)}
    state = states.get(target.model, "not running")
    return None if state == "ready" else state


def run_workloads(target: Target, workloads: list[Workload], *, run_id: str, out_dir: str,
                  stall_timeout_s: float = 120.0, health_budget_s: float = 120.0,
                  poll_s: float = 1.0,
                  progress: Callable[[str, int, int], None] | None = None,
                  warn: Callable[[str], None] | None = None,
                  meter: EnergyMeter | None = None,
                  idle_s: float = IDLE_S,
                  repeat_unstable: int = 0,
                  doubt: Callable[[str, dict[str, Any]], str | None] | None = None,
                  acceptance_floor: float = spec_metrics.ACCEPTANCE_FLOOR,
                  ) -> tuple[dict[str, Any], list[str]]:
    """Run ``workloads`` one request at a time; append each record to
    ``out_dir/requests.jsonl`` as it completes.

    Returns ``(summaries, warnings)``: workload name → :func:`summarize_workload` dict (the
    warm-up included, flagged ``discarded``), and the warnings raised on the way (chunk-count
    fallbacks, answers cut by thinking), each once, with ``(N of M requests)`` when it was
    raised by more than one request. ``progress(workload, done, total)`` is called as it goes,
    ``warn(text)`` the first time each warning is raised. A workload whose
    :attr:`Workload.not_run` is set is not sent and is reported ``not-run`` with that reason.
    Each request is sent through :func:`send_patiently` (``health_budget_s``, ``poll_s``:
    seconds; a loading or rate-limited server is waited for, not called dead). A request that carried
    a llama-swap swap (its loading frames in the stream, or — with ``target.swap_base`` — ``/running``
    not saying the member ``ready`` before the send: :func:`swap_state`) is written ``discarded`` with
    its ``swap`` and sent again, up to :data:`SWAP_REMEASURE` more times: it never counts in n or the
    CV (the summary's ``swapped`` says how many there were); every try swapping fails the workload
    ``swapping``; a member llama-swap could not start is ``swap-failed``, quoting llama-swap.

    With a ``meter`` (:class:`rigkit.bench.energy.EnergyMeter`) the card's idle draw is
    measured first for ``idle_s`` seconds (nothing sent), then each request's energy: its record
    carries ``energy_j`` (J), ``energy_s`` (s) and ``avg_w`` (W), and each workload's summary an
    ``energy`` object (:func:`rigkit.bench.energy.summarize_energy`).

    A measured workload whose compared figures are unstable (:func:`unstable_metrics`: CV above
    :data:`rigkit.bench.results.MAX_CV`) is measured again, up to ``repeat_unstable`` more
    times (``rigkit bench``: :data:`REPEAT_UNSTABLE` unless told; 0 here: a window's bench spends
    the window's time and judges against no baseline, so it is measured once); its records carry ``attempt`` (1, 2, …), its summary is the last attempt's, with
    ``attempts`` and ``tries`` (``[{attempt, cv: {metric: cv}, doubt}]``) — the verdict then says
    WARN unstable with the figures, never FAIL on speed. So is one whose impossible figures, left out, left
    too few to be steady (:func:`too_few_figures`; its words in ``doubt``). So is a stable workload that ``doubt(name,
    summary)`` doubts (``rigkit bench``: a regression against the baseline, :func:`regression_doubt`):
    a slowdown must hold when measured again before it is a FAIL — two runs' own spreads do not
    hold the run-to-run drift of a shared host (the sandbox's twenty pairs: one FAIL between two
    steady runs of the same settings, 35% apart).

    Speculative decoding (:mod:`rigkit.bench.metrics`): the engine's counters are scraped around each
    workload — behind llama-swap only while ``/running`` says the member ``ready`` (a scrape never loads
    it) — and differenced into the summary's ``spec_decode``, ``mixed`` when the engine finished more
    requests than this workload sent (then no acceptance figure). A workload with ``window_tokens``
    (``long``) is also scraped during its stream: its ``spec_decode["windows"]``, and a window whose
    acceptance rate falls below ``acceptance_floor`` (0–1) is a warning naming it
    (:func:`rigkit.bench.metrics.collapse_warning`) and the summary's ``spec_decode["collapse"]``.
    """
    os.makedirs(out_dir, exist_ok=True)
    jsonl = os.path.join(out_dir, "requests.jsonl")
    counts: dict[str, int] = {}
    summaries: dict[str, Any] = {}
    aborted: str | None = None
    sent = 0

    def _warn(text: str) -> None:
        counts[text] = counts.get(text, 0) + 1
        if counts[text] == 1 and warn:
            warn(text)

    idle_w = None
    if meter is not None:
        if meter.start() and meter.idle_span is None:
            meter.idle(idle_s)
        idle_w = meter.idle_span.avg_w if meter.idle_span is not None else None
    session = ChatSession()
    with session, open(jsonl, "a", encoding="utf-8") as fh:
        for wl in workloads:
            if aborted or wl.not_run:
                why = wl.not_run or f"not run: the run stopped after {aborted}"
                summaries[wl.name] = summarize_workload(wl.name, [], not_run=why,
                                                        skipped=bool(wl.not_run))
                summaries[wl.name]["discarded"] = wl.discard
                continue
            tries: list[dict[str, Any]] = []
            def scrape_now() -> tuple[dict[str, Any] | None, str | None]:
                return spec_metrics.scrape(target.aux_base, target.headers(), swap_base=target.swap_base,
                                           member=target.model, api_key=target.api_key)

            for attempt in range(1, 1 + (1 if wl.discard else 1 + max(repeat_unstable, 0))):
                before, note = scrape_now()
                sent_before = sent
                reader = (spec_metrics.WindowReader(lambda: scrape_now()[0], wl.window_tokens)
                          if wl.window_tokens and before else None)
                records: list[dict[str, Any]] = []
                quotes: list[dict[str, Any]] = []
                swapped_total = 0
                error = kind = None
                for i, spec in enumerate(wl.requests):
                    if progress:
                        progress(wl.name, i, len(wl.requests))
                    def send() -> RequestResult:
                        if reader is not None:
                            reader.samples.clear()
                            reader.start()
                        got = send_patiently(
                            lambda: stream_chat(target.chat_url, spec.payload, api_key=target.api_key,
                                                session=session, stall_timeout_s=stall_timeout_s,
                                                on_chunk=(lambda r: reader.on_chunk(r.token_chunks))
                                                if reader is not None else None),
                            health_budget_s=health_budget_s, poll_s=poll_s)
                        if reader is not None:
                            reader.finish()
                        return got

                    def record(r: RequestResult, energy: dict[str, Any], discarded: bool) -> dict[str, Any]:
                        return {"schema_version": SCHEMA_VERSION, "run_id": run_id,
                                "ts": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                                "workload": wl.name, "prompt_id": spec.prompt_id,
                                "repetition": spec.repetition, "discarded": discarded,
                                "temperature": spec.payload.get("temperature"),
                                "max_tokens": spec.payload.get("max_tokens"), "attempt": attempt,
                                **r.to_record(), **energy}

                    swaps: list[dict[str, Any]] = []
                    while True:
                        state = swap_state(target)
                        energy: dict[str, Any] = {}
                        if meter is None:
                            r = send()
                        else:
                            with meter.measure() as span:
                                r = send()
                            energy = span.record()
                        sent += 1
                        if state is not None and r.swap is None and (r.ok or r.error_kind == "swap-failed"):
                            r.swap = {"seen": f"llama-swap's /running said {state} before the send",
                                      "state": state, "model": target.model}
                        if not (r.ok and r.swap):
                            break
                        # a request that carried a swap: its times are the swap's — recorded, kept out
                        # of the figures (never in n or CV) and measured again
                        swaps.append(r.swap)
                        _warn(f"{wl.name}: a request carried a llama-swap swap of its member (llama-swap's "
                              f"loading frames, or /running not ready before the send): kept out of the "
                              f"figures and measured again (up to {SWAP_REMEASURE} times)")
                        if len(swaps) > SWAP_REMEASURE:
                            failed(r, Happened("swap"), (
                                f"every one of {len(swaps)} tries carried a llama-swap swap of "
                                f"{target.model or 'the member'} ({swaps[-1].get('seen')}): something "
                                f"else keeps asking llama-swap for another member; nothing measured"))
                            break
                        fh.write(json.dumps(record(r, energy, True)) + "\n")
                        fh.flush()
                    swapped_total += len(swaps)
                    for w in r.warnings:
                        _warn(w)
                    rec = record(r, energy, wl.discard)
                    if r.ok and spec.expected is not None:
                        v = verbatim_check(spec.expected, r.answer)
                        vd = {**v.__dict__, "message": v.message()}
                        rec["verbatim"] = vd
                        quotes.append(vd)
                    fh.write(json.dumps(rec) + "\n")
                    fh.flush()
                    records.append(rec)
                    if not r.ok:
                        error, kind = r.error, r.error_kind
                        health = probe_health(target)
                        # a 5xx judged again with /health (vLLM's 503 after EngineDeadError)
                        kind = failure_kind(Happened("health", kind=kind, health=health))
                        error = f"{error}; {health}"
                        if kind == "engine-dead":
                            error += " (engine dead)"
                        elif kind in WAIT_KINDS:
                            error += f" ({WAIT_KINDS[kind]}, not dead)"
                        break
                if progress:
                    progress(wl.name, len(records), len(wl.requests))
                after, note2 = scrape_now() if before else (None, note)
                delta = spec_metrics.spec_delta(before, after, own_requests=sent - sent_before)
                if delta and delta.get("mixed"):
                    _warn(f"{wl.name}: {delta['foreign_requests']} request(s) that were not the bench's moved "
                          f"the engine's counters (vllm:request_success_total rose by {delta['requests']}, the "
                          f"bench sent {delta['own_requests']}): its acceptance is mixed, not reported")
                if delta and reader is not None and not delta.get("mixed"):
                    delta["windows"] = reader.windows()
                    fell = spec_metrics.collapsed(delta["windows"], acceptance_floor)
                    delta["collapse"] = fell and {"window": fell["index"], "from_token": fell["from_token"],
                                                  "to_token": fell["to_token"], "acceptance_rate": fell["acceptance_rate"],
                                                  "floor": acceptance_floor}
                    if fell:
                        _warn(spec_metrics.collapse_warning(wl.name, fell, acceptance_floor, len(delta["windows"])))
                summaries[wl.name] = summarize_workload(
                    wl.name, records, error=error,
                    error_kind=kind, spec_decode=delta,
                    spec_decode_note=None if delta else (note2 or note or "no drafts counted"),
                    verbatim=quotes if any(s.expected is not None for s in wl.requests) else None,
                    energy=summarize_energy(records, idle_w, meter.method) if meter else None)
                summaries[wl.name]["discarded"] = wl.discard
                summaries[wl.name]["attempts"] = attempt
                summaries[wl.name]["swapped"] = swapped_total
                shaky = {} if wl.discard else unstable_metrics(wl.name, summaries[wl.name])
                few = None if wl.discard or error else too_few_figures(wl.name, summaries[wl.name])
                why = (few if few or wl.discard or error or shaky or doubt is None
                       else doubt(wl.name, summaries[wl.name]))
                tries.append({"attempt": attempt, "cv": shaky, "doubt": why})
                if error or not (shaky or why) or attempt > max(repeat_unstable, 0):
                    break
                _warn(f"{wl.name}: " + (f"unstable ({', '.join(f'{m} CV {100 * cv:.1f}%' for m, cv in shaky.items())})"
                                        if shaky else why) + "; measuring it again")
            summaries[wl.name]["tries"] = tries
            if error and kind in ABORT_KINDS:
                aborted = wl.name
    warnings = [text if n == 1 else f"{text} ({n} of {sent} requests)"
                for text, n in counts.items()]
    return summaries, warnings


def build_summary(run_id: str, target: Target, context: dict[str, Any],
                  workloads: dict[str, Any], baselines: list[dict[str, Any]],
                  warnings: list[str], preset: str,
                  energy: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``summary.json`` object: ``schema_version``, ``run_id``, ``timestamp`` (UTC),
    ``target`` (label, never the key), ``preset``, ``context`` (with ``warmup_done``),
    ``energy`` (:meth:`rigkit.bench.energy.EnergyMeter.describe`: method, source, idle
    draw; None when not measured), ``workloads`` (measured ones; the warm-up is kept under
    ``warmup``; each with its ``energy``), ``verdicts``, ``speedups``, ``warnings``,
    ``exit_code``."""
    measured = {n: w for n, w in workloads.items() if not w.get("discarded")}
    warm = workloads.get("warmup")
    context = dict(context)
    context["warmup_done"] = bool(warm and warm["status"] == "ok")
    verdicts = {n: verdict(n, w, context, baselines, preset) for n, w in measured.items()}
    if warm and warm.get("skipped"):
        verdicts["warmup"] = {"verdict": "NOT-RUN", "reasons": [warm["error"]], "baseline": None}
    elif warm and warm["status"] != "ok":
        verdicts["warmup"] = {"verdict": "FAIL", "reasons": [warm["error"]], "baseline": None}
    return {
        "schema_version": SCHEMA_VERSION, "run_id": run_id,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "target": target.label, "preset": preset, "context": context, "energy": energy,
        "warmup": warm, "workloads": measured, "verdicts": verdicts,
        "speedups": speedups(measured, [b for b in baselines if not b.get("_found")]), "warnings": warnings,
        "exit_code": exit_code(verdicts),
    }


def _fmt(s: dict[str, Any] | None, unit: str, digits: int = 1, of: int | None = None) -> str:
    """One figure as printed: ``"<median> <unit>"`` with ``(min, max, CV)`` when it has several values;
    ``of`` (the workload's request count) adds ``n K of N`` when fewer requests gave the figure (the
    others left out as impossible or unmeasurable), so a median of one request never reads as of all."""
    if not s:
        return "n/a"
    txt = f"{s['median']:.{digits}f} {unit}"
    short = of is not None and s["n"] < of
    parts = [f"n {s['n']} of {of}"] if short else []
    if s["n"] > 1:
        parts += [f"min {s['min']:.{digits}f}", f"max {s['max']:.{digits}f}"]
        if s.get("cv") is not None:
            parts.append(f"CV {100 * s['cv']:.1f}%")
    return txt + (f" ({', '.join(parts)})" if parts else "")


SOURCE_WORDS = {
    "usage": "from usage",
    "timings": "from llama.cpp's timings.predicted_n (the server's count; no usage sent)",
    "usage+timings": "from usage and llama.cpp's timings.predicted_n",
    "chunk-estimate": "ESTIMATED by counting chunks (no usage, no timings)",
    "mixed": "partly ESTIMATED by counting chunks (some requests had no usage)",
}


def energy_header(energy: dict[str, Any]) -> str:
    """The run's energy line: how it was measured, where, and the idle draw (shown apart, never
    subtracted), e.g. ``energy: the card's energy counter (NVML) on rig (its agent over SSH) · idle 32.0 W
    over 2.0 s (measured apart, not subtracted)``, or ``energy: power.draw sampled and integrated (no
    counter: NVML: Not Supported (code 3)) on …`` (why not the counter, when the meter says)."""
    if not energy.get("method"):
        return f"energy: not measured — {energy.get('unavailable') or 'no reading'}"
    idle = energy.get("idle")
    idle_txt = (f"idle {idle['avg_w']:.1f} W over {idle['seconds']:.1f} s before the run "
                "(measured apart, not subtracted)" if idle and idle.get("avg_w") is not None
                else "idle draw not measured")
    why = f" (no counter: {energy['counter_unavailable']})" if energy.get("counter_unavailable") else ""
    return f"energy: {energy.get('method_words')}{why} on {energy.get('where')} · {idle_txt}"


def energy_line(e: dict[str, Any]) -> str:
    """One workload's energy line: ``  energy: 81.2 J over 0.68 s · 119.4 W · 3.15 tok/J ·
    0.317 J/token`` (+ its note: requests not measured); tok/J and J/token only where the energy
    is the engine's work — a draw at the idle level (``power_modelled`` False) reads
    ``tok/J n/a (not power-modelled: …)``."""
    if e.get("joules") is None:
        return f"  energy: n/a — {e.get('note') or 'not measured'}"
    txt = (f"  energy: {e['joules']:.1f} J over {e['seconds']:.2f} s · "
           f"{e['avg_w']:.1f} W average" if e.get("avg_w") is not None else
           f"  energy: {e['joules']:.1f} J")
    if e.get("power_modelled") is False:
        # the joules are the card's resting draw, not the engine's work: no tok/J to show
        return txt + f" · tok/J n/a ({e.get('note')})"
    if e.get("tok_per_j") is not None:
        txt += f" · {e['tok_per_j']:.3g} tok/J · {e['j_per_token']:.3g} J/token"
    if e.get("note"):
        txt += f" ({e['note']})"
    return txt


def impossible_lines(marks: list[dict[str, Any]], most: int = 3) -> list[str]:
    """The printed lines of a workload's impossible figures (:func:`rigkit.bench.results.implausible_figures`):
    ``  IMPOSSIBLE decode 146318.0 tok/s (chat-1 rep 0): above 25500.0 tok/s, 255 generated tokens over
    less than 10 ms …; left out of the figures``, the first ``most``, then a count."""
    lines = [f"  IMPOSSIBLE {'decode' if m['metric'] == 'decode_tps' else 'prefill'} {m['value']:.1f} tok/s "
             f"({m.get('prompt_id')} rep {m.get('repetition')}): above {m['bound']:.1f} tok/s, {m['why']}; "
             f"left out of the figures (kept in requests.jsonl)" for m in marks[:most]]
    if len(marks) > most:
        lines.append(f"  IMPOSSIBLE: {len(marks) - most} more such figures left out")
    return lines


def declares_speculative(speculative: Any) -> bool:
    """Whether a run's context ``speculative`` (:func:`rigkit.bench.context.probe_engine`: llama.cpp's
    ``/props`` ``default_generation_settings.params["speculative.types"]``, ``"none"`` when it drafts
    nothing, ``"none,draft-mtp"`` listing a fallback first; or what the spec declares for HyperQwen,
    ``"dflash2 (DFLASH_TOKENS=7)"``) names a speculative-decoding method: not None, empty or only
    ``none``."""
    if not speculative:
        return False
    return any(part.strip().lower() not in ("", "none") for part in str(speculative).split(","))


def spec_lines(w: dict[str, Any], said: set[str], declared: bool = True) -> list[str]:
    """A workload's speculative-decoding lines (``w``: a :func:`summarize_workload` dict): ``  speculative
    decoding: acceptance length 3.50 tokens/step, acceptance rate 35.7% · by draft position 0 71% · 1 57% …``;
    ``MIXED`` with the foreign requests (no figure); the ``long`` workload's windows; why nothing was
    read — only where the member ``declared`` speculative decoding (:func:`declares_speculative`: for
    one that does not, a ``/metrics`` that answered 501 or has no counters is no news). A note already
    in ``said`` is not said again."""
    sd = w.get("spec_decode")
    if not sd:
        note = w.get("spec_decode_note")
        if not declared or not note or note in said:
            return []
        said.add(note)
        return [f"  speculative decoding: {note}" if note == spec_metrics.NO_SPEC
                else f"  speculative decoding: not read — {note}"]
    if sd.get("mixed"):
        return [f"  speculative decoding: MIXED — {sd['foreign_requests']} request(s) not the bench's moved the "
                f"engine's counters ({sd['requests']} finished, {sd['own_requests']} sent by the bench): no "
                f"acceptance figure"]
    line = (f"  speculative decoding: acceptance length {sd['acceptance_length']:.2f} tokens/step, acceptance rate "
            + (f"{100 * sd['acceptance_rate']:.1f}%" if sd.get("acceptance_rate") is not None else "n/a"))
    pos = sd.get("by_position") or {}
    if pos:
        line += " · by draft position " + " · ".join(f"{p} {100 * r:.0f}%" for p, r in pos.items())
    out = [line]
    wins = sd.get("windows") or []
    if wins:
        out.append(f"  acceptance in {len(wins)} windows along {wins[-1]['to_token']} generated tokens: "
                   + " · ".join(f"{x['from_token']}-{x['to_token']} {100 * (x['acceptance_rate'] or 0):.0f}%"
                                for x in wins))
    return out


def report_lines(summary: dict[str, Any]) -> list[str]:
    """Plain-text lines for stdout: one block per workload (figures, then its verdict), then
    speed-ups and the overall result."""
    lines: list[str] = []
    ctx = summary["context"]
    engine = " ".join(x for x in (ctx.get("engine") or "unknown", ctx.get("engine_version")) if x)
    lines.append(f"target {summary['target']} · engine {engine} · model {ctx.get('model') or 'unknown'} "
                 f"({ctx.get('quantization') or 'quantization unknown'}) · preset "
                 f"{summary['preset']} · warm-up {'done' if ctx.get('warmup_done') else 'NOT done'}")
    en = summary.get("energy")
    if en:
        lines.append(energy_header(en))
    said: set[str] = set()
    for name, w in summary["workloads"].items():
        v = summary["verdicts"][name]
        if w["status"] != "ok":
            lines.append(f"{name}: {w['status'].upper()} — {w['error']}")
        else:
            m = w["metrics"]
            ct = m.get("completion_tokens")
            tpc = m.get("tokens_per_chunk")
            estimate = w.get("counts") == "estimate"
            decode = _fmt(m.get("decode_tps"), "tok/s", of=w["n"])
            if estimate and m.get("decode_tps"):
                decode = (f"~{decode} (ESTIMATE: chunks counted; "
                          f"{w.get('estimate_why') or 'the server sent no usage'})")
            lines.append(
                f"{name}: n={w['n']} · prompt {_fmt(m.get('prompt_tokens'), 'tokens', 0)} · decode {decode} · prefill "
                f"{_fmt(m.get('prefill_tps'), 'tok/s', of=w['n'])} · TTFT {_fmt(m.get('ttft_s'), 's', 3)}"
                f" · answer TTFT {_fmt(m.get('ttft_answer_s'), 's', 3)}")
            if w.get("unmeasurable"):
                figs = ", ".join(sorted(w["unmeasurable"]))
                lines.append(f"  unmeasurable ({figs}): {next(iter(w['unmeasurable'].values()))}")
            if w.get("swapped"):
                lines.append(f"  {w['swapped']} request(s) carried a llama-swap swap: kept out of these "
                             f"figures and measured again")
            source = SOURCE_WORDS.get(w["tokens_source"], w["tokens_source"])
            if w["tokens_source"] == "chunk-estimate" and w.get("estimate_why"):
                source = f"ESTIMATED by counting chunks ({w['estimate_why']})"
            lines.append(
                f"  completion tokens: {ct['median']:.0f} per request (median), "
                f"{w['completion_tokens_total']} in total {source}; a chunk "
                f"count would say {w['chunk_estimate_total']} · "
                f"{tpc['median']:.2f} tokens/chunk" if ct and tpc else "  completion tokens: n/a")
            for line in impossible_lines(w.get("implausible") or []):
                lines.append(line)
            cut = w.get("cut_by_thinking") or []
            if cut:
                lines.append(f"  WARNING: {len(cut)} of {w['n']} answers cut by max_tokens after "
                             f"thinking used most of it — {cut[0]['prompt_id']}: {cut[0]['note']}")
            st = w.get("server_timings")
            if st and st.get("predicted_per_second"):
                lines.append(f"  server timings: prefill {_fmt(st['prompt_per_second'], 'tok/s')}"
                             f" · decode {_fmt(st['predicted_per_second'], 'tok/s')}")
            lines.extend(spec_lines(w, said, declares_speculative(ctx.get("speculative"))))
            if w.get("energy"):
                lines.append(energy_line(w["energy"]))
            for q in w.get("verbatim") or []:
                lines.append(f"  {q['message']}")
        reasons = "; ".join(v["reasons"])
        lines.append(f"  verdict: {v['verdict']}" + (f" — {reasons}" if reasons else ""))
        if v.get("baseline"):
            lines.append(f"  baseline: {v['baseline']} ({v.get('baseline_why') or 'given'})")
    if "warmup" in summary["verdicts"]:
        wv = summary["verdicts"]["warmup"]
        lines.append(f"warmup: {wv['verdict']} — {wv['reasons'][0]}")
    for s in summary["speedups"]:
        lines.append(f"speed-up vs {s['against']}: {s['workload']} {s['factor']:.2f}x decode")
    bad = [n for n, v in summary["verdicts"].items() if v["verdict"] == "FAIL"]
    lines.append(f"result: FAIL ({', '.join(bad)})" if bad else "result: OK")
    return lines
