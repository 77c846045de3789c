"""The fleet comparison of ``rigkit report`` (issue 67, rigkit.report.fleet): each rig against the other
rigs' median and spread with the bench's own noise rules; the odd rig named with its figure."""

from __future__ import annotations

import statistics
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.bench.results import compare_speed
from rigkit.report import fleet
from rigkit.report.page import Run

CTX = {"gpu": "NVIDIA GeForce RTX 3090", "driver": "610.57", "power_limit_w": 420, "engine": "llama.cpp",
       "engine_version": "b1", "model": "m", "quantization": "Q4_K_M", "speculative": "none"}


def _stats(values: list[float]) -> dict:
    mean = statistics.mean(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values),
            "cv": statistics.stdev(values) / mean if len(values) > 1 else None}


def _run(host: str, values: list[float], member: str = "strata", **ctx) -> Run:
    summary = {"preset": "small", "context": {**CTX, **ctx, "host": host, "member": member},
               "workloads": {"chat-greedy": {"max_tokens": 256, "metrics": {"decode_tps": _stats(values)}}}}
    return Run(datetime(2026, 12, 6, tzinfo=timezone.utc), f"run-{host}", "/r", summary)


def _runs(figures: dict[str, list[float]], **ctx) -> dict:
    return {(h, "strata"): [_run(h, v, **ctx)] for h, v in figures.items()}


def test_a_rig_several_times_slower_than_the_others_is_named_the_slow_outlier_with_its_figure():
    figs = {"a": [40.1, 40.5, 39.8], "b": [41.0, 40.2, 40.7], "c": [10.2, 10.4, 10.1], "d": [40.3, 39.9, 40.8]}
    (entry,) = fleet.fleet_comparison(_runs(figs), list(figs))
    assert [r["host"] for r in entry["rigs"] if r["outlier"]] == ["c"]
    assert entry["outliers"][0].startswith("c 10.2 tok/s, slow:")
    assert entry["fleet"] == {"median": pytest.approx(40.2), "low": 10.2, "high": pytest.approx(40.7), "n_rigs": 4}
    assert any("outlier: c 10.2 tok/s, slow" in line for line in fleet.lines([entry]))


def test_rigs_whose_requests_overlap_name_no_outlier_and_two_rigs_are_not_a_fleet():
    figs = {"a": [40.1, 42.5, 39.8], "b": [41.0, 40.2, 40.7], "c": [39.2, 41.4, 40.1]}
    (entry,) = fleet.fleet_comparison(_runs(figs), list(figs))
    assert entry["outliers"] == [] and all(r["verdict"] == "PASS" for r in entry["rigs"])
    (two,) = fleet.fleet_comparison(_runs({"a": [40.0, 40.1, 40.2], "b": [10.0, 10.1, 10.2]}), ["a", "b"])
    assert two["outliers"] == [] and "needs 3" in two["note"]


def test_rigs_of_another_context_or_a_host_not_asked_are_not_compared_together():
    runs = {**_runs({"a": [40.0, 40.1, 40.2], "b": [40.3, 40.1, 40.2]}),
            **_runs({"c": [10.0, 10.1, 10.2]}, power_limit_w=250), **_runs({"d": [10.0, 10.1, 10.2]})}
    entries = fleet.fleet_comparison(runs, ["a", "b", "c"])
    assert sorted(len(e["rigs"]) for e in entries) == [1, 2]  # c (250 W) apart; d not asked
    assert all(not e["outliers"] for e in entries)


FIG = st.floats(5, 200, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(FIG, min_size=3, max_size=5), min_size=3, max_size=6))
def test_an_outlier_is_exactly_the_benchs_own_verdict_against_the_others_pooled(samples):
    hosts = [f"h{i}" for i in range(len(samples))]
    figs = dict(zip(hosts, samples))
    (entry,) = fleet.fleet_comparison(_runs(figs), hosts)
    for rig in entry["rigs"]:
        others = [_stats(figs[h]) for h in hosts if h != rig["host"]]
        lo = min(o["min"] for o in others)
        hi = max(o["max"] for o in others)
        if rig["outlier"] == "slow":  # every request slower than every other rig's: beyond the noise
            assert rig["max"] < lo and rig["verdict"] == "FAIL"
        if rig["outlier"] == "fast":
            assert rig["min"] > hi
        if lo <= rig["max"] and rig["min"] <= hi:  # overlapping the others: never named
            assert rig["outlier"] is None
        pooled = {"median": statistics.median(o["median"] for o in others), "min": lo, "max": hi,
                  "n": sum(o["n"] for o in others)}
        assert rig["verdict"] == compare_speed(rig, pooled)[0]


def test_the_page_renders_judged_groups_and_groups_too_small_to_judge_alike(tmp_path):
    """Every rig of every entry has one shape (``verdict``, ``reason``, ``outlier``; None when the group is
    too small to judge): the page's StrictUndefined template read ``r.verdict`` of a two-rig group's rig and
    ``rigkit report`` crashed (the harness's README bench, three hosts' results, one group of two)."""
    from rigkit.report.page import write_report

    runs = {**_runs({"a": [40.1, 40.5, 39.8], "b": [41.0, 40.2, 40.7], "c": [10.2, 10.4, 10.1]}),
            **_runs({"d": [40.0, 40.1, 40.2], "e": [40.3, 40.1, 40.2]}, power_limit_w=250)}
    entries = fleet.fleet_comparison(runs, ["a", "b", "c", "d", "e"])
    assert sorted(len(e["rigs"]) for e in entries) == [2, 3]
    assert all({"verdict", "reason", "outlier"} <= set(r) for e in entries for r in e["rigs"])
    page = open(write_report([], "inventory/x.py", str(tmp_path), str(tmp_path / "results"), {}, "run live",
                             fleet=entries)).read()
    assert page.count('data-fleet="strata/chat-greedy/decode_tps"') == 2
    assert "c 10.2 tok/s, slow:" in page and "a fleet comparison needs 3" in page
