"""`rigkit report` (issue 16 items 3 and 5): one static page per inventory — every host and
member, the drift state, the bench history charts (inline SVG, points linking to the runs'
files), nothing fetched from the network, text escaped; opened in headless Chromium with its
console captured, and a screenshot kept (``out/test-artefacts/report.png``, ignored by git)."""

import json
import re
import shutil
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest

from rigkit.drift.compare import Finding
from rigkit.drift.run import document, dumps_document, read_document
from rigkit.report.page import find_runs, write_report

ARTEFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artefacts"
STATE = {"gpu": {"state": "ok", "name": "NVIDIA GeForce RTX 3090", "driver": "610.57",
                 "power_limit_w": 420.0, "power_enforced_w": 420.0, "power_default_w": 350.0,
                 "power_min_w": 100.0, "power_max_w": 450.0, "declared_power_limit_w": 420,
                 "declared_driver": "610.57"},
         "cuda": "13.3", "declared_cuda": "13.3",
         "llama_swap_live": {"members": ["gguf-baseline", "strata"], "live_config_as_declared": True},
         "hold": None, "lock": {"held": False, "holder": None, "stale": None}, "window": None}


def member(service=None):
    return SimpleNamespace(service=service)


def host(name, *members):
    spec = SimpleNamespace(
        llama_swap=SimpleNamespace(members={m: member("hyperqwen" if m == "hyperqwen" else None)
                                            for m in members}),
        bench=SimpleNamespace(baseline=None))
    return SimpleNamespace(name=name, spec=spec)


def summary(host_, member_, when, decode, status="ok", counts="counted"):
    w = {"status": status, "counts": counts, "error": None if status == "ok" else "stalled",
         "metrics": {"decode_tps": {"median": decode, "min": decode, "max": decode, "n": 1, "cv": None},
                     "prefill_tps": {"median": decode * 8, "min": 1, "max": 1, "n": 1, "cv": None},
                     "ttft_s": {"median": 0.2, "min": 0.2, "max": 0.2, "n": 1, "cv": None}}
         if status == "ok" else {}}
    return {"run_id": f"run-{member_}-{when:%H%M%S}", "timestamp": when.isoformat(), "preset": "small",
            "context": {"host": host_, "member": member_}, "workloads": {"chat-greedy": w},
            "verdicts": {"chat-greedy": {"verdict": "PASS" if status == "ok" else "FAIL",
                                         "reasons": []}}}


@pytest.fixture
def fleet(tmp_path):
    """Two hosts; b's strata has three runs (one failed, one an estimate), a's none; b drifted
    with a finding holding markup and brackets."""
    results = tmp_path / "results"
    t0 = datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    for i, (decode, status, counts) in enumerate([(40.0, "ok", "counted"), (0, "failed", "counted"),
                                                 (17.0, "ok", "estimate")]):
        s = summary("b", "strata", t0 + timedelta(hours=i), decode, status, counts)
        d = results / f"bench-{i}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(s))
        (d / "requests.jsonl").write_text("{}\n")
    s = summary("b", "hyperqwen", t0, 120.0)
    (results / "hq").mkdir()
    (results / "hq" / "summary.json").write_text(json.dumps(s))
    (results / "junk").mkdir()
    (results / "junk" / "summary.json").write_text("not json")
    hosts = [host("a", "gguf-baseline", "strata"), host("b", "gguf-baseline", "hyperqwen", "strata")]
    f = Finding("b", "pin", "IgnorePkg in [options]", "<script>alert(1)</script>", "missing")
    doc = read_document(dumps_document(document([f], {"a": 0, "b": 3}, ["a", "b"], "inv.py",
                                                {"a": STATE, "b": STATE})))
    out = tmp_path / "report"
    page = write_report(hosts, "inv.py", str(out), str(results), doc, "run live")
    return Path(page), hosts


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def tags(text):
    p = Tags()
    p.feed(text)
    return p.tags


def test_runs_are_grouped_by_the_host_and_member_their_context_names(fleet, tmp_path):
    runs = find_runs(str(tmp_path / "results"))
    assert sorted(runs) == [("b", "hyperqwen"), ("b", "strata")]
    assert [r.time.hour for r in runs[("b", "strata")]] == [10, 11, 12]


def test_the_page_fetches_nothing_and_every_link_is_a_file_in_its_folder(fleet):
    page, _ = fleet
    text = page.read_text()
    assert not re.search(r"(src|href)=\"(https?:)?//", text)
    assert "<script" not in text
    hrefs = [a.get("href") or a.get("xlink:href") for t, a in tags(text) if t == "a"]
    files = [h for h in hrefs if h and not h.startswith("#")]
    assert files and all((page.parent / h).is_file() for h in files), files
    # each strata run's point links to its copied summary
    assert sum('xlink:href="runs/b/strata/' in ln for ln in text.splitlines()) >= 3


def test_finding_text_is_escaped_and_brackets_kept(fleet):
    text = fleet[0].read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "IgnorePkg in [options]" in text


