"""The power-limit sweep (issue 31 part 2: ``rigkit window --sweep power_limit=300,350,420``), the
parts that need no sandbox host: the arguments and the card's range (exact messages), the grid's
rule for a power limit (the best tok/J among the limits keeping 95 % of the best decode tok/s, held
over generated figures), the table, the line to paste, the chart and the report; and the host's
runner against the sandbox's own fake ``nvidia-smi`` (tests/harness/stubs/nvidia-smi, state in
``$RIGKIT_FAKE_GPU_DIR``) with the HyperQwen stand-in registered through the runtime hook stand-in,
so its decode follows the limit and the draw the meter samples follows its load: three limits
measured, the healer standing down at every limit and during the restore, the declared limit back
and read back after it."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigkit.report.sweep import (SweepArgError, check_power_limits, group_data_line, parse_sweep, plan_sweep, result,
                                 table_lines, write_result)
from rigkit.common import gpu
from rigkit.host import powerlimit
from rigkit.common.sweepgrid import SPEED_FLOOR, frontier, pending, recommend
from tests.unit.stand_in_unit import StandInUnit

ROOT = Path(__file__).resolve().parents[2]
STUBS = ROOT / "tests" / "harness" / "stubs"
GRID = {"param": "power_limit", "settings": [300, 350, 420], "contexts": [4096], "workloads": ["chat-greedy", "quoting"]}
DEMAND_W = 370.0


def model_cell(limit: int, workload: str, context: int, base: float = 250.0) -> dict:
    """A cell as the sandbox's model has it (stubs/nvidia-smi, openai_stub.py): the draw min(limit,
    370 W), decode ``base * sqrt(min(limit, 370) / 370)``."""
    w = min(limit, DEMAND_W)
    tps = base * (w / DEMAND_W) ** 0.5
    return {"setting": limit, "workload": workload, "context": context, "status": "ok", "decode_tps": round(tps, 1),
            "prefill_tps": 4e5, "ttft_s": 0.05, "tokens_per_chunk": 2.5, "runs": 2, "error": None,
            "avg_w": w, "tok_per_j": tps / w, "j_per_token": w / tps, "energy_j": 100.0, "power_modelled": True,
            "energy_note": None, "enforced_w": float(limit)}


def cells_of(grid: dict) -> list[dict]:
    return [model_cell(s, w, c) for s, c, w in pending(grid, [])]


# ------------------------------------------------------------------------------ arguments and the card's range
def smi_text(lo: float = 100.0, hi: float = 450.0, enforced: float = 420.0) -> str:
    """``rigkit.common.gpu.QUERY``'s output for a 3090 (NVIDIA's documented csv, nounits)."""
    return (f"0, NVIDIA GeForce RTX 3090, GPU-3c1f, 610.57, 24576, 1, 350.00, {enforced:.2f}, {enforced:.2f}, "
            f"{lo:.2f}, {hi:.2f}\n")


def test_each_limit_is_checked_against_the_cards_range_as_read_from_the_gpu():
    check_power_limits([300, 350, 420], gpu.parse_query(smi_text()))  # within 100-450 W: nothing raised
    with pytest.raises(SweepArgError) as exc:
        check_power_limits([300, 460], gpu.parse_query(smi_text()))
    assert str(exc.value) == ("--sweep power_limit 460 W is outside GPU 0's limits 100–450 W (nvidia-smi "
                              "power.min_limit/power.max_limit); nothing was changed")
    with pytest.raises(SweepArgError, match="--sweep power_limit 300 W is outside GPU 0's limits 320–400 W"):
        check_power_limits([300], gpu.parse_query(smi_text(320, 400)))
    # a range the card does not report is never assumed; an unreadable card is a host problem (exit 1)
    with pytest.raises(RuntimeError, match="reports no power.min_limit/power.max_limit"):
        check_power_limits([300], gpu.parse_query(smi_text().replace("100.00, 450.00", "[N/A], [N/A]")))
    with pytest.raises(RuntimeError, match="the card's power range could not be read .nvidia-smi: mismatch"):
        check_power_limits([300], gpu.parse_query("Failed to initialize NVML: Driver/library version mismatch", 18))


def test_the_plan_of_a_power_sweep_keeps_the_deployed_env_and_says_what_it_changes():
    from rigkit.spec.validate import spec_from_dict

    spec = spec_from_dict({})
    key, values = parse_sweep("power_limit=300,350,420")
    sp = plan_sweep(spec, key, values, [4096], ["chat-greedy"], runs=2, max_tokens=64, max_minutes=None, resume=False)
    assert sp["settings"] == [{"value": 300}, {"value": 350}, {"value": 420}]  # no .env: the tenant runs its own
    assert sp["declared_w"] == 420 and "nvidia-smi --power-limit" in sp["guard"] and "put back" in sp["guard"]


# ------------------------------------------------------------------------------ the rule
def test_the_sandbox_model_recommends_350_the_best_tok_per_j_keeping_95_percent_of_the_decode_speed():
    cells = cells_of(GRID)
    front = frontier(GRID, cells)
    assert [front[s]["enforced_w"] for s in (300, 350, 420)] == [300.0, 350.0, 420.0]
    assert front[300]["tok_per_j"] > front[350]["tok_per_j"] > front[420]["tok_per_j"]
    rec = recommend(GRID, cells, 65536)
    # 300 W keeps sqrt(300/370) = 90 % of the speed (below the floor); 350 W 97 % at more tok/J than 420 W
    assert (rec["setting"], rec["candidates"], rec["warning"]) == (350, [350, 420], None)
    assert rec["reason"].startswith("power_limit=350: the best tok/J (0.6947)") and "keeping >= 95% of the best " \
        "decode tok/s (420 W, 250 tok/s; geometric means over chat-greedy, quoting at 4096 tokens): 350 W, 420 W " \
        "(decode tok/s kept: 300 W 90.0 %, 350 W 97.2 %, 420 W 100.0 %)" in rec["reason"]
    assert group_data_line("power_limit", 350) == "gpu_power_limit_w = 350"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a loaded CI machine
@given(st.dictionaries(st.integers(100, 500), st.tuples(st.floats(1, 500), st.floats(0.01, 5)), min_size=1,
                       max_size=6))
def test_the_recommendation_is_the_best_tok_per_j_within_the_speed_floor_for_any_figures(figures):
    grid = {"param": "power_limit", "settings": sorted(figures), "contexts": [4096], "workloads": ["chat-greedy"]}
    cells = [{**model_cell(s, "chat-greedy", 4096), "decode_tps": round(tps, 1), "tok_per_j": tpj}
             for s, (tps, tpj) in figures.items()]
    rec = recommend(grid, cells, 65536)
    front = frontier(grid, cells)
    best = max(f["decode_tps"] for f in front.values())
    keep = [s for s, f in front.items() if f["decode_tps"] >= SPEED_FLOOR * best]
    assert rec["candidates"] == sorted(keep)
    assert front[rec["setting"]]["decode_tps"] >= SPEED_FLOOR * best
    assert all(front[s]["tok_per_j"] <= front[rec["setting"]]["tok_per_j"] for s in keep)
    ties = [s for s in keep if front[s]["tok_per_j"] == front[rec["setting"]]["tok_per_j"]]
    assert rec["setting"] == min(ties)  # a tie goes to the lower limit


def test_a_limit_with_a_failed_cell_is_no_candidate_and_an_unmodelled_draw_is_said():
    cells = cells_of(GRID)
    cells[-1] = {**cells[-1], "status": "crashed", "decode_tps": None, "error": "engine-dead: HTTP 500"}  # 420 quoting
    rec = recommend(GRID, cells, 65536)
    assert rec["setting"] == 350 and 420 not in rec["candidates"]
    flat = [{**c, "power_modelled": False} if c["setting"] == 300 else c for c in cells_of(GRID)]
    assert "not power-modelled at 300 W" in recommend(GRID, flat, 65536)["warning"]
    none = recommend(GRID, [{**c, "status": "failed"} for c in cells_of(GRID)], 65536)
    assert (none["setting"], none["reason"]) == (None, "no power limit answered every cell of the grid")


def test_the_power_result_table_frontier_line_chart_and_report(tmp_path):
    from rigkit.report.page import sweep_views

    sweep = {**GRID, "cells": cells_of(GRID), "declared_w": 420,
             "energy": {"method": "sampled", "idle": {"seconds": 2.0, "joules": 64.0, "avg_w": 32.0}}}
    res = result(sweep, 65536, "sbx", "W2")
    text = "\n".join(table_lines(res))
    assert "  power_limit=300 W: 225.1 tok/s · 0.7504 tok/J · 1.3327 J/token · 300.0 W average (enforced 300.0 W)" in text
    assert "  power_limit=420 W: 250.0 tok/s · 0.6757 tok/J · 1.4800 J/token · 370.0 W average (enforced 420.0 W)" in text
    assert "  idle draw before the first cell: 32.0 W over 2.0 s (shown apart, not subtracted)" in text
    assert "rule: the best tok/J among the limits keeping >= 95% of the best decode tok/s" in text
    assert "in group_data/all.py or the host's data: gpu_power_limit_w = 350" in text
    assert "  declared now: gpu_power_limit_w = 420" in text
    assert "TTFT 0.05 s · 1.333 J/token · 0.750 tok/J · 300.0 W · 2 run(s)" in text  # per cell, in the details
    written = write_result(tmp_path / "results" / "W2", res)
    assert [p.name for p in written] == ["sweep.json", "sweep.txt", "sweep.svg"]
    assert "recommended 350 W" in (tmp_path / "results" / "W2" / "sweep.svg").read_text()
    views = sweep_views("sbx", str(tmp_path / "results"), str(tmp_path / "out"))
    assert [v["param"] for v in views] == ["power_limit"]
    assert views[0]["group_data"] == "gpu_power_limit_w = 350" and views[0]["title"] == "power-limit sweep"
    assert views[0]["frontier"][0] == {"setting": 300, "decode_tps": 225.1, "tok_per_j": 0.7504, "j_per_token": 1.3327,
                                       "avg_w": 300.0, "enforced_w": 300.0}


def test_an_open_power_sweep_explains_the_limit_to_drift():
    from rigkit.drift.compare import Finding, apply_window
    from rigkit.common.journal import expected_deviations

    j = {"id": "W2", "state": "open", "plan": {"tenant": "hyperqwen"},
         "changed": {"timers": [], "proxy_stopped": False, "tenant_started": False,
                     "power_limit": {"index": 0, "declared_w": 420.0, "enforced_before_w": 420.0}}}
    assert expected_deviations(j) == ["GPU 0 power limit: window W2 is sweeping power limits (the restore puts the "
                                      "declared 420 W back)"]
    f = apply_window("h", [Finding("h", "power", "GPU 0 enforced.power.limit", "420 W", "300 W")], j)
    assert f[0].severity == "expected" and "sweeping power limits" in f[0].actual
    assert apply_window("h", [Finding("h", "power", "GPU 0 enforced.power.limit", "420 W", "300 W")],
                        {**j, "state": "restored"})[0].severity != "expected"


# ------------------------------------------------------------------------------ the host's runner
class PoweredUnit(StandInUnit):
    """The tenant's unit played by the HyperQwen stand-in registered with the fake GPU through the
    runtime hook stand-in (as a container start would be): its decode follows the limit, its load
    drives the draw."""

    def __init__(self, tmp: Path, gpu_dir: Path) -> None:
        super().__init__(tmp / "control")
        self.tmp, self.gpu_dir = tmp, gpu_dir
        self.share = tmp / "share"
        self.share.mkdir()
        self.control.mkdir()

    def launch(self) -> subprocess.Popen:
        proc = self.stand_in({"FAKE_GPU_SHARE": str(self.share), "DFLASH_TOKENS": "7"})
        bundle = self.tmp / f"bundle{self.starts}"
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps({
            "process": {"args": ["/app/entrypoint.py", "single"], "env": ["FAKE_GPU_SHARE=/app/models/gpu"]},
            "root": {"path": str(self.tmp / "rootfs")},
            "mounts": [{"type": "bind", "destination": "/app/models/gpu", "source": str(self.share)}]}))
        subprocess.run([sys.executable, str(STUBS / "nvidia-container-runtime-hook"), "prestart"], check=True,
                       input=json.dumps({"id": f"c{self.starts}", "pid": proc.pid, "bundle": str(bundle)}),
                       text=True, timeout=30)
        return proc


@pytest.fixture
def gpu_rig(tmp_path, monkeypatch):
    """A fake GPU (``gpu/``, declared 420 W enforced as the deploy leaves it), the fake ``nvidia-smi``
    on PATH (each ``--power-limit`` logged to ``pl.log``) and a host config from the default spec with
    its paths in ``tmp_path``; returns ``{"cfg", "gpu", "tmp"}``."""
    if os.geteuid() != 0:
        pytest.skip("the fake nvidia-smi sets a limit for root only, as the real one does")
    from rigkit.host.config import HostConfig
    from tests.unit import fake_gpu

    gpu_dir, data = fake_gpu.install(tmp_path, monkeypatch)
    (tmp_path / "pl.log").unlink()
    return {"cfg": HostConfig(data, str(tmp_path / "host.json")), "gpu": gpu_dir, "tmp": tmp_path}


def enforced() -> float:
    return gpu.query()["gpus"][0]["power_enforced_w"]


def test_the_preflight_refuses_a_limit_outside_the_cards_range_before_anything_changes(gpu_rig):
    from rigkit.host.window.sweep import preflight_problem

    plan = {"power_limit_w": 420, "power_index": 0, "sweep": {"param": "power_limit",
                                                              "settings": [{"value": 300}, {"value": 460}]}}
    assert preflight_problem(plan) == ("--sweep power_limit 460 W is outside GPU 0's limits 100–450 W (nvidia-smi "
                                       "power.min_limit/power.max_limit)")
    assert preflight_problem({**plan, "sweep": {**plan["sweep"], "settings": [{"value": 100}, {"value": 450}]}}) is None
    assert preflight_problem({**plan, "power_limit_w": None}).startswith("the host config names no power.limit_w")
    assert preflight_problem({"sweep": {"param": "dflash_tokens"}}) is None
    assert not (gpu_rig["tmp"] / "pl.log").exists() and enforced() == 420.0  # nothing was set


def test_the_runner_measures_each_limit_the_healer_stands_down_throughout_and_restore_puts_420_back(gpu_rig,
                                                                                                    monkeypatch):
    """The energy is the sampled power.draw (a real nvidia-smi lists no counter field), each cell's
    average between the resident and the busy draw; the speeds and tok/J compare 100 W (decode at 0.52
    of full speed) with 420 W, a gap no machine's own slowness closes (it would need 0.29 s more per
    chunk at 420 W than at 100 W) nor a sampling error."""
    from rigkit.host import power
    from rigkit.host.journal import Journal, StepFailed
    from rigkit.host.window import steps as steps_mod
    from rigkit.host.window import sweep as sweep_mod
    from rigkit.spec.validate import spec_from_dict

    cfg, tmp = gpu_rig["cfg"], gpu_rig["tmp"]
    unit = PoweredUnit(tmp, gpu_rig["gpu"])
    # the meter samples power.draw (nvidia-smi has no energy counter field): a request's joules are near
    # its draw only where it lasts well beyond the samples at its two ends (each a run of the fake, ~0.1 s
    # here), so requests of ~1.5 s (40 ms a chunk, as the sandbox's sweep test has them), sampled every 50 ms
    (unit.control / "chunk_s").write_text("0.04\n")
    monkeypatch.setattr(sweep_mod, "EnergyMeter", functools.partial(sweep_mod.EnergyMeter, interval_s=0.05))
    for mod in (steps_mod, sweep_mod):
        monkeypatch.setattr(mod, "sh", unit.sh)
        monkeypatch.setattr(mod, "unit_state", unit.state)
    healer: list[str] = []
    real_set = powerlimit.set_limit

    def set_limit(index, watts, timeout_s=30.0):  # the healer runs at every limit the sweep sets, and in restore
        rc = power.heal(cfg)
        healer.append(f"{watts:g}: rc {rc}, {json.loads((tmp / 'power.json').read_text())['last_check']['result']}")
        return real_set(index, watts, timeout_s)

    monkeypatch.setattr(sweep_mod.host_powerlimit, "set_limit", set_limit)
    (tmp / "key.env").write_text("")
    sp = plan_sweep(spec_from_dict({}), "power_limit", [100, 350, 420], [4096], ["chat-greedy"], runs=2, max_tokens=96,
                    max_minutes=None, resume=False)
    plan = {"host": "h", "tenant": "hyperqwen", "tenant_unit": "hq.service", "tenant_port": unit.port,
            "tenant_model": "m", "api_key_file": str(tmp / "key.env"), "tenant_env": str(tmp / ".env"),
            "power_limit_w": 420, "power_index": 0, "timeouts": {"healthy_s": 20, "tenant_stop_s": 10, "warmup_s": 60},
            "vram_idle": {"timeout_s": 20, "idle_mib": 512, "index": 0}, "sweep": sp}
    data = {"id": "W2", "state": "open", "plan": plan, "results_dir": str(tmp / "W2"), "steps": [], "notes": [],
            "changed": {"timers": [], "proxy_stopped": False, "tenant_started": False, "tenant_env": None},
            "sweep": {"cells": [], "starts": {}, "resumed_from": None}}
    j = Journal(data, cfg.path("window_journal"))
    j.save()
    w = steps_mod.Window(j)
    try:
        sweep_mod.Sweep(w).run()
    finally:
        unit.sh("systemctl", "stop", "hq.service")
    assert [s["status"] for s in data["steps"] if s["name"].startswith("sweep:")] == ["ok"] * 3, data["steps"]
    assert unit.starts == 1  # one clean start for every limit
    assert data["changed"]["power_limit"] == {"index": 0, "declared_w": 420.0, "enforced_before_w": 420.0}
    assert enforced() == 420.0  # the last limit swept; the restore sets the declared one regardless
    cells = {c["setting"]: c for c in data["sweep"]["cells"]}
    assert [cells[s]["enforced_w"] for s in (100, 350, 420)] == [100.0, 350.0, 420.0]
    # power.draw sampled (nvidia-smi has no energy counter field; the fake refuses it as the real tool does)
    assert data["sweep"]["energy"]["method"] == "sampled" and 30 < data["sweep"]["energy"]["idle"]["avg_w"] < 34
    for s in (100, 350, 420):
        c = cells[s]
        # every sample is the resident draw or the busy one, min(limit, demand): the average lies between
        assert c["status"] == "ok" and c["power_modelled"] is True and 32.0 <= c["avg_w"] <= min(s, DEMAND_W) + 0.5, c
    # sqrt(100/370) = 0.52 of the speed at 100 W, and ~0.52 of the joules per token: a margin no sampling
    # error nor a slow machine closes
    assert cells[100]["decode_tps"] < 0.97 * cells[420]["decode_tps"]
    assert cells[100]["tok_per_j"] > cells[420]["tok_per_j"]
    # the window's restore: the journal says restoring, the healer still stands down, the limit is put back
    j.set(state="restoring")
    os.unlink(tmp / "pl.log")
    (gpu_rig["gpu"] / "power_limit").write_text("300.00\n")  # as a kill mid-sweep leaves it
    detail = sweep_mod.restore_power(j)
    assert detail == ("GPU 0 enforces the declared 420 W again (enforced.power.limit read back; 420.0 W before the "
                      "window)")
    assert enforced() == 420.0 and data["changed"]["power_limit"] is None
    assert (tmp / "pl.log").read_text().split() == ["--id=0", "--power-limit=420"]
    assert healer == ["100: rc 0, stood down", "350: rc 0, stood down", "420: rc 0, stood down",
                      "420: rc 0, stood down"]
    assert sweep_mod.restore_power(j) == "the GPU power limit untouched (no limit was set)"
    # a limit that cannot be put back fails the restore step, naming it; the record stays for --restore
    data["changed"]["power_limit"] = {"index": 0, "declared_w": 420.0, "enforced_before_w": 420.0}
    monkeypatch.setattr(sweep_mod.host_powerlimit, "set_limit", lambda i, w, t=30.0: (False, "`nvidia-smi` exited 4: nope"))
    with pytest.raises(StepFailed, match="putting the declared 420 W back on GPU 0 failed: `nvidia-smi` exited 4"):
        sweep_mod.restore_power(j)
    assert data["changed"]["power_limit"] is not None


@pytest.mark.parametrize("state, stands_down", [("preflight", True), ("open", True), ("restoring", True),
                                                ("restore-failed", True), ("restored", False), ("closed", False)])
def test_the_healer_stands_down_in_every_state_of_an_open_power_sweep_and_heals_once_it_is_closed(gpu_rig, state,
                                                                                                   stands_down):
    """From ``window start``'s journal (``preflight``, before the unit takes the lock) to the end of the
    restore — and after a restore that failed, until ``--restore`` — the healer leaves the sweep's limit
    alone; a closed window's limit is healed to the declared one."""
    from rigkit.host import power

    (gpu_rig["tmp"] / "window.json").write_text(json.dumps({
        "id": "W3", "state": state, "plan": {"sweep": {"param": "power_limit"}},
        "changed": {"power_limit": {"index": 0, "declared_w": 420.0, "enforced_before_w": 420.0}}}))
    subprocess.run(["nvidia-smi", "-pl", "300"], check=True, capture_output=True)  # the sweep's limit
    assert power.heal(gpu_rig["cfg"]) == 0
    assert enforced() == (300.0 if stands_down else 420.0)
