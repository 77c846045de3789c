"""The card's energy counter through NVML (issue 41): NVIDIA's real binding (``pynvml``, nvidia-ml-py
13.615.71) against the sandbox's stand-in ``libnvidia-ml.so.1`` (tests/harness/stubs/libnvidia-ml.c, built
here with gcc as the mirror builds it), whose counter is the fake nvidia-smi's one power model.

- The stand-in exports exactly the names pynvml resolves for the calls rigkit makes (read from pynvml's
  own source), and words every code as pynvml does.
- ``rigkit-agent energy`` (rigkit.bench.nvml) loads the library as pynvml does (by soname, through the
  dynamic loader): the counter and its method; no library → LibraryNotFound → sampled; a board without
  a counter → 3 → sampled; a mismatch → 18; no driver loaded → 9; ``--serve`` a reading per line.
- Both methods measure the same thing: on the fake's model at two power limits, the counter and the
  sampled draw give the same joules (within what sampling can resolve), the same W and the same
  ordering of tok/J — the power-limit sweep's figures mean the same whichever method measured them;
  and for any draw profile (hypothesis) the counter's joules are its integral and the sampled ones within
  one interval per step of the draw.
"""

from __future__ import annotations

import ast
import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.bench import nvml
from rigkit.bench.energy import EnergyMeter, summarize_energy, trapezoid_j

ROOT = Path(__file__).resolve().parents[2]
STUBS = ROOT / "tests" / "harness" / "stubs"
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import build_mirror  # noqa: E402

from tests.unit.test_fake_gpu_power import chat, engine, idle, load  # noqa: E402,F401  (engine: a fixture)

#: The pynvml functions rigkit.bench.nvml calls.
CALLS = ("nvmlInit", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetTotalEnergyConsumption", "nvmlShutdown",
         "nvmlErrorString")


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Path:
    """The stand-in, built as the mirror builds it, in a folder of its own (``libnvidia-ml.so.1``)."""
    built = build_mirror.shared_library("libnvidia-ml.c", "libnvidia-ml.so.1")
    folder = tmp_path_factory.mktemp("nvml")
    (folder / "libnvidia-ml.so.1").write_bytes(built.read_bytes())
    return folder


@pytest.fixture(scope="module")
def private_lib(tmp_path_factory) -> Path:
    """The stand-in under another soname (``libnvidia-ml-test.so``), for loading into this process: a
    library loaded here as ``libnvidia-ml.so.1`` would be found by every later ``CDLL("libnvidia-ml.so.1")``
    of this process (the dynamic loader matches loaded objects by soname), and the other tests' machine
    has no NVML."""
    folder = tmp_path_factory.mktemp("nvml-private")
    copy = folder / "libnvidia-ml-test.so"
    copy.write_bytes(build_mirror.shared_library("libnvidia-ml.c", "libnvidia-ml-test.so").read_bytes())
    return copy


def resolved_names() -> set[str]:
    """The library names pynvml looks up (``_nvmlGetFunctionPointer("…")``) for :data:`CALLS`, following
    its calls to its own module-level functions (``nvmlInit`` → ``nvmlInitWithFlags`` → …)."""
    import pynvml

    tree = ast.parse(Path(pynvml.__file__).read_text())
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    names, todo, seen = set(), list(CALLS), set()
    while todo:
        fn = todo.pop()
        if fn in seen or fn not in funcs:
            continue
        seen.add(fn)
        for node in ast.walk(funcs[fn]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id == "_nvmlGetFunctionPointer" and isinstance(node.args[0], ast.Constant):
                    names.add(node.args[0].value)
                elif node.func.id in funcs:
                    todo.append(node.func.id)
    return names


def test_the_stand_in_exports_exactly_what_pynvml_resolves_for_rigkits_calls(lib):
    # the calls rigkit makes are the ones listed (rigkit.bench.nvml's pynvml.<name> calls)
    tree = ast.parse((ROOT / "rigkit" / "bench" / "nvml.py").read_text())
    used = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "pynvml"}
    assert used == set(CALLS) - {"nvmlErrorString"}  # nvmlErrorString: only inside pynvml, to word a code
    want = resolved_names()
    assert want == {"nvmlInitWithFlags", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetTotalEnergyConsumption",
                    "nvmlShutdown", "nvmlErrorString"}
    nm = subprocess.run(["nm", "-D", "--defined-only", str(lib / "libnvidia-ml.so.1")], capture_output=True, text=True,
                        check=True).stdout
    exported = {ln.split()[-1] for ln in nm.splitlines() if " T " in ln}
    assert exported == want


