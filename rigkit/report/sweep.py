"""``rigkit window --sweep``: one sweep command, two keys (:data:`SWEEPABLE`).

- ``dflash_tokens``: HyperQwen's safety frontier — per draft length (``DFLASH_TOKENS``), how fast it
  is on each workload and up to which context it survives, and the setting to declare.
- ``power_limit`` (issue 31): per GPU power limit (W, each within the card's ``power.min_limit``..
  ``power.max_limit`` as read from the GPU before the window opens: :func:`check_power_limits`), the
  tenant's decode tok/s and its tokens per joule, and the limit to declare
  (:func:`rigkit.common.sweepgrid.recommend_power` states the rule). The tenant runs its deployed
  ``.env``; the host sets each limit with ``nvidia-smi --power-limit`` and the window's restore puts
  the declared one back, whatever happens.

The control side: the arguments (checked before any host is touched, exit 2), the ``.env`` of each
setting rendered by the one renderer (:func:`rigkit.render.files.render`) from the host's spec with
``dflash_tokens=N`` and ``allow_unsafe_spec: true`` — the guard is lifted on purpose, and said once —
shipped in the window's plan (the host installs them and puts the deployed one back:
:mod:`rigkit.host.window.sweep`); then the result from the journal's cells: the table (setting ×
workload × context), the frontier and the recommendation (:mod:`rigkit.common.sweepgrid`),
the chart, all written into the window's results folder as ``sweep.json``, ``sweep.txt`` and
``sweep.svg``. Nothing is applied: the recommendation is printed as the group_data line to paste.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rigkit.common.gpu import card, power_limit_problem
from rigkit.common.sweepgrid import SPEED_FLOOR, frontier, latest, pending, recommend
from rigkit.spec.validate import POWER_LIMIT_SANITY_W

#: What ``--sweep`` may vary: per key its allowed range (before the card's own, for power), what
#: its values are, an example and the spec field the recommendation declares.
SWEEPABLE = {
    "dflash_tokens": {"range": (1, 64), "what": "draft lengths", "example": "dflash_tokens=3,5,7",
                      "field": "hyperqwen.dflash_tokens"},
    "power_limit": {"range": POWER_LIMIT_SANITY_W, "what": "power limits in W", "example": "power_limit=300,350,420",
                    "field": "gpu_power_limit_w"},
}
#: The workloads a sweep cell can run (the bench's, without the warm-up).
SWEEP_WORKLOADS = ("chat-greedy", "chat-sampled", "quoting")
DEFAULT_WORKLOADS = ("chat-greedy", "quoting")
#: Default contexts (tokens); the spec's ``max_model_len`` is added for a draft-length sweep (its
#: question is how far each setting survives). A power-limit sweep asks how fast and how efficient
#: each limit is: :data:`DEFAULT_POWER_CONTEXTS` only.
DEFAULT_CONTEXTS = (4096, 16384, 20480)
DEFAULT_POWER_CONTEXTS = (4096, 16384)
POWER_NOTE = ("the sweep sets each power limit with nvidia-smi --power-limit for this window only (the "
              "power healer stands down while the window is open); the declared limit is put back at restore")
GUARD_NOTE = ("the sweep lifts the DFlash guard on purpose: each setting's .env is rendered with "
              "hyperqwen.allow_unsafe_spec: true, for this window only; the deployed .env is put back at restore")


class SweepArgError(ValueError):
    """Bad sweep input: the message names the option, the value and what is allowed."""


def parse_sweep(text: str) -> tuple[str, list[int]]:
    """``"dflash_tokens=3,5,7"`` → ``("dflash_tokens", [3, 5, 7])``, ``"power_limit=300,350,420"`` →
    ``("power_limit", [300, 350, 420])`` (W). Raises SweepArgError for another key, a value that is not
    an integer, out of the key's range (1–64; 100–500 W, :data:`rigkit.spec.validate.POWER_LIMIT_SANITY_W`,
    before the card's own range: :func:`check_power_limits`) or repeated, or none."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or key not in SWEEPABLE:
        raise SweepArgError(f"--sweep {text!r}: the key {key!r} cannot be swept; allowed: "
                            f"{', '.join(f'{k}=N,N,...' for k in SWEEPABLE)} (e.g. "
                            f"{' or '.join(k['example'] for k in SWEEPABLE.values())})")
    lo, hi = SWEEPABLE[key]["range"]
    unit = " W" if key == "power_limit" else ""
    out: list[int] = []
    for raw in values.split(","):
        v = raw.strip()
        if not v.lstrip("-").isdigit():
            raise SweepArgError(f"--sweep {key}: {v!r} is not an integer; give {SWEEPABLE[key]['what']} {lo}–{hi}, "
                                f"comma-separated (e.g. {SWEEPABLE[key]['example']})")
        n = int(v)
        if not lo <= n <= hi:
            raise SweepArgError(f"--sweep {key}: {n}{unit} is out of range; allowed {lo}–{hi}{unit}")
        if n in out:
            raise SweepArgError(f"--sweep {key}: {n} is given twice")
        out.append(n)
    return key, out


