"""``benchmarks/flaky_loop.py`` names the tests that once flipped by their pytest node ids; a renamed
or removed test would make the loop count it as failed every run (no outcome at all). Each node it
names by default must be a test function of its file."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _loop():
    spec = importlib.util.spec_from_file_location("flaky_loop", ROOT / "benchmarks" / "flaky_loop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LOOP = _loop()


@pytest.mark.parametrize("node", LOOP.UNIT + LOOP.HARNESS)
def test_each_default_node_is_a_test_function_of_its_file(node):
    path, name = node.split("::", 1)
    tree = ast.parse((ROOT / path).read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert name in names, f"{node}: no test {name} in {path} (renamed? update benchmarks/flaky_loop.py)"


def test_a_repetition_counts_once_and_only_when_every_outcome_of_it_passed():
    """The harness's repetitions (pytest-repeat ids ``name[3-20]``) read from pytest's ``-rA`` lines."""
    node, other = "tests/harness/test_window.py::t", "tests/harness/test_window.py::u"
    out = "\n".join([f"PASSED {node}[1-3]", f"FAILED {node}[2-3] - boom", f"PASSED {node}[3-3]",
                     f"ERROR {node}[3-3] - teardown", f"PASSED {other}[1-3]", "PASSED tests/x.py::t[1-3]"])
    assert LOOP.count_repetitions(out, [node, other]) == {node: 1, other: 1}
