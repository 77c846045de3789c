"""The sandbox's fake ``nvidia-smi`` (tests/harness/stubs/nvidia-smi) held against the real 610.57.04
capture, field by field (issue 37 part 1).

The capture is ``data/gpu-captures/linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt`` in the
shared folder beside the checkout (``RIGKIT_SHARED`` overrides; SOURCES.md there), read by the small
readers of tests/unit/test_gpu_captures.py (never by the fake's code). The fake runs here on the CI
machine with its state in a temporary folder: ``RIGKIT_FAKE_GPU_DIR`` (the loaded module's version, the
holders), ``RIGKIT_FAKE_GPU_DRIVER`` (the installed driver, as the nvidia-utils package of the sandbox
mirror writes ``/usr/share/fake-gpu/driver``) and ``RIGKIT_FAKE_GPU_BOARD`` (no board file: the 3090's
defaults). What is held:

- the fields ``--query-gpu`` accepts are exactly the capture's ``--help-query-gpu`` (first names and
  second names), and ``--help-query-gpu`` prints that list; one field it does not list
  (``total_energy_consumption``: no real driver lists it) fails the whole query with the real message,
  exit 2 and nothing on stderr;
- every field's header (name and unit) is the capture's, and its value has the capture's shape (a number
  with the capture's unit and decimals, ``[N/A]``, ``N/A``, ``[Requested functionality has been
  deprecated]``, ``Enabled``/``Disabled``, hex, ...) in the idle state and with a process on the card,
  with and without units;
- ``--version``'s keys and deprecation lines, ``-q``'s headings, keys and deprecation notes, the table's
  frame and columns, the compute apps' fields and header.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import tests.unit.test_gpu_captures as captures
from tests.unit import fake_gpu

STUB = fake_gpu.STUB
CAPTURE = captures.CAPTURES / "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt"
DRIVER = "610.57.04"
pytestmark = pytest.mark.skipif(not CAPTURE.is_file(), reason=f"no 610.57.04 capture at {CAPTURE} (the shared "
                                "folder beside the checkout; set RIGKIT_SHARED)")
#: An entry of a ``--help-query-*`` list: a line that is ``"name"`` or ``"name" or "second name"`` (the
#: lines of values such as ``"0: Default" means ...`` are not entries).
ENTRY = re.compile(r'^"([\w.]+)"(?: or "([\w.]+)")?$', re.M)


def entries(help_text: str) -> list[tuple[str, str | None]]:
    return [m.groups() for m in ENTRY.finditer(help_text)]


def names(help_text: str) -> set[str]:
    return {n for pair in entries(help_text) for n in pair if n}


@pytest.fixture(scope="module")
def cap():
    return captures.Capture(CAPTURE)


@pytest.fixture
def fake(tmp_path):
    """``run(*args)``: the fake with driver 610.57.04 installed and loaded, its state in ``tmp_path``;
    ``hold()`` puts a live process on the card (21600 MiB) until the test ends."""
    env = fake_gpu.driver_env(tmp_path, json.dumps({"driver_version": DRIVER, "cuda_version": "13.3"}) + "\n", DRIVER)
    gpu_dir = tmp_path / "gpu"
    holders = []

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(STUB), *args], env=env, capture_output=True, text=True, timeout=60)

    def hold() -> int:
        p = subprocess.Popen(["sleep", "300"])
        holders.append(p)
        (gpu_dir / "procs" / f"{p.pid}.mib").write_text("21600\n")
        return p.pid

    run.hold = hold
    try:
        yield run
    finally:
        for p in holders:
            p.kill()
            p.wait()


def ok(r: subprocess.CompletedProcess) -> str:
    assert (r.returncode, r.stderr) == (0, ""), r.stdout + r.stderr
    return r.stdout


def shape(value: str, unit: str = "") -> str:
    """A value's format class: the literal for ``[...]``, ``N/A`` and empty; a number as ``N`` with its
    decimals (``N.dd``) and unit (``N.dd W``); hex ``0x<n digits>``; the pairs a field toggles between
    (``Enabled|Disabled``, ``Active|Not Active``, ``Yes|No``), a P-state, the timestamp; other text as
    ``text``."""
    v = value.strip()
    if v.startswith("[") or v in ("N/A", ""):
        return v
    m = re.fullmatch(r"-?\d+(?:\.(\d+))?(?: (\S+))?", v)
    if m:
        return "N" + ("." + "d" * len(m.group(1)) if m.group(1) else "") + (f" {m.group(2)}" if m.group(2) else "")
    if re.fullmatch(r"0x[0-9A-Fa-f]+", v):
        return f"0x{len(v) - 2}"
    for pair in (("Enabled", "Disabled"), ("Active", "Not Active"), ("Yes", "No")):
        if v in pair:
            return "|".join(pair)
    if re.fullmatch(r"P\d+", v):
        return "P-state"
    if re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}", v):
        return "timestamp"
    return "text"


# ---- the fields


def test_the_fields_accepted_are_exactly_the_captures_help_query_gpu(cap, fake):
    listed = names(cap.s["capabilities :: help-query-gpu"])
    assert len(listed) == 282  # 241 fields, 41 second names
    printed = ok(fake("--help-query-gpu"))
    assert printed.startswith('List of valid properties to query for the switch "--query-gpu":\n')
    assert entries(printed) == entries(cap.s["capabilities :: help-query-gpu"])  # in order, with second names
    # every name the capture lists answers, in one query (as the capture's own query asked them)
    r = fake(f"--query-gpu={','.join(sorted(listed))}", "--format=csv,noheader")
    assert len(ok(r).splitlines()) == 1 and len(r.stdout.split(", ")) == len(listed)
    for field in ("total_energy_consumption", "power.bogus", "energy", "gpu_names"):
        r = fake(f"--query-gpu=index,{field},power.draw", "--format=csv,noheader,nounits")
        assert (r.returncode, r.stdout, r.stderr) == (2, f'Field "{field}" is not a valid field to query.\n\n', "")


def test_a_second_name_answers_under_the_first_as_the_real_tool_prints_it(cap, fake):
    pairs = [(a, b) for a, b in entries(cap.s["capabilities :: help-query-gpu"]) if b]
    firsts = ok(fake(f"--query-gpu={','.join(a for a, _ in pairs)}", "--format=csv"))
    seconds = ok(fake(f"--query-gpu={','.join(b for _, b in pairs)}", "--format=csv"))
    assert firsts.splitlines()[0] == seconds.splitlines()[0]  # the header names the first
    # the capture's accounted-apps query: gpu_util asked, gpu_utilization printed
    assert "gpu_utilization [%]" in cap.body("load", "query-accounted-apps").splitlines()[0]


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "a-process-on-the-card"])
def test_every_field_has_the_captures_header_and_the_shape_of_its_value(cap, fake, busy):
    """The capture asked every field it lists in one ``--format=csv`` query, idle and under load: the
    fake's answer to the same query has the capture's header to the letter, and each value the shape
    the capture's has for that field in either phase; ``nounits`` and ``noheader,nounits`` as the
    capture's values without their unit."""
    if busy:
        fake.hold()
    idle, load = cap.body("idle", "query-gpu"), cap.body("load", "query-gpu")
    fields, units, rows = captures.csv_table(idle)
    _, _, load_rows = captures.csv_table(load)
    text = ok(fake(f"--query-gpu={','.join(fields)}", "--format=csv"))
    assert text.splitlines()[0] == idle.strip().splitlines()[0]
    got_fields, got_units, got = captures.csv_table(text)
    assert (got_fields, got_units, len(got)) == (fields, units, 1)
    wrong = {f: (got[0][i], rows[0][i], load_rows[0][i]) for i, f in enumerate(fields)
             if shape(got[0][i]) not in (shape(rows[0][i]), shape(load_rows[0][i]))}
    assert not wrong, wrong
    bare = ok(fake(f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits")).strip().split(", ")
    want = [captures.project(c, tuple(fields), False, False).strip().split(", ") for c in (idle, load)]
    wrong = {f: (bare[i], want[0][i], want[1][i]) for i, f in enumerate(fields)
             if shape(bare[i]) not in (shape(want[0][i]), shape(want[1][i]))}
    assert len(bare) == len(fields) and not wrong, wrong
    with_header = ok(fake(f"--query-gpu={','.join(fields)}", "--format=csv,nounits")).splitlines()
    assert with_header[0] == idle.strip().splitlines()[0]  # the header keeps its units under nounits


def test_the_values_are_a_3090s_with_the_state_the_sandbox_models(fake):
    q = "--query-gpu=name,driver_version,kmd_version,memory.total,memory.used,power.draw,power.limit,power.min_limit," \
        "power.max_limit,power.default_limit,pstate"
    assert ok(fake(q, "--format=csv,noheader")) == (
        "NVIDIA GeForce RTX 3090, 610.57.04, 610.57.04, 24576 MiB, 1 MiB, 21.50 W, 350.00 W, 100.00 W, 450.00 W, "
        "350.00 W, P8\n")
    fake.hold()
    assert ok(fake(q, "--format=csv,noheader,nounits")) == (
        "NVIDIA GeForce RTX 3090, 610.57.04, 610.57.04, 24576, 21601, 32.00, 350.00, 100.00, 450.00, 350.00, P2\n")


# ---- --version, -q, the table, the compute apps


def test_version_says_what_the_captures_says(cap, fake):
    def keys(text):
        return [ln.split(":", 1)[0] for ln in text.strip().splitlines()]

    want, got = cap.s["capabilities :: version"], ok(fake("--version"))
    assert keys(got) == keys(want)
    assert [ln for ln in got.splitlines() if "Deprecated" in ln] == [ln for ln in want.splitlines() if "Deprecated" in ln]
    assert got.strip() == want.strip()  # the same driver: every line the capture's


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "a-process-on-the-card"])
def test_q_has_the_captures_headings_keys_and_deprecation_notes(cap, fake, busy):
    if busy:
        fake.hold()
    phase = "load" if busy else "idle"
    want_text, got_text = cap.body(phase, "query (-q)"), ok(fake("-q"))

    def outline(text):
        """Every heading and key as its path, the Processes section apart (its records are the state)."""
        heads, entries_ = captures.q_outline(text)
        keys = [path for path, _ in entries_]
        return ([h for h in heads if "Processes" not in h], [k for k in keys if "Processes" not in k[:-1]],
                {k for k in keys if "Processes" in k[:-1]})

    want, got = outline(want_text), outline(got_text)
    gpu_head = lambda hs: [h if not h[0].startswith("GPU 0000") else ("GPU <bus id>", *h[1:]) for h in hs]  # noqa: E731
    assert gpu_head(got[0]) == gpu_head(want[0]) and len(got[0]) > 40
    assert [k for k in gpu_head(got[1]) if k[-1] != "Processes"] == gpu_head(want[1]) and len(got[1]) > 150
    if busy:  # a process's keys (the capture has processes in both phases: the desktop's)
        assert set(gpu_head(got[2])) == set(gpu_head(want[2])) and len(got[2]) == 6
    else:  # none: "Processes : None", as the H100 capture (590.48.01) has it
        assert got[2] == set() and "    Processes                                          : None" in got_text.splitlines()
    notes = [ln for ln in want_text.splitlines() if "[Deprecated;" in ln]
    assert len(notes) == 2 and [ln for ln in got_text.splitlines() if "[Deprecated;" in ln] == notes
    # and -q reads as the query does
    entries_ = captures.q_entries(got_text)
    assert captures.q_get(entries_, "KMD Version") == DRIVER and captures.q_get(entries_, "FB Memory Usage", "Total") == \
        "24576 MiB"
    assert captures.q_get(entries_, "GPU Power Readings", "Max Power Limit") == "450.00 W"


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "a-process-on-the-card"])
def test_the_table_has_the_captures_frame_and_columns(cap, fake, busy):
    pid = fake.hold() if busy else None
    want = cap.body("load" if busy else "idle", "nvidia-smi (default table)").strip("\n").splitlines()[1:]
    got = ok(fake()).strip("\n").splitlines()
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}", got[0]), got[0]
    got = got[1:]

    def columns(line):
        return [i for i, c in enumerate(line) if c in "|+"]

    frames = {ln for ln in want if not re.search(r"\d|N/A  N/A", ln)}
    assert [i for i, ln in enumerate(got) if not ln] == [i for i, ln in enumerate(want) if not ln] == [11]
    for line in filter(None, got):
        if not re.search(r"\d|N/A  N/A", line) and "No running processes" not in line:
            assert line in frames, line  # the frame and the column headings, to the letter
        assert len(line) == 91 and columns(line) in [columns(w) for w in want], line
    assert got[1] == f"| NVIDIA-SMI {DRIVER}              KMD Version: {DRIVER}     CUDA UMD Version: 13.3     |" == want[1]
    if busy:
        row = next(ln for ln in got if str(pid) in ln)
        assert row.split() == ["|", "0", "N/A", "N/A", str(pid), "C", "sleep", "21600MiB", "|"], row  # columns: above
    else:
        assert "|  No running processes found                                                             |" in got