def parse_contexts(text: str | None, max_model_len: int, key: str = "dflash_tokens") -> list[int]:
    """``--contexts`` (tokens, comma-separated, strictly ascending, each ≤ ``max_model_len``); None:
    :data:`DEFAULT_CONTEXTS` plus ``max_model_len`` (``key`` ``power_limit``:
    :data:`DEFAULT_POWER_CONTEXTS`), those above it dropped. Raises SweepArgError."""
    if text is None and key == "power_limit":
        return [c for c in DEFAULT_POWER_CONTEXTS if c <= max_model_len] or [max_model_len]
    if text is None:
        return sorted({c for c in DEFAULT_CONTEXTS if c < max_model_len} | {max_model_len})
    out: list[int] = []
    for raw in text.split(","):
        v = raw.strip()
        if not v.isdigit() or int(v) <= 0:
            raise SweepArgError(f"--contexts: {v!r} is not a positive integer (tokens, e.g. 4096,16384,20480)")
        n = int(v)
        if out and n <= out[-1]:
            raise SweepArgError(f"--contexts: {n} after {out[-1]}: contexts must be ascending, each once "
                                "(the sweep runs them from the shortest up)")
        if n > max_model_len:
            raise SweepArgError(f"--contexts: {n} is above hyperqwen.max_model_len {max_model_len}: the engine "
                                "refuses longer requests; allowed up to it")
        out.append(n)
    return out


def parse_workloads(text: str | None) -> list[str]:
    """``--workloads`` (comma-separated names of :data:`SWEEP_WORKLOADS`); None: the defaults.
    Raises SweepArgError for an unknown or repeated name."""
    if text is None:
        return list(DEFAULT_WORKLOADS)
    out: list[str] = []
    for raw in text.split(","):
        v = raw.strip()
        if v not in SWEEP_WORKLOADS:
            raise SweepArgError(f"--workloads: unknown workload {v!r}; allowed: {', '.join(SWEEP_WORKLOADS)}")
        if v in out:
            raise SweepArgError(f"--workloads: {v} is given twice")
        out.append(v)
    return out


def setting_env(spec: Any, key: str, value: int) -> str:
    """The tenant's ``.env`` for ``hyperqwen.<key> = value`` with ``allow_unsafe_spec: true``, by the
    one renderer from ``spec`` (every other key as declared). Raises SweepArgError when the spec
    with that value is invalid (the problem named)."""
    from pydantic import ValidationError

    from rigkit import paths
    from rigkit.render.files import render
    from rigkit.spec.validate import check_spec

    try:
        hq = type(spec.hyperqwen).model_validate({**spec.hyperqwen.model_dump(), key: value,
                                                  "allow_unsafe_spec": True})
    except ValidationError as exc:
        raise SweepArgError(f"--sweep {key}={value}: {exc.errors()[0]['msg']}") from None
    swept = spec.model_copy(update={"hyperqwen": hq})
    problems = check_spec(swept)
    if problems:
        raise SweepArgError(f"--sweep {key}={value}: the spec would be invalid: {problems[0]}")
    return render(swept)[paths.HYPERQWEN_ENV].text


def check_power_limits(values: list[int], smi: dict[str, Any], index: int = 0) -> None:
    """Each power limit (W) of a ``power_limit`` sweep within GPU ``index``'s ``power.min_limit``..
    ``power.max_limit`` as read from the card (``smi``: :func:`rigkit.common.gpu.parse_query` of the
    host's ``nvidia-smi``; the host checks again before it sets the first one). Raises SweepArgError
    naming the first value outside, or RuntimeError when the card's range cannot be read (a host
    problem, not bad input)."""
    g, why = card(smi, index)
    if g is None:
        raise RuntimeError(f"--sweep power_limit: the card's power range could not be read ({why})")
    if g.get("power_min_w") is None or g.get("power_max_w") is None:
        raise RuntimeError(f"--sweep power_limit: GPU {index} reports no power.min_limit/power.max_limit "
                           "(nvidia-smi [N/A]); its range is never assumed")
    for v in values:
        problem = power_limit_problem(v, g["power_min_w"], g["power_max_w"], f"GPU {index}",
                                      field="--sweep power_limit")
        if problem:
            raise SweepArgError(problem + "; nothing was changed")


