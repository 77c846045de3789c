"""Energy in every bench (issue 31): the nvidia-smi energy query's parser on NVIDIA's documented
formats (numbers with and without units, ``[N/A]``, ``[Not Supported]``), the meter's two methods
(sampled ``power.draw``, what nvidia-smi allows: no driver lists an energy counter field, issue 37;
a counter, for a reader that has one), the per-workload figures, and a ``rigkit bench --url`` run
that prints them and writes them to the JSONL and summary.json."""

import json
import math
import re
import threading

from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.cli.bench import bench, local_energy_reader
from rigkit.common import gpu
from rigkit.bench.energy import EnergyMeter, summarize_energy, trapezoid_j
from rigkit.report.chart import samples_from_jsonl, write_chart

from .replay import Script, vllm_stream

MISSING = ("[N/A]", "[Not Supported]", "[Unknown Error]", "N/A", "")


def field(unit):
    """One CSV field as nvidia-smi writes it: ``(text, value)``, value None where it has none."""
    number = st.one_of(st.integers(0, 10 ** 12).map(float),
                       st.floats(0, 1e6, allow_nan=False).map(lambda v: float(f"{v:.2f}")))
    shown = number.flatmap(lambda v: st.sampled_from(
        [(f"{v:.2f}", v), (f"{v:.2f} {unit}", v), (f"{v:g}", float(f"{v:g}"))]))
    return st.one_of(shown, st.sampled_from([(m, None) for m in MISSING]))


@settings(max_examples=200, deadline=None)
@given(st.lists(field("W"), min_size=1, max_size=4))
def test_every_energy_field_reads_as_its_number_or_none(rows):
    assert gpu.ENERGY_FIELDS == ("index", "power.draw")  # nothing a driver does not list (issue 37)
    text = "".join(f"{i}, {w[0]}\n" for i, w in enumerate(rows))
    got = gpu.parse_energy(text, 0)
    assert got["state"] == "ok"
    for i, (_, watts) in enumerate(rows):
        assert got["gpus"][i] == {"index": i, "energy_j": None, "power_draw_w": watts}


@settings(max_examples=100, deadline=None)
@given(st.lists(field("W"), min_size=6, max_size=6), field("MiB"), field("MiB"))
def test_every_query_field_reads_as_its_number_or_none(powers, total, used):
    line = ", ".join(["0", "NVIDIA GeForce RTX 3090", "GPU-1", "610.57", total[0], used[0]]
                     + [p[0] for p in powers[:5]])
    g = gpu.parse_query(line + "\n", 0)["gpus"][0]
    assert g["memory_total_mib"] == total[1] and g["memory_used_mib"] == used[1]
    assert g["memory_total_gib"] == (None if total[1] is None else round(total[1] / 1024, 2))
    assert [g[k] for k in ("power_default_w", "power_limit_w", "power_enforced_w", "power_min_w",
                           "power_max_w")] == [p[1] for p in powers[:5]]


def test_nvidias_documented_shapes_with_header_units_and_not_supported():
    # nvidia-smi --query-gpu=index,power.draw --format=csv (header, units)
    text = "index, power.draw [W]\n0, 250.31 W\n1, [N/A]\n2, [Not Supported]\n"
    assert gpu.parse_energy(text, 0)["gpus"] == [
        {"index": 0, "energy_j": None, "power_draw_w": 250.31},
        {"index": 1, "energy_j": None, "power_draw_w": None}, {"index": 2, "energy_j": None, "power_draw_w": None}]
    assert gpu.parse_energy("Failed to initialize NVML: Driver/library version mismatch", 18)["state"] == "mismatch"
    assert gpu.parse_energy("", 127)["state"] == "missing"
    assert gpu.parse_energy("0, 12, 5\n", 0)["state"] == "no-gpu"  # wrong shape: no reading
    # a field the driver does not list: the real tool refuses the whole query (stdout, an empty line, exit 2)
    refused = gpu.parse_energy('Field "total_energy_consumption" is not a valid field to query.\n\n', 2)
    assert refused["state"] == "error" and refused["gpus"] == []
    m = EnergyMeter(lambda: refused)
    assert m.start() is None and m.unavailable == 'nvidia-smi: error: Field "total_energy_consumption" is not a valid ' \
        "field to query."


def scripted(values):
    """A reader answering ``(energy_j, power_w)`` pairs in turn (the last one repeats): without a
    counter (``energy_j`` None) through nvidia-smi's own output (``index, power.draw``), with one as a
    reader that has a counter would (nvidia-smi has none: NVML's, issue "Energy from the card's counter")."""
    values = list(values)

    def read():
        e, w = values.pop(0) if len(values) > 1 else values[0]
        if e is None:
            return gpu.parse_energy(f"0, {'[N/A]' if w is None else w}\n", 0)
        return {"state": "ok", "message": "", "gpus": [{"index": 0, "energy_j": e, "power_draw_w": w}]}
    return read


def test_counter_method_takes_the_difference_and_refuses_a_counter_that_went_back():
    """A reader with a counter (not nvidia-smi's: it has none)."""
    m = EnergyMeter(scripted([(1000, 30), (1000, 30), (1050, 300), (1050, 300), (10, 30)]))
    assert m.start() == "counter"
    with m.measure() as span:
        pass
    assert span.joules == 50.0 and span.samples == 2
    with m.measure() as span:
        pass
    assert span.joules is None and span.note.startswith("energy counter went back (1050.0 J to 10.0 J")


