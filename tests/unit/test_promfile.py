"""The rig's metrics files (issue 47): names, units and labels by Prometheus' conventions, written
atomically 0644 with prometheus-client, each writer its own file, escaped label values for any spec
name, and ``promtool check metrics`` (Debian's prometheus 2.42.0, tests/harness/promtool.py) clean on
every file these tests write. The sandbox's real node_exporter reads them in tests/harness/test_metrics.py."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from rigkit.report import prometheus
from rigkit.drift.compare import Finding
from rigkit.host import promfile
from rigkit.host.config import HostConfig
from rigkit.common.jsonfile import iso_utc

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import promtool  # noqa: E402


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` as Prometheus' own parser (prometheus-client's) reads the text."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def clean(text: str) -> None:
    rc, out = promtool.check_metrics(text)
    assert rc == 0, f"promtool check metrics: exit {rc}: {out}\n{text}"


POWER_RECORD = {"declared_w": 420.0, "index": 0, "reapplies": 2,
                "last_check": {"at": "2026-12-02T03:04:05Z", "result": "re-applied", "enforced_w": 420.0, "message": "m"},
                "last_reapply": {"at": "2026-12-02T03:04:05Z", "from_w": 350.0, "to_w": 420.0, "enforced_w": 420.0,
                                 "ok": True, "message": "m"}}


def test_the_power_part_has_base_units_a_counter_and_one_result():
    text = promfile.text(promfile.power_families(POWER_RECORD))
    clean(text)
    got = samples(text)
    assert got[("rigkit_power_limit_declared_watts", ())] == 420.0
    assert got[("rigkit_power_limit_enforced_watts", ())] == 420.0
    assert got[("rigkit_power_limit_reapplies_total", ())] == 2.0
    assert "# TYPE rigkit_power_limit_reapplies_total counter" in text
    assert got[("rigkit_power_check_timestamp_seconds", ())] == 1796180645.0  # 2026-12-02T03:04:05Z
    assert got[("rigkit_power_reapply_ok", ())] == 1.0
    results = {dict(k[1])["result"]: v for k, v in got.items() if k[0] == "rigkit_power_check_result"}
    assert results == {"as declared": 0.0, "re-applied": 1.0, "failed": 0.0, "stood down": 0.0, "unread": 0.0}
    assert promfile.power_families(None) == []  # the healer has not run: nothing to say


def test_the_state_part_names_the_holders_kind_never_its_words():
    lock = {"held": True, "holder": {"what": "rollback to generation 1 (secret=hunter2 \"x\")", "pid": 5,
                                     "since": "2026-12-02T03:04:05Z", "command": "rigkit-agent lock hold --what x"}}
    index = {"current": 3, "previous": 2, "generations": [
        {"n": 2, "time": "2026-12-01T00:00:00Z"}, {"n": 3, "time": "2026-12-02T03:04:05Z"},
        {"n": 4, "time": "2026-12-02T04:00:00Z", "failed": "deploy failed at: confirmation"}]}
    holds = {"generation": {"generation": 2, "since": "2026-12-02T03:04:05Z"}}
    text = promfile.text(promfile.state_families(lock, True, index, holds))
    clean(text)
    got = samples(text)
    assert got[("rigkit_lock_held", ())] == 1.0
    assert got[("rigkit_lock_holder_info", (("kind", "rollback"),))] == 1.0
    assert "hunter2" not in text and "rigkit-agent" not in text and "confirmation" not in text
    assert got[("rigkit_window_open", ())] == 1.0
    assert got[("rigkit_generation_current", ())] == 3.0
    assert got[("rigkit_generations_failed", ())] == 1.0
    assert got[("rigkit_generation_last_failed", ())] == 4.0
    assert got[("rigkit_generation_last_failed_timestamp_seconds", ())] == 1796184000.0
    assert got[("rigkit_generation_hold", ())] == 1.0 and got[("rigkit_generation_held", ())] == 2.0
    free = samples(promfile.text(promfile.state_families({"held": False, "holder": None}, False,
                                                         {"current": None, "generations": []}, {})))
    assert free == {("rigkit_lock_held", ()): 0.0, ("rigkit_window_open", ()): 0.0,
                    ("rigkit_generations_failed", ()): 0.0, ("rigkit_generation_hold", ()): 0.0}


@given(st.text(max_size=80))
def test_a_lock_holder_kind_is_always_a_listed_word(what):
    assert promfile.lock_kind(what) in promfile.LOCK_KINDS


def test_each_writer_has_its_own_file():
    assert [promfile.file_name(p) for p in promfile.PARTS] == [
        "rigkit_power.prom", "rigkit_state.prom", "rigkit_drift.prom", "rigkit_bench.prom"]
    with pytest.raises(ValueError, match="unknown metrics part 'x'"):
        promfile.file_name("x")


def test_a_file_is_written_atomically_0644_whatever_the_umask(tmp_path):
    path = tmp_path / "tf" / "rigkit_power.prom"
    old = os.umask(0)
    try:
        promfile.write(path, promfile.power_families(POWER_RECORD))
        first = path.stat().st_ino
        promfile.write(path, promfile.power_families({**POWER_RECORD, "reapplies": 3}))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert path.stat().st_ino != first  # replaced by a rename, never rewritten in place
    assert os.listdir(path.parent) == ["rigkit_power.prom"]  # no temp file left
    assert samples(path.read_text())[("rigkit_power_limit_reapplies_total", ())] == 3.0
    clean(path.read_text())


def _host_config(tmp_path, textfile_dir):
    from rigkit.render.files import render_host_config
    from rigkit.spec.validate import spec_from_layers

    spec = spec_from_layers([{"paused_timers": [], "lock_files": [],
                              **({"metrics_textfile_dir": textfile_dir} if textfile_dir else {})}])
    data = json.loads(render_host_config(spec))
    assert data["metrics"] == {"textfile_dir": textfile_dir}
    for k in ("lock", "window_journal", "holds", "power_state", "generations"):
        data["paths"][k] = str(tmp_path / k)
    return HostConfig(data, str(tmp_path / "host.json"))


def test_nothing_is_written_when_the_spec_names_no_folder(tmp_path):
    cfg = _host_config(tmp_path, None)
    assert promfile.textfile_dir(cfg) is None and promfile.publish(cfg, "power", "state") == []


def test_publish_reads_each_record_through_its_reader(tmp_path):
    from rigkit.host import generations, lock

    folder = "/var/lib/prometheus/node-exporter"
    cfg = _host_config(tmp_path, folder)
    cfg.data["metrics"]["textfile_dir"] = str(tmp_path / "tf")  # the rendered value, moved under tmp
    (tmp_path / "power_state").write_text(json.dumps(POWER_RECORD))
    held = lock.try_lock(cfg.path("lock"), "window 2026-x: measuring")
    try:
        written = promfile.publish(cfg, "power", "state")
    finally:
        held.release()
    assert [p.name for p in written] == ["rigkit_power.prom", "rigkit_state.prom"]
    state = samples((tmp_path / "tf" / "rigkit_state.prom").read_text())
    assert state[("rigkit_lock_holder_info", (("kind", "window"),))] == 1.0
    assert ("rigkit_generation_current", ()) not in state  # no generation recorded yet
    (tmp_path / "holds").write_text("not json")
    assert promfile.publish(cfg, "state") == []  # an unreadable holds file: said, skipped, never raised
    for p in written:
        clean(p.read_text())
    assert generations.read_index(cfg.path("generations"))["generations"] == []


def test_the_spec_key_is_an_absolute_folder_or_unset():
    from rigkit.spec.validate import SpecError, spec_from_dict

    assert spec_from_dict({}).metrics_textfile_dir is None
    for bad, words in (("prom", "an absolute path"), ("/var/lib", "not a system folder"),
                       ("/var/lib/node_exporter/../x", "without ..")):
        with pytest.raises(SpecError) as info:
            spec_from_dict({"metrics_textfile_dir": bad})
        text = " ".join(str(p) for p in info.value.problems)
        assert "metrics_textfile_dir" in text and words in text, text


# Spec names (inventory hosts, members, workloads): anything, including quotes, backslashes, newlines.
NAMES = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=24)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(host=NAMES, member=NAMES, workload=NAMES, kind=NAMES)
def test_any_spec_name_ends_escaped_one_label_value_and_promtool_clean(host, member, workload, kind):
    summary = {"timestamp": "2026-12-02T03:04:05+00:00",
               "workloads": {workload: {"metrics": {"decode_tps": {"median": 41.5}, "ttft_s": {"median": 0.25}},
                                        "energy": {"j_per_token": 2.5}}},
               "verdicts": {workload: {"verdict": "PASS"}}}
    bench = promfile.text(prometheus.bench_families(summary, host, member))
    drift = promfile.text(prometheus.drift_families([Finding(host, kind, "item", "a", "b")], {host: 3}, 1.0))
    for text in (bench, drift):
        clean(text)
    got = samples(bench)
    key = tuple(sorted({"host": host, "member": member, "workload": workload}.items()))
    assert got[("rigkit_bench_decode_tokens_per_second", key)] == 41.5
    assert got[("rigkit_bench_energy_joules_per_token", key)] == 2.5
    got = samples(drift)
    sev = Finding(host, kind, "item", "a", "b").severity
    assert got[("rigkit_drift_findings", tuple(sorted({"host": host, "kind": kind, "severity": sev}.items())))] == 1.0
    assert got[("rigkit_drift_exit_code", (("host", host),))] == 3.0


def test_the_bench_part_per_member_and_workload():
    summary = {"timestamp": "2026-12-02T03:04:05+00:00",
               "workloads": {"chat": {"metrics": {"decode_tps": {"median": 118.0}, "prefill_tps": None,
                                                  "ttft_s": {"median": 0.4}}, "energy": None}},
               "verdicts": {"chat": {"verdict": "WARN"}}}
    text = promfile.text(prometheus.bench_families(summary, "rig", "hyperqwen"))
    clean(text)
    got = samples(text)
    key = (("host", "rig"), ("member", "hyperqwen"), ("workload", "chat"))
    assert got[("rigkit_bench_decode_tokens_per_second", key)] == 118.0
    assert got[("rigkit_bench_ttft_seconds", key)] == 0.4
    assert ("rigkit_bench_prefill_tokens_per_second", key) not in got
    assert ("rigkit_bench_energy_joules_per_token", key) not in got  # not measured: no figure, never 0
    assert got[("rigkit_bench_verdict", tuple(sorted(key + (("verdict", "WARN"),))))] == 1.0
    assert sum(v for k, v in got.items() if k[0] == "rigkit_bench_verdict") == 1.0
    assert got[("rigkit_bench_timestamp_seconds", key)] == 1796180645.0


@settings(max_examples=60, deadline=None)
@given(j=st.none() | st.floats(0.001, 100.0), modelled=st.sampled_from([True, False, None]))
def test_a_j_per_token_the_bench_calls_not_power_modelled_is_absent_never_written(j, modelled):
    """Issue 60: the sandbox's Strata (llama.cpp on the CPU) draws the card's idle level, and the bench prints
    ``tok/J n/a (not power-modelled)``; the metrics held a J/token for it all the same. Over every energy
    shape summarize_energy writes: the series exists exactly when a J/token was measured and not marked."""
    energy = {"joules": 12.0, "j_per_token": j, "tok_per_j": 1 / j if j else None, "power_modelled": modelled,
              "note": "not power-modelled: …" if modelled is False else None}
    summary = {"timestamp": "2026-12-02T03:04:05+00:00",
               "workloads": {"chat": {"metrics": {"decode_tps": {"median": 100.0}}, "energy": energy}},
               "verdicts": {"chat": {"verdict": "PASS"}}}
    text = promfile.text(prometheus.bench_families(summary, "rig", "strata"))
    clean(text)
    key = (("host", "rig"), ("member", "strata"), ("workload", "chat"))
    got = samples(text).get(("rigkit_bench_energy_joules_per_token", key))
    if j is None or modelled is False:
        assert got is None and "rigkit_bench_energy_joules_per_token{" not in text
    else:
        assert got == j


def test_a_clean_host_has_zero_findings_before_drift_does():
    got = samples(promfile.text(prometheus.drift_families([], {"rig": 0}, 5.0)))
    assert got == {("rigkit_drift_found", (("host", "rig"),)): 0.0, ("rigkit_drift_exit_code", (("host", "rig"),)): 0.0,
                   ("rigkit_drift_timestamp_seconds", (("host", "rig"),)): 5.0}


@pytest.mark.parametrize("cmd", ["drift", "bench"])
def test_metrics_file_must_be_a_prom_file_in_an_existing_folder(cmd, tmp_path):
    from rigkit.cli.main import cli

    args = [cmd, "--metrics", str(tmp_path / "rigkit.txt")] + (["--url", "http://127.0.0.1:9"] if cmd == "bench" else [])
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2 and "Invalid value for '--metrics'" in res.output and "ending in .prom" in res.output
    res = CliRunner().invoke(cli, [cmd, "--metrics", str(tmp_path / "no" / "rigkit_x.prom")])
    assert res.exit_code == 2 and "does not exist" in res.output


@pytest.mark.skipif(os.geteuid() != 0, reason="the fake nvidia-smi sets a limit for root only")
def test_the_healer_run_writes_its_part_and_the_state(tmp_path, monkeypatch):
    """``rigkit-agent power`` (the agent's entry point, as its timer runs it) after a driver reload of the
    fake GPU: the power file says re-applied once, then the next run says as declared, the count kept."""
    from tests.unit import fake_gpu

    gpu_dir, data = fake_gpu.install(tmp_path, monkeypatch)
    data["metrics"] = {"textfile_dir": str(tmp_path / "tf")}
    (tmp_path / "host.json").write_text(json.dumps(data))
    env = {**os.environ, "RIGKIT_HOST_CONFIG": str(tmp_path / "host.json")}

    def run() -> dict:
        subprocess.run([sys.executable, "-m", "rigkit.host", "power"], env=env, capture_output=True, check=True)
        return samples((tmp_path / "tf" / "rigkit_power.prom").read_text())

    assert run()[("rigkit_power_limit_reapplies_total", ())] == 0.0
    (gpu_dir / "driver_reload").touch()
    after = run()
    assert after[("rigkit_power_limit_reapplies_total", ())] == 1.0
    assert after[("rigkit_power_check_result", (("result", "re-applied"),))] == 1.0
    assert after[("rigkit_power_limit_enforced_watts", ())] == 420.0
    assert run()[("rigkit_power_check_result", (("result", "as declared"),))] == 1.0
    assert (tmp_path / "tf" / "rigkit_state.prom").exists()
    for f in (tmp_path / "tf").iterdir():
        clean(f.read_text())
    assert iso_utc(0) == "1970-01-01T00:00:00Z" and promfile.epoch(iso_utc(0)) == 0.0


def test_the_shipped_alerts_are_valid_and_fire_only_after_their_event():
    """rigkit/report/rigkit.rules.yml (issue 66: moved from notes/ into the product, ``rigkit render`` writes it):
    ``promtool check rules`` and ``promtool test rules`` (each alert quiet before its event, firing with its
    labels and annotations after): drift, the healer, a failed generation, a FAIL verdict, acceptance collapse,
    node_exporter down, a textfile error."""
    rc, out = promtool.check_rules(ROOT / "rigkit" / "report" / "rigkit.rules.yml")
    assert rc == 0 and "SUCCESS: 7 rules found" in out, out
    proc = subprocess.run([str(promtool.promtool()), "test", "rules", "rigkit.rules.test.yml"],
                          cwd=ROOT / "tests" / "unit" / "data", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr


def test_a_generation_command_writes_the_state_part(tmp_path):
    """``rigkit-agent generation hold N`` then ``release`` (the agent's entry point): each run writes
    ``rigkit_state.prom`` at once, the hold there and then gone; ``list`` (it changes nothing) writes none."""
    from rigkit.host import generations

    cfg = _host_config(tmp_path, "/var/lib/prometheus/node-exporter")
    cfg.data["metrics"]["textfile_dir"] = str(tmp_path / "tf")
    root = cfg.path("generations")
    root.mkdir()
    (root / "1.json").write_text(json.dumps({"n": 1}))
    (root / "index.json").write_text(json.dumps({"current": 1, "previous": None, "generations": [
        {"n": 1, "time": "2026-12-02T03:04:05Z", "operator": "rig", "reason": "deploy", "key": "k"}]}))
    (tmp_path / "host.json").write_text(json.dumps(cfg.data))
    env = {**os.environ, "RIGKIT_HOST_CONFIG": str(tmp_path / "host.json")}
    prom = tmp_path / "tf" / "rigkit_state.prom"

    def agent(*args: str) -> None:
        subprocess.run([sys.executable, "-m", "rigkit.host", "generation", *args], env=env, capture_output=True,
                       check=True)

    agent("list")
    assert not prom.exists()
    agent("hold", "1", "--why", "a failed revert")
    held = samples(prom.read_text())
    assert held[("rigkit_generation_hold", ())] == 1.0 and held[("rigkit_generation_held", ())] == 1.0
    assert held[("rigkit_generation_current", ())] == 1.0
    agent("release")
    assert samples(prom.read_text())[("rigkit_generation_hold", ())] == 0.0
    clean(prom.read_text())
    assert generations.read_index(root)["current"] == 1


# --- the deploy's smoke on the host (issue 60): the control side hands the text, the agent writes it --------

SMOKE = {"timestamp": "2026-12-05T03:04:05+00:00",
         "workloads": {"chat-greedy": {"metrics": {"decode_tps": {"median": 2010.5}, "ttft_s": {"median": 0.03}},
                                       "energy": {"j_per_token": 0.2, "power_modelled": False}}},
         "verdicts": {"chat-greedy": {"verdict": "PASS"}}}


def test_the_smokes_figures_reach_the_hosts_folder_through_the_agent(tmp_path, monkeypatch):
    """``smoke_metrics`` (control side: the files each member's ``rigkit bench --metrics`` wrote) →
    ``rigkit-agent metrics bench`` (here the agent's own :func:`put_main` on the text the SSH call would carry)
    → ``rigkit_bench.prom``: every member's series in one file, one family of each name, the idle-level
    J/token absent, promtool clean, 0644."""
    from types import SimpleNamespace

    from rigkit import remote
    from rigkit.deploy.run import smoke_metrics

    folder = tmp_path / "textfile"
    cfg = _host_config(tmp_path, str(folder))
    monkeypatch.setattr("rigkit.host.config.load", lambda *a, **k: cfg)
    sent = []

    def agent(self, *args, stdin=None, **_kw):
        import io
        from contextlib import redirect_stdout

        sent.append((self.name, args))
        buf = io.StringIO()
        with redirect_stdout(buf):
            rc = promfile.put_main(list(args[1:]), io.StringIO(stdin))
        return subprocess.CompletedProcess(args, rc, buf.getvalue(), "")

    monkeypatch.setattr(remote.Remote, "agent", agent)
    paths = {}
    for member, decode in (("strata", 2010.5), ("gguf-baseline", 42.0)):
        summary = json.loads(json.dumps(SMOKE))
        summary["workloads"]["chat-greedy"]["metrics"]["decode_tps"]["median"] = decode
        (tmp_path / member).mkdir()
        paths[member] = tmp_path / member / "rigkit_bench.prom"  # what the smoke's bench writes (--metrics)
        prometheus.write(str(paths[member]), prometheus.bench_families(summary, "rig", member))
    paths["hyperqwen"] = tmp_path / "absent" / "rigkit_bench.prom"  # its bench wrote nothing: left out
    notes = []
    out = SimpleNamespace(note=lambda text, error=False: notes.append((text, error)))
    hs = SimpleNamespace(name="rig", connection={})
    assert smoke_metrics(hs, paths, out) is True, notes
    assert sent == [("rig", ("metrics", "bench"))]
    prom = folder / "rigkit_bench.prom"
    assert notes == [(f"post-deploy smoke: metrics on rig: written {prom}", False)]
    text = prom.read_text()
    clean(text)
    got = samples(text)
    for member, decode in (("strata", 2010.5), ("gguf-baseline", 42.0)):
        key = (("host", "rig"), ("member", member), ("workload", "chat-greedy"))
        assert got[("rigkit_bench_decode_tokens_per_second", key)] == decode
        assert got[("rigkit_bench_verdict", tuple(sorted(key + (("verdict", "PASS"),))))] == 1.0
        assert ("rigkit_bench_energy_joules_per_token", key) not in got  # not power-modelled
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644
    assert text.count("# TYPE rigkit_bench_decode_tokens_per_second gauge") == 1


@pytest.mark.parametrize("text, words", [
    ("# TYPE rigkit_power_limit_declared_watts gauge\nrigkit_power_limit_declared_watts 1\n",
     "series rigkit_power_limit_declared_watts not of the bench part (names start rigkit_bench_)"),
    ("rigkit_bench_x{a=\"1\" 2\n", "not Prometheus exposition text"),
    ("x" * (promfile.PUT_MAX_BYTES + 1), f"more than the {promfile.PUT_MAX_BYTES} allowed"),
])
def test_the_agent_refuses_what_is_not_the_bench_parts_text_and_writes_nothing(tmp_path, monkeypatch, capsys,
                                                                              text, words):
    import io

    folder = tmp_path / "textfile"
    monkeypatch.setattr("rigkit.host.config.load", lambda *a, **k: _host_config(tmp_path, str(folder)))
    assert promfile.put_main(["bench"], io.StringIO(text)) == 2
    assert words in capsys.readouterr().err
    assert not folder.exists()
    assert promfile.put_main(["power"], io.StringIO("")) == 2  # the agent's own parts are its own
    assert "is not handed to the host (one of bench)" in capsys.readouterr().err


def test_the_agent_writes_nothing_when_the_host_names_no_folder(tmp_path, monkeypatch, capsys):
    import io

    monkeypatch.setattr("rigkit.host.config.load", lambda *a, **k: _host_config(tmp_path, None))
    text = promfile.text(prometheus.bench_families(SMOKE, None, "strata"))
    assert promfile.put_main(["bench"], io.StringIO(text)) == 0
    assert capsys.readouterr().out == "not written: the host config names no metrics.textfile_dir\n"