def plan_sweep(spec: Any, key: str, values: list[int], contexts: list[int], workloads: list[str], *,
               runs: int, max_tokens: int, max_minutes: float | None, resume: bool) -> dict[str, Any]:
    """The plan's ``sweep`` (:mod:`rigkit.host.window.sweep` documents it): for ``dflash_tokens`` each
    setting carries its ``.env``; for ``power_limit`` only its value (W) — the tenant keeps the
    deployed ``.env`` and the plan carries ``declared_w`` (``gpu_power_limit_w``, what the
    recommendation is compared with). Raises SweepArgError when a context leaves no room for a
    prompt with ``max_tokens``."""
    small = [c for c in contexts if c - max_tokens - 32 < 64]
    if small:
        raise SweepArgError(f"--contexts: {small[0]} leaves no room for a prompt with --max-tokens {max_tokens}; "
                            f"allowed from {max_tokens + 96} tokens")
    effort = spec.bench.reasoning_effort
    settings = ([{"value": v} for v in values] if key == "power_limit" else
                [{"value": v, "env": setting_env(spec, key, v)} for v in values])
    return {"param": key, "settings": settings, "declared_w": spec.gpu_power_limit_w,
            "contexts": contexts, "workloads": workloads, "runs": runs, "max_tokens": max_tokens,
            "max_model_len": spec.hyperqwen.max_model_len, "max_minutes": max_minutes, "resume": resume,
            "stall_timeout_s": spec.bench.stall_timeout_s,
            "extra_body": {"chat_template_kwargs": {"reasoning_effort": effort}} if effort else {},
            "guard": GUARD_NOTE if key == "dflash_tokens" else POWER_NOTE}


def grid_of(sweep: dict[str, Any]) -> dict[str, Any]:
    """The grid of a journal's (or plan's) ``sweep``: ``param``, ``settings`` (values), ``contexts``,
    ``workloads``."""
    settings = [s["value"] if isinstance(s, dict) else s for s in sweep["settings"]]
    return {"param": sweep["param"], "settings": settings, "contexts": list(sweep["contexts"]),
            "workloads": list(sweep["workloads"])}


def result(sweep: dict[str, Any], max_model_len: int, host: str, window_id: str | None) -> dict[str, Any]:
    """The sweep's result from the journal's ``sweep``: ``{"host", "window", "grid", "cells" (latest
    per key), "frontier" ({setting: ...}, keys as strings), "recommendation", "pending" (count),
    "stopped", "group_data" (the line to paste, or None), "declared_w" (W, a power-limit sweep's
    declared limit), "energy" (the meter: method, idle draw), "limits" (per limit set: what was read
    back)}``."""
    grid = grid_of(sweep)
    cells = list(latest(sweep.get("cells") or []).values())
    rec = recommend(grid, cells, max_model_len)
    return {"host": host, "window": window_id, "grid": grid, "max_model_len": max_model_len, "cells": cells,
            "frontier": {str(k): v for k, v in frontier(grid, cells).items()}, "recommendation": rec,
            "pending": len(pending(grid, cells)), "stopped": sweep.get("stopped"),
            "resumed_from": sweep.get("resumed_from"), "starts": sweep.get("starts") or {},
            "declared_w": sweep.get("declared_w"), "energy": sweep.get("energy"),
            "limits": sweep.get("limits") or {},
            "group_data": group_data_line(grid["param"], rec["setting"], max_model_len)
            if rec["setting"] is not None else None}


