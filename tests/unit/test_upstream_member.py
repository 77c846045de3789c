"""A member of the operator's own copied from llama-swap's own Docker example (issue 63): v250's
``config.example.yaml`` ``docker-llama`` (tests/unit/data/llama_swap/config.example.yaml, upstream's
file), its ``cmd``/``cmdStop``/``proxy`` as written there, ``--name ${MODEL_ID}`` and
``docker stop ${MODEL_ID}`` included.

Before: rigkit judged the container name on the literal macro — ``'${MODEL_ID}' — a container name is
at least two characters …`` and ``stops ${MODEL_ID}, but cmd runs container 'docker-llama'`` —
refusing the example llama-swap ships, though llama-swap expands ``${MODEL_ID}`` to the member's id
before it runs either command. After: the container is the name as llama-swap's loader expands it
(``rigkit.spec.llama_swap_load.expand_macros``, held to upstream's loader by the differential test),
for every member id; what stays refused is the example's ``-p ${PORT}:8080``, which publishes on every
interface (the rig listens on loopback only), named with its fix."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.spec import llama_swap_load, members
from rigkit.spec.cmdline import container_name
from rigkit.spec.problems import SpecError
from rigkit.spec.validate import check_spec, spec_from_layers

UPSTREAM = yaml.safe_load((Path(__file__).parent / "data" / "llama_swap" / "config.example.yaml").read_text())
EXAMPLE = UPSTREAM["models"]["docker-llama"]
SANDBOX = {"strata": {"model_file": "strata-coder-Q4_K_M.gguf", "args": ["--threads", "1"]}}


def member(cmd: str, mid: str = "docker-llama") -> dict:
    return {"llama_swap": {"members": {mid: {
        "cmd": cmd, "cmd_stop": EXAMPLE["cmdStop"], "proxy": EXAMPLE["proxy"], "staged": False,
        "cold_boot_s": 60, "vram_gib": 1.0, "ttl": 300}}}}


def problems(layer: dict) -> list[str]:
    """check_spec's problems with the member (spec_from_layers raises them as SpecError)."""
    try:
        found = check_spec(spec_from_layers([SANDBOX, layer]))
    except SpecError as exc:
        found = exc.problems
    return [f"{p.key}: {p.value} — {p.allowed}" for p in found]


def test_upstreams_docker_example_is_refused_only_for_publishing_on_every_interface():
    assert "--name ${MODEL_ID}" in EXAMPLE["cmd"] and EXAMPLE["cmdStop"] == "docker stop ${MODEL_ID}"
    found = problems(member(EXAMPLE["cmd"]))
    assert len(found) == 1 and found[0].startswith("llama_swap.members.docker-llama.cmd: '${PORT}:8080' — publishes on "
                                                   "every interface"), found
    # the operator's one change, the one the message names: publish on loopback
    assert problems(member(EXAMPLE["cmd"].replace("-p ${PORT}:8080", "-p 127.0.0.1:${PORT}:8080"))) == []


@settings(max_examples=60, deadline=None)
@given(mid=st.from_regex(r"[a-z0-9][a-z0-9_.-]{1,20}", fullmatch=True))
def test_the_container_is_the_name_llama_swaps_loader_runs_for_every_member_id(mid):
    cmd = EXAMPLE["cmd"].replace("-p ${PORT}:8080", "-p 127.0.0.1:${PORT}:8080")
    expanded = llama_swap_load.expand_macros({"models": {mid: {"cmd": cmd, "cmdStop": EXAMPLE["cmdStop"],
                                                               "proxy": EXAMPLE["proxy"]}}}, {"models"})
    runs = container_name(expanded["models"][mid]["cmd"])
    assert runs == mid and expanded["models"][mid]["cmdStop"] == f"docker stop {mid}"
    spec = spec_from_layers([SANDBOX, member(cmd, mid)])
    assert members.resolve_member(mid, spec).container == runs
    assert [p for p in check_spec(spec) if "container" in p.allowed] == []


def test_a_member_missing_a_required_key_names_the_key_not_the_whole_member():
    """Issue 63: pydantic hands a missing key's error the mapping it is missing from; the message showed
    that whole member as the value (``cold_boot_s: {'proxy': …, 'cmd': …} (dict) — required``)."""
    cmd = EXAMPLE["cmd"].replace("-p ${PORT}:8080", "-p 127.0.0.1:${PORT}:8080")
    full = member(cmd)["llama_swap"]["members"]["docker-llama"]
    required = []
    for k in full:
        found = problems({"llama_swap": {"members": {"docker-llama": {f: v for f, v in full.items() if f != k}}}})
        mine = [p for p in found if p.startswith(f"llama_swap.members.docker-llama.{k}: ") and p.endswith(" — required")]
        if mine:
            required.append(k)
            assert mine == [f"llama_swap.members.docker-llama.{k}: missing — required"], found
    assert "cold_boot_s" in required