def test_the_stand_in_words_every_code_as_pynvml_does(private_lib):
    import pynvml

    so = ctypes.CDLL(str(private_lib))
    so.nvmlErrorString.restype = ctypes.c_char_p
    for code, words in pynvml.NVMLError._errcode_to_string.items():
        assert so.nvmlErrorString(code).decode() == words, code
    assert so.nvmlErrorString(12345).decode() == "Unknown Error"
    # before nvmlInit nothing answers: NVML_ERROR_UNINITIALIZED
    handle = ctypes.c_void_p()
    assert so.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 1
    assert so.nvmlShutdown() == 1


def fake_env(tmp_path: Path, lib: Path | None, board: dict | None = None) -> dict[str, str]:
    """A process environment with the fake GPU in ``tmp_path/gpu`` (its driver loaded), its nvidia-smi on
    PATH and, with ``lib``, the stand-in where the dynamic loader finds it (``LD_LIBRARY_PATH``)."""
    gpu_dir, bin_dir = tmp_path / "gpu", tmp_path / "bin"
    (gpu_dir / "procs").mkdir(parents=True, exist_ok=True)
    bin_dir.mkdir(exist_ok=True)
    (gpu_dir / "module_version").write_text("?\n")  # no driver package here: DRIVER "?" on both sides
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexec {sys.executable} {STUBS / 'nvidia-smi'} \"$@\"\n")
    smi.chmod(0o755)
    (tmp_path / "board.json").write_text(json.dumps(board or {}))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RIGKIT_FAKE_GPU_DIR": str(gpu_dir),
           "RIGKIT_FAKE_GPU_BOARD": str(tmp_path / "board.json"), "RIGKIT_FAKE_NVIDIA_SMI": str(STUBS / "nvidia-smi")}
    env.pop("LD_LIBRARY_PATH", None)
    if lib is not None:
        env["LD_LIBRARY_PATH"] = str(lib)
    return env


def agent_energy(env: dict[str, str], *args: str, stdin: str | None = None) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "rigkit.host", "energy", *args], env=env, input=stdin,
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    return [json.loads(ln) for ln in r.stdout.splitlines()]


def test_the_agent_reads_the_counter_through_the_real_binding_and_the_fakes_model(lib, tmp_path):
    env = fake_env(tmp_path, lib)
    first, second = agent_energy(env, "--serve", stdin="\n\n")
    assert (first["state"], first["method"], first["counter_unavailable"]) == ("ok", "counter", None)
    assert first["source"] == nvml.COUNTER_SOURCE
    g1, g2 = first["gpus"][0], second["gpus"][0]
    assert g1["index"] == 0 and g1["power_draw_w"] is None and g1["energy_j"] > 0
    assert g2["energy_j"] >= g1["energy_j"]  # a counter: it never goes back
    ledger = json.loads((tmp_path / "gpu" / "energy.json").read_text())  # the fake's one model, advanced
    assert ledger["mj"] / 1000.0 == pytest.approx(g2["energy_j"], abs=0.001)


def test_without_the_library_the_draw_is_sampled_and_the_reading_says_why(tmp_path):
    (reading,) = agent_energy(fake_env(tmp_path, None))
    assert (reading["state"], reading["method"]) == ("ok", "sampled")
    assert reading["counter_unavailable"] == "NVML: NVML Shared Library Not Found (code 12)"  # LibraryNotFound
    assert reading["source"] == "nvidia-smi --query-gpu=index,power.draw --format=csv,noheader,nounits"
    assert reading["gpus"] == [{"index": 0, "energy_j": None, "power_draw_w": 21.5}]


def test_a_board_without_a_counter_answers_3_and_the_draw_is_sampled(lib, tmp_path):
    (reading,) = agent_energy(fake_env(tmp_path, lib, {"energy_counter": False}))
    assert (reading["state"], reading["method"]) == ("ok", "sampled")
    assert reading["counter_unavailable"] == "GPU 0 has no energy counter: NVML: Not Supported (code 3)"
    assert reading["gpus"][0]["power_draw_w"] == 21.5


def test_a_mismatch_and_an_unloaded_driver_answer_nvmls_codes(lib, tmp_path):
    env = fake_env(tmp_path, lib)
    (tmp_path / "gpu" / "force_mismatch").write_text("")
    (reading,) = agent_energy(env)
    assert reading["counter_unavailable"] == "NVML: RM has detected an NVML/RM version mismatch. (code 18)"
    assert (reading["method"], reading["state"]) == ("sampled", "mismatch")  # nvidia-smi fails alike (exit 18)
    (tmp_path / "gpu" / "force_mismatch").unlink()
    (tmp_path / "gpu" / "module_version").unlink()  # no module loaded, none built for this kernel
    (reading,) = agent_energy(env)
    assert reading["counter_unavailable"] == "NVML: Driver Not Loaded (code 9)"
    assert (reading["method"], reading["state"]) == ("sampled", "no-gpu")


