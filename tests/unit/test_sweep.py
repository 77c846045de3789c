"""The sweep's pure parts (issue 19): argument checks with their exact messages, the grid's rules
(what is left, the frontier, the recommendation), crash classification, cells from request
results, the .env each setting gets from the one renderer, the table, the chart and the report;
and the HyperQwen stand-in engine behaving as the seeds report (tokens per chunk by draft length,
EngineDeadError at 20k tokens above 7 drafts, 500s until restarted twice), which the sandbox sweep
takes as its ground truth."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rigkit.bench.client import RequestResult, stream_chat
from rigkit.host.window.sweep import cell_payload, summarize_cell
from rigkit.common.sweepgrid import classify, crash_point, frontier, pending, recommend
from rigkit.report.sweep import (SweepArgError, group_data_line, parse_contexts, parse_sweep, parse_workloads,
                                 result, setting_env, table_lines, write_result)
from tests.unit.stand_in_unit import StandInUnit, free_port

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "tests" / "harness" / "stubs" / "openai_stub.py"
GRID = {"param": "dflash_tokens", "settings": [3, 5, 7, 9, 15], "contexts": [4096, 16384, 20480],
        "workloads": ["chat-greedy", "quoting"]}


# ------------------------------------------------------------------------------ arguments
@pytest.mark.parametrize("text, message", [
    ("spec=3", "--sweep 'spec=3': the key 'spec' cannot be swept; allowed: dflash_tokens=N,N,..., power_limit=N,N,... "
               "(e.g. dflash_tokens=3,5,7 or power_limit=300,350,420)"),
    ("dflash_tokens", "--sweep 'dflash_tokens': the key 'dflash_tokens' cannot be swept; allowed: dflash_tokens=N,N,..., "
                      "power_limit=N,N,... (e.g. dflash_tokens=3,5,7 or power_limit=300,350,420)"),
    ("dflash_tokens=3,x", "--sweep dflash_tokens: 'x' is not an integer; give draft lengths 1–64, comma-separated "
                          "(e.g. dflash_tokens=3,5,7)"),
    ("dflash_tokens=3,2.5", "--sweep dflash_tokens: '2.5' is not an integer; give draft lengths 1–64, comma-separated "
                            "(e.g. dflash_tokens=3,5,7)"),
    ("dflash_tokens=0,7", "--sweep dflash_tokens: 0 is out of range; allowed 1–64"),
    ("dflash_tokens=7,7", "--sweep dflash_tokens: 7 is given twice"),
    ("power_limit=300,x", "--sweep power_limit: 'x' is not an integer; give power limits in W 100–500, comma-separated "
                          "(e.g. power_limit=300,350,420)"),
    ("power_limit=300,350.5", "--sweep power_limit: '350.5' is not an integer; give power limits in W 100–500, "
                              "comma-separated (e.g. power_limit=300,350,420)"),
    ("power_limit=90,350", "--sweep power_limit: 90 W is out of range; allowed 100–500 W"),
    ("power_limit=350,520", "--sweep power_limit: 520 W is out of range; allowed 100–500 W"),
    ("power_limit=350,350", "--sweep power_limit: 350 is given twice"),
])
def test_bad_sweep_values_name_the_field_the_value_and_what_is_allowed(text, message):
    with pytest.raises(SweepArgError) as exc:
        parse_sweep(text)
    assert str(exc.value) == message


def test_a_good_sweep_keeps_its_order():
    assert parse_sweep("dflash_tokens=3, 5,7,9,11,15") == ("dflash_tokens", [3, 5, 7, 9, 11, 15])
    assert parse_sweep("power_limit=420,300, 350") == ("power_limit", [420, 300, 350])


@pytest.mark.parametrize("text, message", [
    ("4096,0", "--contexts: '0' is not a positive integer (tokens, e.g. 4096,16384,20480)"),
    ("4096,abc", "--contexts: 'abc' is not a positive integer (tokens, e.g. 4096,16384,20480)"),
    ("16384,4096", "--contexts: 4096 after 16384: contexts must be ascending, each once (the sweep runs them "
                   "from the shortest up)"),
    ("4096,4096", "--contexts: 4096 after 4096: contexts must be ascending, each once (the sweep runs them "
                  "from the shortest up)"),
    ("4096,131072", "--contexts: 131072 is above hyperqwen.max_model_len 65536: the engine refuses longer "
                    "requests; allowed up to it"),
])
def test_bad_contexts_are_refused_with_the_value_and_the_rule(text, message):
    with pytest.raises(SweepArgError) as exc:
        parse_contexts(text, 65536)
    assert str(exc.value) == message


def test_default_contexts_end_at_max_model_len():
    assert parse_contexts(None, 65536) == [4096, 16384, 20480, 65536]
    assert parse_contexts(None, 16384) == [4096, 16384]
    # a power-limit sweep asks how fast and how efficient, not how far: two contexts
    assert parse_contexts(None, 65536, "power_limit") == [4096, 16384]
    assert parse_contexts(None, 8192, "power_limit") == [4096]


def test_workloads_default_and_unknown_names():
    assert parse_workloads(None) == ["chat-greedy", "quoting"]
    with pytest.raises(SweepArgError) as exc:
        parse_workloads("chat-greedy,warmup")
    assert str(exc.value) == "--workloads: unknown workload 'warmup'; allowed: chat-greedy, chat-sampled, quoting"


# ------------------------------------------------------------------------------ the grid
def stub_truth(setting: int, workload: str, context: int) -> dict:
    """A cell as the stand-in engine answers it (tests/harness/stubs/openai_stub.py): tokens per chunk
    by draft length, one chunk per 10 ms, death at 20k+ tokens above 7 drafts."""
    if setting > 7 and context >= 20_000:
        return {"setting": setting, "workload": workload, "context": context, "status": "crashed",
                "decode_tps": None, "error": "engine-dead: HTTP 500 ... EngineDeadError"}
    tpc = 1 + 0.6 * setting if workload == "quoting" else 1 + 1.5 * min(setting, 7) / 7
    return {"setting": setting, "workload": workload, "context": context, "status": "ok",
            "decode_tps": round(tpc / 0.01, 1), "prefill_tps": 4e5, "ttft_s": 0.05, "tokens_per_chunk": tpc,
            "runs": 2, "error": None, "acceptance_rate": round((tpc - 1) / setting, 4), "acceptance_length": round(tpc, 3),
            "acceptance_mixed": False}


def run_grid(grid: dict, stop_after: int | None = None) -> list[dict]:
    """Measure ``grid`` the way the host does (pending() order, crash stops a setting)."""
    cells: list[dict] = []
    while (left := pending(grid, cells)) and (stop_after is None or len(cells) < stop_after):
        s, ctx, w = left[0]
        cells.append(stub_truth(s, w, ctx))
    return cells


def test_the_sweep_finds_9_and_15_crashing_at_20480_and_recommends_7_with_the_max_model_len_warning():
    cells = run_grid(GRID)
    front = frontier(GRID, cells)
    assert {s: (f["survived"], f["crashed_at"]) for s, f in front.items()} == {
        3: (20480, None), 5: (20480, None), 7: (20480, None), 9: (16384, 20480), 15: (16384, 20480)}
    # the crash ends the setting: quoting at 20480 was not tried after chat-greedy died there
    assert [(c["workload"], c["context"]) for c in cells if c["setting"] == 9] == [
        ("chat-greedy", 4096), ("quoting", 4096), ("chat-greedy", 16384), ("quoting", 16384), ("chat-greedy", 20480)]
    rec = recommend(GRID, cells, 65536)
    assert (rec["setting"], rec["context"], rec["candidates"]) == (7, 20480, [3, 5, 7])
    assert rec["warning"] == ("the longest context survived is 20480 tokens, below hyperqwen.max_model_len 65536: "
                              "nothing was measured between them at this setting")
    assert group_data_line("dflash_tokens", rec["setting"]) == 'hyperqwen = {"dflash_tokens": 7}'
    # a draft length the guard refuses at the spec's max_model_len is declared with the guard lifted
    assert group_data_line("dflash_tokens", 9, 65536) == 'hyperqwen = {"dflash_tokens": 9, "allow_unsafe_spec": True}'
    assert group_data_line("dflash_tokens", 9, 8192) == 'hyperqwen = {"dflash_tokens": 9}'
    assert group_data_line("dflash_tokens", 7, 65536) == 'hyperqwen = {"dflash_tokens": 7}'


def test_no_warning_when_the_longest_context_is_max_model_len_and_a_longer_draft_wins_when_it_survives():
    grid = {**GRID, "contexts": [4096, 16384]}
    cells = run_grid(grid)
    rec = recommend(grid, cells, 16384)
    assert (rec["setting"], rec["warning"]) == (15, None)  # nothing crashed below 20k: quoting favours 15


def test_resume_skips_the_cells_already_measured_and_a_finished_grid_has_nothing_left():
    part = run_grid(GRID, stop_after=7)
    left = pending(GRID, part)
    assert left[0] == (5, 4096, "quoting") and len(left) == len(pending(GRID, [])) - 7
    assert pending(GRID, run_grid(GRID)) == []
    # a wider grid on resume measures only what is new
    wider = {**GRID, "settings": [3, 5, 7, 9, 11, 15]}
    assert {s for s, _c, _w in pending(wider, run_grid(GRID))} == {11}


def test_a_crash_point_hides_the_longer_contexts_of_that_setting_only():
    cells = [stub_truth(9, "chat-greedy", 4096), {**stub_truth(9, "quoting", 4096), "status": "crashed"}]
    assert crash_point(cells, 9) == 4096 and crash_point(cells, 7) is None
    assert [p for p in pending(GRID, cells) if p[0] == 9] == []


def test_no_recommendation_when_nothing_survives_the_shortest_context():
    cells = [{**stub_truth(s, "chat-greedy", 4096), "status": "crashed"} for s in GRID["settings"]]
    rec = recommend(GRID, cells, 65536)
    assert rec["setting"] is None
    assert rec["reason"] == "no setting survived the shortest context (4096 tokens) on every workload"


@pytest.mark.parametrize("kind, active, status", [
    (None, True, "ok"), (None, False, "crashed"), ("engine-dead", True, "crashed"), ("http-5xx", True, "crashed"),
    ("connection", True, "crashed"), ("cut", True, "crashed"), ("http-4xx", True, "failed"),
    ("empty-answer", True, "failed"), ("http-4xx", False, "crashed"),
])
def test_crash_classification(kind, active, status):
    assert classify(kind, active) == status


def test_a_cell_is_the_median_of_its_runs_and_a_500_makes_it_a_crash():
    ok = [RequestResult(decode_tps=v, prefill_tps=1000.0, ttft_s=0.5, tokens_per_chunk=2.5, prompt_tokens=4000)
          for v in (100.0, 300.0, 200.0)]
    cell = summarize_cell(7, "chat-greedy", 4096, ok, [None] * 3, True, "w1")
    assert (cell["status"], cell["decode_tps"], cell["runs"], cell["error"]) == ("ok", 200.0, 3, None)
    dead = ok[:1] + [RequestResult(ok=False, error_kind="engine-dead", error="HTTP 500: EngineDeadError")]
    cell = summarize_cell(9, "quoting", 20480, dead, [None] * 2, True, "w1")
    assert (cell["status"], cell["decode_tps"], cell["error"]) == ("crashed", None, "engine-dead: HTTP 500: EngineDeadError")


def test_cell_prompts_fill_the_context():
    for w in ("chat-greedy", "chat-sampled", "quoting"):
        payload, passage = cell_payload(w, 20480, 64, 4.0, "n1", 0, "m")
        chars = len(payload["messages"][0]["content"])
        assert abs(chars / 4.0 - (20480 - 64 - 32)) < 120, (w, chars)
        assert payload["messages"][0]["content"].startswith("Run n1")
        assert (passage is not None) == (w == "quoting")
    with pytest.raises(ValueError, match="context 128: no room for a prompt with max_tokens 64"):
        cell_payload("quoting", 128, 64, 4.0, "n", 0, None)


# ------------------------------------------------------------------------------ the .env of a setting
def test_each_setting_env_comes_from_the_one_renderer_with_the_guard_lifted():
    from rigkit import paths
    from rigkit.render.files import render
    from rigkit.spec.problems import SpecError
    from rigkit.spec.validate import spec_from_dict

    spec = spec_from_dict({})
    deployed = render(spec)[paths.HYPERQWEN_ENV].text
    with pytest.raises(SpecError):  # the guard is on for the deploy ...
        spec_from_dict({"hyperqwen": {"dflash_tokens": 15}})
    swept = setting_env(spec, "dflash_tokens", 15)  # ... and lifted for the sweep's .env only
    diff = [(a, b) for a, b in zip(deployed.splitlines(), swept.splitlines()) if a != b]
    assert diff == [("DFLASH_TOKENS=7", "DFLASH_TOKENS=15")]
    assert setting_env(spec, "dflash_tokens", 7) == deployed
    assert spec.hyperqwen.allow_unsafe_spec is False  # the host's spec is not changed


# ------------------------------------------------------------------------------ table, chart, report
def test_the_result_table_chart_and_files(tmp_path):
    sweep = {**GRID, "cells": run_grid(GRID), "stopped": None}
    res = result(sweep, 65536, "sbx", "W1")
    text = "\n".join(table_lines(res))
    assert "             9 chat-greedy       250.0 tok/s     250.0 tok/s           CRASH" in text
    assert "             9 quoting           640.0 tok/s     640.0 tok/s               -" in text
    assert "  dflash_tokens=15: 16384 tokens, crashed at 20480" in text
    assert "to declare it (nothing was applied), in group_data/all.py or the host's data: " \
           'hyperqwen = {"dflash_tokens": 7}' in text
    assert "WARNING: the longest context survived is 20480 tokens, below hyperqwen.max_model_len 65536" in text
    written = write_result(tmp_path, res)
    assert [p.name for p in written] == ["sweep.json", "sweep.txt", "sweep.svg"]
    svg = (tmp_path / "sweep.svg").read_text()
    assert svg.count("crash @ 20480") == 2 * 2  # 9 and 15, on both workloads
    assert json.loads((tmp_path / "sweep.json").read_text())["recommendation"]["setting"] == 7


def test_the_report_shows_the_last_sweep(tmp_path):
    from rigkit.report.page import sweep_view

    write_result(tmp_path / "results" / "W1", result({**GRID, "cells": run_grid(GRID)}, 65536, "sbx", "W1"))
    view = sweep_view("sbx", str(tmp_path / "results"), str(tmp_path / "out"))
    assert view["group_data"] == 'hyperqwen = {"dflash_tokens": 7}'
    assert view["rows"][6] == {"setting": 9, "workload": "chat-greedy",
                               "cells": ["250.0 tok/s", "250.0 tok/s", "CRASH"]}
    assert view["frontier"][3] == {"setting": 9, "survived": "16384 tokens", "crashed_at": 20480,
                                   "acceptance": "chat-greedy 17%, quoting 60%"}
    assert view["chart"].startswith("<svg") and "crash @ 20480" in view["chart"]
    assert sweep_view("other", str(tmp_path / "results"), str(tmp_path / "out")) is None


# ------------------------------------------------------------------------------ the stand-in engine
class Engine:
    """The HyperQwen stand-in (``--kind vllm``) as a local process with ``DFLASH_TOKENS`` set."""

    def __init__(self, draft: int, control: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "DFLASH_TOKENS": str(draft)}
        self.proc = subprocess.Popen([sys.executable, str(STUB), "--kind", "vllm", "--port", str(self.port),
                                      "--alias", "m", "--control-dir", str(control)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        end = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < end, "the stand-in never listened"
                time.sleep(0.05)

    def chat(self, workload: str, context: int) -> RequestResult:
        payload, _ = cell_payload(workload, context, 64, 4.0, "t", 0, "m")
        return stream_chat(f"http://127.0.0.1:{self.port}/v1/chat/completions", payload)

    def health(self) -> int:
        import requests

        return requests.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code

    def stop(self) -> str:
        self.proc.terminate()
        _, errs = self.proc.communicate(timeout=10)
        return errs


def test_the_stand_in_engine_grows_tokens_per_chunk_with_the_draft_length_on_quoting(tmp_path):
    got = {}
    for d in (3, 7, 15):
        e = Engine(d, tmp_path)
        try:
            got[d] = (e.chat("chat-greedy", 4096).tokens_per_chunk, e.chat("quoting", 4096).tokens_per_chunk)
        finally:
            e.stop()
    assert 2.3 <= got[7][0] <= 2.7  # the seeds: about 2.5 tokens per chunk at 7 drafts on chat
    assert got[3][1] < got[7][1] < got[15][1]
    assert got[15][0] == got[7][0]  # longer drafts buy chat nothing


def test_the_stand_in_engine_dies_at_20k_tokens_above_7_drafts_and_takes_two_restarts(tmp_path):
    e = Engine(7, tmp_path)
    try:
        assert e.chat("quoting", 20480).ok  # 7 drafts survive 20k
    finally:
        e.stop()
    e = Engine(9, tmp_path)
    try:
        assert e.chat("quoting", 16384).ok
        dead = e.chat("quoting", 20480)
        assert (dead.ok, dead.error_kind) == (False, "engine-dead") and "EngineDeadError" in dead.error
        assert e.chat("chat-greedy", 4096).error_kind == "engine-dead"  # 500 until restarted
        assert e.health() == 503
    finally:
        errs = e.stop()
    assert "marlin_gemm" in errs and "EngineDeadError" in errs
    e = Engine(9, tmp_path)  # the first restart looks healthy and still answers 500
    try:
        assert e.health() == 200
        again = e.chat("chat-greedy", 4096)
        assert (again.ok, again.status) == (False, 500)
    finally:
        e.stop()
    e = Engine(9, tmp_path)  # the second one is clean
    try:
        assert e.chat("chat-greedy", 4096).ok
    finally:
        e.stop()


def test_an_open_sweep_explains_its_env_to_drift():
    from rigkit.drift.compare import Finding, apply_window
    from rigkit.common.journal import expected_deviations

    env = "/opt/rigkit/hyperqwen/.env"
    j = {"id": "W1", "state": "open", "plan": {"tenant": "hyperqwen"},
         "changed": {"timers": [], "proxy_stopped": False, "tenant_started": False,
                     "tenant_env": {"path": env, "backup": "/var/lib/rigkit/windows/W1/deployed.env"}}}
    assert expected_deviations(j) == [f"{env} changed: window W1 installed a sweep setting's .env (the restore "
                                      "puts the deployed one back from /var/lib/rigkit/windows/W1/deployed.env)"]
    f = apply_window("h", [Finding("h", "file", env, "content abc", "content def")], j)
    assert f[0].severity == "expected" and "installed a sweep setting's .env" in f[0].actual
    assert expected_deviations({**j, "state": "restored"}) == []


# ------------------------------------------------------------------------------ the host's runner
class FakeUnit(StandInUnit):
    """The tenant's unit played by the stand-in engine, which reads DFLASH_TOKENS from the installed
    .env (as compose passes it)."""

    def __init__(self, env_file: Path, control: Path) -> None:
        super().__init__(control)
        self.env_file = env_file

    def launch(self) -> subprocess.Popen:
        env = dict(line.split("=", 1) for line in self.env_file.read_text().splitlines()
                   if "=" in line and not line.startswith("#"))
        return self.stand_in({"DFLASH_TOKENS": env["DFLASH_TOKENS"]})


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """A Window with a sweep plan over the fake unit; returns a function that runs the sweep."""
    from rigkit.host.window import steps as steps_mod
    from rigkit.host.window import sweep as sweep_mod
    from rigkit.host.journal import Journal
    from rigkit.render.files import render
    from rigkit.report.sweep import plan_sweep
    from rigkit.spec.validate import spec_from_dict
    from rigkit import paths

    spec = spec_from_dict({})
    env_file = tmp_path / ".env"
    deployed = render(spec)[paths.HYPERQWEN_ENV].text
    env_file.write_text(deployed)
    env_file.chmod(0o640)
    (tmp_path / "key.env").write_text("")
    unit = FakeUnit(env_file, tmp_path / "control")
    for mod in (steps_mod, sweep_mod):
        monkeypatch.setattr(mod, "sh", unit.sh)
        monkeypatch.setattr(mod, "unit_state", unit.state)
    waits: list[str] = []  # no GPU here: each start's wait for the GPU's memory is recorded instead
    monkeypatch.setattr(steps_mod.Window, "wait_vram_idle", lambda self, label: waits.append(label) or "idle")

    def run(values, contexts, max_minutes=None):
        sp = plan_sweep(spec, "dflash_tokens", values, contexts, ["chat-greedy"], runs=1, max_tokens=32,
                        max_minutes=max_minutes, resume=False)
        plan = {"host": "h", "tenant": "hyperqwen", "tenant_unit": "hq.service", "tenant_port": unit.port,
                "tenant_model": "m", "api_key_file": str(tmp_path / "key.env"), "tenant_env": str(env_file),
                "timeouts": {"healthy_s": 20, "tenant_stop_s": 10, "warmup_s": 60}, "sweep": sp}
        data = {"id": "W1", "plan": plan, "results_dir": str(tmp_path / "W1"), "steps": [], "notes": [],
                "changed": {"timers": [], "proxy_stopped": False, "tenant_started": False, "tenant_env": None},
                "sweep": {"cells": [], "starts": {}, "resumed_from": None}}
        w = steps_mod.Window(Journal(data, tmp_path / "window.json"))
        try:
            sweep_mod.Sweep(w).run()
        finally:
            unit.sh("systemctl", "stop", "hq.service")
        return w, data

    run.env_file, run.deployed, run.unit, run.waits = env_file, deployed, unit, waits
    return run


def test_the_host_runner_records_the_crash_restarts_twice_and_puts_the_deployed_env_back(runner):
    w, data = runner([7, 9], [4096, 20480])
    cells = {(c["setting"], c["context"]): c["status"] for c in data["sweep"]["cells"]}
    assert cells == {(7, 4096): "ok", (7, 20480): "ok", (9, 4096): "ok", (9, 20480): "crashed"}
    assert [a["probe"] == "ok" for a in data["sweep"]["starts"]["dflash_tokens=9"]] == [True]
    assert [a["probe"] == "ok" for a in data["sweep"]["starts"]["deployed"]] == [False, True]
    # every start waited for the GPU's memory first, the restarts after the crash included
    assert runner.waits == [f"{label} start {a['attempt']}" for label, starts in data["sweep"]["starts"].items()
                            for a in starts]
    assert "DFLASH_TOKENS=7" in runner.env_file.read_text()  # recover put the deployed .env back
    assert data["changed"]["tenant_env"] is None
    assert [s["name"] for s in data["steps"] if s["name"].startswith("sweep")] == [
        "sweep:dflash_tokens=7", "sweep:dflash_tokens=9", "sweep:recover"]
    assert runner.env_file.read_text() == runner.deployed and oct(runner.env_file.stat().st_mode & 0o777) == "0o640"
    assert any("the engine died at 20480 tokens on chat-greedy" in n for n in data["notes"])
    # speculative decoding's acceptance per cell, from the stand-in's counters (chat: low, its model's)
    ok = [c for c in data["sweep"]["cells"] if c["status"] == "ok"]
    assert all(c["acceptance_mixed"] is False and 0 < c["acceptance_rate"] < 0.35 for c in ok), ok
    assert all(len(c["acceptance_by_position"]) == c["setting"] for c in ok)
    from rigkit.common.sweepgrid import frontier
    from rigkit.report.sweep import grid_of
    assert set(frontier(grid_of(data["plan"]["sweep"]), data["sweep"]["cells"])[7]["acceptance"]) == {"chat-greedy"}


def test_the_host_runner_stops_cleanly_on_its_time_budget_and_restore_puts_the_env_back(runner, monkeypatch):
    from rigkit.host.window.sweep import Sweep

    real = Sweep.over_budget

    def budget_spent_after_one_cell(self):
        if self.data["cells"]:
            self.t0 -= 3600  # an hour has gone by since the sweep started
        return real(self)

    monkeypatch.setattr(Sweep, "over_budget", budget_spent_after_one_cell)
    w, data = runner([9], [4096, 20480], max_minutes=5)
    assert [(c["context"], c["status"]) for c in data["sweep"]["cells"]] == [(4096, "ok")]
    assert data["sweep"]["stopped"] == "time budget of 5 min spent; 1 cell(s) left for --resume"
    assert "DFLASH_TOKENS=9" in runner.env_file.read_text()
    assert w.r_restore_env() == (f"{runner.env_file} is the deployed file again ({len(runner.deployed.encode())} bytes, "
                                 "mode 0640)")
    assert runner.env_file.read_text() == runner.deployed
    assert w.r_restore_env().endswith("untouched (no setting was installed)")


@pytest.mark.parametrize("args, message", [
    (["--contexts", "4096"], "--contexts: only with --sweep KEY=N,N,..."),
    (["--resume", "--max-minutes", "5"], "--max-minutes, --resume: only with --sweep KEY=N,N,..."),
    (["--sweep", "dflash_tokens=7", "--bench", "small"], "--sweep runs its own measurements: not with --bench"),
    (["--sweep", "dflash_tokens=7", "--restore"], "--sweep runs its own measurements: not with --restore"),
])
def test_sweep_options_out_of_place_are_usage_errors_before_any_inventory_is_read(args, message, tmp_path):
    from click.testing import CliRunner

    from rigkit.cli.window import window

    res = CliRunner().invoke(window, ["-i", str(tmp_path / "missing.py"), *args])
    assert res.exit_code == 2
    assert message in " ".join(res.output.split())


def test_a_cells_acceptance_is_in_its_details_line_and_a_mixed_one_has_no_figure():
    from rigkit.report.sweep import acceptance_text

    cell = {"acceptance_rate": 0.6, "acceptance_length": 5.2, "acceptance_by_position": {"0": 0.93, "1": 0.86},
            "acceptance_mixed": False}
    assert acceptance_text(cell) == " · acceptance 60% (5.20 tokens/step; by draft position 0:93% 1:86%)"
    assert acceptance_text({**cell, "acceptance_rate": None, "acceptance_mixed": True}) == \
        " · acceptance MIXED (requests not the sweep's moved the counters)"
    assert acceptance_text({"acceptance_rate": None}) == ""
