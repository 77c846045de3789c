"""The GPU as ``nvidia-smi`` reports it: one query, one parser, for the deploy's facts, drift, the
window and the bench (DESIGN.md "Versions and units of measure": VRAM in GiB = MiB / 1024).

Source: ``nvidia-smi --query-gpu=<FIELDS> --format=csv,noheader,nounits`` (``nvidia-smi
--help-query-gpu``). Every query asks only fields the driver lists in ``--help-query-gpu``: the real
tool refuses the whole query for one field it does not list (``Field "X" is not a valid field to
query.`` and an empty line, exit 2; the captures in ``data/gpu-captures/``, tests/unit/test_gpu_captures.py).
A field the device cannot report reads ``[N/A]`` or ``[Not Supported]``; with units (no ``nounits``) a
number carries its unit (``350.00 W``, ``24576 MiB``): both read as None / the number. Exit 18 is NVML's
"Driver/library version mismatch" (until a reboot), 6 "No devices were found", 9 an NVML init failure
("couldn't communicate with the NVIDIA driver").
"""

from __future__ import annotations

import re

import subprocess
import time
from typing import Any, Callable

#: ``--query-gpu`` fields, in order.
FIELDS = (
    "index", "name", "uuid", "driver_version", "memory.total", "memory.used", "power.default_limit",
    "power.limit", "enforced.power.limit", "power.min_limit", "power.max_limit",
)
QUERY = ("nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits")
QUERY_COMMAND = " ".join(QUERY)


#: Units nvidia-smi appends to a number when ``nounits`` is not given (``--help-query-gpu``).
UNITS = ("MiB", "mJ", "W", "%", "MHz", "C")


def _num(text: str) -> float | None:
    """The number in one CSV field (``"350.00"``, ``"350.00 W"``), None for ``[N/A]``,
    ``[Not Supported]``, ``[Unknown Error]`` or anything else that is not a finite number."""
    t = text.strip()
    for unit in UNITS:
        if t.endswith(" " + unit):
            t = t[: -len(unit) - 1].rstrip()
            break
    try:
        value = float(t)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


def card(smi: dict[str, Any], index: int) -> tuple[dict[str, Any] | None, str | None]:
    """GPU ``index`` of a :func:`parse_query` (or :func:`parse_energy`) result: ``(its dict, None)``, or
    ``(None, why not)`` — ``"nvidia-smi: <state>: <message>"`` when the query failed,
    ``"nvidia-smi lists no GPU <index>"`` when it has no such card."""
    if smi.get("state") != "ok":
        return None, f"nvidia-smi: {smi.get('state')}: {smi.get('message')}"
    g = next((g for g in smi.get("gpus") or [] if g.get("index") == index), None)
    return (g, None) if g is not None else (None, f"nvidia-smi lists no GPU {index}")


def enforced_w(index: int = 0) -> tuple[float | None, str | None]:
    """GPU ``index``'s ``enforced.power.limit`` (W) now (:func:`query`), or ``(None, why not)`` as
    :func:`card` words it. The one read-back of a limit just set: the power-limit sweep, its
    restore and the confirmation."""
    g, why = card(query(), index)
    return (g.get("power_enforced_w"), None) if g is not None else (None, why)


def power_limit_problem(watts: float, lo: float | None, hi: float | None, gpu: str = "the card",
                        field: str = "gpu_power_limit_w") -> str | None:
    """Why ``watts`` (W) cannot be ``gpu``'s power limit, as the one message every check gives
    (``gpu_power_limit_w 450 W is outside GPU 0's limits 100–400 W (nvidia-smi
    power.min_limit/power.max_limit)``; ``field`` names where the value came from), or None when it
    lies in ``lo``..``hi`` (W, as :func:`parse_query` reads them) or the range is unknown (either
    bound None). Used by the spec's check, the deploy's preflight, the power-limit operation and the
    power-limit sweep (control side and host)."""
    if lo is None or hi is None or lo <= watts <= hi:
        return None
    return (f"{field} {watts:g} W is outside {gpu}'s limits {lo:g}–{hi:g} W "
            "(nvidia-smi power.min_limit/power.max_limit)")