@pytest.fixture
def counter_reader(private_lib, monkeypatch):
    """An :class:`rigkit.bench.nvml.EnergyReader` in this process whose pynvml talks to the stand-in
    (:func:`private_lib`) handed to pynvml as the library it loaded (``pynvml.nvmlLib``). Restored
    afterwards."""
    import pynvml

    monkeypatch.setenv("RIGKIT_FAKE_NVIDIA_SMI", str(STUBS / "nvidia-smi"))
    monkeypatch.setattr(pynvml, "nvmlLib", ctypes.CDLL(str(private_lib)))
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    readers = []

    def make(sampled):
        readers.append(nvml.EnergyReader(sampled=sampled))
        return readers[-1]

    yield make
    for r in readers:
        r.close()


def test_both_methods_give_a_power_limit_sweep_the_same_figures_on_the_fakes_model(engine, counter_reader, monkeypatch):
    """One request per limit measured by both meters at once, on the fake's model (draw min(limit, 370 W)
    while the engine is busy, 32 W resident otherwise): the counter's joules are the model's (its busy
    seconds at the busy draw, the rest at the resident draw), the sampled joules the same within what a
    sampler can resolve, and the sweep's figures (W, J/token, tok/J and their order) agree."""
    if os.geteuid() != 0:
        pytest.skip("nvidia-smi -pl needs root (the fake refuses it as the real one does)")
    monkeypatch.setenv("RIGKIT_FAKE_GPU_DIR", str(engine["gpu_dir"]))
    smi = engine["smi"]
    (engine["control"] / "chunk_s").write_text("0.1\n")  # 20 chunks: 2 s busy at full speed

    def sampled():
        from rigkit.common import gpu

        return gpu.parse_energy(smi(*gpu.ENERGY_QUERY[1:]), 0)

    counter = EnergyMeter(counter_reader(sampled), interval_s=0.05)
    sampler = EnergyMeter(lambda: {**sampled(), "source": "nvidia-smi"}, interval_s=0.05)
    assert (counter.start(), sampler.start()) == ("counter", "sampled")
    assert counter.source == nvml.COUNTER_SOURCE and counter.counter_unavailable is None
    figures = {}
    for limit in (150, 420):
        smi("-pl", str(limit))
        busy0 = load(engine)["busy_s"]
        with counter.measure() as c_span:
            with sampler.measure() as s_span:
                r = chat(engine["port"])
                idle(engine)
        busy_s = load(engine)["busy_s"] - busy0
        assert r.ok and r.completion_tokens == 50
        busy_w = min(limit, 370.0)
        model_j = busy_s * busy_w + max(0.0, c_span.seconds - busy_s) * 32.0
        # the counter is the model's: the busy seconds exact, the resident ones to a second of readings
        assert c_span.joules == pytest.approx(model_j, abs=33.0), (limit, c_span.record(), busy_s)
        # the sampler sees the same draw, to a sample either side of each edge of the busy stretch
        assert s_span.joules == pytest.approx(c_span.joules, abs=2 * 0.25 * busy_w + 0.15 * c_span.joules), \
            (limit, s_span.record(), c_span.record())
        recs = {m: [{"ok": True, "completion_tokens": r.completion_tokens, **span.record()}]
                for m, span in (("counter", c_span), ("sampled", s_span))}
        figures[limit] = {m: summarize_energy(recs[m], 32.0, m) for m in recs}
    for limit, by in figures.items():
        c, s = by["counter"], by["sampled"]
        assert set(c) == set(s) and c["method"] == "counter" and s["method"] == "sampled"
        assert c["power_modelled"] is s["power_modelled"] is True
        assert 32.0 < c["avg_w"] <= min(limit, 370.0) + 1 and 32.0 < s["avg_w"] <= min(limit, 370.0) + 1
        assert s["j_per_token"] == pytest.approx(c["j_per_token"], rel=0.2)
    # the sweep's point: 150 W gives more tokens per joule than 420 W, whichever method measured it
    for m in ("counter", "sampled"):
        assert figures[150][m]["tok_per_j"] > figures[420][m]["tok_per_j"], figures


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(0.05, 3.0), st.floats(10.0, 450.0)), min_size=1, max_size=8),
       st.floats(0.01, 0.5))