def group_data_line(key: str, value: int, max_model_len: int | None = None) -> str:
    """The group_data line that declares the sweep's key at ``value``: ``gpu_power_limit_w = 350``
    for ``power_limit`` (W); for ``dflash_tokens`` ``hyperqwen.<key> = value`` (deep-merged: every
    other HyperQwen key keeps its value), e.g. ``hyperqwen = {"dflash_tokens": 7}``. A draft length the
    spec's guard refuses at ``max_model_len`` (:data:`rigkit.spec.validate.SAFE_DFLASH_TOKENS` at
    :data:`rigkit.spec.validate.UNSAFE_SPEC_CONTEXT` or more) is declared with ``"allow_unsafe_spec": True``,
    which the deploy then needs — and warns about: the sweep did not prove it safe at that length."""
    from rigkit.spec.validate import SAFE_DFLASH_TOKENS, UNSAFE_SPEC_CONTEXT

    if key == "power_limit":
        return f"{SWEEPABLE[key]['field']} = {value}"
    if (key == "dflash_tokens" and value > SAFE_DFLASH_TOKENS and max_model_len is not None
            and max_model_len >= UNSAFE_SPEC_CONTEXT):
        return f'hyperqwen = {{"{key}": {value}, "allow_unsafe_spec": True}}'
    return f'hyperqwen = {{"{key}": {value}}}'


def cell_text(cell: dict[str, Any] | None, crashed_at: int | None, context: int) -> str:
    """One table cell: ``"412.3 tok/s"`` (decode), ``"CRASH"``, ``"failed"``, ``"-"`` (not tried:
    above the crash point) or ``"pending"``."""
    if cell is None:
        return "-" if crashed_at is not None and context >= crashed_at else "pending"
    if cell["status"] == "crashed":
        return "CRASH"
    if cell["status"] != "ok":
        return "failed"
    return f"{cell['decode_tps']:.1f} tok/s" if cell.get("decode_tps") is not None else "n/a"


def energy_text(cell: dict[str, Any]) -> str:
    """A cell's energy for the operator: ``"1.234 J/token · 0.810 tok/J · 277.1 W"`` (the cell's
    measured requests), with ``not power-modelled`` when its draw stayed at the idle level, or
    ``"no energy (why)"``."""
    if cell.get("j_per_token") is None or cell.get("tok_per_j") is None:
        return f"no energy ({cell.get('energy_note') or 'not measured'})"
    watts = f" · {cell['avg_w']:.1f} W" if cell.get("avg_w") is not None else ""
    return (f"{cell['j_per_token']:.3f} J/token · {cell['tok_per_j']:.3f} tok/J{watts}"
            + (" (not power-modelled)" if cell.get("power_modelled") is False else ""))


def power_frontier_lines(res: dict[str, Any]) -> list[str]:
    """The power-limit frontier: per limit decode tok/s and tok/J (geometric means over its cells),
    J/token, the average draw and the enforced limit read back."""
    grid, front = res["grid"], res["frontier"]
    lines = [f"frontier (per power limit: decode tok/s and tok/J, geometric means over "
             f"{', '.join(grid['workloads'])} at {', '.join(map(str, grid['contexts']))} tokens):"]
    for s in grid["settings"]:
        f = front[str(s)]
        if not f["cells"]:
            lines.append(f"  power_limit={s} W: nothing measured" + ("" if f["complete"] else " (cells left)"))
            continue
        lines.append(f"  power_limit={s} W: {f['decode_tps']} tok/s · "
                     + (f"{f['tok_per_j']:.4f} tok/J · {f['j_per_token']:.4f} J/token · {f['avg_w']} W average"
                        if f["tok_per_j"] else "no energy figure")
                     + f" (enforced {f['enforced_w'] if f['enforced_w'] is not None else '?'} W)"
                     + (" NOT power-modelled" if f["power_modelled"] is False else "")
                     + (f", crashed at {f['crashed_at']}" if f["crashed_at"] else "")
                     + ("" if f["complete"] else " (cells left)"))
    idle = (res.get("energy") or {}).get("idle")
    if idle:
        lines.append(f"  idle draw before the first cell: {idle['avg_w']} W over {idle['seconds']} s "
                     "(shown apart, not subtracted)")
    lines.append(f"  rule: the best tok/J among the limits keeping >= {SPEED_FLOOR:.0%} of the best decode tok/s")
    return lines


def acceptance_text(cell: dict[str, Any]) -> str:
    """A cell's speculative decoding for its details line: `` · acceptance 60% (5.20 tokens/step; by draft
    position 0:93% 1:86% …)``, `` · acceptance MIXED (requests not the sweep's)``, or ``""`` when not read."""
    if cell.get("acceptance_mixed"):
        return " · acceptance MIXED (requests not the sweep's moved the counters)"
    if cell.get("acceptance_rate") is None:
        return ""
    pos = cell.get("acceptance_by_position") or {}
    length = cell.get("acceptance_length")
    more = ([f"{length:.2f} tokens/step"] if length is not None else []) + \
        (["by draft position " + " ".join(f"{p}:{100 * r:.0f}%" for p, r in pos.items())] if pos else [])
    return f" · acceptance {100 * cell['acceptance_rate']:.0f}%" + (f" ({'; '.join(more)})" if more else "")


