"""The run chart reads right (issue 16 item 2): bars on their labels, failures and not-run
workloads marked where they are, empty panels left out, the warm-up's failure shown, each
request's value drawn over its bar, estimates marked."""

import json

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rigkit.report.chart import draw_run, samples_from_jsonl, write_history_svg
from rigkit.bench.results import stats


def ok(decode, prefill=None, ttft=None, counts="counted"):
    return {"status": "ok", "counts": counts, "metrics": {
        "decode_tps": stats(decode), "prefill_tps": stats(prefill or []),
        "ttft_s": stats(ttft or [])}}


def summary(**workloads):
    warm = workloads.pop("warmup", {"status": "ok", "metrics": {}})
    return {"run_id": "r1", "context": {}, "warmup": warm, "workloads": workloads,
            "verdicts": {n: {"verdict": "PASS"} for n in workloads}}


def draw(s, baseline=None, samples=None):
    fig = Figure()
    FigureCanvasAgg(fig)
    drawn = draw_run(fig, s, baseline, samples)
    return fig, drawn


def texts(ax):
    return [t.get_text() for t in ax.texts]


def test_a_lone_bar_sits_on_its_label_and_a_baseline_pair_straddles_it():
    s = summary(**{"chat-greedy": ok([100]), "quoting": ok([200])})
    base = {"workloads": {"quoting": ok([190])}}
    fig, _ = draw(s, base)
    ax = fig.axes[0]
    centres = sorted(round(p.get_x() + p.get_width() / 2, 2) for p in ax.patches)
    assert centres == [0.0, 0.81, 1.19]
    assert list(ax.get_xticks()) == [0, 1]


def test_failed_and_not_run_workloads_are_marked_at_their_labels():
    s = summary(**{"chat-greedy": ok([100]),
                   "chat-sampled": {"status": "failed", "error_kind": "stalled", "metrics": {}},
                   "quoting": {"status": "not-run", "metrics": {}}})
    fig, _ = draw(s)
    ax = fig.axes[0]
    marks = {t.get_text(): round(t.xy[0]) for t in ax.texts}
    assert marks["FAILED\nstalled\nno value measured"] == 1 and marks["not run"] == 2


def test_a_failed_workload_puts_no_mark_on_the_value_axis():
    s = summary(**{"chat-greedy": ok([100]),
                   "chat-sampled": {"status": "failed", "error_kind": "cut", "metrics": {}}})
    fig, _ = draw(s)
    ax = fig.axes[0]
    assert list(ax.lines) == []  # no marker plotted at a value (the old X sat at 0 tok/s)
    (mark,) = [t for t in ax.texts if t.get_text().startswith("FAILED")]
    assert mark.xycoords == ax.get_xaxis_transform() and mark.xy == (1, 0.5)
    assert [round(p.get_height()) for p in ax.patches if p.get_height() > 0][:1] == [100]


def test_an_estimate_is_not_drawn_beside_a_counted_baseline():
    s = summary(**{"chat-greedy": ok([40], counts="estimate"), "quoting": ok([200])})
    base = {"workloads": {"chat-greedy": ok([100]), "quoting": ok([190])}}
    fig, _ = draw(s, base)
    ax = fig.axes[0]
    heights = sorted(round(p.get_height()) for p in ax.patches)
    assert heights == [40, 190, 200]  # the counted 100 is not beside the estimated 40
    assert "baseline counted, not comparable" in texts(ax)


def test_panels_without_any_value_are_not_drawn():
    fig, drawn = draw(summary(**{"chat-greedy": ok([100])}))
    assert drawn == ["decode_tps"] and len(fig.axes) == 1


def test_a_failed_warm_up_gets_its_own_marked_column():
    s = summary(warmup={"status": "failed", "error_kind": "http-4xx", "metrics": {}},
                **{"chat-greedy": ok([100])})
    fig, _ = draw(s)
    ax = fig.axes[0]
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == ["warmup", "chat-greedy"]
    assert "FAILED\nhttp-4xx\nno value measured" in texts(ax)


def test_each_request_is_a_point_over_the_median_bar():
    fig, _ = draw(summary(**{"chat-greedy": ok([90, 100, 130])}),
                  samples={"chat-greedy": {"decode_tps": [90.0, 100.0, 130.0]}})
    ax = fig.axes[0]
    (points,) = ax.collections
    assert sorted(y for _, y in points.get_offsets()) == [90.0, 100.0, 130.0]
    assert ax.patches[0].get_height() == 100


def test_a_chunk_count_estimate_is_hatched_and_labelled():
    fig, _ = draw(summary(**{"chat-greedy": ok([40], counts="estimate")}))
    ax = fig.axes[0]
    assert ax.patches[0].get_hatch() == "xx"
    assert "~40.0 estimate" in texts(ax)
    assert "this run (estimate)" in ax.get_legend_handles_labels()[1]


def test_nothing_measured_draws_a_note_instead_of_empty_axes():
    fig, drawn = draw(summary(**{"quoting": {"status": "not-run", "error": "too small",
                                             "metrics": {}}}))
    assert drawn == [] and "nothing measured" in fig.axes[0].texts[0].get_text()


def test_requests_jsonl_samples_leave_out_the_warm_up_and_failures(tmp_path):
    p = tmp_path / "requests.jsonl"
    p.write_text('{"workload": "warmup", "discarded": true, "ok": true, "decode_tps": 1}\n'
                 '{"workload": "chat-greedy", "ok": true, "decode_tps": 50.5, "ttft_s": 0.2}\n'
                 '{"workload": "chat-greedy", "ok": false, "decode_tps": 9}\nnot json\n')
    assert samples_from_jsonl(str(p)) == {"chat-greedy": {"decode_tps": [50.5], "ttft_s": [0.2]}}


def test_requests_jsonl_samples_leave_out_an_impossible_figure_as_the_summary_does(tmp_path):
    """Issue 60: 255 tokens within 1.74 ms (146,318 tok/s) is no point to draw; the other figures stay."""
    p = tmp_path / "requests.jsonl"
    rec = {"workload": "chat-greedy", "ok": True, "completion_tokens": 256, "ttft_s": 0.05}
    p.write_text(json.dumps({**rec, "decode_tps": 146318.0}) + "\n" + json.dumps({**rec, "decode_tps": 2010.0}) + "\n")
    assert samples_from_jsonl(str(p)) == {"chat-greedy": {"decode_tps": [2010.0], "ttft_s": [0.05, 0.05]}}


def test_history_svg_links_every_point_to_its_run(tmp_path):
    from datetime import datetime, timezone
    runs = [{"time": datetime(2026, 12, 1, h, tzinfo=timezone.utc), "href": f"runs/r{h}/summary.json",
             "workloads": {"chat-greedy": ok([100 + h])}} for h in (1, 2)]
    out = tmp_path / "h.svg"
    assert write_history_svg(str(out), "t", runs, references={"decode_tps": {"rig": 118}}) == 1
    svg = out.read_text()
    assert svg.count('xlink:href="runs/r1/summary.json"') == 1
    assert 'xlink:href="runs/r2/summary.json"' in svg

