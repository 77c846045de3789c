"""Per-workload summaries, verdicts against a baseline, and the files of a results folder.

Statistics follow ``notes/bench.md`` §6: median is the verdict statistic; min, max, n and the
coefficient of variation (sample standard deviation / mean) are kept beside it, and the raw
samples stay in ``requests.jsonl``.

Verdicts (per workload):

- ``FAIL`` — the workload failed (HTTP 5xx, engine dead, stall, cut stream, thinking ate the
  budget…), the verbatim check failed, or decode (quoting: also prefill) tok/s median is more
  than 15% below the baseline's.
- ``WARN`` — more than 15% above the baseline (a stale baseline or a counting bug: chunk
  counting produces exactly such jumps), or CV above 10% (unstable: rerun before judging).
- ``PASS`` — within the band.
- ``no baseline`` — no baseline given, or its context differs or is unknown
  (:func:`rigkit.host.bench.context.comparable`).
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

import json
import statistics
from typing import Any

from rigkit.host.bench.context import comparable

SCHEMA_VERSION = 1
METRICS = ("decode_tps", "prefill_tps", "ttft_s", "ttft_answer_s", "e2e_s",
           "completion_tokens", "prompt_tokens", "tokens_per_chunk")
SLOWER, FASTER, MAX_CV = 0.85, 1.15, 0.10
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


def summarize_workload(name: str, records: list[dict[str, Any]], *, error: str | None = None,
                       error_kind: str | None = None, spec_decode: dict | None = None,
                       spec_decode_note: str | None = None,
                       verbatim: list[dict[str, Any]] | None = None,
                       not_run: str | None = None, skipped: bool = False,
                       energy: dict[str, Any] | None = None) -> dict[str, Any]:
    """Summary of one workload from its successful request records (dicts from
    :meth:`rigkit.host.bench.client.RequestResult.to_record`).

    Keys: ``status`` (``ok`` / ``failed`` / ``not-run``), ``error``, ``error_kind``, ``n``,
    ``metrics`` (name → :func:`stats`), ``tokens_source`` (``usage``, ``timings``,
    ``chunk-estimate``, ``usage+timings`` or ``mixed`` — some estimated), ``counts``
    (:func:`counts_kind`), ``cut_by_thinking`` (``[{prompt_id, repetition, note}]``: answers
    cut by max_tokens after thinking used most of it), ``completion_tokens_total``, ``chunk_estimate_total`` (what chunk counting
    would have said), ``server_timings`` (llama.cpp prompt/predicted tok/s stats),
    ``spec_decode``, ``verbatim`` (one entry per quoting run), ``energy``
    (:func:`rigkit.host.bench.energy.summarize_energy`: J, W, tok/J, J/token; None when not
    measured). ``not_run`` (the reason)
    marks a workload not sent; ``skipped`` says it was left out because it cannot run on this
    target (verdict NOT-RUN) rather than because an earlier failure stopped the run (FAIL).
    """
    ok = [r for r in records if r.get("ok")]
    sources = sorted({r.get("tokens_source") for r in ok if r.get("tokens_source")})
    kinds = {counts_kind(s_) for s_ in sources}
    source = sources[0] if len(sources) == 1 else (
        ("mixed" if "estimate" in kinds else "usage+timings") if sources else None)
    timings = [r.get("server_timings") or {} for r in ok]
    out: dict[str, Any] = {
        "status": "not-run" if not_run else ("failed" if error else "ok"),
        "skipped": bool(not_run and skipped),
        "error": not_run or error, "error_kind": error_kind, "n": len(ok),
        "metrics": {m: stats([r.get(m) for r in ok]) for m in METRICS},
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
    }
    if verbatim is not None:
        out["verbatim"] = verbatim
    return out


def _median(summary: dict[str, Any], metric: str) -> float | None:
    s = (summary.get("metrics") or {}).get(metric)
    return s.get("median") if s else None


def verdict(name: str, current: dict[str, Any], context: dict[str, Any],
            baselines: list[dict[str, Any]]) -> dict[str, Any]:
    """Verdict for workload ``name``: ``{"verdict": PASS|WARN|FAIL|no baseline|not comparable|
    NOT-RUN, "reasons": [...], "baseline": file or None}``; a workload that was not run
    because it cannot run on this target (its summary's ``status`` ``not-run`` with
    ``skipped`` true) is ``NOT-RUN`` with the reason, never a FAIL. ``baselines`` are loaded summary files
    (``{"context": …, "workloads": …, "_file": path}``)."""
    reasons: list[str] = []
    if current["status"] == "not-run" and current.get("skipped"):
        return {"verdict": "NOT-RUN", "reasons": [current["error"]], "baseline": None}
    if current["status"] != "ok":
        return {"verdict": "FAIL", "reasons": [current["error"]], "baseline": None}
    failed_quotes = [v for v in current.get("verbatim") or [] if not v["passed"]]
    if failed_quotes:
        reasons.append(failed_quotes[0]["message"])
    metrics = ["decode_tps"] + (["prefill_tps"] if name == "quoting" else [])
    match, why = None, "none given (--baseline FILE)"
    for b in baselines:
        ok, reason = comparable(context, b.get("context") or {})
        if ok and name in (b.get("workloads") or {}):
            match = b
            break
        why = reason if not ok else f"baseline has no {name} workload"
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
            src = bw.get("tokens_source") if mine == "estimate" else current.get("tokens_source")
            reasons.append(f"decode not compared: {est}'s completion tokens are a chunk-count "
                           f"estimate (the server sent no usage), {cnt}'s are counted "
                           f"({src}); an estimate is neither a slowdown nor a speed-up")
            metrics = [m for m in metrics if m != "decode_tps"]
            label = "not comparable"
        for m in metrics:
            cur, base = _median(current, m), _median(bw, m)
            unit = "decode" if m == "decode_tps" else "prefill"
            if cur is None or not base:
                # a missing figure is no evidence of speed: never a PASS
                which = "this run" if cur is None else "the baseline"
                reasons.append(f"{unit} not compared: {which} has no {unit} tok/s figure")
                if label != "FAIL":
                    label = "not comparable"
                continue
            ratio = cur / base
            if ratio < SLOWER:
                reasons.append(f"{unit} {cur:.1f} tok/s is {100 * (1 - ratio):.0f}% below "
                               f"baseline {base:.1f} tok/s")
                label = "FAIL"
            elif ratio > FASTER:
                reasons.append(f"{unit} {cur:.1f} tok/s is {100 * (ratio - 1):.0f}% above "
                               f"baseline {base:.1f} tok/s (stale baseline or a counting bug?)")
                if label not in ("FAIL", "not comparable"):
                    label = "WARN"
    for m in metrics:
        s = (current.get("metrics") or {}).get(m)
        if s and s.get("cv") is not None and s["cv"] > MAX_CV:
            reasons.append(f"{m} CV {100 * s['cv']:.1f}% > {100 * MAX_CV:.0f}%: unstable, rerun")
            if label in ("PASS", "no baseline"):
                label = "WARN"
    if failed_quotes:
        label = "FAIL"
    return {"verdict": label, "reasons": reasons,
            "baseline": match.get("_file") if match else None}


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
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh)
    except OSError as exc:
        raise ValueError(f"--baseline {path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise ValueError(f"--baseline {path}: not JSON ({exc})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("workloads"), dict):
        raise ValueError(f"--baseline {path}: no \"workloads\" object (give a summary.json "
                         f"written by rigkit bench)")
    obj["_file"] = path
    return obj


def exit_code(verdicts: dict[str, dict[str, Any]]) -> int:
    """1 when any verdict is FAIL, else 0 (DESIGN.md "Exit codes")."""
    return 1 if any(v["verdict"] == "FAIL" for v in verdicts.values()) else 0
