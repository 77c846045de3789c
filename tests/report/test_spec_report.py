"""Speculative decoding's acceptance in ``rigkit report`` (issue 65): runs of the stand-in HyperQwen engine
(:mod:`tests.bench.standin`, a local process: quoting's and chat-greedy's acceptance as its model gives it,
a run with another client's request mixed into chat-greedy, the long workload with a planted collapse) drawn
in the member's history, a member with one run drawn as bars, and the runs table per workload and draft
position; opened in headless Chromium, a screenshot kept (``out/test-artefacts/report-spec.png``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from rigkit.bench.context import Target
from rigkit.bench.runner import build_summary, run_workloads
from rigkit.bench.workloads import PRESETS, build_workloads
from rigkit.report.page import write_report

from bench.standin import stand_in  # tests/bench, a package on pytest's path (tests/ has no __init__)
from .test_report import ARTEFACTS, STATE, host, tags

pytestmark = pytest.mark.slow


def bench(url: str, out: Path, names: list[str], member: str, hour: int, progress=None) -> dict:
    """One run of ``names`` against the stand-in at ``url``, its summary.json written in ``out``, dated
    ``hour`` o'clock (the history's x axis; the runs themselves take seconds)."""
    target = Target(chat_url=url + "/v1/chat/completions", aux_base=url, label="stand-in", model="hq")
    wls = build_workloads(PRESETS["small"], names, model="hq", nonce=out.name)
    summaries, warnings = run_workloads(target, wls, run_id=out.name, out_dir=str(out), progress=progress)
    s = build_summary(out.name, target, {"host": "rig", "member": member}, summaries, [], warnings, "small")
    s["timestamp"] = f"2026-12-06T{hour:02d}:00:00+00:00"
    (out / "summary.json").write_text(json.dumps(s))
    return s


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spec-report")
    results = tmp / "results"
    with stand_in(tmp / "control", chunk_s=0.002) as url:  # 2 ms a step: decode figures the bench believes
        first = bench(url, results / "run-1", ["chat-greedy", "quoting"], "hyperqwen", 1)
        poked = []

        def someone_else(name, done, total):
            if name == "chat-greedy" and done == 1 and not poked:
                poked.append(requests.post(url + "/v1/chat/completions", timeout=30, json={
                    "model": "hq", "max_tokens": 4, "messages": [{"role": "user", "content": "ping"}]}).status_code)

        second = bench(url, results / "run-2", ["chat-greedy", "quoting"], "hyperqwen", 2, progress=someone_else)
        (tmp / "control" / "collapse_after").write_text("128")
        third = bench(url, results / "run-3", ["chat-greedy", "quoting", "long"], "hyperqwen", 3)
        (tmp / "control" / "collapse_after").unlink()
        alone = bench(url, results / "run-4", ["chat-greedy", "quoting"], "hyperqwen-mtp", 4)
    hosts = [host("rig", "hyperqwen", "hyperqwen-mtp", "strata")]
    out = tmp / "report"
    path = Path(write_report(hosts, "inv.py", str(out), str(results), {"hosts": {"rig": STATE}, "run": {}},
                             "run live"))
    return path, {"first": first, "second": second, "third": third, "alone": alone}


def test_the_runs_table_has_acceptance_per_workload_and_position_mixed_and_the_collapse(page):
    path, runs = page
    text = path.read_text()
    q = runs["first"]["workloads"]["quoting"]["spec_decode"]
    c = runs["first"]["workloads"]["chat-greedy"]["spec_decode"]
    assert c["acceptance_rate"] < q["acceptance_rate"]  # the stand-in's model: chat low, quoting high
    assert f"quoting: acceptance {100 * q['acceptance_rate']:.1f}% · {q['acceptance_length']:.2f} tokens/step" in text
    assert "by draft position 0:" in text and " 6:" in text
    assert "chat-greedy: MIXED: 1 request(s) not the bench&#39;s moved the counters" in text
    fell = runs["third"]["workloads"]["long"]["spec_decode"]["collapse"]
    assert fell and f"FELL to {100 * fell['acceptance_rate']:.1f}% in window {fell['window']}" in text


def test_the_history_and_one_run_charts_draw_acceptance(page):
    path, _ = page
    text = path.read_text()
    hq = text[text.index('data-chart="rig/hyperqwen"'):]
    hq = hq[:hq.index("</figure>")]
    assert "spec. decoding acceptance (0-1)" in hq and "tokens per verify step" in hq
    one = text[text.index('data-chart="rig/hyperqwen-mtp"'):]
    one = one[:one.index("</figure>")]
    assert "one run:" in one and "spec. decoding acceptance (0-1)" in one


def test_chromium_shows_the_acceptance(page):
    from .browser import load, screenshot

    path, _ = page
    seen = load(path)
    assert seen.errors == [], seen.stderr[-3000:]
    cells = [a.get("data-spec") for t, a in tags(seen.dom) if t == "div" and "data-spec" in a]
    assert {"chat-greedy", "quoting", "long"} <= set(cells)
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = screenshot(path, ARTEFACTS / "report-spec.png", size="1400,3000")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
