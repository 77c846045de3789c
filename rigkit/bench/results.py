"""Per-workload summaries, verdicts against a baseline, and the files of a results folder.

Statistics follow ``notes/bench.md`` §6: median is the verdict statistic; min, max, n and the
coefficient of variation (sample standard deviation / mean) are kept beside it, and the raw
samples stay in ``requests.jsonl``.

Verdicts (per workload; speed by :func:`compare_speed`, which judges the noise by both runs'
own spread):

- ``FAIL`` — what is certain: the workload failed (HTTP 5xx, engine dead, stall, cut stream,
  wrong counts, thinking ate the budget…), the verbatim check failed, or decode (quoting: also
  prefill) tok/s is more than 15% below the baseline's *beyond the noise of both runs* (both
  stable, and every request of this run slower than every request of the baseline).
- ``WARN`` — unstable (either run's CV above 10%: never FAIL nor PASS on speed; the runner
  first measures an unstable workload again, up to a bound), more than 15% apart within the
  noise, or more than 15% above beyond it (a stale baseline or a counting bug).
- ``PASS`` — within the band.
- The baseline: ``--baseline`` files when given, else the last *steady* comparable run of the
  member in the results folder (:func:`find_baselines`: same context — which holds the power
  limit — and the same host, member, preset and workload ``max_tokens``, :func:`same_settings`;
  steady: :func:`unsteady` says nothing against it), named in the verdict's ``baseline`` and
  ``baseline_why``; the newer unstable runs passed over are named in ``baseline_skipped``. An
  unstable run is never a default baseline: its noise would carry into every later verdict.
- ``no baseline`` — no baseline given, or its context differs or is unknown
  (:func:`rigkit.bench.context.comparable`).
- ``not comparable`` — a baseline matches, but one side's completion tokens are a chunk-count
  estimate (the server sent no usage) and the other's are counted (``usage`` or llama.cpp's
  ``timings.predicted_n``): decode tok/s from an estimate is neither a slowdown nor a speed-up
  against a count (chunk counting undercounts ~2.5x under speculative decoding), so the
  decode comparison is not made and the reason says why. Never a FAIL. So is a matching
  baseline when either side has no figure for a compared metric (no decode tok/s: one token,
  or a usage without ``completion_tokens`` that left only an estimate): a missing figure is
  never a PASS.

Exit code: 1 when any verdict is FAIL (a verbatim FAIL included — a model that cannot quote is
a failed smoke test, even the tiny test model's), else 0.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from rigkit.bench.context import comparable
from rigkit.common.jsonfile import load_named

SCHEMA_VERSION = 1
METRICS = ("decode_tps", "prefill_tps", "ttft_s", "ttft_answer_s", "e2e_s",
           "completion_tokens", "prompt_tokens", "tokens_per_chunk")
SLOWER, FASTER, MAX_CV = 0.85, 1.15, 0.10
#: A run is *steady* (a default baseline may be it) with at least this many figures of each compared
#: metric: a CV from two samples is one difference, not a spread.
MIN_STEADY_N = 3
#: The smallest interval (s) a rate's clock readings can carry. The client stamps a read when it runs,
#: and a woken reader with other runnable tasks beside it waits up to a scheduler slice first (Linux
#: kernel/sched/fair.c: CFS's targeted latency 6 ms × (1 + log2 CPUs), 12 ms on a 2-CPU host; EEVDF's
#: base slice 0.75 ms × the same factor per competing task); a buffer between (an SSH forward, a proxy)
#: hands on many tokens in one read. A rate over a shorter interval measures those, not the server.
#: :func:`rate_bounds` derives each request's bounds from it.
MIN_INTERVAL_S = 0.010
#: How each ``tokens_source`` counts: ``counted`` (the server's own count) or ``estimate``.
COUNTED_SOURCES = ("usage", "timings")


def counts_kind(tokens_source: str | None) -> str | None:
    """``"counted"`` for ``usage``/``timings``, ``"estimate"`` for ``chunk-estimate`` or a
    ``mixed`` workload (some requests estimated), None when unknown (no successful request)."""
    if tokens_source is None:
        return None
    return "counted" if tokens_source in COUNTED_SOURCES else "estimate"


def stats(values: list[float]) -> dict[str, Any] | None:
    """``{median, min, max, n, cv}`` of the non-None ``values`` (cv None for n < 2 or a zero
    mean); None when there is no value."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    mean = statistics.fmean(vals)
    cv = statistics.stdev(vals) / mean if len(vals) > 1 and mean else None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals), "cv": cv}


