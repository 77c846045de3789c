"""`rigkit bench --url` against the replay server: counts, failures, quoting, secrets, exits."""

import json
import os

import pytest
from click.testing import CliRunner

from rigkit.cli.bench import bench
from rigkit.bench.workloads import QUOTE_END, QUOTE_START

from .replay import ENGINE_DEAD_BODY, Script, vllm_stream

ENGINE_DEAD_MSG = ENGINE_DEAD_BODY["error"]["message"]


def run(replay, tmp_path, *args):
    out = tmp_path / "out"
    result = CliRunner().invoke(bench, ["--url", replay.url, "--out", str(out), "--preset",
                                        "small", *args])
    return result, out


def jsonl(out):
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


def test_ten_by_three_stream_reports_thirty_tokens_and_what_chunk_counting_would_say(replay, tmp_path):
    replay.default = Script(vllm_stream(answer=["abc"] * 10, tokens_per_chunk=3))
    result, out = run(replay, tmp_path, "--workload", "chat-greedy", "--no-warmup")
    assert result.exit_code == 0, result.output
    assert ("  completion tokens: 30 per request (median), 120 in total from usage; a chunk "
            "count would say 40 · 3.00 tokens/chunk") in result.stdout.splitlines()
    recs = jsonl(out)
    assert [(r["completion_tokens"], r["chunk_estimate"], r["tokens_source"]) for r in recs] \
        == [(30, 10, "usage")] * 4
    assert "  speculative decoding: acceptance length 3.00 tokens/step, acceptance rate 28.6%" \
        in result.stdout.splitlines()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["workloads"]["chat-greedy"]["spec_decode"]["acceptance_length"] == 3.0
    assert summary["context"]["engine"] == "vllm"
    assert summary["context"]["quantization"] == "W4A16"
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_500_mid_run_ends_the_run_with_exit_1_and_a_verdict_naming_the_error(replay, tmp_path):
    ok = Script(vllm_stream(answer=["abc"] * 3))
    replay.queue(ok, ok, ok, Script(die=True))  # warm-up 2, chat-greedy 1 ok then dead
    result, out = run(replay, tmp_path)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    err = (f"HTTP 500 from POST /v1/chat/completions: {ENGINE_DEAD_MSG}; /health answers 503 "
           f"(engine dead)")
    assert f"chat-greedy: FAILED — {err}" in lines
    assert f"  verdict: FAIL — {err}" in lines
    assert "chat-sampled: NOT-RUN — not run: the run stopped after chat-greedy" in lines
    assert "quoting: NOT-RUN — not run: the run stopped after chat-greedy" in lines
    assert lines[-2] == "result: FAIL (chat-greedy, chat-sampled, quoting)"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["workloads"]["chat-greedy"]["n"] == 1  # the failure is not averaged in
    assert summary["workloads"]["chat-greedy"]["error_kind"] == "engine-dead"
    assert summary["exit_code"] == 1


def test_stalled_stream_fails_the_workload_with_exit_1(replay, tmp_path):
    steps = vllm_stream(answer=["a", "b"])
    replay.queue(Script(steps[:2] + [("hold",)]))  # nothing more until the client gives up
    result, _ = run(replay, tmp_path, "--no-warmup", "--workload", "chat-greedy",
                    "--stall-timeout", "0.3")
    assert result.exit_code == 1
    assert ("chat-greedy: FAILED — stalled: no data for 0.3 s (stall timeout) after 1 token "
            "chunks; /health answers 200") in result.stdout.splitlines()


def _passage(prompt: str) -> str:
    start = prompt.index(QUOTE_START + "\n") + len(QUOTE_START) + 1
    return prompt[start:prompt.index("\n" + QUOTE_END)]


def test_quoting_passes_when_the_passage_comes_back_verbatim(replay, tmp_path):
    replay.queue(Script(quote=True))
    result, out = run(replay, tmp_path, "--no-warmup", "--workload", "quoting")
    assert result.exit_code == 0, result.output
    prompt = replay.requests_seen[-1]["messages"][0]["content"]
    passage = _passage(prompt)
    assert f"  verbatim PASS ({len(passage)} characters)" in result.stdout.splitlines()


def test_quoting_fails_with_the_first_differing_position(replay, tmp_path):
    replay.queue(Script(quote=True, quote_diff_at=17))
    result, out = run(replay, tmp_path, "--no-warmup", "--workload", "quoting")
    assert result.exit_code == 1
    prompt = replay.requests_seen[-1]["messages"][0]["content"]
    passage = _passage(prompt)
    msg = (f"verbatim FAIL: answer differs from the quoted passage at character 17 (line 1, "
           f"column 18): expected {passage[17:41]!r}, got {'#' + passage[18:41]!r}")
    assert f"  {msg}" in result.stdout.splitlines()
    rec = jsonl(out)[0]
    assert (rec["verbatim"]["passed"], rec["verbatim"]["first_diff"]) == (False, 17)


def test_each_run_quotes_behind_a_unique_prefix(replay, tmp_path):
    replay.default = Script(quote=True)
    run(replay, tmp_path, "--no-warmup", "--workload", "quoting")
    run(replay, tmp_path, "--no-warmup", "--workload", "quoting", "--out", str(tmp_path / "b"))
    first, second = (r["messages"][0]["content"] for r in replay.requests_seen)
    assert first.startswith("Run ") and first.split("\n")[0] != second.split("\n")[0]