def survival_lines(res: dict[str, Any]) -> list[str]:
    """The draft-length frontier: per setting the longest context survived on every workload and
    where it crashed."""
    grid, front = res["grid"], res["frontier"]
    lines = ["frontier (longest context survived on every workload):"]
    for s in grid["settings"]:
        f = front[str(s)]
        acc = f.get("acceptance") or {}
        lines.append(f"  {grid['param']}={s}: " + (f"{f['survived']} tokens" if f["survived"] else "none")
                     + (f", crashed at {f['crashed_at']}" if f["crashed_at"] else "")
                     + ("" if f["complete"] else " (cells left)")
                     + (" · acceptance there " + ", ".join(f"{w} {100 * r:.0f}%" for w, r in acc.items()) if acc else ""))
    return lines


def table_lines(res: dict[str, Any]) -> list[str]:
    """The result as plain text: the table (decode tok/s median per cell; tokens per chunk, prefill
    tok/s and TTFT beside it), the frontier, the recommendation and its group_data line."""
    grid = res["grid"]
    by = {(c["setting"], c["workload"], c["context"]): c for c in res["cells"]}
    front = res["frontier"]
    head = f"{grid['param']:>14} {'workload':<13}" + "".join(f"{c:>16}" for c in grid["contexts"])
    lines = [f"sweep on {res['host']} (window {res['window']}): decode tok/s per cell, median of each cell's runs",
             head]
    for s in grid["settings"]:
        crashed = front[str(s)]["crashed_at"]
        for w in grid["workloads"]:
            lines.append(f"{s:>14} {w:<13}" + "".join(f"{cell_text(by.get((s, w, c)), crashed, c):>16}"
                                                      for c in grid["contexts"]))
    lines.append("details (tokens per chunk · prefill tok/s · TTFT s" +
                 (" · J/token · tok/J · average W):" if grid["param"] == "power_limit" else "):"))
    for c in res["cells"]:
        if c["status"] == "ok":
            lines.append(f"  {grid['param']}={c['setting']} {c['workload']} @ {c['context']}: "
                         f"{c['tokens_per_chunk']} tokens/chunk · prefill {c['prefill_tps']} tok/s · "
                         f"TTFT {c['ttft_s']} s · " + (f"{energy_text(c)} · " if grid["param"] == "power_limit"
                                                        else "") + f"{c['runs']} run(s)" + acceptance_text(c))
        else:
            lines.append(f"  {grid['param']}={c['setting']} {c['workload']} @ {c['context']}: "
                         f"{c['status'].upper()} — {c['error']}")
    if grid["param"] == "power_limit":
        lines += power_frontier_lines(res)
    else:
        lines += survival_lines(res)
    rec = res["recommendation"]
    if rec["setting"] is None:
        lines.append(f"recommendation: none — {rec['reason']}")
    else:
        lines.append(f"recommendation: {rec['reason']}" + ("" if grid["param"] == "power_limit" else
                                                            f" ({rec['decode_tps']} tok/s)"))
        lines.append(f"  to declare it (nothing was applied), in group_data/all.py or the host's data: "
                     f"{res['group_data']}")
        declared = res.get("declared_w")
        if grid["param"] == "power_limit" and declared is not None:
            lines.append(f"  declared now: gpu_power_limit_w = {declared}"
                         + (" (the same)" if declared == rec["setting"] else ""))
    if rec.get("warning"):
        lines.append(f"WARNING: {rec['warning']}")
    if res.get("stopped"):
        lines.append(f"stopped early: {res['stopped']}")
    return lines