def rate_bounds(record: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """The highest decode tok/s a request's own run can carry: ``{"decode_tps": (bound tok/s, why in
    words)}`` where the record has the figure, else ``{}``.

    Decode is (n − 1) tokens over the interval from the first token's arrival to the last's
    (:mod:`rigkit.bench.client`). That interval is trusted down to :data:`MIN_INTERVAL_S` only, so the
    bound is (n − 1) / :data:`MIN_INTERVAL_S`; and when the server says how long it worked (llama.cpp's
    ``timings.predicted_ms``, from its first generated token to its last — tools/server ``get_timings``:
    ``t_token_generation``), tokens cannot reach the client over a shorter interval than the server took to
    make them, less :data:`MIN_INTERVAL_S` of clock slack: (n − 1) / max(server's interval −
    :data:`MIN_INTERVAL_S`, :data:`MIN_INTERVAL_S`). A figure above its bound was bunched by a buffer
    between, or read by a client that ran late — never the server's speed. Prefill (prompt tokens / TTFT)
    has no such bound: a buffer can only delay the first token, which lowers it."""
    tm = record.get("server_timings") or {}
    if not isinstance(tm, dict):
        tm = {}
    n = record.get("completion_tokens")
    if record.get("decode_tps") is None or not isinstance(n, int) or n < 2:
        return {}
    floor_ms = 1000 * MIN_INTERVAL_S
    bound = (n - 1) / MIN_INTERVAL_S
    why = f"{n - 1} generated tokens over less than {floor_ms:g} ms, the shortest interval the bench can time"
    server_ms = tm.get("predicted_ms")
    if isinstance(server_ms, (int, float)) and not isinstance(server_ms, bool) and server_ms > 2 * floor_ms:
        bound = (n - 1) / ((server_ms - floor_ms) / 1000)
        why = (f"faster than the server made them: its timings say {server_ms:.0f} ms for the generated "
               f"tokens, less {floor_ms:g} ms of clock slack")
    return {"decode_tps": (bound, why)}


def implausible_figures(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each figure of ``records`` above its :func:`rate_bounds`: ``[{prompt_id, repetition, attempt,
    metric, value (tok/s), bound (tok/s), why}]``, in record order."""
    out = []
    for r in records:
        for metric, (bound, why) in rate_bounds(r).items():
            value = r.get(metric)
            if value is not None and value > bound:
                out.append({"prompt_id": r.get("prompt_id"), "repetition": r.get("repetition"),
                            "attempt": r.get("attempt"), "metric": metric, "value": value,
                            "bound": round(bound, 1), "why": why})
    return out


def summarize_workload(name: str, records: list[dict[str, Any]], *, error: str | None = None,
                       error_kind: str | None = None, spec_decode: dict | None = None,
                       spec_decode_note: str | None = None,
                       verbatim: list[dict[str, Any]] | None = None,
                       not_run: str | None = None, skipped: bool = False,
                       energy: dict[str, Any] | None = None) -> dict[str, Any]:
    """Summary of one workload from its successful request records (dicts from
    :meth:`rigkit.bench.client.RequestResult.to_record`).

    Keys: ``status`` (``ok`` / ``failed`` / ``not-run``), ``error``, ``error_kind``, ``n``,
    ``metrics`` (name → :func:`stats`), ``tokens_source`` (``usage``, ``timings``,
    ``chunk-estimate``, ``usage+timings`` or ``mixed`` — some estimated), ``counts``
    (:func:`counts_kind`), ``cut_by_thinking`` (``[{prompt_id, repetition, note}]``: answers
    cut by max_tokens after thinking used most of it), ``completion_tokens_total``, ``chunk_estimate_total`` (what chunk counting
    would have said), ``server_timings`` (llama.cpp prompt/predicted tok/s stats),
    ``spec_decode``, ``verbatim`` (one entry per quoting run), ``energy``
    (:func:`rigkit.bench.energy.summarize_energy`: J, W, tok/J, J/token; None when not
    measured), ``max_tokens`` (the requests' ``max_tokens``, None when they differ),
    ``estimate_why`` (why counts are estimated: no usage, or a usage without
    ``completion_tokens``), ``implausible`` (:func:`implausible_figures`: rates above what the run
    can carry, marked and left out of ``metrics``; the records keep them), ``attempts`` (how many times it
    was measured; the runner raises it when a run was unstable), ``unmeasurable`` (``{figure: "k of n
    requests: <reason>"}``: figures the arrival times could not carry, the first request's reason).
    ``not_run`` (the reason)
    marks a workload not sent; ``skipped`` says it was left out because it cannot run on this
    target (verdict NOT-RUN) rather than because an earlier failure stopped the run (FAIL).
    """
    ok = [r for r in records if r.get("ok")]
    per = [implausible_figures([r]) for r in ok]
    marked = {(i, m["metric"]) for i, marks in enumerate(per) for m in marks}
    sources = sorted({r.get("tokens_source") for r in ok if r.get("tokens_source")})
    kinds = {counts_kind(s_) for s_ in sources}
    source = sources[0] if len(sources) == 1 else (
        ("mixed" if "estimate" in kinds else "usage+timings") if sources else None)
    timings = [r.get("server_timings") or {} for r in ok]
    out: dict[str, Any] = {
        "status": "not-run" if not_run else ("failed" if error else "ok"),
        "skipped": bool(not_run and skipped),
        "error": not_run or error, "error_kind": error_kind, "n": len(ok),
        "metrics": {m: stats([r.get(m) for i, r in enumerate(ok) if (i, m) not in marked]) for m in METRICS},
        "implausible": [m for marks in per for m in marks],
        "tokens_source": source,
        "counts": ("estimate" if "estimate" in kinds else "counted") if sources else None,
        "cut_by_thinking": [{"prompt_id": r.get("prompt_id"), "repetition": r.get("repetition"),
                             "note": r["cut_note"]} for r in ok if r.get("cut_note")],
        "completion_tokens_total": sum(r.get("completion_tokens") or 0 for r in ok),
        "chunk_estimate_total": sum(r.get("chunk_estimate") or 0 for r in ok),
        "server_timings": {
            "prompt_per_second": stats([t.get("prompt_per_second") for t in timings]),
            "predicted_per_second": stats([t.get("predicted_per_second") for t in timings]),
        } if any(timings) else None,
        "spec_decode": spec_decode,
        "spec_decode_note": spec_decode_note,
        "energy": energy,
        "max_tokens": _one({r.get("max_tokens") for r in records}),
        "estimate_why": _one({_estimate_why(r) for r in ok if counts_kind(r.get("tokens_source")) == "estimate"}),
        "attempts": 1,
        "unmeasurable": _unmeasurable(ok),
    }
    if verbatim is not None:
        out["verbatim"] = verbatim
    return out


def _unmeasurable(ok: list[dict[str, Any]]) -> dict[str, str]:
    """``{figure: "k of n requests: <first reason>"}`` over the records' ``unmeasurable``."""
    out: dict[str, list[str]] = {}
    for r in ok:
        for fig, why in (r.get("unmeasurable") or {}).items():
            out.setdefault(fig, []).append(why)
    return {fig: f"{len(whys)} of {len(ok)} requests: {whys[0]}" for fig, whys in out.items()}


def _one(values: set[Any]) -> Any:
    """The single value of ``values`` (None and duplicates ignored); None when none or several."""
    vals = {v for v in values if v is not None}
    return next(iter(vals)) if len(vals) == 1 else None


def _estimate_why(record: dict[str, Any]) -> str:
    """Why a request's completion tokens are an estimate, in the server's terms: it sent no
    usage, or a usage without ``completion_tokens`` (its keys named)."""
    keys = record.get("usage_keys")
    if keys is None:
        return "the server sent no usage"
    return ("the server's usage had no completion_tokens (it sent "
            + (", ".join(keys) if keys else "an empty usage object") + ")")


def _median(summary: dict[str, Any], metric: str) -> float | None:
    s = (summary.get("metrics") or {}).get(metric)
    return s.get("median") if s else None


def _spread(s: dict[str, Any]) -> tuple[float, float]:
    """``(low, high)`` of a metric's stats: its min and max, or its median twice when a
    hand-written baseline gives only the median."""
    med = s["median"]
    lo, hi = s.get("min"), s.get("max")
    return (med if lo is None else lo, med if hi is None else hi)


def _figures(s: dict[str, Any], unit: str = "tok/s") -> str:
    """``1831.1 tok/s (min 1015.3, max 2230.0, n 3, CV 21.5%)`` — a run's own spread in words."""
    lo, hi = _spread(s)
    cv = f", CV {100 * s['cv']:.1f}%" if s.get("cv") is not None else ""
    return f"{s['median']:.1f} {unit} (min {lo:.1f}, max {hi:.1f}, n {s.get('n', 1)}{cv})"


def compare_speed(cur: dict[str, Any], base: dict[str, Any], unit: str = "decode",
                  attempts: int = 1) -> tuple[str, str | None]:
    """Judge one throughput metric of this run (``cur``: :func:`stats`) against a baseline's
    (``base``: :func:`stats`, or a hand-written ``{"median": …}``). Returns ``(label, reason)``,
    label ``PASS``, ``WARN`` or ``FAIL``; reason None for a plain PASS.

    How the noise is judged — by the two runs' own spread, never by a fixed band alone:

    - **unstable** — either run's CV (sample standard deviation / mean) above :data:`MAX_CV`:
      the run is too noisy to compare, so the speed says neither PASS nor FAIL: ``WARN``
      with both runs' figures (``attempts``: how many times this run was measured).
    - **a regression** (``FAIL``) — both stable, this run's median more than 15% below the
      baseline's (:data:`SLOWER`) *and* every request of this run slower than every request of
      the baseline (this run's max below the baseline's min): beyond the noise of both runs —
      which needs each run's noise known: with fewer than :data:`MIN_STEADY_N` figures in either
      (``n``; impossible figures left out can leave 1–2) the same finding is a ``WARN`` naming ``n``.
    - **faster beyond the noise** (``WARN``: a stale baseline or a counting bug) — the mirror
      image: more than 15% above (:data:`FASTER`) and this run's min above the baseline's max.
    - **within the noise** (``WARN``) — more than 15% apart but the spreads overlap: not
      certain either way, rerun to tell.
    - ``PASS`` — within 15%.

    So the verdict of A against B and of B against A never disagree as FAIL and PASS: a FAIL
    one way is the faster-beyond-the-noise WARN the other (a property test holds it).
    """
    label_cur = "this run"
    if cur.get("cv") is not None and cur["cv"] > MAX_CV:
        again = f" after {attempts} attempts" if attempts > 1 else ""
        return "WARN", (f"{unit} unstable{again}: this run {_figures(cur)} has CV above "
                        f"{100 * MAX_CV:.0f}%, too noisy to compare with baseline "
                        f"{_figures(base)}: neither PASS nor FAIL, rerun on a quiet host")
    if base.get("cv") is not None and base["cv"] > MAX_CV:
        return "WARN", (f"{unit} not judged: the baseline {_figures(base)} has CV above "
                        f"{100 * MAX_CV:.0f}% (an unstable baseline); {label_cur} "
                        f"{_figures(cur)}")
    c, b = cur["median"], base["median"]
    ratio = c / b
    (c_lo, c_hi), (b_lo, b_hi) = _spread(cur), _spread(base)
    if ratio < SLOWER:
        few = [f"{who} {s.get('n') or 1}" for who, s in (("this run", cur), ("the baseline", base))
               if (s.get("n") or 1) < MIN_STEADY_N]
        if c_hi < b_lo and few:
            return "WARN", (f"{unit} {c:.1f} tok/s is {100 * (1 - ratio):.0f}% below baseline {b:.1f} tok/s and "
                            f"below its slowest, but with too few figures to know the noise ({', '.join(few)}; "
                            f"a FAIL needs at least {MIN_STEADY_N} of each): not a certain regression, "
                            f"rerun with more requests")
        if c_hi < b_lo:
            held = f"; measured {attempts} times" if attempts > 1 else ""
            return "FAIL", (f"{unit} {c:.1f} tok/s is {100 * (1 - ratio):.0f}% below baseline "
                            f"{b:.1f} tok/s, beyond the noise of both runs (this run "
                            f"{_figures(cur)}, every request slower than the baseline's "
                            f"slowest {b_lo:.1f}{held})")
        return "WARN", (f"{unit} {c:.1f} tok/s is {100 * (1 - ratio):.0f}% below baseline "
                        f"{b:.1f} tok/s but within the noise (this run {_figures(cur)} overlaps "
                        f"the baseline {_figures(base)}): not a certain regression, rerun")
    if ratio > FASTER:
        if c_lo > b_hi:
            return "WARN", (f"{unit} {c:.1f} tok/s is {100 * (ratio - 1):.0f}% above baseline "
                            f"{b:.1f} tok/s, beyond the noise of both runs (stale baseline or a "
                            f"counting bug?)")
        return "WARN", (f"{unit} {c:.1f} tok/s is {100 * (ratio - 1):.0f}% above baseline "
                        f"{b:.1f} tok/s but within the noise (this run {_figures(cur)} overlaps "
                        f"the baseline {_figures(base)}): rerun to tell")
    return "PASS", None


def compared_metrics(name: str) -> list[str]:
    """The figures a verdict of workload ``name`` compares: decode tok/s, and prefill tok/s for
    ``quoting``; none for ``long`` (one request: what it measures is acceptance along the generation,
    judged against the floor, not a speed against a baseline)."""
    if name == "long":
        return []
    return ["decode_tps"] + (["prefill_tps"] if name == "quoting" else [])


def unsteady(name: str, workload: dict[str, Any]) -> str | None:
    """Why workload ``name``'s summary is not a steady run, in words (``decode CV 23.1% above 10%``,
    ``decode n 2 below 3``), or None when it is: every compared figure (:func:`compared_metrics`)
    measured at least :data:`MIN_STEADY_N` times with a CV at most :data:`MAX_CV`. Only a steady run
    is a default baseline (:func:`verdict`)."""
    for m in compared_metrics(name):
        s = (workload.get("metrics") or {}).get(m) or {}
        unit = "decode" if m == "decode_tps" else "prefill"
        if s.get("median") is None:
            return f"no {unit} figure"
        if (s.get("n") or 1) < MIN_STEADY_N:
            return f"{unit} n {s.get('n') or 1} below {MIN_STEADY_N}"
        if s.get("cv") is not None and s["cv"] > MAX_CV:
            return f"{unit} CV {100 * s['cv']:.1f}% above {100 * MAX_CV:.0f}%"
    return None


#: Settings a default baseline must share with this run, beyond the context
#: (:data:`rigkit.bench.context.CONTEXT_KEYS`, which holds the power limit).
SETTINGS = ("host", "member", "preset", "max_tokens")


def same_settings(name: str, current: dict[str, Any], context: dict[str, Any],
                  preset: str | None, baseline: dict[str, Any]) -> str | None:
    """None when ``baseline`` (a loaded summary) ran workload ``name`` with this run's
    :data:`SETTINGS` — same host and member (or the same ``--url`` target), preset and
    ``max_tokens`` — else the first difference in words (``max_tokens 48 vs 256``)."""
    bctx = baseline.get("context") or {}
    bw = (baseline.get("workloads") or {}).get(name) or {}
    pairs = [("host", context.get("host"), bctx.get("host")),
             ("member", context.get("member"), bctx.get("member")),
             ("preset", preset, baseline.get("preset")),
             ("max_tokens", current.get("max_tokens"), bw.get("max_tokens"))]
    if not context.get("host"):
        pairs.append(("target", context.get("target"), baseline.get("target")))
    for key, mine, theirs in pairs:
        if mine != theirs:
            return f"{key} {mine} vs {theirs}"
    return None


def verdict(name: str, current: dict[str, Any], context: dict[str, Any],
            baselines: list[dict[str, Any]], preset: str | None = None) -> dict[str, Any]:
    """Verdict for workload ``name``: ``{"verdict": PASS|WARN|FAIL|no baseline|not comparable|
    NOT-RUN, "reasons": [...], "baseline": file or None, "baseline_why": words or None}``; a
    workload that was not run because it cannot run on this target (its summary's ``status``
    ``not-run`` with ``skipped`` true) is ``NOT-RUN`` with the reason, never a FAIL.
    ``baselines`` are loaded summary files (``{"context": …, "workloads": …, "_file": path}``),
    the first that matches wins: given ones (``--baseline``) need the same context; found ones
    (``"_found": True``, :func:`find_baselines`, newest first) also :func:`same_settings` and
    a workload that ran ``ok``. Speed is judged by :func:`compare_speed` (unstable: WARN, never
    FAIL); FAIL stays for what is certain: a failed workload, a verbatim FAIL, a regression
    beyond the noise of both runs."""
    reasons: list[str] = []
    if current["status"] == "not-run" and current.get("skipped"):
        return {"verdict": "NOT-RUN", "reasons": [current["error"]], "baseline": None,
                "baseline_why": None}
    if current["status"] != "ok":
        return {"verdict": "FAIL", "reasons": [current["error"]], "baseline": None,
                "baseline_why": None}
    failed_quotes = [v for v in current.get("verbatim") or [] if not v["passed"]]
    if failed_quotes:
        reasons.append(failed_quotes[0]["message"])
    metrics = compared_metrics(name)
    skipped: list[dict[str, str]] = []  # newer comparable runs passed over: unstable
    match, why = None, "none given (--baseline FILE) and no earlier comparable run in the results folder"
    found_why, found_mine = None, False  # the difference to name: a run of this member's first
    for b in baselines:
        ok, reason = comparable(context, b.get("context") or {})
        bw = (b.get("workloads") or {}).get(name)
        if b.get("_found"):
            if ok and bw and bw.get("status", "ok") == "ok":
                differs = same_settings(name, current, context, preset, b)
                shaky = unsteady(name, bw) if differs is None else None
                if differs is None and shaky is None:
                    match = b
                    break
                if shaky:
                    skipped.append({"file": b.get("_file"), "why": shaky})
                    continue
                mine_too = not differs.startswith(("host ", "member ", "target "))
                if found_why is None or (mine_too and not found_mine):
                    found_why, found_mine = f"earlier runs differ: {differs}", mine_too
            elif not ok:
                found_why = found_why or f"earlier runs' {reason}"
            continue
        if ok and bw:
            match = b
            break
        why = reason if not ok else f"baseline has no {name} workload"
    if match is None and found_why and not any(not b.get("_found") for b in baselines):
        why = f"none given, and no earlier comparable run in the results folder ({found_why})"
    if match is None and skipped and not any(not b.get("_found") for b in baselines):
        why = (f"none given, and no steady comparable run in the results folder (an unstable run is never "
               f"a baseline; passed over: {_passed_over(skipped)})")
    label = "PASS"
    if match is None:
        reasons.append(f"no baseline: {why}")
        label = "no baseline"
    else:
        bw = match["workloads"][name]
        mine = current.get("counts") or counts_kind(current.get("tokens_source"))
        theirs = bw.get("counts") or counts_kind(bw.get("tokens_source"))
        if mine and theirs and mine != theirs:
            est, cnt = ("this run", "the baseline") if mine == "estimate" else ("the baseline", "this run")
            est_why = (current if mine == "estimate" else bw).get("estimate_why") or "the server sent no usage"
            src = bw.get("tokens_source") if mine == "estimate" else current.get("tokens_source")
            reasons.append(f"decode not compared: {est}'s completion tokens are a chunk-count "
                           f"estimate ({est_why}), {cnt}'s are counted "
                           f"({src}); an estimate is neither a slowdown nor a speed-up")
            metrics = [m for m in metrics if m != "decode_tps"]
            label = "not comparable"
        rank = {"PASS": 0, "WARN": 1, "not comparable": 1, "FAIL": 2}
        for m in metrics:
            cur = (current.get("metrics") or {}).get(m)
            base = (bw.get("metrics") or {}).get(m)
            unit = "decode" if m == "decode_tps" else "prefill"
            if not cur or cur.get("median") is None or not base or not base.get("median"):
                # a missing figure is no evidence of speed: never a PASS
                which = "this run" if not cur or cur.get("median") is None else "the baseline"
                reasons.append(f"{unit} not compared: {which} has no {unit} tok/s figure")
                if label != "FAIL":
                    label = "not comparable"
                continue
            got, reason = compare_speed(cur, base, unit, attempts=current.get("attempts") or 1)
            if reason:
                reasons.append(reason)
            if rank[got] > rank[label]:
                label = got
    if match is None:
        for m in compared_metrics(name):
            s = (current.get("metrics") or {}).get(m)
            if s and s.get("cv") is not None and s["cv"] > MAX_CV:
                reasons.append(f"{m} CV {100 * s['cv']:.1f}% > {100 * MAX_CV:.0f}%: unstable, rerun")
                label = "WARN"
    fell = (current.get("spec_decode") or {}).get("collapse")
    if fell:
        reasons.append(f"speculative decoding's acceptance fell to {100 * fell['acceptance_rate']:.1f}% in window "
                       f"{fell['window']} (generated tokens {fell['from_token']}-{fell['to_token']}), below the floor "
                       f"of {100 * fell['floor']:.1f}%")
        if label in ("PASS", "no baseline", "not comparable"):
            label = "WARN"
    if failed_quotes:
        label = "FAIL"
    baseline_why = None
    if match is not None:
        baseline_why = ((f"the last steady comparable run of this member (same host, preset, workload, "
                         f"max_tokens, power limit; n ≥ {MIN_STEADY_N}, CV ≤ {100 * MAX_CV:.0f}%) in the "
                         f"results folder" + (f"; passed over, unstable: {_passed_over(skipped)}" if skipped
                                              else "")) if match.get("_found")
                        else "given (--baseline or bench.baseline)")
    return {"verdict": label, "reasons": reasons,
            "baseline": match.get("_file") if match else None, "baseline_why": baseline_why,
            "baseline_skipped": skipped}


def _passed_over(skipped: list[dict[str, str]], most: int = 3) -> str:
    """``results/a/summary.json (decode CV 23.1% above 10%), …`` — the newest ``most``, then a count."""
    words = ", ".join(f"{s['file']} ({s['why']})" for s in skipped[:most])
    return words + (f" and {len(skipped) - most} older" if len(skipped) > most else "")


def find_baselines(results_dir: str, exclude: str | None = None) -> list[dict[str, Any]]:
    """Every ``summary.json`` under ``results_dir`` (earlier runs of ``rigkit bench``), newest
    first by its ``timestamp``, each loaded as :func:`load_baseline` does and marked
    ``"_found": True`` — the candidates for a default baseline (:func:`verdict` keeps the
    first with the same context and :func:`same_settings`). ``exclude``: this run's own folder.
    Unreadable or foreign files are skipped; a missing folder gives ``[]``."""
    out: list[tuple[str, dict[str, Any]]] = []
    skip = os.path.realpath(exclude) if exclude else None
    if not os.path.isdir(results_dir):
        return []
    for root, _dirs, files in os.walk(results_dir):
        if "summary.json" not in files or (skip and os.path.realpath(root) == skip):
            continue
        path = os.path.join(root, "summary.json")
        try:
            b = load_baseline(path)
        except ValueError:
            continue
        if not isinstance(b.get("timestamp"), str):
            continue
        b["_found"] = True
        out.append((b["timestamp"], b))
    out.sort(key=lambda tb: tb[0], reverse=True)
    return [b for _, b in out]


def speedups(summary_workloads: dict[str, Any], baselines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decode speed-up (current median / baseline median) per workload measured in both,
    for every baseline whose engine, model, quantization or speculative setting differs
    (e.g. HyperQwen against the GGUF baseline). Entries: ``workload``, ``against`` (label),
    ``factor``."""
    out = []
    for b in baselines:
        ctx = b.get("context") or {}
        label = " ".join(str(ctx.get(k)) for k in ("engine", "model", "quantization")
                         if ctx.get(k)) or b.get("_file", "baseline")
        for name, cur in summary_workloads.items():
            bw = (b.get("workloads") or {}).get(name)
            if not bw or cur.get("status") != "ok" or bw.get("status", "ok") != "ok":
                continue
            c, base = _median(cur, "decode_tps"), _median(bw, "decode_tps")
            if c and base and (cur.get("counts") or "counted") == (bw.get("counts") or "counted"):
                out.append({"workload": name, "against": label, "file": b.get("_file"),
                            "factor": round(c / base, 3)})
    return out


def load_baseline(path: str) -> dict[str, Any]:
    """Load a baseline: a ``summary.json`` of an earlier run (or a hand-written file of the
    same shape: ``{"context": {...}, "workloads": {name: {"metrics": {"decode_tps":
    {"median": ...}}}}}``). Raises ValueError naming the file when it is unreadable or
    misshapen."""
    obj = load_named(path, "--baseline")
    if not isinstance(obj, dict) or not isinstance(obj.get("workloads"), dict):
        raise ValueError(f"--baseline {path}: no \"workloads\" object (give a summary.json "
                         f"written by rigkit bench)")
    obj["_file"] = path
    return obj


def exit_code(verdicts: dict[str, dict[str, Any]]) -> int:
    """1 when any verdict is FAIL, else 0 (DESIGN.md "Exit codes")."""
    return 1 if any(v["verdict"] == "FAIL" for v in verdicts.values()) else 0
