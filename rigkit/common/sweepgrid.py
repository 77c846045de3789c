"""The sweep's grid, pure (no I/O): which cells are left to measure, the frontier and the
recommendation. The host's sweep runner (:mod:`rigkit.host.window.sweep`) and the control side
(:mod:`rigkit.report.sweep`) both read the journal's cells through these functions, so "what is left",
"how far did it survive" and "what to recommend" have one meaning.

A *grid* is ``{"param": "dflash_tokens" | "power_limit", "settings": [int] (draft lengths, or
power limits in W), "contexts": [int] (ascending, tokens), "workloads": [str]}``. A *cell* is one
measured (setting, workload, context)::

    {"setting": 9, "workload": "quoting", "context": 20480,
     "status": "ok" | "crashed" | "failed",
     "decode_tps": tok/s | None, "prefill_tps": tok/s | None, "ttft_s": s | None,
     "tokens_per_chunk": float | None, "prompt_tokens": int | None, "runs": int,
     "energy_j": J | None, "avg_w": W | None, "tok_per_j": tok/J | None, "j_per_token": J | None,
     "power_modelled": bool | None, "energy_note": str | None,
     "enforced_w": W | None (power_limit only: enforced.power.limit read back before the cell),
     "acceptance_rate": 0-1 | None, "acceptance_length": tokens per verify step | None,
     "acceptance_by_position": {"0": 0-1, ...}, "acceptance_mixed": bool | None
     (speculative decoding's counters around the cell, rigkit.bench.metrics.spec_delta; None: not read;
     mixed: requests not the sweep's moved them, and then no acceptance figure),
     "error": str | None, "window": window id, "measured": UTC ISO}

Figures are medians over the cell's runs; the energy ones are sums over its measured requests
(:func:`rigkit.bench.energy.summarize_energy`: completion tokens over the joules the card's
counter advanced while they ran).

The two keys share what is left, the crash point and the frontier's survival; they differ in what
is recommended (:func:`recommend`): the draft length with the best decode tok/s at the longest
context survived, or the power limit with the best tok/J among those keeping
:data:`SPEED_FLOOR` of the best decode tok/s. ``crashed``: the engine died on the cell (EngineDeadError,
5xx, the container gone); ``failed``: the cell got no figures but the engine lived (a 4xx, an
empty answer). A setting is not tried at or above the context where it crashed.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

#: Where a crash comes from, by the bench client's ``error_kind``
#: (:class:`rigkit.bench.client.RequestResult`): the engine, not the request.
CRASH_KINDS = frozenset({"engine-dead", "http-5xx", "connection", "cut", "stalled", "stream-error"})


def classify(error_kind: str | None, tenant_active: bool = True) -> str:
    """A cell's status from its first failed request's ``error_kind`` (None: every request
    answered) and whether the tenant's unit is still active: ``ok``, ``crashed`` (a kind in
    :data:`CRASH_KINDS`, or the unit gone) or ``failed`` (the request's own fault: 4xx, an empty
    answer, thinking ate the budget)."""
    if error_kind is None:
        return "ok" if tenant_active else "crashed"
    if error_kind in CRASH_KINDS or not tenant_active:
        return "crashed"
    return "failed"


def cell_key(cell: dict[str, Any]) -> tuple[int, str, int]:
    """``(setting, workload, context)`` of a cell."""
    return int(cell["setting"]), str(cell["workload"]), int(cell["context"])


def latest(cells: Iterable[dict[str, Any]]) -> dict[tuple[int, str, int], dict[str, Any]]:
    """The last cell journalled for each key (a re-measured cell replaces the older one)."""
    out: dict[tuple[int, str, int], dict[str, Any]] = {}
    for c in cells:
        out[cell_key(c)] = c
    return out


def crash_point(cells: Iterable[dict[str, Any]], setting: int) -> int | None:
    """The shortest context (tokens) at which ``setting`` crashed, or None."""
    ctx = [int(c["context"]) for c in latest(cells).values()
           if int(c["setting"]) == setting and c.get("status") == "crashed"]
    return min(ctx) if ctx else None


def pending(grid: dict[str, Any], cells: Iterable[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """The cells left to measure, in the order the sweep runs them: ``[(setting, context,
    workload)]`` — settings as given, contexts from the shortest up, workloads as given; cells
    already journalled are skipped, and so is every context at or above a setting's crash point."""
    done = latest(cells)
    out = []
    for s in grid["settings"]:
        crash = crash_point(done.values(), int(s))
        for ctx in grid["contexts"]:
            if crash is not None and ctx >= crash:
                break
            for w in grid["workloads"]:
                if (int(s), w, int(ctx)) not in done:
                    out.append((int(s), int(ctx), w))
    return out