def test_for_any_draw_the_counter_is_its_integral_and_sampling_converges_to_it(profile, interval_s):
    """Any piecewise-constant draw (segments of seconds at W): the meter's counter method gives exactly
    its integral (a counter's difference), and the sampled method (power.draw every ``interval_s``, plus
    the span's last reading, by the trapezoid rule) differs from it by at most each step of the draw
    times one interval: the two methods measure one quantity, and the sampled one converges to it."""
    edges = [0.0]
    for seconds, _ in profile:
        edges.append(edges[-1] + seconds)

    def watts(t: float) -> float:
        return next((w for (s, w), end in zip(profile, edges[1:]) if t < end), profile[-1][1])

    def joules(t: float) -> float:
        return sum(w * max(0.0, min(t, end) - start) for (s, w), start, end in zip(profile, edges, edges[1:]))

    now = [0.0]
    meter = EnergyMeter(lambda: {"state": "ok", "message": "", "source": "test",
                                 "gpus": [{"index": 0, "energy_j": 1000.0 + joules(now[0]), "power_draw_w": None}]},
                        clock=lambda: now[0])
    assert meter.start() == "counter"
    with meter.measure() as span:
        now[0] = edges[-1]
    exact = joules(edges[-1])
    assert span.joules == pytest.approx(exact, rel=1e-9, abs=1e-6)
    times = [i * interval_s for i in range(int(edges[-1] / interval_s) + 1)] + [edges[-1]]
    sampled = trapezoid_j([(t, watts(t)) for t in times])
    steps = sum(abs(b[1] - a[1]) for a, b in zip(profile, profile[1:]))
    assert abs(sampled - exact) <= steps * interval_s + 1e-6 * exact


def test_the_bench_reads_through_one_agent_session_restarted_when_it_dies(lib, tmp_path, monkeypatch):
    """``rigkit bench --host``'s reader (rigkit.cli.bench.AgentEnergyReader): one ``rigkit-agent energy
    --serve`` session for every reading (here the agent runs on this machine in place of ``ssh HOST``),
    a dead session a failed reading that says so, the next reading a new session; closing ends it."""
    from rigkit.cli.bench import AgentEnergyReader
    from rigkit.remote import Remote

    env = fake_env(tmp_path, lib)
    for k in ("PATH", "RIGKIT_FAKE_GPU_DIR", "RIGKIT_FAKE_GPU_BOARD", "RIGKIT_FAKE_NVIDIA_SMI", "LD_LIBRARY_PATH"):
        monkeypatch.setenv(k, env[k])  # for the agent: a child process reads them at its start
    argvs = []

    def argv(self, command, as_root):
        argvs.append((command, as_root))
        return [sys.executable, "-m", "rigkit.host", "energy", "--serve"]

    monkeypatch.setattr(Remote, "argv", argv)
    monkeypatch.chdir(ROOT)
    reader = AgentEnergyReader("rig", {"ssh_user": "rig", "_sudo": True})
    a, b = reader(), reader()
    # one session, the agent's own path, as the inventory's user (no sudo: NVML's counter needs no root)
    assert argvs == [("/opt/rigkit/venv/bin/rigkit-agent energy --serve", False)]
    assert (a["method"], b["method"]) == ("counter", "counter") and b["gpus"][0]["energy_j"] >= a["gpus"][0]["energy_j"]
    reader._proc.kill()
    reader._proc.wait()
    dead = reader()
    assert dead["state"] == "error" and dead["message"].startswith("rig: rigkit-agent energy: the session ended")
    again = reader()
    assert again["method"] == "counter" and len(argvs) == 2  # a new session
    proc = reader._proc
    reader.close()
    assert proc.returncode == 0  # stdin closed: the agent shut NVML down and exited


def test_a_counters_seconds_are_the_readers_own_stamps_not_the_transports():
    """Counter readings stamped by the reader (``t_s``, the host's clock as the counter was read): the span's
    seconds are the stretch the counter covers, however long each reading took to come back (an SSH round
    trip), so J / s is the card's average draw."""
    stamps = iter([(100.0, 10.0), (100.0, 10.0), (102.0, 74.0)])  # start(), then the span's two readings
    calls = iter([0.0, 0.9, 1.0, 1.1, 3.0, 3.9])  # each reading's call, on the control side, took 0.9 s

    def read():
        t, j = next(stamps)
        return {"state": "ok", "message": "", "t_s": t, "gpus": [{"index": 0, "energy_j": j, "power_draw_w": None}]}

    meter = EnergyMeter(read, clock=lambda: next(calls))
    assert meter.start() == "counter"
    with meter.measure() as span:
        pass
    assert (span.joules, span.seconds, span.avg_w) == (64.0, 2.0, 32.0)  # midpoints would say 2.4 s, 26.7 W


def test_a_closed_reader_samples_and_says_so(counter_reader, tmp_path, monkeypatch):
    """After :meth:`EnergyReader.close` (NVML shut down) a reading is the sampled draw, saying why."""
    env = fake_env(tmp_path, None)
    for k in ("RIGKIT_FAKE_GPU_DIR", "RIGKIT_FAKE_GPU_BOARD"):
        monkeypatch.setenv(k, env[k])
    from rigkit.common import gpu

    reader = counter_reader(lambda: gpu.parse_energy("0, 21.50\n", 0))
    assert reader()["method"] == "counter"
    reader.close()
    after = reader()
    assert (after["method"], after["counter_unavailable"]) == ("sampled", "NVML shut down (the reader was closed)")