def test_the_compute_apps_answer_the_captures_fields(cap, fake):
    help_ = cap.s["capabilities :: help-query-compute-apps"]
    assert entries(ok(fake("--help-query-compute-apps"))) == entries(help_)
    load = cap.body("load", "query-compute-apps")
    fields, units, rows = captures.csv_table(load)
    asked = ",".join(fields)
    assert ok(fake(f"--query-compute-apps={asked}", "--format=csv")) == load.strip().splitlines()[0] + "\n"  # none
    pid = fake.hold()
    text = ok(fake(f"--query-compute-apps={asked}", "--format=csv"))
    assert text.splitlines()[0] == load.strip().splitlines()[0]
    _, _, got = captures.csv_table(text)
    assert len(got) == 1 and [shape(v) for v in got[0]] == [shape(v) for v in rows[0]]
    assert got[0][5:] == [str(pid), "sleep", "21600 MiB"]
    seconds = [b for _, b in entries(help_) if b]
    assert seconds == ["name", "used_memory"]
    assert ok(fake("--query-compute-apps=pid,name,used_memory", "--format=csv,noheader,nounits")) == f"{pid}, sleep, 21600\n"
    r = fake("--query-compute-apps=pid,energy", "--format=csv")
    assert (r.returncode, r.stdout, r.stderr) == (2, 'Field "energy" is not a valid field to query.\n\n', "")


def test_a_mismatch_names_the_nvml_version_as_the_real_tool(fake, tmp_path):
    """The NVML version is the driver's first two components (``--version``: ``NVML version : 610.57``)."""
    (tmp_path / "gpu" / "module_version").write_text("610.60.02\n")
    r = fake("--query-gpu=driver_version", "--format=csv,noheader")
    assert (r.returncode, r.stdout) == (18, "Failed to initialize NVML: Driver/library version mismatch\n"
                                            "NVML library version: 610.57\n")
