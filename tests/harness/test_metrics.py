"""The rig on the operator's dashboard (issue 47), scraped from the real node_exporter over HTTP.

A copy of the run's converged host (nspawn lane; the sandbox inventory declares
``metrics_textfile_dir: /var/lib/prometheus/node-exporter``) runs Debian's real node_exporter 1.5.0
(``prometheus-node-exporter``, tests/harness/promtool.py), put there by this module's fixture as the
rig's operator would have installed it — rigkit does not install node_exporter — and started as a
transient unit running as ``nobody`` (the files must be readable by the exporter's own user) with its
textfile collector on that folder, listening on the host's own address (a Prometheus server scrapes it
over the network). The control machine's node_exporter (the same binary, on 127.0.0.1 of the CI machine,
its textfile folder a tmp dir) reads what ``rigkit drift --metrics`` and ``rigkit bench --metrics`` write.

Each test scrapes before and after its event and finds the metric changed: a drift finding, a driver
reload healed by the agent's healer (its service started by the test, its timer stopped meanwhile), a
failed deploy put back, a smoke. Every ``*.prom`` file the module saw is ``promtool check metrics``
clean and node_exporter reports no textfile error.
"""
from __future__ import annotations

import json
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.harness
sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostctl  # noqa: E402
import promtool  # noqa: E402
import sandbox_project  # noqa: E402

RIGKIT = str(Path(sys.executable).parent / "rigkit")
PROJECT = sandbox_project.cwd()
TOKEN = hostctl.hub_token()
EXPORTER = "/usr/local/bin/prometheus-node-exporter"
ENV_FILE = "/opt/rigkit/hyperqwen/.env"


rigkit = sandbox_project.rigkit  # rigkit(host, *args, timeout=…)


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of one scrape of ``url`` (node_exporter's /metrics)."""
    resp = requests.get(url, timeout=10)
    resp.raise_for_status()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(resp.text) for s in fam.samples}


