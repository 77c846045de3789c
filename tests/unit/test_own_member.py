"""A member of the operator's own (issue 61), as docs/operating.md "A member of your own" declares it:
the example is run as printed — its group_data lines exec'd as pyinfra loads group_data, its `--data`
parsed as the CLI parses it — and the member gets Strata's estimate and the group's co-load check."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from rigkit import paths
from rigkit.render.files import render
from rigkit.spec.cmdline import split_command
from rigkit.spec.validate import check_spec, co_load_problems, spec_from_layers, spec_warnings
from rigkit.spec.vram import member_fits

ROOT = Path(__file__).resolve().parents[2]
#: the sandbox's own values for Strata (inventory/sandbox.py) and its committed model lock
SANDBOX = {"strata": {"model_file": "strata-coder-Q4_K_M.gguf", "args": ["--threads", "1"]}}
LOCK = json.loads((ROOT / "inventory" / "sandbox.lock.json").read_text())


def parse_data_apart(items: tuple[str, ...]) -> dict:
    """``rigkit.cli.common.parse_data`` (pyinfra's own ``--data`` reader) in a process of its own: it imports
    ``pyinfra_cli``, which gevent-patches the process that imports it — a pytest-xdist worker then dies waiting
    for its next test (``gevent.exceptions.LoopExit``: tests/conftest.py refuses a test that patches)."""
    import subprocess
    import sys

    code = ("import json, sys; from rigkit.cli.common import parse_data; "
            "print(json.dumps(parse_data(tuple(sys.argv[1:]))))")
    proc = subprocess.run([sys.executable, "-c", code, *items], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    return json.loads(proc.stdout)


def section() -> str:
    text = (ROOT / "docs" / "operating.md").read_text()
    start = text.index("### A member of your own")
    return text[start:text.index("\n## ", start)]


def example(staged: bool = True) -> dict:
    """The printed group_data lines, exec'd (``"staged": False`` where step 4 says to set it)."""
    (code,) = re.findall(r"```python\n(.*?)```", section(), re.S)
    assert '"staged": True' in code
    if not staged:
        code = code.replace('"staged": True', '"staged": False')
    data: dict = {}
    exec(compile(code, "docs/operating.md", "exec"), {}, data)
    return {k: v for k, v in data.items() if not k.startswith("_")}


def spec_of(*layers):
    return spec_from_layers([SANDBOX, *layers])


def test_the_example_is_a_valid_staged_member_that_changes_nothing_live():
    staged = spec_of(example())
    assert check_spec(staged) == []
    assert not [w for w in spec_warnings(staged) if "strata-8k" in w.key]
    files, before = render(staged), render(spec_of())
    assert files[paths.LLAMA_SWAP_CONFIG].text == before[paths.LLAMA_SWAP_CONFIG].text
    assert files[f"{paths.UNIT_DIR}/llama-swap.service"].text == before[f"{paths.UNIT_DIR}/llama-swap.service"].text
    assert "strata-8k" in yaml.safe_load(files[paths.LLAMA_SWAP_STAGED].text)["models"]


def test_step_3s_data_and_step_4s_flip_make_the_same_live_member():
    (data,) = re.findall(r"--show --data '([^']*)'", section())
    over = parse_data_apart((data,))
    via_data = spec_of(example(), over)
    flipped = spec_of(example(staged=False))
    live = yaml.safe_load(render(flipped)[paths.LLAMA_SWAP_CONFIG].text)["models"]
    assert render(via_data)[paths.LLAMA_SWAP_CONFIG].text == render(flipped)[paths.LLAMA_SWAP_CONFIG].text
    argv = split_command(live["strata-8k"]["cmd"])
    assert argv[argv.index("--name") + 1] == "strata-8k"
    assert argv[argv.index("--label") + 1] == "rigkit.member=strata-8k"
    assert argv[argv.index("--ctx-size") + 1] == "8192"
    assert argv[argv.index("--model") + 1] == "/models/strata-coder-Q4_K_M.gguf"
    assert live["strata-8k"]["proxy"] == "http://127.0.0.1:18050"
    assert live["strata-8k"]["cmdStop"] == "docker stop --time 10 strata-8k"
    assert render(flipped)[f"{paths.UNIT_DIR}/llama-swap.service"].text == \
        render(spec_of())[f"{paths.UNIT_DIR}/llama-swap.service"].text


def test_the_member_gets_stratas_estimate_and_the_groups_check():
    """The same estimate as Strata's at the same context (one code path), and the co-load check
    reads it: a member that cannot fit is refused with its own key, one below its estimate warned."""
    mine = {f.member: f for f in member_fits(spec_of(example()), LOCK)}["strata-8k"]
    strata = {f.member: f for f in member_fits(spec_of({"strata": {"ctx_size": 8192}}), LOCK)}["strata"]
    assert mine.estimate_gib is not None and mine.error is None
    assert mine.estimate_gib == strata.estimate_gib and mine.detail == strata.detail
    assert "8,192 tokens" in mine.detail
    low = spec_of(example(), {"llama_swap": {"members": {"strata-8k": {"vram_gib": 0.001}}}})
    (fit,) = [f for f in member_fits(low, LOCK) if f.member == "strata-8k"]
    assert fit.warning and fit.warning.startswith("llama_swap.members.strata-8k.vram_gib: 0.001 GiB declared")
    # the group check counts it: two members loaded together must fit the card
    from rigkit.spec.problems import SpecError

    with pytest.raises(SpecError) as e:
        spec_of(example(), {"llama_swap": {"groups": {"gpu": {"swap": False}}}})
    assert "strata-8k (20 GiB)" in str(e.value)
    figures = {"strata-8k": 30.0}  # an estimate above the card: the co-load check reads it
    assert any("strata-8k" in str(p) for p in co_load_problems(spec_of(example()), figures))
    huge = spec_of(example(), {"llama_swap": {"members": {"strata-8k": {"llamacpp": {"ctx_size": 10_000_000}}}}})
    (fit,) = [f for f in member_fits(huge, LOCK) if f.member == "strata-8k"]
    assert fit.error and fit.error.startswith("llama_swap.members.strata-8k.llamacpp.ctx_size:")


def test_a_member_of_your_own_names_what_it_lacks():
    from rigkit.spec.problems import SpecError

    for over, key in (({"llamacpp": {"model": "nope", "port": 18050}}, "llama_swap.members.strata-8k.llamacpp.model"),
                      ({"cmd": "server --port 18050"}, "llama_swap.members.strata-8k.cmd"),
                      ({"service": "strata"}, "llama_swap.members.strata-8k.service")):
        with pytest.raises(SpecError) as e:
            spec_of(example(), {"llama_swap": {"members": {"strata-8k": over}}})
        assert key in str(e.value), str(e.value)