def _geomean(vals: list[float]) -> float | None:
    vals = [v for v in vals if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def frontier(grid: dict[str, Any], cells: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per setting: ``survived`` (the longest context, tokens, at which every workload's cell is
    ``ok`` and so is every shorter context's; None when not even the shortest), ``crashed_at``
    (context or None), ``complete`` (no cell of it is pending), ``all_ok`` (every cell of the grid
    measured ``ok``), and over its ``ok`` cells the geometric means ``decode_tps`` (tok/s),
    ``tok_per_j`` (tok/J) and ``j_per_token`` (J), the mean ``avg_w`` (W), ``enforced_w`` (W, the
    power limit read back; None for a draft-length sweep), ``power_modelled`` (False when any cell's
    draw stayed at the idle level, None when unknown), ``cells`` (how many were ``ok``) and
    ``acceptance`` (``{workload: acceptance rate 0-1}`` of its cells at the context ``survived``; ``{}``
    when none survived or none was read)."""
    done = latest(cells)
    left = {(s, ctx, w) for s, ctx, w in pending(grid, done.values())}
    out: dict[int, dict[str, Any]] = {}
    for s in grid["settings"]:
        s = int(s)
        survived = None
        for ctx in grid["contexts"]:
            if all(done.get((s, w, int(ctx)), {}).get("status") == "ok" for w in grid["workloads"]):
                survived = int(ctx)
            else:
                break
        ok = [c for k, c in done.items() if k[0] == s and c.get("status") == "ok"]
        watts = [c["avg_w"] for c in ok if c.get("avg_w") is not None]
        enforced = [c["enforced_w"] for c in ok if c.get("enforced_w") is not None]
        modelled = [c.get("power_modelled") for c in ok if c.get("power_modelled") is not None]
        tpj = _geomean([c.get("tok_per_j") for c in ok])
        dec = _geomean([c.get("decode_tps") for c in ok])
        out[s] = {"survived": survived, "crashed_at": crash_point(done.values(), s),
                  "complete": not any(p[0] == s for p in left),
                  "all_ok": len(ok) == len(grid["contexts"]) * len(grid["workloads"]),
                  "decode_tps": round(dec, 1) if dec else None,
                  "tok_per_j": round(tpj, 4) if tpj else None,
                  "j_per_token": round(1 / tpj, 4) if tpj else None,
                  "avg_w": round(sum(watts) / len(watts), 1) if watts else None,
                  "enforced_w": enforced[-1] if enforced else None,
                  "power_modelled": all(modelled) if modelled else None, "cells": len(ok),
                  "acceptance": {w: done[(s, w, survived)]["acceptance_rate"] for w in grid["workloads"]
                                 if survived is not None
                                 and done.get((s, w, survived), {}).get("acceptance_rate") is not None}}
    return out


def _score(done: dict, setting: int, workloads: list[str], context: int) -> float | None:
    vals = [done.get((setting, w, context), {}).get("decode_tps") for w in workloads]
    if any(v is None or v <= 0 for v in vals):
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


#: The power-limit rule: a limit is a candidate when its decode tok/s keeps at least this share of
#: the best limit's (geometric means over the grid's cells).
SPEED_FLOOR = 0.95


def recommend(grid: dict[str, Any], cells: Iterable[dict[str, Any]], max_model_len: int) -> dict[str, Any]:
    """The recommendation for the grid's key: :func:`recommend_power` for ``power_limit``, else
    :func:`recommend_draft` (same return shape; ``power_limit`` adds ``tok_per_j``)."""
    if grid["param"] == "power_limit":
        return recommend_power(grid, cells)
    return recommend_draft(grid, cells, max_model_len)


def recommend_power(grid: dict[str, Any], cells: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The power limit to declare: among the limits whose every cell of the grid answered (no
    crash, nothing pending), those whose decode tok/s (geometric mean over the cells) keeps at least
    :data:`SPEED_FLOOR` (95 %) of the best limit's are the candidates, and the one of them with the
    best tok/J (geometric mean over the cells; a tie goes to the lower limit) is recommended: the
    most tokens per joule that costs at most 5 % of the decode speed.

    Returns ``{"setting": W | None, "context": None, "decode_tps": tok/s | None, "tok_per_j":
    tok/J | None, "candidates": [W], "warning": str | None, "reason": str}``; ``setting`` is None when
    no limit measured every cell, or none has an energy figure. ``warning`` says when the grid is
    not complete or a limit's draw stayed at the idle level (``not power-modelled``: the tokens were
    not the GPU's work, so their tok/J says nothing of the limit)."""
    front = frontier(grid, cells)
    full = {s: f for s, f in front.items() if f["all_ok"] and f["decode_tps"]}
    warnings = []
    if not all(f["complete"] for f in front.values()):
        warnings.append("the sweep is not complete (some cells are left: run it again with --resume)")
    flat = sorted(s for s, f in front.items() if f["power_modelled"] is False)
    if flat:
        warnings.append(f"not power-modelled at {', '.join(f'{s} W' for s in flat)}: the card drew its idle level "
                        "while the tokens were served, so tok/J does not depend on the limit there")
    none = {"setting": None, "context": None, "decode_tps": None, "tok_per_j": None, "candidates": [],
            "warning": "; ".join(warnings) or None}
    if not full:
        return {**none, "reason": "no power limit answered every cell of the grid"}
    best_tps = max(f["decode_tps"] for f in full.values())
    cands = sorted(s for s, f in full.items() if f["decode_tps"] >= SPEED_FLOOR * best_tps)
    scored = [(full[s]["tok_per_j"], -s) for s in cands if full[s]["tok_per_j"]]
    if not scored:
        return {**none, "candidates": cands, "reason": "no energy figure was measured (the card reports no "
                "power.draw)"}
    tpj, neg = max(scored)
    best = -neg
    fastest = max(full, key=lambda s: (full[s]["decode_tps"], -s))
    shares = ", ".join(f"{s} W {100 * full[s]['decode_tps'] / best_tps:.1f} %" for s in sorted(full))
    return {"setting": best, "context": None, "decode_tps": full[best]["decode_tps"], "tok_per_j": tpj,
            "candidates": cands, "warning": "; ".join(warnings) or None,
            "reason": (f"power_limit={best}: the best tok/J ({tpj:g}) among the limits keeping >= "
                       f"{SPEED_FLOOR:.0%} of the best decode tok/s ({fastest} W, {best_tps:g} tok/s; geometric means "
                       f"over {', '.join(grid['workloads'])} at {', '.join(map(str, grid['contexts']))} tokens): "
                       f"{', '.join(f'{s} W' for s in cands)} (decode tok/s kept: {shares})")}


def recommend_draft(grid: dict[str, Any], cells: Iterable[dict[str, Any]], max_model_len: int) -> dict[str, Any]:
    """The draft-length recommendation: among the settings that survived the longest context any setting
    survived on every workload (``context``), the one with the best decode tok/s there (the
    geometric mean over the workloads of each cell's median; a tie goes to the longer draft).

    Returns ``{"setting": int | None, "context": int | None, "decode_tps": tok/s | None,
    "candidates": [int], "warning": str | None, "reason": str}``; ``setting`` is None when no
    setting survived even the shortest context. ``warning`` says when ``context`` is below
    ``max_model_len`` (tokens) or the grid is not complete.
    """
    done = latest(cells)
    front = frontier(grid, done.values())
    reached = [f["survived"] for f in front.values() if f["survived"] is not None]
    if not reached:
        return {"setting": None, "context": None, "decode_tps": None, "candidates": [],
                "warning": None, "reason": "no setting survived the shortest context "
                f"({grid['contexts'][0]} tokens) on every workload"}
    longest = max(reached)
    cands = [s for s, f in front.items() if f["survived"] is not None and f["survived"] >= longest]
    scored = [(sc, s) for s in cands if (sc := _score(done, s, grid["workloads"], longest)) is not None]
    best_score, best = max(scored) if scored else (None, max(cands))
    warnings = []
    if longest < max_model_len:
        warnings.append(f"the longest context survived is {longest} tokens, below hyperqwen.max_model_len "
                        f"{max_model_len}: nothing was measured between them at this setting")
    if not all(f["complete"] for f in front.values()):
        warnings.append("the sweep is not complete (some cells are left: run it again with --resume)")
    return {"setting": best, "context": longest, "decode_tps": round(best_score, 1) if best_score else None,
            "candidates": sorted(cands), "warning": "; ".join(warnings) or None,
            "reason": (f"{grid['param']}={best}: the best decode tok/s at {longest} tokens "
                       f"(geometric mean over {', '.join(grid['workloads'])}) among {', '.join(map(str, sorted(cands)))}, "
                       f"the settings that survived {longest} tokens on every workload")}
