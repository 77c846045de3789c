"""The rig on the operator's dashboard (issues 47, 66), scraped from the real node_exporter over HTTP.

A copy of the run's converged host (nspawn lane; the sandbox inventory declares
``metrics_textfile_dir: /var/lib/prometheus/node-exporter``, so the golden deploy installed node_exporter as part
of the rig: the mirror's ``prometheus-node-exporter`` — Debian's real node_exporter 1.5.0 binary in Arch's package
layout and unit — pinned by ``rigkit lock``, its arguments in ``/etc/conf.d/prometheus-node-exporter``, its unit
enabled, running as ``node_exporter`` and listening on the host's loopback only). The test scrapes it from inside
the host (``curl 127.0.0.1:9100``). The control machine's node_exporter (the same binary, on 127.0.0.1 of the CI
machine, its textfile folder a tmp dir) reads what ``rigkit drift --metrics`` and ``rigkit bench --metrics`` write.

Each test scrapes before and after its event and finds the metric changed: a drift finding, a driver
reload healed by the agent's healer (its service started by the test, its timer stopped meanwhile), a
failed deploy put back, a smoke. Every ``*.prom`` file the module saw is ``promtool check metrics``
clean and node_exporter reports no textfile error. Issue 66's must-shows: node_exporter from the locked package
serving rigkit's files, its whole scrape parsed by promtool (lint only in node_exporter's own series), drift
flagging it stopped, and every target of the rendered ``prometheus/rigkit.yml`` scraped without loading a model.
Cost: no deploy of its own for these (the golden copy is the deploy with metrics asked for); one ``rigkit
drift`` and one ``rigkit render``.
"""
from __future__ import annotations

import json
import shlex
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
ENV_FILE = "/opt/rigkit/hyperqwen/.env"


rigkit = sandbox_project.rigkit  # rigkit(host, *args, timeout=…)


def parse(text: str) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of one exposition ``text``."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def scrape(target) -> dict[tuple[str, tuple], float]:
    """One scrape of ``target``: a URL (the control machine's node_exporter), or a host, whose own node_exporter
    listens on its loopback (``node_exporter.listen_address``' default) and is scraped from inside it."""
    if isinstance(target, str):
        resp = requests.get(target, timeout=10)
        resp.raise_for_status()
        return parse(resp.text)
    return parse(target.run(f"curl -fsS -m 10 {target.url}").stdout)


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
    h.url = "http://127.0.0.1:9100/metrics"  # node_exporter.listen_address's default: the host's own loopback
    end = time.monotonic() + 60  # bounds a hang; the event awaited is the deployed exporter answering after boot
    while h.run(f"curl -fsS -m 5 -o /dev/null {h.url}", check=False).returncode != 0:
        assert time.monotonic() < end, h.run("systemctl status prometheus-node-exporter", check=False).stdout
        time.sleep(0.5)
    yield h


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


def test_node_exporter_runs_from_the_locked_package_serving_rigkits_files(host):
    """Issue 66: the deploy with metrics asked for (the golden build's) installed node_exporter as part of the rig:
    the package at the version ``rigkit lock`` resolved (and held), its unit enabled and running as the package's
    user, its arguments from rigkit's ``/etc/conf.d`` file, listening on loopback only, serving rigkit's
    files; promtool parses its whole scrape, and its only lint is in node_exporter's own series."""
    lock = json.loads(Path(hostctl.STATE / "sandbox.lock.json").read_text())
    pin = lock["pins"]["prometheus-node-exporter"]
    assert pin["want"] == hostctl.MANIFEST["node_exporter_version"], pin
    assert host.run("pacman -Q prometheus-node-exporter").stdout.split() == ["prometheus-node-exporter", pin["version"]]
    assert pin["version"] == hostctl.MANIFEST["pins"]["prometheus-node-exporter"]
    assert "prometheus-node-exporter" in host.run("pacman-conf IgnorePkg").stdout.split()
    assert host.run("systemctl is-enabled prometheus-node-exporter.service").stdout.strip() == "enabled"
    pid = host.run("systemctl show -p MainPID --value prometheus-node-exporter.service").stdout.strip()
    assert host.run(f"stat -c %U /proc/{pid}").stdout.strip() == "node_exporter"
    argv = host.run(f"tr '\\0' ' ' < /proc/{pid}/cmdline").stdout.split()
    assert argv == ["/usr/bin/prometheus-node-exporter", f"--collector.textfile.directory={host.textfile_dir}",
                    "--web.listen-address=127.0.0.1:9100"], argv
    with pytest.raises(requests.ConnectionError):  # loopback only: the host's own address refuses
        requests.get(f"http://{host.ssh_hostname}:9100/metrics", timeout=5)
    host.run("systemctl start rigkit-power.service")  # a timer job: writes both of the agent's parts now
    text = host.run(f"curl -fsS -m 10 {host.url}").stdout
    got = parse(text)
    assert got[("rigkit_power_limit_declared_watts", ())] == 420.0
    assert ("rigkit_generation_current", ()) in got and got[("node_textfile_scrape_error", ())] == 0.0
    rc, out = promtool.check_metrics(text)
    assert rc in (0, 3), f"promtool check metrics exit {rc} (1: unparsable): {out}"
    lint = [ln.split()[0] for ln in out.splitlines() if ln.strip()]
    assert all(name.startswith("node_") for name in lint), out  # node_exporter's own names (node_memory_MemFree…)
    rigkit_part = "\n".join(ln for ln in text.splitlines()  # rigkit's series (their HELP and TYPE lines too)
                             if ln.removeprefix("# HELP ").removeprefix("# TYPE ").startswith("rigkit_")) + "\n"
    assert promtool.check_metrics(rigkit_part) == (0, "")
    print(f"\nnode_exporter: prometheus-node-exporter {pin['version']} (locked, held), enabled, user node_exporter, "
          f"127.0.0.1:9100 only; scrape of {len(got)} samples: promtool exit {rc} "
          f"({len(lint)} lint lines, all node_exporter's own node_* names), rigkit's part clean")