def test_the_reference_figures_of_the_real_rig_are_drawn_for_hyperqwen(fleet):
    text = fleet[0].read_text()
    hq = text[text.index('data-chart="b/hyperqwen"'):]
    hq = hq[:hq.index("</figure>")]
    assert "rig chat greedy 118" in hq and "rig quoting 29k 1210" in hq


@pytest.mark.slow
def test_chromium_loads_the_page_without_console_errors_and_shows_every_host_member_and_chart(fleet):
    from .browser import load, screenshot

    page, hosts = fleet
    seen = load(page)
    assert seen.errors == [], seen.stderr[-3000:]
    dom = tags(seen.dom)
    assert [a["data-host"] for t, a in dom if t == "section" and "data-host" in a] == ["a", "b"]
    members = [a["data-member"] for t, a in dom if t == "section" and "data-member" in a]
    assert members == ["gguf-baseline", "strata", "gguf-baseline", "hyperqwen", "strata"]
    charts = [a["data-chart"] for t, a in dom if t == "figure" and "data-chart" in a]
    assert charts == ["b/hyperqwen", "b/strata"]
    assert seen.dom.count("<svg") == len(charts)
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = screenshot(page, ARTEFACTS / "report.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_the_console_check_catches_a_page_error_and_console_error(tmp_path):
    """The control: the same capture reports an uncaught exception and console.error."""
    from .browser import load

    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><script>console.error("TypeError: x is null");'
                   'throw new Error("boom")</script></body></html>')
    seen = load(bad)
    assert any("Uncaught Error: boom" in e for e in seen.errors), seen.stderr[-2000:]
    assert any("TypeError: x is null" in e for e in seen.errors), seen.stderr[-2000:]


WARN_REASON = ("decode unstable after 3 attempts: this run 1274.7 tok/s (min 900.0, max 1600.0, n 4, CV 21.5%) "
               "has CV above 10%, too noisy to compare")


@pytest.fixture
def warned(tmp_path):
    """One strata run whose verdict is WARN (its reason), judged against a steady run with an unstable one
    passed over, with one impossible figure marked."""
    results = tmp_path / "results"
    when = datetime(2026, 12, 5, 10, tzinfo=timezone.utc)
    s = summary("b", "strata", when, 1274.7)
    s["verdicts"]["chat-greedy"] = {
        "verdict": "WARN", "reasons": [WARN_REASON], "baseline": "results/steady/summary.json",
        "baseline_why": "the last steady comparable run of this member (…); passed over, unstable: "
                        "results/shaky/summary.json (decode CV 23.1% above 10%)"}
    s["workloads"]["chat-greedy"]["implausible"] = [
        {"prompt_id": "chat-2", "repetition": 0, "attempt": 1, "metric": "decode_tps", "value": 146318.0,
         "bound": 25500.0, "why": "255 generated tokens over less than 10 ms, the shortest interval the bench "
                                  "can time"}]
    (results / "r").mkdir(parents=True)
    (results / "r" / "summary.json").write_text(json.dumps(s))
    doc = read_document(dumps_document(document([], {"b": 0}, ["b"], "inv.py", {"b": STATE})))
    return Path(write_report([host("b", "strata")], "inv.py", str(tmp_path / "report"), str(results), doc,
                             "run live"))


def _runs_table(text: str) -> str:
    table = text[text.index('<table class="runs">'):]
    return table[:table.index("</table>")]


def test_a_warns_reason_its_baseline_and_an_impossible_figure_are_written_in_the_runs_table(warned):
    """Issue 60: the reason was only a tooltip (``title``); now it is the cell's text, escaped."""
    table = _runs_table(warned.read_text())
    assert "title=" not in table
    assert f'<span class="why">{WARN_REASON}</span>' in table
    assert ('<span class="baseline">baseline: results/steady/summary.json (the last steady comparable run of '
            'this member (…); passed over, unstable: results/shaky/summary.json (decode CV 23.1% above 10%))'
            '</span>') in table
    assert ('<span class="impossible">IMPOSSIBLE decode 146318.0 tok/s (chat-2 rep 0): above 25500.0 tok/s, '
            '255 generated tokens over less than 10 ms') in table


@pytest.mark.slow
def test_chromium_shows_the_warns_reason_in_the_page(warned):
    """The page as Chromium lays it out: the reason is in the rendered DOM's text (no hover), and the
    screenshot (``out/test-artefacts/report-warn.png``) shows the cell."""
    from .browser import load, screenshot

    seen = load(warned)
    assert seen.errors == [], seen.stderr[-3000:]
    cell = _runs_table(seen.dom)
    text = re.sub(r"<[^>]+>", "", cell)
    assert "chat-greedy: WARN " + WARN_REASON in text
    assert "baseline: results/steady/summary.json (the last steady comparable run" in text
    assert "IMPOSSIBLE decode 146318.0 tok/s" in text
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = screenshot(warned, ARTEFACTS / "report-warn.png", size="1200,1400")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
