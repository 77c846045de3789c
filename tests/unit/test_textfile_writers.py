"""Every combination of rigkit's metrics writers in one textfile folder, read by the real node_exporter
(Debian's 1.5.0, ``tests/harness/promtool.py``) — issue 57.

The owner's behaviour first: two ``*.prom`` files carrying one series are both read, the exporter serves
one, logs ``was collected before with the same name and label values`` and reports
``node_textfile_scrape_error 0``. Then each pair of rigkit's writers (the agent's power and state files,
drift over every host or one, the bench per host and member, bare ``--url`` runs against different URLs
and models) and all of them together, written into one folder through rigkit's own writers: whatever
rigkit writes, node_exporter serves every series of every file with its value, its scrape error stays 0
and it logs nothing; a writer rigkit refuses (:class:`rigkit.report.prometheus.SeriesClash`) is one whose
series another file already carries, so the refusal is what stopped a silent drop.
"""
from __future__ import annotations

import itertools
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from rigkit.drift.compare import Finding
from rigkit.host import promfile
from rigkit.report import prometheus

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import promtool  # noqa: E402

pytestmark = pytest.mark.slow

SUMMARY = {"timestamp": "2026-12-02T03:04:05+00:00",
           "workloads": {"chat": {"metrics": {"decode_tps": {"median": 118.0}, "ttft_s": {"median": 0.4}},
                                  "energy": {"j_per_token": 2.5}}},
           "verdicts": {"chat": {"verdict": "PASS"}}}
POWER = {"declared_w": 420.0, "index": 0, "reapplies": 1,
         "last_check": {"at": "2026-12-02T03:04:05Z", "result": "as declared", "enforced_w": 420.0, "message": "m"}}
FINDINGS = [Finding("rig", "file", "/etc/x", "a", "b"), Finding("rig2", "unit", "x.service", "a", "b")]

#: rigkit's writers: name -> (file name, families, control side?). The agent's files go through its own
#: writer (rigkit.host.promfile), the control side's through rigkit.report.prometheus.write.
WRITERS = {
    "agent power": ("rigkit_power.prom", promfile.power_families(POWER), False),
    "agent state": ("rigkit_state.prom", promfile.state_families(
        {"held": True, "holder": {"what": "deploy", "since": "2026-12-02T03:04:05Z"}}, False,
        {"current": 2, "generations": [{"n": 1, "time": "2026-12-01T00:00:00Z", "failed": True},
                                       {"n": 2, "time": "2026-12-02T00:00:00Z"}]}, {}), False),
    "drift, every host": ("rigkit_drift.prom", prometheus.drift_families(FINDINGS, {"rig": 3, "rig2": 3}, 1.0), True),
    "drift --host rig": ("rigkit_drift_rig.prom", prometheus.drift_families(FINDINGS[:1], {"rig": 3}, 2.0), True),
    "bench rig strata": ("rigkit_bench_strata.prom", prometheus.bench_families(SUMMARY, "rig", "strata"), True),
    "bench rig hyperqwen": ("rigkit_bench_hyperqwen.prom", prometheus.bench_families(SUMMARY, "rig", "hyperqwen"), True),
    "bench --url :8080": ("rigkit_bench_url_a.prom", prometheus.bench_families(
        SUMMARY, *prometheus.url_labels("http://127.0.0.1:8080", None)), True),
    "bench --url :18020 qwen": ("rigkit_bench_url_b.prom", prometheus.bench_families(
        SUMMARY, *prometheus.url_labels("http://user:secret@127.0.0.1:18020/v1", "qwen")), True),
    "bench --url :8080 again": ("rigkit_bench_url_c.prom", prometheus.bench_families(
        SUMMARY, *prometheus.url_labels("http://127.0.0.1:8080/", None)), True),
}


