"""The host's own uses of the GPU beyond a query: the enforced power limit read back now
(:func:`enforced_w`), the wait for the card's memory to come back near idle before a tenant starts
(:func:`wait_idle`) and the capture tool (``python -m rigkit.host.gpu``, ``benchmarks/gpu_facts.sh``).
The queries and their parsers, which both sides use, are :mod:`rigkit.common.gpu`."""

from __future__ import annotations

import time
from typing import Any, Callable

from rigkit.common.gpu import (APPS_QUERY, APPS_QUERY_COMMAND, ENERGY_QUERY, QUERY, apps_text, card, parse_apps,
                               parse_energy, parse_query, query, query_apps)


def enforced_w(index: int = 0) -> tuple[float | None, str | None]:
    """GPU ``index``'s ``enforced.power.limit`` (W) now (:func:`query`), or ``(None, why not)`` as
    :func:`card` words it. The one read-back of a limit just set: the power-limit sweep, its
    restore and the confirmation."""
    g, why = card(query(), index)
    return (g.get("power_enforced_w"), None) if g is not None else (None, why)


class VramBusy(RuntimeError):
    """:func:`wait_idle` gave up: the GPU's memory is not back near idle. The message names the used
    MiB, the ceiling, the seconds waited and the compute apps still holding memory; ``seen`` is the
    last reading (:func:`wait_idle`'s return shape)."""

    def __init__(self, message: str, seen: dict[str, Any]) -> None:
        super().__init__(message)
        self.seen = seen


def wait_idle(timeout_s: float, idle_mib: float, log: Callable[[str], None] | None = None, *, index: int = 0,
              interval_s: float = 0.5) -> dict[str, Any]:
    """Wait until GPU ``index``'s memory is back near its idle baseline: no compute app listed on it
    and ``memory.used`` ≤ ``idle_mib`` (MiB; the host config's ``vram.idle_mib``). A stopped model
    server's memory is freed only once the driver has torn its context down, so the next tenant must
    not start before (llama-swap's open problem of the next model starting next to the last one's
    memory). Polls every ``interval_s`` s, for at most ``timeout_s`` s.

    Reads :data:`QUERY` (``memory.used`` of GPU ``index`` and its ``uuid``) and :data:`APPS_QUERY`
    (the apps on that uuid) through :func:`query` and :func:`query_apps`. ``log`` gets one line when
    the first reading finds the memory held (what holds it) and one when it is released after a wait.

    Returns ``{"waited_s": s, "used_mib": MiB now, "ceiling_mib": idle_mib, "polls": int,
    "first_used_mib": MiB at the first reading, "first_apps": [app] at the first reading}`` (apps as
    :func:`parse_apps`). Raises :class:`VramBusy` after ``timeout_s`` (message: GPU, used MiB,
    ceiling, seconds waited, the apps still holding memory: pid, MiB, name), and at once when
    nvidia-smi cannot answer for good (``missing``, ``mismatch``, ``no-gpu``); a failed run
    (``error``, e.g. a query that timed out) is polled through until the timeout."""
    t0 = time.monotonic()
    polls, first, said = 0, None, False
    while True:
        polls += 1
        q = query()
        smi, why = card(q, index)
        apps = query_apps() if smi is not None else {"state": q["state"], "message": why, "apps": []}
        waited = round(time.monotonic() - t0, 2)
        if smi is None or apps["state"] != "ok":
            used, mine = None, []
            problem = why or f"nvidia-smi: {apps['state']}: {apps['message'][:300]}"
            if apps["state"] != "error":  # missing, mismatch, no-gpu, or no such GPU: it will not come back
                raise VramBusy(f"GPU {index} memory cannot be read: {problem}", _seen(waited, used, idle_mib, polls, first))
        else:
            used = float(smi["memory_used_mib"] or 0)
            mine = [a for a in apps["apps"] if a["gpu_uuid"] == smi["uuid"]]
            if first is None:
                first = (used, mine)
            if not mine and used <= idle_mib:
                if said and log:
                    log(f"GPU {index} memory back near idle after {waited:g} s ({used:g} MiB used, "
                        f"ceiling {idle_mib:g} MiB)")
                return _seen(waited, used, idle_mib, polls, first)
            if not said and log:
                log(f"waiting for GPU {index} memory to come back near idle: {used:g} MiB used, ceiling "
                    f"{idle_mib:g} MiB; held by {apps_text(mine)}")
                said = True
            problem = (f"{used:g} MiB used, ceiling {idle_mib:g} MiB; compute apps still holding memory: "
                       f"{apps_text(mine)} ({APPS_QUERY_COMMAND})")
        if waited >= timeout_s:
            raise VramBusy(f"GPU {index} memory not back near idle after {waited:g} s (timeout {timeout_s:g} s): "
                           f"{problem}", _seen(waited, used, idle_mib, polls, first))
        time.sleep(max(0.0, min(interval_s, timeout_s - waited)))