def test_without_a_counter_power_draw_is_sampled_and_integrated():
    read, calls = scripted([(None, 250.0)]), []
    sampled = threading.Event()

    def counted():
        calls.append(1)
        if len(calls) >= 3:  # the start's reading, the span's first, then one of the sampler's
            sampled.set()
        return read()

    m = EnergyMeter(counted, interval_s=0.005)
    assert m.start() == "sampled"
    with m.measure() as span:
        assert sampled.wait(60)  # the block lasts until the sampler has read once (the limit guards a hang)
    assert span.samples >= 3
    assert math.isclose(span.avg_w, 250.0) and math.isclose(span.joules, 250.0 * span.seconds)
    assert trapezoid_j([(0.0, 100.0), (1.0, 300.0), (3.0, 300.0)]) == 800.0
    assert trapezoid_j([(0.0, 1.0)]) is None


def test_a_card_with_neither_figure_has_no_energy_and_says_why():
    m = EnergyMeter(scripted([(None, None)]))
    assert m.start() is None
    with m.measure() as span:
        pass
    assert span.record() == {"energy_j": None, "energy_note": "no energy: the card reports no power.draw "
                             "([N/A]/[Not Supported])"}


def test_workload_figures_and_the_idle_level_mark():
    recs = [{"ok": True, "energy_j": 30.0, "energy_s": 0.25, "completion_tokens": 60},
            {"ok": True, "energy_j": 30.0, "energy_s": 0.25, "completion_tokens": 60},
            {"ok": True, "energy_note": "power.draw not read: x", "completion_tokens": 5}]
    e = summarize_energy(recs, idle_w=32.0, method="sampled")
    assert (e["joules"], e["seconds"], e["avg_w"], e["tok_per_j"], e["j_per_token"]) == (60.0, 0.5, 120.0, 2.0, 0.5)
    assert e["power_modelled"] is True and e["note"] == "measured 2 of 3 requests"
    at_idle = summarize_energy(recs[:2], idle_w=118.0, method="sampled")
    assert at_idle["power_modelled"] is False
    assert at_idle["note"].startswith("not power-modelled: the card drew 120.0 W, its idle level (118.0 W)")


def test_a_remote_url_reads_no_gpu_here():
    assert local_energy_reader("http://10.0.0.5:18020")[0] is None
    from rigkit.bench.nvml import EnergyReader

    assert isinstance(local_energy_reader("http://127.0.0.1:18020")[0], EnergyReader)  # the counter, else sampled


def test_bench_prints_tok_per_joule_and_writes_it_to_jsonl_summary_and_chart(replay, tmp_path, monkeypatch):
    """nvidia-smi's power.draw, sampled: 33 W while the idle draw is measured, 250 W while the requests
    run; each request's joules are 250 W times its measured seconds."""
    from rigkit.bench.energy import EnergyMeter

    state = {"idle": False}
    real_idle = EnergyMeter.idle

    def idle(self, seconds=2.0):
        state["idle"] = True
        try:
            return real_idle(self, seconds)
        finally:
            state["idle"] = False

    def read(timeout_s=10.0):
        return gpu.parse_energy(f"0, {'33.00' if state['idle'] else '250.00'}\n", 0)

    monkeypatch.setattr(EnergyMeter, "idle", idle)
    monkeypatch.setattr(gpu, "query_energy", read)
    replay.default = Script(vllm_stream(answer=["abc"] * 10, tokens_per_chunk=2))
    out = tmp_path / "out"
    result = CliRunner().invoke(bench, ["--url", replay.url, "--out", str(out), "--preset", "small",
                                        "--workload", "chat-greedy", "--no-warmup"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # no NVML library on this machine: the card's counter cannot be read, and the line says why (issue 41)
    assert any(ln.startswith("energy: power.draw sampled and integrated (no counter: NVML: NVML Shared Library Not "
                             "Found (code 12)) on this machine (the --url server is local) · idle 33.0 W over ")
               for ln in lines), lines
    energy = [ln for ln in lines if ln.startswith("  energy: ")]
    assert energy and re.search(r" · 2(49|50)\.\d W average · [\d.]+ tok/J · [\d.]+ J/token$", energy[0]), energy
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 4, recs
    # the draw over each request, and its joules from the seconds (both rounded to 4 decimals in the record)
    assert all(r["avg_w"] == 250.0 and math.isclose(r["energy_j"], 250.0 * r["energy_s"], abs_tol=0.02) for r in recs)
    summary = json.loads((out / "summary.json").read_text())
    e = summary["workloads"]["chat-greedy"]["energy"]
    assert (e["method"], e["power_modelled"], e["requests"]) == ("sampled", True, 4)
    assert math.isclose(e["avg_w"], 250.0, rel_tol=0.01), e  # from the records' rounded joules and seconds
    assert e["completion_tokens"] == 80 and math.isclose(e["tok_per_j"], 80 / e["joules"], rel_tol=1e-3)
    assert summary["energy"]["method"] == "sampled" and summary["energy"]["idle"]["avg_w"] == 33.0
    assert summary["energy"]["source"] == gpu.ENERGY_QUERY_COMMAND == \
        "nvidia-smi --query-gpu=index,power.draw --format=csv,noheader,nounits"
    per_request = samples_from_jsonl(str(out / "requests.jsonl"))["chat-greedy"]["tok_per_j"]
    assert len(per_request) == 4 and all(v > 0 for v in per_request)
    assert "tok_per_j" in write_chart(str(tmp_path / "c.svg"), summary, fmt="svg")