def test_api_key_is_sent_as_bearer_and_never_written_or_printed(replay, tmp_path):
    key_file = tmp_path / "hyperqwen.env"
    key_file.write_text("# rigkit\nVLLM_API_KEY=sk-test-do-not-leak-9f3a\n")
    replay.queue(Script(quote=True))
    result, out = run(replay, tmp_path, "--api-key-file", str(key_file))
    assert {h.get("Authorization") for h in replay.seen_headers} == {
        "Bearer sk-test-do-not-leak-9f3a"}
    blobs = [result.stdout, result.stderr] + [p.read_bytes().decode("latin-1")
                                              for p in out.iterdir()]
    assert not [b for b in blobs if "sk-test-do-not-leak-9f3a" in b]


def test_key_file_without_the_key_is_invalid_input(replay, tmp_path):
    key_file = tmp_path / "empty.env"
    key_file.write_text("OTHER=1\n")
    result, _ = run(replay, tmp_path, "--api-key-file", str(key_file))
    assert result.exit_code == 2
    assert result.stderr == f"rigkit bench: --api-key-file: VLLM_API_KEY not found in {key_file}\n"


@pytest.mark.parametrize("args", [[], ["--url", "http://x", "--host", "h", "--member", "m"]])
def test_url_or_host_and_member_is_required(args):
    result = CliRunner().invoke(bench, args)
    assert result.exit_code == 2
    assert "Error: give either --url, or --host and --member (with -i)" in result.stderr


def test_host_without_member_is_a_usage_error():
    result = CliRunner().invoke(bench, ["--host", "rig"])
    assert result.exit_code == 2
    assert "Error: --host and --member go together" in result.stderr


def test_unreadable_baseline_is_invalid_input(replay, tmp_path):
    result, _ = run(replay, tmp_path, "--baseline", str(tmp_path / "nope.json"))
    assert result.exit_code == 2
    assert result.stderr == (f"rigkit bench: --baseline {tmp_path / 'nope.json'}: cannot read "
                             f"(No such file or directory)\n")


def test_unreachable_url_exits_1(tmp_path):
    result = CliRunner().invoke(bench, ["--url", "http://127.0.0.1:9", "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr == "rigkit bench: http://127.0.0.1:9: not reachable (ConnectionError)\n"


def test_much_slower_than_a_matching_baseline_fails_and_shows_the_speed_up(replay, tmp_path):
    ctx = {"gpu": "NVIDIA GeForce RTX 3090", "driver": "610.57", "power_limit_w": 420,
           "speculative": "dflash2"}
    (tmp_path / "ctx.json").write_text(json.dumps(ctx))
    # 100 ms between chunks: decode is the server's pace, so each run is stable (this machine's
    # jitter of ~10 ms is a few % of it; an unstable one is measured again)
    replay.default = Script(vllm_stream(answer=["abc"] * 4, gap_s=0.1))
    result, out = run(replay, tmp_path, "--no-warmup", "--workload", "chat-greedy",
                      "--context", str(tmp_path / "ctx.json"), "--repeat-unstable", "2")
    summary = json.loads((out / "summary.json").read_text())
    decode = summary["workloads"]["chat-greedy"]["metrics"]["decode_tps"]
    for k in ("median", "min", "max"):
        decode[k] *= 100  # every request of the baseline 100x faster: beyond the noise of both
    (tmp_path / "base.json").write_text(json.dumps(summary))
    result, out2 = run(replay, tmp_path, "--no-warmup", "--workload", "chat-greedy",
                       "--context", str(tmp_path / "ctx.json"), "--baseline",
                       str(tmp_path / "base.json"), "--out", str(tmp_path / "second"),
                       "--repeat-unstable", "1")  # the slowdown holds when measured again: a FAIL
    assert result.exit_code == 1
    verdict = json.loads((tmp_path / "second" / "summary.json").read_text())["verdicts"]
    assert verdict["chat-greedy"]["verdict"] == "FAIL"
    assert verdict["chat-greedy"]["reasons"][0].startswith("decode ")
    assert "% below baseline" in verdict["chat-greedy"]["reasons"][0]
    assert verdict["chat-greedy"]["reasons"][0].endswith("; measured 2 times)")
    assert any(line.startswith("speed-up vs vllm qwen3.8-27b W4A16: chat-greedy 0.0")
               for line in result.stdout.splitlines())


def test_a_url_runs_metrics_are_labelled_by_what_it_measured_and_a_second_file_of_the_same_is_refused(replay, tmp_path):
    """Issue 57: a bare --url run's series carry the URL and the model asked for (before: host="" member="",
    so two runs against two servers made one series in two files, and node_exporter dropped one); a second
    file carrying the same series is refused (exit 1, nothing written), naming the first."""
    from prometheus_client.parser import text_string_to_metric_families

    replay.default = Script(vllm_stream(answer=["abc"] * 4, tokens_per_chunk=1))
    first, second = tmp_path / "rigkit_bench_a.prom", tmp_path / "rigkit_bench_b.prom"
    result, _ = run(replay, tmp_path, "--workload", "chat-greedy", "--no-warmup", "--model", "qwen",
                    "--metrics", str(first))
    assert result.exit_code == 0, result.output
    labels = {tuple(sorted(s.labels.items())) for fam in text_string_to_metric_families(first.read_text())
              for s in fam.samples if s.name == "rigkit_bench_timestamp_seconds"}  # decode may be n/a (too fast to measure)
    assert labels == {(("host", replay.url.rstrip("/")), ("member", "qwen"), ("workload", "chat-greedy"))}
    result, _ = run(replay, tmp_path, "--workload", "chat-greedy", "--no-warmup", "--model", "qwen",
                    "--metrics", str(second))
    assert result.exit_code == 1, result.output
    assert f"{second} not written: {first} already carries rigkit_bench_" in result.stderr
    assert not second.exists()