def _seen(waited: float, used: float | None, idle_mib: float, polls: int, first) -> dict[str, Any]:
    """:func:`wait_idle`'s record of what it saw (its docstring)."""
    return {"waited_s": waited, "used_mib": used, "ceiling_mib": float(idle_mib), "polls": polls,
            "first_used_mib": first[0] if first else None, "first_apps": first[1] if first else []}


#: Every ``nvidia-smi`` query the product parses (name → argv, parser), for
#: ``benchmarks/gpu_facts.sh``; all read-only.
PARSED = {"query": (QUERY, parse_query), "energy": (ENERGY_QUERY, parse_energy), "apps": (APPS_QUERY, parse_apps)}
#: Read-only outputs saved beside them for the record, not parsed (what fields this driver knows,
#: the full report).
RAW = {"help-query-gpu": ("nvidia-smi", "--help-query-gpu"), "full-report": ("nvidia-smi", "-q")}


def facts_lines(folder: str) -> list[str]:
    """What each parser of :data:`PARSED` read from the raw outputs saved in ``folder``
    (``<name>.out``, ``<name>.rc``, as ``benchmarks/gpu_facts.sh`` writes them): one line per
    parser with its state and every field it read (``None``: the card reported ``[N/A]`` /
    ``[Not Supported]`` or nothing), and how the bench measures energy (the counter when a reading has
    one, else sampled power.draw)."""
    import json
    import os

    lines = []
    for name, (argv, parse) in PARSED.items():
        try:
            with open(os.path.join(folder, f"{name}.out"), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            with open(os.path.join(folder, f"{name}.rc"), encoding="utf-8") as fh:
                rc = int(fh.read().strip() or 0)
        except (OSError, ValueError) as exc:
            lines.append(f"{name}: not read ({exc})")
            continue
        got = parse(text, rc)
        lines.append(f"{name} ({' '.join(argv)}; exit {rc}): {got['state']}"
                     + (f" — {got['message'][:200]}" if got["message"] else ""))
        for g in got.get("gpus", []):
            lines.append(f"  GPU {g['index']}: " + json.dumps(g, sort_keys=True))
        for a in got.get("apps", []):
            lines.append("  app: " + json.dumps(a, sort_keys=True))
        if name == "energy" and got["state"] == "ok":
            has = all(g["energy_j"] is not None for g in got["gpus"])
            lines.append("  energy method: " + ("counter" if has else "sampled power.draw (nvidia-smi has no "
                                                                   "energy counter field)"))
    return lines


def main(argv: list[str]) -> int:
    """``python -m rigkit.host.gpu --commands``: ``name<TAB>command`` per line of :data:`PARSED`
    then :data:`RAW` (``parsed``/``raw`` third); ``--parse DIR``: :func:`facts_lines`."""
    if argv[:1] == ["--commands"]:
        for kind, table in (("parsed", {k: v[0] for k, v in PARSED.items()}), ("raw", RAW)):
            for name, args in table.items():
                print(f"{name}\t{' '.join(args)}\t{kind}")
        return 0
    if len(argv) == 2 and argv[0] == "--parse":
        print("\n".join(facts_lines(argv[1])))
        return 0
    print("usage: python -m rigkit.host.gpu --commands | --parse DIR")
    return 2


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
