"""Speculative decoding's acceptance (issue 65): vLLM's counters held to vLLM's source, read from the
stand-in HyperQwen engine as a local process (tests/harness/stubs/openai_stub.py), never scraped from a
member llama-swap does not show ready, never merged with someone else's requests, and read in windows
along the long workload, where a planted collapse is named in its window.

vLLM's families, as vLLM's source defines them (what :data:`VLLM` transcribes, one line each):
``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingProm.__init__`` at commit
016a8587edb04ae53c913a1da9355a07dc0ca4ae (four ``prometheus_client.Counter``; the per-position one
``labelnames + ["position"]``), and ``vllm/v1/metrics/loggers.py`` ``PrometheusStatLogger.__init__`` at
commit 005a810bc40faa25b8870fbc8559c3462581eee3 (``labelnames = ["model_name", "engine"]``;
``vllm:request_success`` with ``labelnames + ["finished_reason"]``). The exposition vLLM serves is then
prometheus-client's own (:func:`vllm_exposition` builds it with the same library and definitions).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rigkit.bench import metrics
from rigkit.bench.context import Target
from rigkit.bench.runner import report_lines, run_workloads
from rigkit.bench.workloads import PRESETS, RequestSpec, Workload, build_workloads
from rigkit.report import prometheus

from .replay import Script, vllm_stream
from .standin import stand_in

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "harness"))

#: vLLM's families: name → (documentation, label names). Source: module docstring.
VLLM = {
    "vllm:spec_decode_num_drafts": ("Number of spec decoding drafts.", ("model_name", "engine")),
    "vllm:spec_decode_num_draft_tokens": ("Number of draft tokens.", ("model_name", "engine")),
    "vllm:spec_decode_num_accepted_tokens": ("Number of accepted tokens.", ("model_name", "engine")),
    "vllm:spec_decode_num_accepted_tokens_per_pos": ("Accepted tokens per draft position.",
                                                     ("model_name", "engine", "position")),
    "vllm:request_success": ("Count of successfully processed requests.", ("model_name", "engine", "finished_reason")),
}


def vllm_exposition(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int], requests_: dict[str, int],
                    engines: int = 1) -> str:
    """The text vLLM's ``/metrics`` serves for these counter values: prometheus-client's own exposition of
    the :data:`VLLM` families (``_total`` and ``_created`` samples), ``engines`` engines each holding the values."""
    reg = CollectorRegistry()
    c = {name: Counter(name, doc, labelnames=list(labels), registry=reg) for name, (doc, labels) in VLLM.items()}
    for e in range(engines):
        lv = ["hq", str(e)]
        c["vllm:spec_decode_num_drafts"].labels(*lv).inc(drafts)
        c["vllm:spec_decode_num_draft_tokens"].labels(*lv).inc(draft_tokens)
        c["vllm:spec_decode_num_accepted_tokens"].labels(*lv).inc(accepted)
        for pos, v in enumerate(per_pos):
            c["vllm:spec_decode_num_accepted_tokens_per_pos"].labels(*lv, str(pos)).inc(v)
        for why, v in requests_.items():
            c["vllm:request_success"].labels(*lv, why).inc(v)
    return generate_latest(reg).decode()


def test_rigkits_table_is_vllms():
    assert {fam: labels for fam, labels in metrics.VLLM_COUNTERS.values()} == {n: ls for n, (_d, ls) in VLLM.items()}
    assert set(metrics.COUNTERS.values()) == {n + "_total" for n in VLLM}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(0, 7), st.lists(st.integers(0, 10**5), min_size=0, max_size=15),
       st.dictionaries(st.sampled_from(["stop", "length", "abort"]), st.integers(0, 1000)), st.integers(1, 3))
def test_the_reader_sums_what_vllms_exposition_says_over_engines(drafts, k, per_pos, reqs, engines):
    text = vllm_exposition(drafts, drafts * k, sum(per_pos), per_pos, reqs, engines)
    got = metrics.parse_counters(text)
    assert got["drafts"] == drafts * engines and got["draft_tokens"] == drafts * k * engines
    assert got["accepted"] == sum(per_pos) * engines
    assert got.get("per_pos", {}) == {i: float(v * engines) for i, v in enumerate(per_pos)}
    assert got.get("requests", 0.0) == sum(reqs.values()) * engines


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 10**6), st.integers(1, 15), st.data())
def test_acceptance_is_bounded_and_mixed_intervals_carry_no_figure(drafts, k, data):
    accepted = data.draw(st.integers(0, drafts * k))
    own = data.draw(st.integers(0, 50))
    finished = data.draw(st.integers(0, 60))
    before = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "requests": 0.0}
    after = {"drafts": float(drafts), "draft_tokens": float(drafts * k), "accepted": float(accepted),
             "requests": float(finished)}
    d = metrics.spec_delta(before, after, own_requests=own)
    assert d["generated"] == drafts + accepted
    assert d["mixed"] is (finished > own)
    if d["mixed"]:
        assert d["foreign_requests"] == finished - own
        assert d["acceptance_rate"] is None and d["acceptance_length"] is None and d["by_position"] == {}
    else:
        assert 0.0 <= d["acceptance_rate"] <= 1.0
        assert 1.0 <= d["acceptance_length"] <= 1 + k
        assert d["acceptance_length"] == round(1 + accepted / drafts, 3)
    no_counter = {key: v for key, v in after.items() if key != "requests"}  # an engine without the request counter
    assert metrics.spec_delta(before, no_counter, own)["mixed"] is None


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 300)), min_size=1, max_size=30))
def test_windows_tile_the_generation_without_gap_or_overlap(steps_):
    """Whatever the scrapes saw (drafts and accepted added between two), the windows with drafts in them
    are in order, each starts where the generation stood at its first scrape, and their tokens add up."""
    samples, c = [{"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}], [0, 0]
    for dr, acc in steps_:
        acc = min(acc, dr * 7)
        c = [c[0] + dr, c[1] + acc]
        samples.append({"drafts": float(c[0]), "draft_tokens": float(7 * c[0]), "accepted": float(c[1])})
    it = iter(samples)
    reader = metrics.WindowReader(lambda: next(it), window_tokens=10)
    reader.start()
    for n in range(1, len(samples) - 1):
        reader.on_chunk(10**9 * n)  # always past the boundary: one scrape per call
    reader.finish()
    wins = reader.windows()
    assert [w["index"] for w in wins] == list(range(1, len(wins) + 1))
    assert sum(w["generated"] for w in wins) == c[0] + c[1]
    for a, b in zip(wins, wins[1:]):
        assert a["to_token"] <= b["from_token"]
    assert all(w["to_token"] - w["from_token"] == w["generated"] for w in wins)


# --- the stand-in engine, a local process ---------------------------------------------------------

@pytest.fixture
def engine(tmp_path):
    """The stand-in HyperQwen engine (DFLASH_TOKENS 7) and its control folder (:mod:`.standin`)."""
    control = tmp_path / "control"
    with stand_in(control) as url:
        yield url, control


def target(url: str) -> Target:
    return Target(chat_url=url + "/v1/chat/completions", aux_base=url, label="stand-in", model="hq")


def test_the_stand_ins_families_are_vllms(engine):
    url, _ = engine
    text = requests.get(url + "/metrics", timeout=5).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(fams) == set(VLLM)
    for name, (doc, labels) in VLLM.items():
        assert (fams[name].type, fams[name].documentation) == ("counter", doc)
        assert all(tuple(sorted(s.labels)) == tuple(sorted(labels)) for s in fams[name].samples), name
    assert sorted(s.labels["position"] for s in fams["vllm:spec_decode_num_accepted_tokens_per_pos"].samples) == \
        [str(i) for i in range(7)]


def _stream(url: str, content: str, max_tokens: int, **extra) -> tuple[list[str], dict]:
    body = {"model": "hq", "stream": True, "max_tokens": max_tokens, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": content}], **extra}
    chunks, usage = [], {}
    with requests.post(url + "/v1/chat/completions", json=body, stream=True, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                ev = json.loads(line[6:])
                if ev.get("choices"):
                    chunks.append(ev["choices"][0]["delta"]["content"])
                usage = ev.get("usage") or usage
    return chunks, usage


def test_tokens_per_chunk_are_the_accepted_batch_and_quoting_accepts_more_than_chat(engine):
    url, _ = engine
    before = metrics.parse_counters(requests.get(url + "/metrics", timeout=5).text)
    chunks, usage = _stream(url, "think hard", 64)
    mid = metrics.parse_counters(requests.get(url + "/metrics", timeout=5).text)
    chat = metrics.spec_delta(before, mid, own_requests=1)
    # one chunk for the prefill's token, then one per verify step: its accepted tokens plus the bonus one
    assert len(chunks) == chat["drafts"] + 1 and usage["completion_tokens"] == chat["generated"] + 1
    passage = " ".join(f"word{i}" for i in range(400))
    _stream(url, f"<<<QUOTE START>>>\n{passage}\n<<<QUOTE END>>>", 4096)
    after = metrics.parse_counters(requests.get(url + "/metrics", timeout=5).text)
    quoting = metrics.spec_delta(mid, after, own_requests=1)
    assert chat["mixed"] is False and quoting["mixed"] is False
    assert chat["acceptance_rate"] < 0.3 < 0.5 < quoting["acceptance_rate"]
    rates = list(quoting["by_position"].values())
    assert len(rates) == 7 and rates == sorted(rates, reverse=True)  # the model: later positions kept less


def test_foreign_traffic_makes_the_workload_mixed_and_its_metrics_say_so(engine, tmp_path):
    url, _ = engine
    wl = build_workloads(PRESETS["small"], ["chat-greedy"], model="hq", nonce="n")
    sent = []

    def someone_else(name, done, total):  # another client of the engine, during the bench's workload
        if done == 1 and not sent:
            sent.append(requests.post(url + "/v1/chat/completions", timeout=30, json={
                "model": "hq", "max_tokens": 8, "messages": [{"role": "user", "content": "ping"}]}).status_code)

    summaries, warnings = run_workloads(target(url), wl, run_id="r", out_dir=str(tmp_path), progress=someone_else)
    sd = summaries["chat-greedy"]["spec_decode"]
    assert sent == [200] and sd["mixed"] is True and sd["foreign_requests"] == 1
    assert sd["acceptance_rate"] is None
    assert any("1 request(s) that were not the bench's" in w for w in warnings), warnings
    summary = {"timestamp": "2026-12-06T04:00:00+00:00", "workloads": summaries, "verdicts": {}}
    series = {(s.name, s.labels.get("workload")): s.value
              for f in prometheus.bench_families(summary, "rig", "hyperqwen") for s in f.samples}
    assert series[("rigkit_bench_spec_acceptance_mixed", "chat-greedy")] == 1.0
    assert ("rigkit_bench_spec_acceptance_rate", "chat-greedy") not in series
    assert "MIXED — 1 request(s) not the bench's" in "\n".join(report_lines(_summary(summaries)))


def _summary(summaries, context=None):
    from rigkit.bench.runner import build_summary

    return build_summary("r", Target(chat_url="u", aux_base="u", label="t"), context or {}, summaries, [], [],
                         "small")


def test_a_planted_collapse_at_14500_tokens_is_named_in_its_window_of_the_rig_presets_long_generation(engine, tmp_path):
    """The rig preset's long workload (≥ 16k tokens) against the stand-in with acceptance planted to fall
    to 0 at the 14,500th generated token (club-3090 #1052's figure): the WARN names the window that holds
    it (or the next, when the window holding it kept enough acceptance before the fall), never an earlier one."""
    url, control = engine
    (control / "collapse_after").write_text("14500")
    preset = PRESETS["rig"]
    assert preset.long_tokens >= 16_384
    wl = [w for w in build_workloads(preset, ["long"], model="hq", nonce="n")]
    wl[0].requests[0].payload.pop("chat_template_kwargs", None)
    summaries, warnings = run_workloads(target(url), wl, run_id="r", out_dir=str(tmp_path), acceptance_floor=0.05)
    w = summaries["long"]
    sd = w["spec_decode"]
    wins = sd["windows"]
    assert w["status"] == "ok" and w["completion_tokens_total"] == preset.long_tokens
    assert len(wins) >= 6 and wins[-1]["to_token"] == preset.long_tokens - 1  # the prefill's token has no draft
    fell = sd["collapse"]
    holding = next(x for x in wins if x["from_token"] <= 14_500 - 1 < x["to_token"])
    assert fell["window"] in (holding["index"], holding["index"] + 1)
    assert all(x["acceptance_rate"] >= 0.05 for x in wins if x["index"] < fell["window"])
    text = [x for x in warnings if "acceptance fell" in x]
    assert len(text) == 1 and f"window {fell['window']} of {len(wins)}" in text[0], warnings
    summary = _summary(summaries)
    assert summary["verdicts"]["long"]["verdict"] == "WARN"


def test_the_long_workload_without_a_collapse_warns_of_nothing(engine, tmp_path):
    url, _ = engine
    wl = build_workloads(PRESETS["small"], ["long"], model="hq", nonce="n")
    summaries, warnings = run_workloads(target(url), wl, run_id="r", out_dir=str(tmp_path))
    sd = summaries["long"]["spec_decode"]
    assert sd["windows"] and sd["collapse"] is None and not [x for x in warnings if "acceptance fell" in x]


@pytest.mark.parametrize("state", [None, "starting", "stopping", "shutdown"])
def test_a_member_llama_swap_does_not_show_ready_is_never_scraped(replay, state):
    """``/upstream/<m>/metrics`` would load it (llama-swap v250 ``handleUpstream``): no such GET is sent."""
    replay.running = [] if state is None else [{"model": "m", "state": state}]
    got, why = metrics.scrape(replay.url + "/upstream/m", swap_base=replay.url, member="m")
    assert got is None and f"member m is {state or 'stopped'} in llama-swap's /running: not scraped" in why
    assert replay.gets == ["/running"]
    replay.running = [{"model": "m", "state": "ready"}]
    got, why = metrics.scrape(replay.url + "/upstream/m", swap_base=replay.url, member="m")
    assert why is None and replay.gets[-2:] == ["/running", "/upstream/m/metrics"]


def test_a_member_without_speculative_decoding_says_so_once(replay, tmp_path):
    """Said once for a member that declares speculative decoding (the run's context names a method),
    never for one that declares none."""
    replay.metrics_enabled = False
    replay.default = Script(vllm_stream(answer=["abc"] * 3))
    wls = [Workload(n, [RequestSpec("p", 0, {"model": "m", "messages": [{"role": "user", "content": "x"}],
                                              "max_tokens": 8})]) for n in ("chat-greedy", "chat-sampled")]
    summaries, _ = run_workloads(Target(chat_url=replay.url + "/v1/chat/completions", aux_base=replay.url,
                                        label="t"), wls, run_id="r", out_dir=str(tmp_path))
    declared = {"speculative": "dflash2 (DFLASH_TOKENS=7)"}
    lines = [x for x in report_lines(_summary(summaries, declared)) if "speculative decoding" in x]
    assert lines == ["  speculative decoding: not read — /metrics answered HTTP 404"]
    # the operator's report: every llama.cpp smoke said "not read — /metrics answered HTTP 501" for a member
    # with no speculative decoding configured (llama.cpp's /props says "none"): nothing said there
    for none in ({}, {"speculative": None}, {"speculative": "none"}, {"speculative": "none, none"}):
        assert not [x for x in report_lines(_summary(summaries, none)) if "speculative decoding" in x], none
    # and once in the report's runs table, for a member whose /metrics has no vLLM counters
    from datetime import datetime, timezone

    from rigkit.report.page import Run, spec_cells

    quiet = {n: {"spec_decode": None, "spec_decode_note": metrics.NO_SPEC} for n in ("chat-greedy", "quoting")}
    run = Run(datetime.now(timezone.utc), "r", "f", {"workloads": quiet})
    assert spec_cells(run) == [("", "no speculative decoding on this member", metrics.NO_SPEC)]


@pytest.mark.slow  # Debian's promtool, fetched and unpacked on first use (tests/harness/promtool.py)
def test_the_bench_families_pass_promtool(engine, tmp_path):
    import promtool

    url, _ = engine
    wl = build_workloads(PRESETS["small"], ["chat-greedy", "quoting"], model="hq", nonce="n")
    summaries, _ = run_workloads(target(url), wl, run_id="r", out_dir=str(tmp_path))
    summary = _summary(summaries)
    path = tmp_path / "rigkit_bench.prom"
    prometheus.write(str(path), prometheus.bench_families(summary, "rig", "hyperqwen"))
    text = path.read_text()
    code, said = promtool.check_metrics(text)
    assert code == 0, said
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    rate = {s.labels["workload"]: s.value for s in fams["rigkit_bench_spec_acceptance_rate"].samples}
    assert rate["chat-greedy"] < rate["quoting"]
    length = {s.labels["workload"]: s.value for s in fams["rigkit_bench_spec_acceptance_length"].samples}
    assert all(1.0 <= v <= 8.0 for v in length.values())
    pos = [s for s in fams["rigkit_bench_spec_acceptance_rate_by_position"].samples if s.labels["workload"] == "quoting"]
    assert sorted(s.labels["position"] for s in pos) == [str(i) for i in range(7)]
    assert {s.labels["workload"]: s.value for s in fams["rigkit_bench_spec_acceptance_mixed"].samples} == \
        {"chat-greedy": 0.0, "quoting": 0.0}


def test_the_cli_imports_no_http_client_before_its_commands_run():
    """``rigkit.cli`` imports this module's floor for ``--acceptance-floor``; a ``requests`` imported with it
    puts urllib3's ssl ahead of pyinfra's gevent monkey-patching, and ``rigkit lock`` then recursed in ssl
    (the golden build's lock, issue 65). The reader imports it where it is used."""
    import subprocess

    code = "import sys, rigkit.cli.main; print(sorted(m for m in ('requests', 'urllib3') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.fixture(scope="module", params=[3, 7, 15])
def engine_at(request, tmp_path_factory):
    """The stand-in at draft length 3, 7 and 15 (a process each)."""
    with stand_in(tmp_path_factory.mktemp("control"), draft=request.param) as url:
        yield url, request.param


@settings(max_examples=8, deadline=None)
@given(k=st.integers(1, 300))
def test_each_chunk_is_one_verify_steps_accepted_batch_and_the_counters_add_them_up(engine_at, k):
    """Every chat answer of the stand-in: its first chunk the prefill's one token, each later chunk one
    verify step (its accepted drafts and the bonus token; a chat token is one ``sandbox ``); the counters
    moved by exactly those steps: drafts, draft tokens (d per step), accepted, and per position p the steps
    that kept more than p."""
    url, d = engine_at
    before = metrics.parse_counters(requests.get(url + "/metrics", timeout=5).text)
    chunks, usage = _stream(url, "think", k, ignore_eos=True)
    after = metrics.parse_counters(requests.get(url + "/metrics", timeout=5).text)
    sizes = [c.count("sandbox") for c in chunks]
    assert sum(sizes) == usage["completion_tokens"] == k and sizes[0] == 1
    kept = [n - 1 for n in sizes[1:]]
    assert all(0 <= a <= d for a in kept)
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in ("drafts", "draft_tokens", "accepted", "requests")}
    assert delta == {"drafts": len(kept), "draft_tokens": d * len(kept), "accepted": sum(kept), "requests": 1}
    per_pos = {p: after["per_pos"][p] - before["per_pos"].get(p, 0.0) for p in after["per_pos"]}
    assert per_pos == {p: float(sum(1 for a in kept if a > p)) for p in range(d)}


@given(st.lists(st.sampled_from(["none", "None", " none", "", "draft-mtp", "draft-simple", "dflash2 (DFLASH_TOKENS=7)"]),
                max_size=4))
def test_speculative_is_declared_exactly_when_a_method_other_than_none_is_named(parts):
    from rigkit.bench.runner import declares_speculative

    value = ",".join(parts)
    named = [p for p in parts if p.strip().lower() not in ("", "none")]
    assert declares_speculative(value) is bool(named)
    assert not declares_speculative(None)