def parse_query(text: str, rc: int | None = 0) -> dict[str, Any]:
    """The GPUs from :data:`QUERY`'s output and exit code.

    Returns ``{"state": "ok"|"mismatch"|"no-gpu"|"missing"|"error", "message": str, "gpus":
    [{"index", "name", "uuid", "driver_version", "memory_total_gib", "memory_used_gib",
    "memory_total_mib", "memory_used_mib", "power_default_w", "power_limit_w", "power_enforced_w",
    "power_min_w", "power_max_w"}]}``: memory in GiB (MiB / 1024, 2 decimals) and MiB, power in W.
    ``rc`` 127: no nvidia-smi on PATH (``missing``).
    """
    text = (text or "").strip()
    bad = _failed(text, rc)
    if bad:
        return bad
    gpus = []
    for index, f in _rows(text, FIELDS):
        total, used = _num(f["memory.total"]), _num(f["memory.used"])
        gpus.append({
            "index": index, "name": f["name"], "uuid": f["uuid"], "driver_version": f["driver_version"],
            "memory_total_gib": round(total / 1024, 2) if total is not None else None,
            "memory_used_gib": round(used / 1024, 2) if used is not None else None,
            "memory_total_mib": total, "memory_used_mib": used,
            "power_default_w": _num(f["power.default_limit"]), "power_limit_w": _num(f["power.limit"]),
            "power_enforced_w": _num(f["enforced.power.limit"]), "power_min_w": _num(f["power.min_limit"]),
            "power_max_w": _num(f["power.max_limit"]),
        })
    if not gpus:
        return {"state": "no-gpu", "message": text or "no GPU listed", "gpus": []}
    return {"state": "ok", "message": "", "gpus": gpus}


#: The energy query: the draw (W), sampled and integrated by the bench (rigkit.bench.energy) when the
#: card has no counter NVML can read (rigkit.bench.nvml). A query of its own, of fields every captured
#: driver lists in ``--help-query-gpu`` (610.57.04, 595.71.05, 590.48.01): none lists an energy counter,
#: and ``total_energy_consumption`` made the real tool refuse the whole query (exit 2), the draw with it.
ENERGY_FIELDS = ("index", "power.draw")
ENERGY_QUERY = ("nvidia-smi", f"--query-gpu={','.join(ENERGY_FIELDS)}", "--format=csv,noheader,nounits")
ENERGY_QUERY_COMMAND = " ".join(ENERGY_QUERY)


#: The header of plain ``nvidia-smi``: ``CUDA Version: 13.1`` up to driver 59x, ``CUDA UMD Version:
#: 13.3`` from driver 610 (NVIDIA renamed "Driver Version" / "CUDA Version" to "KMD Version" / "CUDA UMD
#: Version" in nvidia-smi's output; the rig's 610.57 prints only the new names in its header). ``-q``
#: prints both from 610 (``CUDA Version : 13.3 [Deprecated; …]``), ``--version`` spells it ``CUDA UMD
#: version : 13.3`` after ``CUDA version : Deprecated, see …`` (lower-case ``version``: the real
#: captures in ``data/gpu-captures/``), hence case-insensitive and a number required.
CUDA_LEVEL = re.compile(r"\bCUDA (?:UMD )?Version\s*:\s*(\d+(?:\.\d+)+)", re.IGNORECASE)


def driver_cuda(text: str) -> str | None:
    """The CUDA level the driver supports (``"13.3"``) from ``nvidia-smi``'s header, ``nvidia-smi -q`` or
    ``nvidia-smi --version`` (:data:`CUDA_LEVEL`, every spelling; the first match), or None when none is
    there. Not the toolkit's version (that is ``pacman -Q cuda``); compared with ``cuda_version`` by
    :func:`rigkit.common.versions.supports`."""
    m = CUDA_LEVEL.search(text)
    return m.group(1) if m else None


def _rows(text: str, fields: tuple[str, ...]):
    """``(index, {field: text})`` for each line of ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader``
    output that has every field and an integer index (``index`` first in ``fields``); other lines
    (a header, a warning) are skipped."""
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(fields):
            continue
        f = dict(zip(fields, parts))
        try:
            yield int(f["index"]), f
        except ValueError:
            continue


def _failed(text: str, rc: int | None) -> dict[str, Any] | None:
    """The ``state``/``message`` of a failed nvidia-smi run (None when ``rc`` is 0/None)."""
    if rc == 127:
        return {"state": "missing", "message": "nvidia-smi not found", "gpus": []}
    if rc in (0, None):
        return None
    lowered = text.lower()
    if "mismatch" in lowered:
        state = "mismatch"
    elif "no devices were found" in lowered or "couldn't communicate" in lowered or rc in (6, 9):
        state = "no-gpu"
    else:
        state = "error"
    return {"state": state, "message": text or f"nvidia-smi exited {rc}", "gpus": []}


def parse_energy(text: str, rc: int | None = 0) -> dict[str, Any]:
    """The energy readings from :data:`ENERGY_QUERY`'s output and exit code.

    Returns ``{"state", "message", "gpus": [{"index", "energy_j", "power_draw_w"}]}`` (states as
    :func:`parse_query`; a refused field is ``error`` with the tool's words): ``power_draw_w`` the draw
    in W (None where the card reports ``[N/A]``/``[Not Supported]``); ``energy_j`` (a cumulative
    counter in J) is None: nvidia-smi has no field for it, so the meter samples the draw.
    """
    text = (text or "").strip()
    bad = _failed(text, rc)
    if bad:
        return bad
    gpus = []
    for index, f in _rows(text, ENERGY_FIELDS):
        gpus.append({"index": index, "energy_j": None, "power_draw_w": _num(f["power.draw"])})
    if not gpus:
        return {"state": "no-gpu", "message": text or "no GPU listed", "gpus": []}
    return {"state": "ok", "message": "", "gpus": gpus}


