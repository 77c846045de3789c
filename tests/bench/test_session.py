"""Issue 44, item 3: one bench session for ``rigkit bench`` and the window
(:mod:`rigkit.bench.session`), with ``rigkit bench``'s rule for the host's bench settings:
a setting applies to any preset when it is not the rig preset's own figure."""

from __future__ import annotations

import json

from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from rigkit.cli.bench import bench
from rigkit.common import gpu
from rigkit.bench.session import SIZING, applied_settings, sized_preset
from rigkit.bench.workloads import PRESETS
from rigkit.host.window.bench import run_bench
from rigkit.spec.model import BenchSpec


def test_the_settings_defaults_are_the_rig_presets_own_figures():
    rig = PRESETS["rig"]
    assert {k: BenchSpec.model_fields[k].default for k in SIZING} == {k: f(rig) for k, f in SIZING.items()}


SPECS = st.builds(BenchSpec, quoting_prompt_tokens=st.sampled_from([64, 600, 29000, 31000]),
                  max_tokens=st.sampled_from([16, 48, 8192, 9000]),
                  reasoning_effort=st.sampled_from([None, "low", "medium", "high"]))


@given(SPECS, st.sampled_from(sorted(PRESETS)))
def test_a_setting_applies_when_the_operator_chose_it_or_the_preset_is_rig(spec, preset_name):
    """The rule ``rigkit bench`` had (against BenchSpec's defaults), now read from the settings as a
    dict as the window has them: the same for every spec and preset."""
    before = {k: getattr(spec, k) for k in SIZING
              if preset_name == "rig" or getattr(spec, k) != BenchSpec.model_fields[k].default}
    assert applied_settings(spec.model_dump(), preset_name) == before
    preset, quoting, max_tokens = sized_preset(preset_name, spec.model_dump(), max_tokens=33)
    assert max_tokens == 33  # the command line wins
    if "quoting_prompt_tokens" in before:
        assert quoting == spec.quoting_prompt_tokens
    effort = (preset.extra_body.get("chat_template_kwargs") or {}).get("reasoning_effort")
    assert effort == (before["reasoning_effort"] if "reasoning_effort" in before
                      else PRESETS[preset_name].extra_body.get("chat_template_kwargs", {}).get("reasoning_effort"))


def _window(replay, tmp_path, settings):
    key = tmp_path / "hq.env"
    key.write_text("VLLM_API_KEY=sk-window-key\n")
    port = replay.url.rsplit(":", 1)[1]
    plan = {"host": "rig", "tenant": "hyperqwen", "tenant_port": port, "tenant_model": "hyperqwen",
            "api_key_file": str(key), "bench_settings": settings, "context": {"quantization": "W4A16"}}
    journal = {"id": "w1", "results_dir": str(tmp_path / "w1"), "boot_to_healthy_s": 3.0, "warmup": None}
    return run_bench(plan, "small", journal, lambda: None)


def test_the_window_applies_the_operators_settings_to_the_small_preset_as_rigkit_bench_does(replay, tmp_path,
                                                                                            monkeypatch):
    monkeypatch.setattr(gpu, "query", lambda timeout_s=30.0: gpu.parse_query("", 127))
    summary = _window(replay, tmp_path, BenchSpec(max_tokens=40, reasoning_effort="low").model_dump())
    chat = [b for b in replay.requests_seen if b.get("max_tokens") == 40]
    # every request but the one quoting prompt (its own budget): warm-up, greedy, sampled
    assert len(chat) == len(replay.requests_seen) - 1 == 10 and all(b["chat_template_kwargs"] == {"reasoning_effort": "low"} for b in chat)
    assert summary["preset"] == "small" and summary["workloads"]["chat-greedy"]["status"] == "ok"
    assert {h.get("Authorization") for h in replay.seen_headers} == {"Bearer sk-window-key"}
    window_bodies = [b for b in replay.requests_seen]
    # rigkit bench --url with the same figures on the command line sends the same requests
    replay.requests_seen.clear()
    out = tmp_path / "cli"
    res = CliRunner().invoke(bench, ["--url", replay.url, "--preset", "small", "--max-tokens", "40",
                                     "--no-energy", "--out", str(out), "--model", "hyperqwen"])
    assert res.exit_code == 1 and "result: FAIL (quoting)" in res.output, res.output  # the replay never quotes
    strip = lambda bodies: [{k: v for k, v in b.items() if k not in ("messages", "chat_template_kwargs")}
                            for b in bodies]
    assert strip(replay.requests_seen) == strip(window_bodies)
    assert json.loads((out / "summary.json").read_text())["preset"] == "small"


def test_the_window_leaves_the_small_preset_alone_with_the_default_settings(replay, tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "query", lambda timeout_s=30.0: gpu.parse_query("", 127))
    _window(replay, tmp_path, BenchSpec().model_dump())
    assert {b.get("max_tokens") for b in replay.requests_seen} <= {PRESETS["small"].chat_max_tokens,
                                                                   PRESETS["small"].quoting_max_tokens}
    assert not any("chat_template_kwargs" in b for b in replay.requests_seen)