def wait_up(url: str, proc: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout  # bounds a hang; the event awaited is the exporter answering
    while True:
        try:
            requests.get(url, timeout=2).raise_for_status()
            return
        except requests.RequestException:
            if time.monotonic() > end or (proc is not None and proc.poll() is not None):
                raise
            time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def host(make_module_host):
    h = make_module_host("m1", converged=True)
    # the folder the sandbox inventory declares (metrics_textfile_dir), as the deploy rendered it for the agent
    h.textfile_dir = json.loads(h.run("cat /etc/rigkit/host.json").stdout)["metrics"]["textfile_dir"]
    assert h.textfile_dir == "/var/lib/prometheus/node-exporter", h.textfile_dir
    dest = h.root / EXPORTER.lstrip("/")
    shutil.copy2(promtool.node_exporter(), dest)
    h.run(f"systemd-run --unit=prometheus-node-exporter -p User=nobody {EXPORTER} --collector.disable-defaults "
          f"--collector.textfile --collector.textfile.directory={h.textfile_dir} "
          f"--web.listen-address={h.ssh_hostname}:9100")
    h.url = f"http://{h.ssh_hostname}:9100/metrics"
    wait_up(h.url)
    yield h
    h.run("systemctl stop prometheus-node-exporter", check=False)


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    """The control machine's node_exporter: its textfile folder is where ``--metrics`` writes."""
    folder = tmp_path_factory.mktemp("control-textfile")
    port = free_port()
    proc = subprocess.Popen([str(promtool.node_exporter()), "--collector.disable-defaults", "--collector.textfile",
                             f"--collector.textfile.directory={folder}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_up(url, proc)
        yield folder, url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_scrape_of_a_member_llama_swap_has_not_loaded_does_not_load_it(host):
    """Issue 65: through llama-swap v250, ``/upstream/<member>/metrics`` starts a member that is not running
    (``handleUpstream``, ``internal/server/api.go:479-546``; the default ``upstream.ignorePaths`` covers static
    files only). The bench's reader (:func:`rigkit.bench.metrics.scrape`, the agent's own copy of it on the
    host) asks ``/running`` first: gguf-baseline, not loaded, is not scraped, and is still not loaded after;
    Strata, the resident, is still the one ready. Strata (ready) is scraped: its answer is llama.cpp's."""
    def running():
        return {m["model"]: m["state"] for m in json.loads(host.run("curl -fsS 127.0.0.1:8080/running").stdout)["running"]}

    def scrape_on_host(member):
        code = ("import json; from rigkit.bench import metrics; print(json.dumps(metrics.scrape("
                f"'http://127.0.0.1:8080/upstream/{member}', swap_base='http://127.0.0.1:8080', member='{member}')))")
        return json.loads(host.run(f"/opt/rigkit/venv/bin/python -c {shlex.quote(code)}").stdout)

    before = running()
    assert "gguf-baseline" not in before and before.get("strata") == "ready", before  # the premise
    got, why = scrape_on_host("gguf-baseline")
    assert got is None and "member gguf-baseline is stopped in llama-swap's /running: not scraped" in why, why
    assert running() == before
    got, said = scrape_on_host("strata")  # ready: scraped (llama.cpp serves no vLLM counters)
    assert "not scraped" not in (said or ""), said
    assert running() == before
    print(f"\nscrape of gguf-baseline (not loaded): {why!r}; of strata (ready): {said!r}; "
          f"/running before and after: {before}")


def test_a_drift_finding_reaches_the_control_machines_exporter(host, control):
    folder, url = control
    prom = folder / "rigkit_drift.prom"
    clean = rigkit(host, "drift", "-i", "inventory/sandbox.py", "--host", host.name, "--metrics", str(prom))
    assert clean.returncode == 0, clean.stdout + clean.stderr[-3000:]
    before = scrape(url)
    assert before[("rigkit_drift_found", (("host", host.name),))] == 0.0
    assert before[("rigkit_drift_exit_code", (("host", host.name),))] == 0.0
    mode = (("host", host.name), ("kind", "file-mode"), ("severity", "drift"))
    assert ("rigkit_drift_findings", mode) not in before
    host.run(f"chmod 0644 {ENV_FILE}")
    try:
        found = rigkit(host, "drift", "-i", "inventory/sandbox.py", "--host", host.name, "--metrics", str(prom))
    finally:
        host.run(f"chmod 0640 {ENV_FILE}")
    assert found.returncode == 3, found.stdout + found.stderr[-3000:]
    after = scrape(url)
    assert after[("rigkit_drift_findings", mode)] == 1.0
    assert after[("rigkit_drift_found", (("host", host.name),))] >= 1.0
    assert after[("rigkit_drift_exit_code", (("host", host.name),))] == 3.0
    stamp = ("rigkit_drift_timestamp_seconds", (("host", host.name),))
    assert after[stamp] >= before[stamp]
    assert after[("node_textfile_scrape_error", ())] == 0.0
    print(f"\ndrift: rigkit_drift_found{{host}} {before[('rigkit_drift_found', (('host', host.name),))]:g} -> "
          f"{after[('rigkit_drift_found', (('host', host.name),))]:g}, rigkit_drift_findings{{kind=file-mode,"
          f"severity=drift}} absent -> {after[('rigkit_drift_findings', mode)]:g}, exit code 0 -> 3")


def test_a_driver_reload_healed_by_the_agent_counts_one_re_application(host):
    """The healer's timer is stopped and its service started by the test: first to have a reading, then
    after the fake driver's reload (``/run/fake-gpu/driver_reload``: the limit back at the board's 350 W)."""
    host.quiet_automatic_jobs()  # no keeper holding the lock: the healer would stand down for it
    host.run("systemctl stop rigkit-power.timer")
    try:
        host.run("systemctl start rigkit-power.service")  # a oneshot: returns once it ran
        before = scrape(host.url)
        n = before[("rigkit_power_limit_reapplies_total", ())]
        assert before[("rigkit_power_check_result", (("result", "as declared"),))] == 1.0
        assert before[("rigkit_power_limit_enforced_watts", ())] == 420.0
        host.run("touch /run/fake-gpu/driver_reload")
        host.run("systemctl start rigkit-power.service")
        after = scrape(host.url)
    finally:
        host.run("systemctl start rigkit-power.timer hyperqwen-watchdog.timer rigkit-keeper.timer")
    assert after[("rigkit_power_limit_reapplies_total", ())] == n + 1
    assert after[("rigkit_power_check_result", (("result", "re-applied"),))] == 1.0
    assert after[("rigkit_power_reapply_ok", ())] == 1.0
    assert after[("rigkit_power_limit_declared_watts", ())] == after[("rigkit_power_limit_enforced_watts", ())] == 420.0
    assert after[("rigkit_power_reapply_timestamp_seconds", ())] > before.get(("rigkit_power_reapply_timestamp_seconds", ()), 0)
    print(f"\nhealer: rigkit_power_limit_reapplies_total {n:g} -> {after[('rigkit_power_limit_reapplies_total', ())]:g}, "
          f"rigkit_power_check_result{{result=re-applied}} 0 -> 1")
    # the healer's run wrote the state part too: the lock it took is free again
    assert after[("rigkit_lock_held", ())] == 0.0 and after[("rigkit_window_open", ())] == 0.0
    assert after[("node_textfile_scrape_error", ())] == 0.0


def test_a_failed_deploy_put_back_is_a_failed_generation(host):
    """A typo in ``strata.args`` (the sandbox's llama-server refuses it as llama.cpp's does): the deploy
    records the attempt as a failed generation and puts the one it started from back
    (tests/harness/test_wirein.py holds the deploy's side); the generation command's run writes the state."""
    host.run("systemctl start rigkit-power.service")  # a timer job: writes the state part
    before = scrape(host.url)
    current = before[("rigkit_generation_current", ())]
    failed = before[("rigkit_generations_failed", ())]
    proc = rigkit(host, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--data",
                  'strata={"args": ["--threads", "1", "--no-such-flag"]}')
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert f"reverted to generation {int(current)}, confirmed" in proc.stderr, proc.stderr[-4000:]
    after = scrape(host.url)
    assert after[("rigkit_generations_failed", ())] == failed + 1
    assert after[("rigkit_generation_current", ())] == current
    assert after[("rigkit_generation_last_failed", ())] > current
    assert after[("rigkit_generation_last_failed_timestamp_seconds", ())] >= \
        before.get(("rigkit_generation_last_failed_timestamp_seconds", ()), 0)
    assert after[("rigkit_generation_hold", ())] == 0.0
    print(f"\nput back: rigkit_generations_failed {failed:g} -> {after[('rigkit_generations_failed', ())]:g}, "
          f"rigkit_generation_last_failed -> {after[('rigkit_generation_last_failed', ())]:g}, "
          f"rigkit_generation_current {current:g} -> {after[('rigkit_generation_current', ())]:g}")


def test_a_smoke_writes_its_figures_per_member_and_workload(host, control, tmp_path):
    folder, url = control
    key = (("host", host.name), ("member", "strata"), ("workload", "chat-greedy"))
    assert ("rigkit_bench_decode_tokens_per_second", key) not in scrape(url)
    # the smoke's 256 tokens (--max-tokens): a 48-token answer decodes in ~20 ms on the sandbox's CPU, near the
    # 10 ms the bench can time, and under load its bunched figures are all left out as impossible (issue 60)
    proc = rigkit(host, "bench", "-i", "inventory/sandbox.py", "--host", host.name, "--member", "strata",
                  "--workload", "chat-greedy", "--max-tokens", "256", "--out", str(tmp_path / "out"),
                  "--results", str(tmp_path / "results"), "--metrics", str(folder / "rigkit_bench.prom"))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    w = summary["workloads"]["chat-greedy"]
    after = scrape(url)
    assert after[("rigkit_bench_decode_tokens_per_second", key)] == pytest.approx(w["metrics"]["decode_tps"]["median"])
    assert after[("rigkit_bench_ttft_seconds", key)] == pytest.approx(w["metrics"]["ttft_s"]["median"])
    # Strata is llama.cpp on the sandbox's CPU: the card stays at its idle draw, the bench says "not
    # power-modelled", and a J/token it does not stand behind is absent, never written (issue 60)
    assert w["energy"]["power_modelled"] is False and w["energy"]["j_per_token"] is not None, w["energy"]
    assert ("rigkit_bench_energy_joules_per_token", key) not in after
    verdict = summary["verdicts"]["chat-greedy"]["verdict"]
    assert after[("rigkit_bench_verdict", tuple(sorted(key + (("verdict", verdict),))))] == 1.0
    print(f"\nsmoke: rigkit_bench_decode_tokens_per_second{{strata,chat-greedy}} absent -> "
          f"{after[('rigkit_bench_decode_tokens_per_second', key)]:.2f}, ttft "
          f"{after[('rigkit_bench_ttft_seconds', key)]:.3f} s, J/token absent (not power-modelled: "
          f"{w['energy']['avg_w']:.1f} W), verdict {verdict}")
    assert after[("node_textfile_scrape_error", ())] == 0.0
    # a member that is not loaded: no request sent, every workload NOT-RUN, said in its own file
    idle = rigkit(host, "bench", "-i", "inventory/sandbox.py", "--host", host.name, "--member", "gguf-baseline",
                  "--workload", "chat-greedy", "--out", str(tmp_path / "idle"), "--results", str(tmp_path / "results"),
                  "--metrics", str(folder / "rigkit_bench_gguf-baseline.prom"))
    assert idle.returncode == 0, idle.stdout + idle.stderr[-3000:]
    key = (("host", host.name), ("member", "gguf-baseline"), ("workload", "chat-greedy"))
    got = scrape(url)
    assert got[("rigkit_bench_verdict", tuple(sorted(key + (("verdict", "NOT-RUN"),))))] == 1.0
    assert ("rigkit_bench_decode_tokens_per_second", key) not in got  # nothing measured: no figure
    assert got[("rigkit_bench_decode_tokens_per_second", (("host", host.name), ("member", "strata"),
                                                          ("workload", "chat-greedy")))] > 0  # strata's file kept


def test_the_deploys_smoke_writes_its_figures_on_the_host(host, tmp_path):
    """Issue 60: ``metrics_textfile_dir`` is set (the sandbox inventory), so the deploy's smoke hands its figures
    to the host's agent (``rigkit-agent metrics bench``) and the host's own node_exporter serves them beside the
    agent's parts: a converged host, ``rigkit deploy --smoke`` (the probe path, then the smoke). The series are
    the bench's own (``rigkit bench --metrics``: labelled by the inventory's host, the member and the workload)."""
    def strata(got, name):
        return {dict(k[1]).get("verdict"): v for k, v in got.items() if k[0] == name
                and dict(k[1]).get("member") == "strata" and dict(k[1]).get("workload") == "chat-greedy"
                and dict(k[1]).get("host") == host.name}

    assert strata(scrape(host.url), "rigkit_bench_decode_tokens_per_second") == {}
    proc = rigkit(host, "deploy", "-i", "inventory/sandbox.py", "--smoke", timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    prom = f"{host.textfile_dir}/rigkit_bench.prom"
    assert f"post-deploy smoke: metrics on {host.name}: written {prom}" in proc.stderr, proc.stderr[-4000:]
    after = scrape(host.url)
    [decode] = strata(after, "rigkit_bench_decode_tokens_per_second").values()
    assert decode > 0
    words = [w for w, v in strata(after, "rigkit_bench_verdict").items() if v == 1.0]
    assert len(words) == 1 and words[0] in ("PASS", "WARN", "no baseline"), words
    assert strata(after, "rigkit_bench_energy_joules_per_token") == {}  # Strata on the CPU: not power-modelled
    assert after[("node_textfile_scrape_error", ())] == 0.0
    print(f"\ndeploy's smoke on the host: rigkit_bench_decode_tokens_per_second{{strata,chat-greedy}} absent -> "
          f"{decode:.2f}, verdict {words[0]}, in {prom}")


def test_every_file_written_is_promtool_clean_and_0644(host, control):
    folder, _url = control
    files = sorted((host.root / host.textfile_dir.lstrip("/")).glob("*.prom")) + sorted(folder.glob("*.prom"))
    assert {f.name for f in files} == {"rigkit_power.prom", "rigkit_state.prom", "rigkit_drift.prom",
                                       "rigkit_bench.prom", "rigkit_bench_gguf-baseline.prom"}
    for f in files:
        rc, out = promtool.check_metrics(f.read_text())
        assert rc == 0, f"{f}: promtool check metrics exit {rc}: {out}"
        assert f.stat().st_mode & 0o777 == 0o644, f
    print(f"\npromtool check metrics: {len(files)} files clean: {', '.join(f.name for f in files)}")