def write_power_chart(path: str, res: dict[str, Any]) -> bool:
    """``sweep.svg`` of a power-limit sweep: two panels over the limit (W): decode tok/s and tok/J
    (geometric means over the cells, the frontier's), the recommended limit ringed and labelled.
    Returns False when no limit has a figure."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    front = res["frontier"]
    pts = [(int(s), front[str(s)]) for s in res["grid"]["settings"] if front[str(s)]["decode_tps"]]
    if not pts:
        return False
    fig = Figure(figsize=(9, 3.8))
    FigureCanvasSVG(fig)
    best = res["recommendation"].get("setting")
    for i, (key, label) in enumerate((("decode_tps", "decode tok/s (geometric mean)"),
                                      ("tok_per_j", "tok/J (geometric mean)"))):
        ax = fig.add_subplot(1, 2, i + 1)
        xy = [(w, f[key]) for w, f in pts if f[key]]
        if xy:
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o")
            for x, y in xy:
                if x == best:
                    ax.plot([x], [y], marker="o", markersize=14, markerfacecolor="none", color="#2f855a", mew=2)
                    ax.annotate(f"recommended {x} W", (x, y), textcoords="offset points", xytext=(0, 12),
                                ha="center", color="#2f855a", fontsize=7)
            top = max(y for _, y in xy)
            ax.set_ylim(0, top * 1.25)
        ax.set_xticks([w for w, _ in pts], [str(w) for w, _ in pts])
        ax.set_xlabel("power limit (W)")
        ax.set_ylabel(label)
        ax.set_title(label.split(" (")[0])
    fig.suptitle(f"{res['host']}: power-limit sweep (window {res['window']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="svg")
    return True


def write_chart(path: str, res: dict[str, Any]) -> bool:
    """``sweep.svg``: one panel per workload, decode tok/s by setting, a line per context, crash
    points (the setting's, whichever workload hit it) marked with a red cross at the setting in every
    panel, labelled with the context; a power-limit sweep's is :func:`write_power_chart`. Returns
    False when no cell has a figure (nothing drawn)."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    grid = res["grid"]
    cells = res["cells"]
    if not cells:
        return False
    if grid["param"] == "power_limit":
        return write_power_chart(path, res)
    fig = Figure(figsize=(4.2 * len(grid["workloads"]) + 1, 3.8))
    FigureCanvasSVG(fig)
    settings = grid["settings"]
    xs = list(range(len(settings)))
    for i, w in enumerate(grid["workloads"]):
        ax = fig.add_subplot(1, len(grid["workloads"]), i + 1)
        top = 1.0
        for ctx in grid["contexts"]:
            ys = []
            for s in settings:
                c = next((c for c in cells if (c["setting"], c["workload"], c["context"]) == (s, w, ctx)), None)
                ys.append(c["decode_tps"] if c and c["status"] == "ok" else None)
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{ctx} tokens")
                top = max(top, *(p[1] for p in pts))
        for x, s in enumerate(settings):  # the setting's crash point, whichever workload hit it
            crashed = res["frontier"][str(s)]["crashed_at"]
            if crashed is not None:
                ax.plot([x], [0], marker="x", color="#c53030", markersize=12, mew=3)
                ax.annotate(f"crash @ {crashed}", (x, 0), textcoords="offset points", xytext=(0, 10 + 11 * (x % 2)),
                            ha="center", color="#c53030", fontsize=7)  # neighbours' labels at two heights
        ax.set_xticks(xs, [str(s) for s in settings])
        ax.set_xlabel(grid["param"] + " (draft length)")
        ax.set_ylabel("decode tok/s (median)")
        ax.set_ylim(-0.05 * top, top * 1.2)
        ax.set_title(w)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{res['host']}: HyperQwen sweep (window {res['window']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="svg")
    return True


def write_result(folder: Path, res: dict[str, Any]) -> list[Path]:
    """Write ``sweep.json``, ``sweep.txt`` and ``sweep.svg`` (when anything was measured) into
    ``folder``; returns the paths written. Raises OSError when the folder cannot be written."""
    folder.mkdir(parents=True, exist_ok=True)
    out = [folder / "sweep.json", folder / "sweep.txt"]
    out[0].write_text(json.dumps(res, indent=1) + "\n")
    out[1].write_text("\n".join(table_lines(res)) + "\n")
    if write_chart(str(folder / "sweep.svg"), res):
        out.append(folder / "sweep.svg")
    return out


def find_results(results_dir: str) -> dict[str, list[dict[str, Any]]]:
    """Every ``sweep.json`` under ``results_dir``, by host, oldest window first (window ids sort by
    time). Unreadable files are skipped."""
    out: dict[str, list[dict[str, Any]]] = {}
    root = Path(results_dir)
    if not root.is_dir():
        return out
    for p in sorted(root.rglob("sweep.json")):
        try:
            res = json.loads(p.read_text())
            host = str(res["host"])
            res["_folder"] = str(p.parent)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.setdefault(host, []).append(res)
    for v in out.values():
        v.sort(key=lambda r: str(r.get("window")))
    return out