def series(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.fixture(scope="module")
def exporter(tmp_path_factory):
    """The real node_exporter over one textfile folder: ``(folder, url, log file)``."""
    folder = tmp_path_factory.mktemp("textfile")
    log = tmp_path_factory.mktemp("log") / "node_exporter.log"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with log.open("w") as err:
        proc = subprocess.Popen([str(promtool.node_exporter()), "--collector.disable-defaults", "--collector.textfile",
                                 f"--collector.textfile.directory={folder}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}/metrics"
    end = time.monotonic() + 30  # bounds a hang; the event awaited is the exporter answering
    while True:
        try:
            requests.get(url, timeout=2).raise_for_status()
            break
        except requests.RequestException:
            if time.monotonic() > end or proc.poll() is not None:
                proc.terminate()
                raise
            time.sleep(0.2)
    try:
        yield folder, url, log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def scrape(exporter) -> tuple[dict, str]:
    """One scrape: ``(its series, what node_exporter logged meanwhile)``."""
    _folder, url, log = exporter
    before = log.stat().st_size
    got = series(requests.get(url, timeout=10).text)
    with log.open() as f:
        f.seek(before)
        return got, f.read()


def test_the_owner_serves_one_of_two_files_carrying_a_series_and_reports_no_error(exporter):
    folder = exporter[0]
    for p in folder.glob("*"):
        p.unlink()
    old = prometheus.bench_families(SUMMARY, "", "")  # two bare --url runs before issue 57: host="" member=""
    promfile.write(folder / "rigkit_bench_a.prom", old)
    text_b = promfile.text(old).replace("118.0", "99.0")
    (folder / "rigkit_bench_b.prom").write_text(text_b)
    got, logged = scrape(exporter)
    key = ("rigkit_bench_decode_tokens_per_second", (("host", ""), ("member", ""), ("workload", "chat")))
    assert got[key] in (118.0, 99.0)  # one of the two; the other is gone
    assert got[("node_textfile_scrape_error", ())] == 0.0
    assert "was collected before with the same name and label values" in logged
    # rigkit's writer now refuses the second file, naming the first
    with pytest.raises(prometheus.SeriesClash, match="rigkit_bench_a.prom already carries rigkit_bench_"):
        prometheus.write(folder / "rigkit_bench_c.prom", old)
    assert not (folder / "rigkit_bench_c.prom").exists()


COMBINATIONS = [*itertools.combinations(WRITERS, 2), tuple(WRITERS)]


def test_every_combination_of_rigkits_writers_is_served_whole(exporter):
    folder = exporter[0]
    for combo in COMBINATIONS:
        for p in folder.glob("*"):
            p.unlink()
        written: dict[str, dict] = {}
        for name in combo:
            file, families, control = WRITERS[name]
            if not control:
                promfile.write(folder / file, families)
            else:
                try:
                    prometheus.write(folder / file, families)
                except prometheus.SeriesClash:
                    ours = set(series(promfile.text(families)))
                    assert any(ours & set(w) for w in written.values()), (combo, name)  # refused only for a real clash
                    continue
            written[name] = series((folder / file).read_text())
        got, logged = scrape(exporter)
        assert got[("node_textfile_scrape_error", ())] == 0.0, combo
        assert logged == "", (combo, logged)
        for name, carried in written.items():
            assert {k: got.get(k) for k in carried} == carried, (combo, name)
    # the two bare --url runs against one URL are one thing measured: the second is refused, not dropped
    assert prometheus.url_labels("http://127.0.0.1:8080", None) == prometheus.url_labels("http://127.0.0.1:8080/", None)


def test_writing_the_same_file_again_is_no_clash(tmp_path):
    file, families, _ = WRITERS["drift, every host"]
    prometheus.write(tmp_path / file, families)
    prometheus.write(tmp_path / file, families)
    assert series((tmp_path / file).read_text())


@settings(max_examples=200, deadline=None)
@given(scheme=st.sampled_from(["http", "https"]), user=st.text("abc:", max_size=6), secret=st.text("xyz!", max_size=6),
       host=st.sampled_from(["127.0.0.1", "localhost", "rig.lan", "[::1]"]),
       port=st.one_of(st.none(), st.integers(1, 65535)), path=st.sampled_from(["", "/", "/v1", "/upstream/strata/"]),
       query=st.sampled_from(["", "?key=hunter2"]), model=st.one_of(st.none(), st.sampled_from(["qwen", "strata"])))
def test_a_url_run_is_labelled_by_what_it_measured_never_by_a_secret(scheme, user, secret, host, port, path, query,
                                                                     model):
    cred = f"{user}:{secret}@" if user or secret else ""
    url = f"{scheme}://{cred}{host}{':' + str(port) if port else ''}{path}{query}"
    label, member = prometheus.url_labels(url, model)
    assert label == f"{scheme}://{host}{':' + str(port) if port else ''}{path.rstrip('/')}"
    assert member == (model or "")
    assert "hunter2" not in label and (not secret or f":{secret}@" not in label)
