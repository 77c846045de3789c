"""Every nvidia-smi parser rigkit has, over every real capture (issue 37 part 4).

The captures are ``data/gpu-captures/*.txt`` in the shared folder beside the checkout (``../shared``,
``RIGKIT_SHARED`` overrides; SOURCES.md there: public test data of utkuozdemir/nvidia_gpu_exporter,
MIT, each file the raw output of one card and driver, idle and under load). For each capture and each
phase (idle, load) the parsers read the capture's own sections — the query CSV (``--format=csv``: a
header and units, as captured; and without either), the compute apps, the header table, ``-q`` and
``--version`` — and what they read is checked against what that phase's ``-q`` says, read here by a
small reader of its own (:func:`q_entries`), never by rigkit's code.

rigkit asks ``--query-gpu=<rigkit.common.gpu.FIELDS>`` in its own order; the capture asked every field
the driver lists. The tool prints each field's value the same whichever others are asked, so the line
rigkit would get is the capture's columns picked in rigkit's order (:func:`project`); ``nounits``
prints the same numbers without the unit the header names (``memory.total [MiB]``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from rigkit.common import gpu
from rigkit.host.gpu import PARSED
from rigkit.common import versions
from rigkit.operations.facts.nvidia import NvidiaSmi
from rigkit.operations.facts.util import RC_MARK
from rigkit.render.declared_state import reboot_reasons

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("RIGKIT_SHARED", ROOT.parent / "shared"))
CAPTURES = SHARED / "data" / "gpu-captures"
FILES = sorted(CAPTURES.glob("*.txt")) if CAPTURES.is_dir() else []
PHASES = ("idle", "load")
#: Fields rigkit asks that no captured driver lists, each with the issue that owns it: the real tool
#: refuses them (``Field "X" is not a valid field to query.``, exit 2; see the energy test below). None:
#: the energy query asked ``total_energy_consumption`` until issue 37 (no driver lists it).
KNOWN_UNLISTED: dict[str, str] = {}

CASES = [pytest.param(f, id=f.stem) for f in FILES] or [pytest.param(None, marks=pytest.mark.skip(
    reason=f"no nvidia-smi captures at {CAPTURES} (the shared folder beside the checkout; set RIGKIT_SHARED)"))]


# ---- reading a capture (independent of rigkit)


def sections(path: Path) -> dict[str, str]:
    """``{section title: body}`` of a capture: each section opens with a line of 80 ``#``, ``# <title>``,
    optional ``# $ command`` lines and another line of 80 ``#``."""
    parts = re.split(r"^#{80}\n# (.+?)\n(?:# .*\n)*#{80}\n", path.read_text(), flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def q_outline(text: str) -> tuple[list[tuple[str, ...]], list[tuple[tuple[str, ...], str]]]:
    """``nvidia-smi -q`` as ``(headings, entries)``: each heading (a line without `` : ``) as its path,
    and each ``Key<blanks>: value`` line as ``(path of headings and key, value)``, under the headings
    indented less than it."""
    heads, out, stack = [], [], []  # stack: [(indent, heading)]
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        m = re.match(r"^\s*(\S.*?)\s+:(?: (.*))?$", line)
        if m:
            out.append((tuple(h for _, h in stack) + (m.group(1),), (m.group(2) or "").strip()))
        else:
            heads.append(tuple(h for _, h in stack) + (line.strip(),))
            stack.append((indent, line.strip()))
    return heads, out


def q_entries(text: str) -> list[tuple[tuple[str, ...], str]]:
    """``nvidia-smi -q``'s entries (:func:`q_outline`)."""
    return q_outline(text)[1]


def q_get(entries, *path: str) -> str:
    """The one value whose key is ``path[-1]`` under headings including ``path[:-1]`` in order."""
    def under(p: tuple[str, ...]) -> bool:
        it = iter(p[:-1])
        return p[-1] == path[-1] and all(h in it for h in path[:-1])
    found = [v for p, v in entries if under(p)]
    assert len(found) == 1, (path, found)
    return found[0]


def q_processes(text: str) -> list[dict[str, str]]:
    """The ``Processes`` records of ``-q``: ``{"pid", "type", "name", "used"}``."""
    return [dict(zip(("pid", "type", "name", "used"), m)) for m in re.findall(
        r"Process ID\s+: (\d+)\n\s+Type\s+: (\S+)\n\s+Name\s+: (.+)\n\s+Used GPU Memory\s+: (.+)\n", text)]


def help_fields(text: str) -> set[str]:
    """Every field name a ``--help-query-*`` output lists (``"name" or "gpu_name"``: both)."""
    return {n for m in re.finditer(r'^"([^"]+)"(?: or "([^"]+)")?', text, re.M) for n in m.groups() if n}


def csv_table(text: str) -> tuple[list[str], list[str], list[list[str]]]:
    """A ``--format=csv`` output: ``(field names, units per field ('' none), rows)``."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    header = [h.strip() for h in lines[0].split(",")]
    names = [h.split(" [")[0] for h in header]
    units = [h.split(" [", 1)[1].rstrip("]") if " [" in h else "" for h in header]
    return names, units, [[v.strip() for v in ln.split(",")] for ln in lines[1:]]


def project(text: str, fields: tuple[str, ...], units: bool, header: bool) -> str:
    """The capture's CSV with only ``fields`` in that order, as nvidia-smi prints that query with
    ``--format=csv`` (``units``, ``header``) or ``csv,noheader,nounits``."""
    names, unit_of, rows = csv_table(text)
    at = [names.index(f) for f in fields]
    out = [", ".join(f + (f" [{unit_of[i]}]" if units and unit_of[i] else "") for f, i in zip(fields, at))] if header else []
    for row in rows:
        vals = [row[i] if units or not unit_of[i] or not row[i].endswith(" " + unit_of[i])
                else row[i][: -len(unit_of[i]) - 1] for i in at]
        out.append(", ".join(vals))
    return "\n".join(out) + "\n"


def query_fields(argv: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """``("gpu" | "compute-apps", fields)`` of an nvidia-smi query argv."""
    arg = next(a for a in argv if a.startswith("--query-"))
    kind, _, fields = arg[len("--query-"):].partition("=")
    return kind, tuple(fields.split(","))


def watts(text: str) -> float:
    assert text.endswith(" W"), text
    return float(text[:-2])


def mib(text: str) -> float:
    assert text.endswith(" MiB"), text
    return float(text[:-4])


class Capture:
    def __init__(self, path: Path):
        self.path, self.s = path, sections(path)
        #: the driver as the file name gives it (SOURCES.md's table): ``610.57.04``
        self.driver_named = path.stem.rsplit("__", 1)[1]

    def body(self, phase: str, what: str) -> str:
        return next(v for k, v in self.s.items() if k.startswith(f"{phase} :: {what}"))

    def q(self, phase: str):
        return q_entries(self.body(phase, "query (-q)"))

    def listed(self, kind: str) -> set[str]:
        return help_fields(self.s[f"capabilities :: help-query-{kind}"])


# ---- the tests


@pytest.mark.parametrize("path", CASES)
def test_every_field_rigkit_asks_is_one_the_captured_driver_lists(path):
    """The real tool refuses a field it does not list (``Field "X" is not a valid field to query.``,
    exit 2): every query rigkit parses asks only listed fields, ``driver_version`` among them (610
    deprecates it for ``kmd_version``, which the 590 capture does not list), save the known ones."""
    cap = Capture(path)
    assert "driver_version" in gpu.FIELDS and "kmd_version" not in gpu.FIELDS
    for name, (argv, _parse) in PARSED.items():
        kind, fields = query_fields(argv)
        unlisted = [f for f in fields if f not in cap.listed(kind) and f not in KNOWN_UNLISTED]
        assert not unlisted, f"{name} ({' '.join(argv)}) asks fields {path.name} does not list: {unlisted}"


@pytest.mark.parametrize("path", CASES)
def test_a_refused_field_reads_as_a_failed_query_never_as_readings(path):
    """What the real tool answers a field it does not list (stdout, an empty line, exit 2; nothing on
    stderr): the energy parser reports the failure with the tool's words."""
    cap = Capture(path)
    kind, _ = query_fields(gpu.ENERGY_QUERY)
    for field in ("total_energy_consumption",):  # what rigkit asked before issue 37: listed by no driver
        assert field not in cap.listed(kind)
        got = gpu.parse_energy(f'Field "{field}" is not a valid field to query.\n\n', 2)
        assert got == {"state": "error", "message": f'Field "{field}" is not a valid field to query.', "gpus": []}


@pytest.mark.parametrize("path", CASES)
@pytest.mark.parametrize("phase", PHASES)
def test_the_energy_query_reads_the_draw_and_the_meter_samples_it(path, phase):
    """What a real card allows: its draw (``power.draw``), sampled and integrated by the bench's meter."""
    from rigkit.bench.energy import EnergyMeter

    cap = Capture(path)
    text = cap.body(phase, "query-gpu")
    names, _units, rows = csv_table(text)
    draw = float(rows[0][names.index("power.draw")].removesuffix(" W"))
    got = gpu.parse_energy(project(text, gpu.ENERGY_FIELDS, False, False), 0)
    assert got == {"state": "ok", "message": "", "gpus": [{"index": 0, "energy_j": None, "power_draw_w": draw}]}
    assert EnergyMeter(lambda: got).start() == "sampled"


@pytest.mark.parametrize("path", CASES)
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize(("units", "header"), [(True, True), (True, False), (False, False)],
                         ids=["csv", "csv-noheader", "csv-noheader-nounits"])
def test_the_gpu_query_reads_what_the_captures_own_q_says(path, phase, units, header):
    cap = Capture(path)
    q = cap.q(phase)
    text = project(cap.body(phase, "query-gpu"), gpu.FIELDS, units, header)
    for got in (gpu.parse_query(text, 0), NvidiaSmi().process([*text.splitlines(), f"{RC_MARK}0"])):
        assert got["state"] == "ok" and got["message"] == ""
        assert len(got["gpus"]) == int(q_get(q, "Attached GPUs"))
        g = got["gpus"][0]
        total = mib(q_get(q, "FB Memory Usage", "Total"))
        assert g == {**g,  # what -q says, field by field
                     "index": 0,
                     "name": q_get(q, "Product Name"),
                     "uuid": q_get(q, "GPU UUID"),
                     # 'Driver Version : 610.57.04 [Deprecated; …]' from 610
                     "driver_version": q_get(q, "Driver Version").split(" [")[0],
                     "memory_total_mib": total,
                     "memory_total_gib": round(total / 1024, 2),
                     "power_default_w": watts(q_get(q, "GPU Power Readings", "Default Power Limit")),
                     "power_limit_w": watts(q_get(q, "GPU Power Readings", "Requested Power Limit")),
                     "power_enforced_w": watts(q_get(q, "GPU Power Readings", "Current Power Limit")),
                     "power_min_w": watts(q_get(q, "GPU Power Readings", "Min Power Limit")),
                     "power_max_w": watts(q_get(q, "GPU Power Readings", "Max Power Limit"))}
        assert g["driver_version"] == cap.driver_named
        assert gpu.bench_context(got) == {"gpu": g["name"], "driver": cap.driver_named, "power_limit_w": g["power_limit_w"],
                                          "memory_total_gib": g["memory_total_gib"], "gpu_count": 1}


@pytest.mark.parametrize("path", CASES)
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("units", [True, False], ids=["csv", "nounits"])
def test_the_compute_apps_are_the_q_processes_that_compute(path, phase, units):
    """``-q``'s Processes with a C in their type (``C``, ``C+G``) are the compute apps, on the card's
    uuid, with their pid, name and memory."""
    cap = Capture(path)
    q_text = cap.body(phase, "query (-q)")
    got = gpu.parse_apps(project(cap.body(phase, "query-compute-apps"), gpu.APPS_FIELDS, units, units), 0)
    assert got["state"] == "ok"
    uuid = q_get(q_entries(q_text), "GPU UUID")
    want = sorted((int(p["pid"]), p["name"], mib(p["used"])) for p in q_processes(q_text) if "C" in p["type"])
    assert sorted((a["pid"], a["name"], a["used_mib"]) for a in got["apps"]) == want
    assert {a["gpu_uuid"] for a in got["apps"]} <= {uuid}
    if phase == "load":
        assert want, f"{path.name}: the load phase runs compute apps"


@pytest.mark.parametrize("path", CASES)
@pytest.mark.parametrize("phase", PHASES)
def test_the_drivers_cuda_level_is_read_from_the_header_q_and_version(path, phase):
    """The header table (and its first line naming CUDA, what drift's probe greps), ``-q`` and
    ``--version`` all give ``-q``'s CUDA level; on 610 ``-q`` prints it twice (``CUDA Version : 13.3
    [Deprecated; …]`` and ``CUDA UMD Version : 13.3``), ``--version`` as ``CUDA UMD version : 13.3``."""
    cap = Capture(path)
    q = cap.q(phase)
    cuda = q_get(q, "CUDA Version").split(" [")[0]
    if any(p[-1] == "CUDA UMD Version" for p, _ in q):
        assert q_get(q, "CUDA UMD Version") == cuda
    table = cap.body(phase, "nvidia-smi (default table)")
    assert gpu.driver_cuda(table) == cuda
    assert gpu.driver_cuda(next(ln for ln in table.splitlines() if "CUDA" in ln)) == cuda
    assert gpu.driver_cuda(cap.body(phase, "query (-q)")) == cuda
    assert gpu.driver_cuda(cap.s["capabilities :: version"]) == cuda


@pytest.mark.parametrize("path", CASES)
def test_every_place_a_real_driver_names_itself_agrees_with_its_series(path):
    """``--version`` (``KMD version`` from 610, ``DRIVER version`` before), the header table, ``-q``
    (``Driver Version``, ``KMD Version``) and the query's ``driver_version``: one full version, which
    agrees with its series (``610.57``) and itself, not with another series; the boot gate, with the
    spec naming the series and the module and DKMS reporting that version, has no reason."""
    cap = Capture(path)
    named = [v.strip() for k, v in re.findall(r"^(KMD version|DRIVER version)\s+:\s+(.+)$",
                                                cap.s["capabilities :: version"], re.M) if v[:1].isdigit()]
    for phase in PHASES:
        q = cap.q(phase)
        named += [q_get(q, "Driver Version").split(" [")[0]]
        named += [v for p, v in q if p[-1] == "KMD Version"]
        named += re.findall(r"(?:KMD|Driver) Version:\s+(\S+)", cap.body(phase, "nvidia-smi (default table)"))
        names, _units, rows = csv_table(cap.body(phase, "query-gpu"))
        named += [rows[0][names.index("driver_version")]]
    assert set(named) == {cap.driver_named} and len(named) >= 7
    series = ".".join(cap.driver_named.split(".")[:2])
    other = "610.57" if series != "610.57" else "595.71"
    assert versions.agrees(series, cap.driver_named) and versions.agrees(cap.driver_named, cap.driver_named)
    assert not versions.agrees(other, cap.driver_named)
    kernel = {"running": "6.12.60-1-lts", "nvidia_module": cap.driver_named, "installed_kernels": ["6.12.60-1-lts"]}
    dkms = [{"module": "nvidia", "version": cap.driver_named, "kernel": "6.12.60-1-lts", "arch": "x86_64",
             "status": "installed"}]
    assert reboot_reasons(kernel, dkms, series, "nvidia-open-dkms") == []
    assert reboot_reasons(kernel, dkms, other, "nvidia-open-dkms")[0] == (
        f"loaded nvidia module is {cap.driver_named}, the pinned driver is {other}")