def test_drift_flags_node_exporter_stopped(host):
    host.run("systemctl stop prometheus-node-exporter.service")
    try:
        proc = rigkit(host, "drift", "-i", "inventory/sandbox.py", "--host", host.name, "--json")
    finally:
        host.run("systemctl start prometheus-node-exporter.service")
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    found = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.strip()]
    hits = [r for r in found if r.get("kind") == "unit" and r.get("item") == "prometheus-node-exporter.service"]
    assert hits and hits[0]["severity"] == "drift", found
    print(f"\ndrift with node_exporter stopped: exit 3, {hits[0]['kind']} {hits[0]['item']}: {hits[0].get('found')}")


def test_every_rendered_scrape_target_is_scraped_without_loading_a_model(host, tmp_path):
    """Issue 66: ``rigkit render``'s ``prometheus/rigkit.yml`` for the host; each target scraped from inside the
    host as its Prometheus would: node_exporter and llama-swap's ``/metrics`` answer, the vLLM member
    (HyperQwen, not running: staged in the sandbox) refuses the connection, and llama-swap runs what it ran
    before — Strata alone, no member started (through llama-swap's ``/upstream/hyperqwen/metrics`` the scrape
    would have loaded it: rigkit/report/scrape.py)."""
    import yaml

    def running() -> list[str]:
        return sorted(m["model"] for m in json.loads(host.run("curl -fsS 127.0.0.1:8080/running").stdout)["running"])

    proc = rigkit(host, "render", "-i", "inventory/sandbox.py", "--host", host.name, "--out", str(tmp_path / "r"))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr[-3000:]
    cfg = yaml.safe_load((tmp_path / "r" / "prometheus" / "rigkit.yml").read_text())
    targets = {(j["job_name"], t, j.get("metrics_path", "/metrics")) for j in cfg["scrape_configs"]
               for sc in j["static_configs"] for t in sc["targets"]}
    assert {j for j, _t, _p in targets} == {"rigkit-node", "rigkit-llama-swap", "rigkit-vllm"}
    before = running()
    assert before == ["strata"], before
    codes = {}
    for job, target, path in sorted(targets):
        r = host.run(f"curl -sS -m 10 -o /dev/null -w '%{{http_code}}' http://{target}{path}", check=False)
        codes[(job, target)] = (r.returncode, r.stdout.strip())
    assert codes[("rigkit-node", "127.0.0.1:9100")] == (0, "200")
    assert codes[("rigkit-llama-swap", "127.0.0.1:8080")] == (0, "200")
    vllm = {t: c for (j, t), c in codes.items() if j == "rigkit-vllm"}
    assert vllm == {"127.0.0.1:18020": (7, "000")}, vllm  # curl exit 7: connection refused, nothing started
    assert "llamaswap_" in host.run("curl -fsS -m 10 127.0.0.1:8080/metrics").stdout
    assert running() == before
    assert "hyperqwen" not in host.run("docker ps --format '{{.Names}}'").stdout
    print(f"\nscrape targets: {', '.join(f'{j} {t}: curl {c[0]} http {c[1]}' for (j, t), c in sorted(codes.items()))}; "
          f"llama-swap running {before} -> {running()}")
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
        before = scrape(host)
        n = before[("rigkit_power_limit_reapplies_total", ())]
        assert before[("rigkit_power_check_result", (("result", "as declared"),))] == 1.0
        assert before[("rigkit_power_limit_enforced_watts", ())] == 420.0
        host.run("touch /run/fake-gpu/driver_reload")
        host.run("systemctl start rigkit-power.service")
        after = scrape(host)
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
    before = scrape(host)
    current = before[("rigkit_generation_current", ())]
    failed = before[("rigkit_generations_failed", ())]
    proc = rigkit(host, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--data",
                  'strata={"args": ["--threads", "1", "--no-such-flag"]}')
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert f"reverted to generation {int(current)}, confirmed" in proc.stderr, proc.stderr[-4000:]
    after = scrape(host)
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

    assert strata(scrape(host), "rigkit_bench_decode_tokens_per_second") == {}
    proc = rigkit(host, "deploy", "-i", "inventory/sandbox.py", "--smoke", timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    prom = f"{host.textfile_dir}/rigkit_bench.prom"
    assert f"post-deploy smoke: metrics on {host.name}: written {prom}" in proc.stderr, proc.stderr[-4000:]
    after = scrape(host)
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
