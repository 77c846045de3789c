"""Issue 39, item 2: a member's history separated by the settings that change its figures
(max_tokens, power limit, preset), the baseline drawn as the caption says, tok/J only where the
energy was the engine's work, and a one-run chart that reads (checked in Chromium)."""

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rigkit.drift.run import document, dumps_document, read_document
from rigkit.report.chart import _median, series_key
from rigkit.report.page import write_report

ARTEFACTS = Path(__file__).resolve().parents[2] / "out" / "test-artefacts"
T0 = datetime(2026, 12, 3, 20, tzinfo=timezone.utc)


def host(name="rig"):
    spec = SimpleNamespace(llama_swap=SimpleNamespace(members={"strata": SimpleNamespace(service=None)}),
                           bench=SimpleNamespace(baseline=None))
    return SimpleNamespace(name=name, spec=spec)


def run_summary(when, decode, max_tokens, *, power=420.0, baseline=None, tok_per_j=None,
                modelled=True):
    m = {"median": decode, "min": decode * 0.98, "max": decode * 1.02, "n": 3, "cv": 0.01}
    energy = None if tok_per_j is None else {
        "joules": 10.0, "seconds": 1.0, "avg_w": 33.0 if not modelled else 250.0,
        "tok_per_j": tok_per_j, "j_per_token": 1 / tok_per_j, "power_modelled": modelled,
        "note": None if modelled else "not power-modelled: the card drew 33.0 W, its idle level"}
    return {"run_id": f"run-{when:%H%M}", "timestamp": when.isoformat(), "preset": "small",
            "context": {"host": "rig", "member": "strata", "power_limit_w": power},
            "energy": {"method": "counter", "idle": {"avg_w": 32.0, "seconds": 2.0}} if energy else None,
            "workloads": {"chat-greedy": {"status": "ok", "counts": "counted", "max_tokens": max_tokens,
                                          "metrics": {"decode_tps": m}, "energy": energy}},
            "verdicts": {"chat-greedy": {"verdict": "PASS", "reasons": [], "baseline": baseline}}}


def write(results, name, s):
    d = results / name
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps(s))
    return str(d / "summary.json")


def report(tmp_path, results):
    doc = read_document(dumps_document(document([], {"rig": 0}, ["rig"], "inv.py", {"rig": {}})))
    page = write_report([host()], "inv.py", str(tmp_path / "report"), str(results), doc, "run live")
    return Path(page)


def figure(page):
    text = page.read_text()
    fig = text[text.index('data-chart="rig/strata"'):]
    return fig[:fig.index("</figure>")]


@given(wl=st.sampled_from(["chat-greedy", "quoting"]), a=st.integers(1, 9000), b=st.integers(1, 9000),
       pa=st.sampled_from([None, 350.0, 420.0]), pb=st.sampled_from([None, 350.0, 420.0]),
       preset=st.sampled_from(["small", "rig"]))
def test_runs_of_different_settings_are_never_one_series(wl, a, b, pa, pb, preset):
    ka = series_key(wl, {"max_tokens": a}, {"power_limit_w": pa, "preset": preset})
    kb = series_key(wl, {"max_tokens": b}, {"power_limit_w": pb, "preset": preset})
    assert (ka == kb) == (a == b and pa == pb)
    assert ka.startswith(wl) and f"max_tokens {a}" in ka


def test_history_separates_max_tokens_draws_the_baseline_and_leaves_unmodelled_tok_per_j_out(tmp_path):
    """256-token smokes (~14 tok/J) and 48-token runs (~4 tok/J) used to share one line (a false
    3.5x drop); the caption promised a dashed baseline that was not drawn; tok/J was drawn for
    runs the bench called not power-modelled."""
    res = tmp_path / "results"
    first = write(res, "a", run_summary(T0, 100.0, 256, tok_per_j=14.0))
    write(res, "b", run_summary(T0 + timedelta(hours=1), 40.0, 48, tok_per_j=4.0))
    write(res, "c", run_summary(T0 + timedelta(hours=2), 101.0, 256, baseline=first, tok_per_j=14.2))
    write(res, "d", run_summary(T0 + timedelta(hours=3), 41.0, 48, tok_per_j=99.0, modelled=False))
    page = report(tmp_path, res)
    fig = figure(page)
    assert "chat-greedy · max_tokens 256 · 420 W · small" in fig
    assert "chat-greedy · max_tokens 48 · 420 W · small" in fig
    assert "baseline of chat-greedy · max_tokens 256 · 420 W · small: 100" in fig
    assert "dashed: the baseline" in fig and "a line per workload and its settings" in fig
    text = page.read_text()
    assert f"dashed: the baseline each series was last judged against ({first})" in text
    words = re.findall(r"<text[^>]*>([^<]*)</text>", fig)
    panel = words[words.index("decode tok/s") + 1:words.index("tok/J")]
    ticks = [float(w) for w in panel[panel.index("2026-Dec-03") + 1:]]
    assert ticks and max(ticks) < 20, panel  # the tok/J axis: 14 and 4, never the idle run's 99
    assert _median(json.loads((res / "d" / "summary.json").read_text())["workloads"]["chat-greedy"],
                   "tok_per_j") is None  # at the idle draw: no tok/J anywhere it is drawn
    assert "tok/J n/a — not power-modelled (draw 33 W, the idle level)" in text
    assert "14 tok/J" in text or "14.2 tok/J" in text


def test_without_a_baseline_the_caption_promises_none(tmp_path):
    res = tmp_path / "results"
    write(res, "a", run_summary(T0, 100.0, 256))
    write(res, "b", run_summary(T0 + timedelta(hours=1), 100.0, 256))
    fig = figure(report(tmp_path, res))
    assert "dashed" not in fig and "baseline of" not in fig


@pytest.mark.slow
def test_a_single_run_reads_in_chromium_as_bars_not_a_time_axis(tmp_path):
    """One run used to label every time tick 00:00:00 and draw four near-empty panels: it is a
    row of bars, its series on x, the value on each bar, its time in the title."""
    from tests.report.browser import load, screenshot

    res = tmp_path / "results"
    base = write(res, "a", run_summary(T0, 95.0, 256))
    s = run_summary(T0 + timedelta(minutes=5), 100.0, 256, baseline=base, tok_per_j=3.2)
    s["workloads"]["chat-sampled"] = {**s["workloads"]["chat-greedy"], "max_tokens": 256}
    s["context"]["member"] = "strata"
    (res / "a").rename(tmp_path / "elsewhere")  # the baseline file is gone from the history...
    base = str(tmp_path / "elsewhere" / "summary.json")
    s["verdicts"]["chat-greedy"]["baseline"] = base  # ...but still named by the run's verdict
    write(res, "one", s)
    page = report(tmp_path, res)
    fig = figure(page)
    assert "one run: run-2005 at 2026-12-03 20:05:00 UTC" in fig
    assert "00:00:00" not in fig
    assert "one run: a bar per workload and its settings" in fig
    for label in ("chat-greedy", "chat-sampled", "max_tokens 256", "decode tok/s", "tok/J", "100", "3.2"):
        assert label in fig, label
    seen = load(page)
    assert seen.errors == [], seen.stderr[-3000:]
    assert seen.dom.count("<svg") == 1 and "one run: run-2005" in seen.dom
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = screenshot(page, ARTEFACTS / "report-one-run.png", size="1200,1400")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
