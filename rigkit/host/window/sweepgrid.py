"""The sweep's grid, pure (no I/O): which cells are left to measure, the frontier and the
recommendation. The host's sweep runner (:mod:`rigkit.host.window.sweep`) and the control side
(:mod:`rigkit.bench.sweep`) both read the journal's cells through these functions, so "what is left",
"how far did it survive" and "what to recommend" have one meaning.

A *grid* is ``{"param": "dflash_tokens", "settings": [int], "contexts": [int] (ascending,
tokens), "workloads": [str]}``. A *cell* is one measured (setting, workload, context)::

    {"setting": 9, "workload": "quoting", "context": 20480,
     "status": "ok" | "crashed" | "failed",
     "decode_tps": tok/s | None, "prefill_tps": tok/s | None, "ttft_s": s | None,
     "tokens_per_chunk": float | None, "prompt_tokens": int | None, "runs": int,
     "error": str | None, "window": window id, "measured": UTC ISO}

Figures are medians over the cell's runs. ``crashed``: the engine died on the cell (EngineDeadError,
5xx, the container gone); ``failed``: the cell got no figures but the engine lived (a 4xx, an
empty answer). A setting is not tried at or above the context where it crashed.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

#: Where a crash comes from, by the bench client's ``error_kind``
#: (:class:`rigkit.host.bench.client.RequestResult`): the engine, not the request.
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


def frontier(grid: dict[str, Any], cells: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per setting: ``survived`` (the longest context, tokens, at which every workload's cell is
    ``ok`` and so is every shorter context's; None when not even the shortest), ``crashed_at``
    (context or None), ``complete`` (no cell of it is pending)."""
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
        out[s] = {"survived": survived, "crashed_at": crash_point(done.values(), s),
                  "complete": not any(p[0] == s for p in left)}
    return out


def _score(done: dict, setting: int, workloads: list[str], context: int) -> float | None:
    vals = [done.get((setting, w, context), {}).get("decode_tps") for w in workloads]
    if any(v is None or v <= 0 for v in vals):
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def recommend(grid: dict[str, Any], cells: Iterable[dict[str, Any]], max_model_len: int) -> dict[str, Any]:
    """The recommendation: among the settings that survived the longest context any setting
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
