"""rigkit's reading of a llama-swap 250 config (:mod:`rigkit.spec.llama_swap_load`) and the spec's refusal of
what llama-swap would refuse in a member (issue #38). The differential test
(test_llama_swap_differential.py) holds the same code to upstream's own loader; these pin the messages."""

from __future__ import annotations

import pytest

from rigkit.render.files import llama_swap_environment
from rigkit.spec.llama_swap_load import SERVICE_ENV_NAMES, judge
from rigkit.spec.problems import SpecError
from rigkit.spec.validate import spec_from_layers

ENV = llama_swap_environment(spec_from_layers([]))
MEMBER = "models:\n  a:\n    cmd: server --port 18030\n    proxy: http://127.0.0.1:18030\n"


def test_the_environment_is_what_the_unit_gives_llama_swap():
    assert tuple(ENV) == SERVICE_ENV_NAMES
    assert ENV["HOME"] == "/var/lib/llama-swap" and ENV["USER"] == "llama-swap"


@pytest.mark.parametrize("field,value,message", [
    ("cmd", "server --port 18030 --models ${MODELS}", "unknown macro '${MODELS}' found in a.cmd"),
    ("cmd", "server --pid ${PID}", "unknown macro '${PID}' found in a.cmd"),
    ("name", "Strata ${VARIANT}", "unknown macro '${VARIANT}' found in a.name"),
    ("env", ["HOME=/var/lib/${USER}"], "model a env: unknown macro '${USER}'"),
    ("cmd", "server ${env.RIGKIT_NOPE}", "environment variable 'RIGKIT_NOPE' is not set"),
])
def test_a_macro_llama_swap_does_not_know_is_refused_naming_the_field(field, value, message):
    import yaml

    cfg = yaml.safe_load(MEMBER)
    cfg["models"]["a"][field] = value
    verdict = judge(yaml.safe_dump(cfg), ENV)
    assert not verdict.ok and verdict.problems[0].startswith(message), verdict.problems


def test_the_macros_llama_swap_sets_are_expanded():
    text = ("macros:\n  T: 60\nmodels:\n  a:\n    cmd: server --port ${PORT} --alias ${MODEL_ID}\n"
            "    cmdStop: kill ${PID}\n    ttl: ${T}\n    env: ['HOME=${env.HOME}']\n")
    verdict = judge(text, ENV)
    assert verdict.ok, verdict.problems
    a = verdict.data["models"]["a"]
    assert a["cmd"] == "server --port 5800 --alias a" and a["proxy"] == "http://localhost:5800"
    assert a["cmdStop"] == "kill ${PID}" and a["ttl"] == 60 and a["env"] == ["HOME=/var/lib/llama-swap"]


def test_a_duplicate_key_is_refused_where_pyyaml_would_keep_the_last():
    verdict = judge(MEMBER + "    proxy: http://127.0.0.1:1\n", ENV)
    assert verdict.problems == ["mapping key 'proxy' already defined at line 4 (line 5): llama-swap refuses a "
                                "duplicate key"]


def test_upstreams_clamps_are_warnings_naming_the_value_it_uses():
    verdict = judge("healthCheckTimeout: 5\n" + MEMBER + "    ttl: 1.5\n", ENV)
    assert verdict.ok
    assert verdict.warnings == [
        "models.a.ttl: 1.5 — llama-swap keeps the whole part, 1 (a Go int)",
        "healthCheckTimeout: 5 — llama-swap raises it to 15 (load.go:63-65: any value below 15 s becomes 15)"]


def test_legacy_groups_and_routing_are_never_mixed():
    groups = "{g: {members: [a]}}"
    verdict = judge(MEMBER + f"groups: {groups}\nrouting: {{router: {{settings: {{groups: {groups}}}}}}}\n", ENV)
    assert verdict.problems == ["config uses both the legacy top-level 'matrix'/'groups' keys and the new "
                                "'routing.router' block; please migrate the top-level keys into 'routing.router' "
                                "and remove them"]


@pytest.mark.parametrize("value,ok", [(2**63 - 1, True), (2**63, False), (2**64, False), ("'60'", False)])
def test_numbers_are_refused_where_a_go_int_cannot_hold_them(value, ok):
    verdict = judge(MEMBER + f"    ttl: {value}\n", ENV)
    assert verdict.ok is ok, verdict.problems
    if not ok:
        assert verdict.problems[0].startswith("models.a.ttl: ")


@pytest.mark.parametrize("text", ["models: [a]\n", "routing:\n  router: x\n", "- 1\n", "models:\n  a: 3\n",
                                  "macros: [1]\n", "{", "models:\n  a:\n    cmd: [x]\n"])
def test_a_wrong_shape_is_a_problem_never_a_crash(text):
    assert not judge(text, ENV).ok


@pytest.mark.parametrize("layer,key,macro", [
    ({"cmd": "llama-server --port ${PORT} --models ${MODELS}"}, "cmd", "${MODELS}"),
    ({"env": ["HOME=/var/lib/${USER}"]}, "env[0]", "${USER}"),
    ({"name": "Coder ${VARIANT}"}, "name", "${VARIANT}"),
])
def test_the_spec_refuses_a_member_macro_llama_swap_would_refuse(layer, key, macro):
    member = {"cmd": "llama-server --port ${PORT}", "vram_gib": 1, "cold_boot_s": 5, **layer}
    with pytest.raises(SpecError) as exc:
        spec_from_layers([{"llama_swap": {"members": {"coder": member},
                                          "groups": {"gpu": {"members": ["strata", "gguf-baseline", "hyperqwen", "coder"]}}}}])
    problems = [p for p in exc.value.problems if p.key == f"llama_swap.members.coder.{key}"]
    assert len(problems) == 1 and f"the macro '{macro}'" in problems[0].allowed, exc.value.problems


@pytest.mark.parametrize("field", ["proxy", "ttl", "cmd"])
def test_a_long_value_never_floods_the_message(field):
    value = {"proxy": "http://h:" + "x" * 100_000, "ttl": "x" * 100_000}.get(field, "server ${" + "A" * 100_000 + "}")
    verdict = judge(MEMBER.replace("proxy: http://127.0.0.1:18030", "") + f"    {field}: '{value}'\n"
                    if field != "cmd" else f"models:\n  a:\n    cmd: '{value}'\n    proxy: http://127.0.0.1:1\n", ENV)
    assert verdict.problems and all(len(p) < 700 for p in verdict.problems), [len(p) for p in verdict.problems]
