"""What the rig can give, one truth per thing, and the operator's units read by systemd's grammar
(rigkit/spec/limits.py, rigkit/spec/unit_files.py; issue #59): each kind refused naming the field, the
value and the rule; the valid neighbours accepted."""
from __future__ import annotations

import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rigkit.spec import limits, unit_files

from .refusals import problems, refusal_tests

REL = "https://github.com/mostlygeek/llama-swap/releases/download"
_DYN = {"cmd": "srv --port ${PORT}", "vram_gib": 1, "cold_boot_s": 5}


REFUSED = [
    ({"llama_swap": {"user": "root"}}, "llama_swap.user", "'root'", "unprivileged user"),
    ({"llama_swap": {"user": "bob"}, "operator_user": "bob"}, "llama_swap.user", "'bob'", "the operator_user"),
    ({"llama_swap": {"port": 80}}, "llama_swap.port", "80", "CAP_NET_BIND_SERVICE"),
    ({"llama_swap": {"start_port": 65535, "members": {"a": _DYN, "b": _DYN}}}, "llama_swap.start_port", "65535",
     "up to 65536 > 65535"),
    ({"gpu_vram_gib": 24576}, "gpu_vram_gib", "24576.0", "24576 MiB is 24 GiB"),
    ({"llama_swap": {"members": {"strata": {"cold_boot_s": 120000}}, "health_check_timeout_s": 180000}},
     "llama_swap.members.strata.cold_boot_s", "120000.0", "milliseconds?"),
    ({"strata": {"stop_timeout_s": 30000}}, "strata.stop_timeout_s", "30000", "milliseconds?"),
    ({"models": {"strata": {"repo_id": "a/b", "url": "https://x.example/y.gguf", "sha256": "0" * 64}}},
     "models.strata.url", "'https://x.example/y.gguf'", "one source per model"),
    ({"llama_swap": {"release_url": f"{REL}/v249/llama-swap_249_linux_amd64.tar.gz"}}, "llama_swap.release_url",
     f"'{REL}/v249/llama-swap_249_linux_amd64.tar.gz'", "beside llama_swap.version 'v250'"),
    ({"llama_swap": {"release_url": f"{REL}/v250/llama-swap_250_linux_arm64.tar.gz"}}, "llama_swap.release_url",
     f"'{REL}/v250/llama-swap_250_linux_arm64.tar.gz'", "linux_arm64"),
    ({"strata": {"model_file": "m.safetensors"}}, "strata.model_file", "'m.safetensors'", "llama.cpp serves GGUF"),
    ({"gguf_baseline": {"model_file": "q-00002-of-00003.gguf"}}, "gguf_baseline.model_file", "'q-00002-of-00003.gguf'",
     "'q-00001-of-00003.gguf'"),
    ({"paused_timers": ["agent.timer", "rigkit-keeper.timer"]}, "paused_timers[1]", "'rigkit-keeper.timer'",
     "rigkit's own timer"),
]


ACCEPTED = [
    {"llama_swap": {"port": 1024, "user": "swap", "start_port": 65534, "members": {"a": _DYN, "b": _DYN}},
     "operator_user": "bob"},
    {"gpu_vram_gib": 288, "llama_swap": {"members": {"strata": {"cold_boot_s": 3000}}, "health_check_timeout_s": 4500}},
    {"models": {"strata": {"url": "https://x.example/y.gguf", "sha256": "0" * 64, "repo_id": None}}},
    {"llama_swap": {"release_url": "http://10.0.0.1/releases/llama-swap_250_linux_amd64.tar.gz"}},
    {"strata": {"model_file": "m-00001-of-00003.gguf"}},
    {"paused_timers": ["agent.timer"]},
]


test_each_kind_is_refused_naming_the_field_the_value_and_the_rule, test_the_valid_neighbours_are_accepted = \
    refusal_tests(REFUSED, ACCEPTED, id_width=20)


@given(st.floats(1, limits.CARD_GIB_MAX), st.floats(1, 10 ** 7))
def test_a_cold_boot_is_refused_exactly_above_the_bound_tied_to_the_card(gib, boot):
    found = [p for p in problems({"gpu_vram_gib": gib, "vram_reserve_gib": 0.5, "vram_idle_mib": 1,
                                  "llama_swap": {"members": {"strata": {"cold_boot_s": boot}},
                                                 "health_check_timeout_s": 10 ** 6}})
             if p.startswith("llama_swap.members.strata.cold_boot_s")]
    assert bool(found) == (boot > gib * 1024 / limits.SLOWEST_LOAD_MIB_S + limits.LONGEST_COMPILE_S)


# --- the operator's unit files ---

def test_a_unit_is_read_by_systemd_syntax_comments_and_continuations():
    text = "# c\n[Unit]\n; c\nRequires=a.service \\\n  # inside\n  b.service\nWants=c\n[Timer]\nOnCalendar=daily\n"
    assert [(s, k, v.split(), n) for s, k, v, n in unit_files.read_unit(text)] == [
        ("Unit", "Requires", ["a.service", "b.service"], 4), ("Unit", "Wants", ["c"], 7),
        ("Timer", "OnCalendar", ["daily"], 9)]


@pytest.mark.parametrize("dep", ["Requires", "BindsTo", "Requisite", "PartOf"])
def test_an_operator_unit_bound_to_llama_swap_is_refused_and_wants_is_accepted(tmp_path, monkeypatch, dep):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.service").write_text(f"[Unit]\n{dep}=network.target llama-swap.service\n[Service]\nExecStart=/bin/true\n")
    (tmp_path / "job.timer").write_text("[Timer]\nOnCalendar=*-*-* 03:00\n")
    (tmp_path / "ok.service").write_text("[Unit]\nWants=llama-swap.service\nAfter=llama-swap.service\n[Service]\nExecStart=/bin/true\n")
    found = problems({"operator_units": ["job.service"]})
    assert any(p.startswith("operator_units[0]: job.service:2: " + dep) and f"use Wants=llama-swap.service" in p
               for p in found), found
    assert problems({"operator_units": ["ok.service", "job.timer"], "paused_timers": ["job.timer"]}) == []


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is the owner of a schedule")
@pytest.mark.parametrize("expr, words", [("2020-01-01", "Next elapse: never"), ("Feb 30", "Failed to parse calendar")])
def test_a_schedule_systemd_refuses_or_that_never_fires_is_refused(tmp_path, monkeypatch, expr, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.timer").write_text(f"[Timer]\nOnCalendar={expr}\n")
    found = problems({"operator_units": ["job.timer"]})
    assert any(p.startswith(f"operator_units[0]: job.timer:2: OnCalendar={expr}") and words in p for p in found), found