def _run(argv: tuple[str, ...], timeout_s: float) -> tuple[str, int]:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return "", 127
    except subprocess.TimeoutExpired:
        return f"nvidia-smi did not answer within {timeout_s:g} s", -1
    return (proc.stdout + proc.stderr if proc.returncode else proc.stdout), proc.returncode


def query_energy(timeout_s: float = 10.0) -> dict[str, Any]:
    """Run :data:`ENERGY_QUERY` on this host and :func:`parse_energy` it (never raises)."""
    return parse_energy(*_run(ENERGY_QUERY, timeout_s))


def query(timeout_s: float = 30.0) -> dict[str, Any]:
    """Run :data:`QUERY` on this host and :func:`parse_query` it (never raises)."""
    return parse_query(*_run(QUERY, timeout_s))


#: The compute-apps query: every process holding memory on a GPU (``nvidia-smi
#: --help-query-compute-apps``: ``gpu_uuid``, ``pid``, ``used_gpu_memory`` in MiB, ``process_name``).
#: The name comes last: it is the only field that may hold a comma, and nvidia-smi quotes nothing.
APPS_FIELDS = ("gpu_uuid", "pid", "used_gpu_memory", "process_name")
APPS_QUERY = ("nvidia-smi", f"--query-compute-apps={','.join(APPS_FIELDS)}", "--format=csv,noheader,nounits")
APPS_QUERY_COMMAND = " ".join(APPS_QUERY)


def parse_apps(text: str, rc: int | None = 0) -> dict[str, Any]:
    """The compute apps from :data:`APPS_QUERY`'s output and exit code.

    Returns ``{"state", "message", "apps": [{"gpu_uuid": str, "pid": int|None, "used_mib": float|None,
    "name": str}]}`` (states as :func:`parse_query`; no app listed is ``ok`` with ``[]``: nvidia-smi
    prints nothing then). ``used_mib`` is None where the tool prints ``[N/A]`` (a process it cannot
    account, e.g. under WDDM or without the permission), ``pid`` likewise; ``name`` is as printed,
    ``[Not Found]`` for a pid the tool cannot resolve to a process (another pid namespace, a process
    being torn down). A header line, a line with too few fields or a pid that is neither a number nor
    bracketed is skipped."""
    text = (text or "").strip()
    bad = _failed(text, rc)
    if bad:
        return {**{k: v for k, v in bad.items() if k != "gpus"}, "apps": []}
    apps = []
    for line in text.splitlines():
        parts = line.split(",", len(APPS_FIELDS) - 1)
        if len(parts) != len(APPS_FIELDS):
            continue
        uuid, pid_t, mib_t, name = (x.strip() for x in parts)
        if pid_t.isdigit():
            pid: int | None = int(pid_t)
        elif pid_t.startswith("["):
            pid = None
        else:  # the header ("pid"), a warning
            continue
        apps.append({"gpu_uuid": uuid, "pid": pid, "used_mib": _num(mib_t), "name": name})
    return {"state": "ok", "message": "", "apps": apps}


def query_apps(timeout_s: float = 30.0) -> dict[str, Any]:
    """Run :data:`APPS_QUERY` on this host and :func:`parse_apps` it (never raises)."""
    return parse_apps(*_run(APPS_QUERY, timeout_s))


class VramBusy(RuntimeError):
    """:func:`wait_idle` gave up: the GPU's memory is not back near idle. The message names the used
    MiB, the ceiling, the seconds waited and the compute apps still holding memory; ``seen`` is the
    last reading (:func:`wait_idle`'s return shape)."""

    def __init__(self, message: str, seen: dict[str, Any]) -> None:
        super().__init__(message)
        self.seen = seen


def apps_text(apps: list[dict[str, Any]]) -> str:
    """``pid 123 python3 21600 MiB, pid [N/A] [Not Found] [N/A] MiB`` (``none listed`` for ``[]``):
    the compute apps as the messages name them."""
    def one(a: dict[str, Any]) -> str:
        pid = a["pid"] if a["pid"] is not None else "[N/A]"
        mib = f"{a['used_mib']:g}" if a["used_mib"] is not None else "[N/A]"
        return f"pid {pid} {a['name']} {mib} MiB"
    return ", ".join(one(a) for a in apps) or "none listed"


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


def bench_context(smi: dict[str, Any]) -> dict[str, Any]:
    """What the bench records of the GPU (first GPU): ``gpu`` (name), ``driver``, ``power_limit_w``
    (W), ``memory_total_gib`` (GiB), ``gpu_count``; ``{}`` when the query failed."""
    gpus = smi.get("gpus") or []
    if smi.get("state") != "ok" or not gpus:
        return {}
    g = gpus[0]
    return {"gpu": g["name"], "driver": g["driver_version"], "power_limit_w": g["power_limit_w"],
            "memory_total_gib": g["memory_total_gib"], "gpu_count": len(gpus)}


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
