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
The queries and parsers live here because both sides read them: the deploy's facts and drift parse
output read over SSH, the bench's local energy reader runs them on the machine whose card it measures.
What only the host does with the GPU (the read-back, the wait for idle memory) is :mod:`rigkit.host.gpu`.
"""

from __future__ import annotations

import re

import subprocess
from typing import Any

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


def apps_text(apps: list[dict[str, Any]]) -> str:
    """``pid 123 python3 21600 MiB, pid [N/A] [Not Found] [N/A] MiB`` (``none listed`` for ``[]``):
    the compute apps as the messages name them."""
    def one(a: dict[str, Any]) -> str:
        pid = a["pid"] if a["pid"] is not None else "[N/A]"
        mib = f"{a['used_mib']:g}" if a["used_mib"] is not None else "[N/A]"
        return f"pid {pid} {a['name']} {mib} MiB"
    return ", ".join(one(a) for a in apps) or "none listed"


def bench_context(smi: dict[str, Any]) -> dict[str, Any]:
    """What the bench records of the GPU (first GPU): ``gpu`` (name), ``driver``, ``power_limit_w``
    (W), ``memory_total_gib`` (GiB), ``gpu_count``; ``{}`` when the query failed."""
    gpus = smi.get("gpus") or []
    if smi.get("state") != "ok" or not gpus:
        return {}
    g = gpus[0]
    return {"gpu": g["name"], "driver": g["driver_version"], "power_limit_w": g["power_limit_w"],
            "memory_total_gib": g["memory_total_gib"], "gpu_count": len(gpus)}
