"""The HF token has one reader (:func:`rigkit.spec.secrets.hf_token`), called once by each command
and handed down (issue #64): where it comes from follows huggingface-hub's own resolution
(``HF_TOKEN``, else ``$HF_TOKEN_PATH``, else ``$HF_HOME/token``, else
``${XDG_CACHE_HOME:-~/.cache}/huggingface/token``: DESIGN.md "Secrets"), and the value never shows in
its ``repr`` or ``str``."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from hypothesis import given, settings, strategies as st

from rigkit.spec.secrets import HfToken, hf_token, hf_token_file

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_" + "Ab3" * 12

#: Where a command reads the token: the CLI's commands, and the deploy's secrets role (plain
#: ``pyinfra INVENTORY deploy.py`` is a command of its own, run once per host).
READERS = ("rigkit/cli/", "roles/secrets.py")


@settings(max_examples=60, deadline=None)
@given(env_value=st.sampled_from(["", "  ", TOKEN, f" {TOKEN}\n"]),
       file_text=st.sampled_from([None, "", "\n", TOKEN, f"{TOKEN}\n"]),
       where=st.sampled_from(["HF_TOKEN_PATH", "HF_HOME", "XDG_CACHE_HOME"]))
def test_the_token_comes_from_the_variable_else_hfs_file(tmp_path_factory, env_value, file_text, where):
    base = tmp_path_factory.mktemp("hf")
    env = {"HOME": str(base / "home")}
    if env_value:
        env["HF_TOKEN"] = env_value
    env[where] = str(base / "t" if where == "HF_TOKEN_PATH" else base)
    path = hf_token_file(env)
    assert path == {"HF_TOKEN_PATH": base / "t", "HF_HOME": base / "token",
                    "XDG_CACHE_HOME": base / "huggingface" / "token"}[where]
    if file_text is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(file_text)
    token = hf_token(env)
    if env_value.strip():
        assert token == HfToken(TOKEN, "environment variable HF_TOKEN")
    elif file_text and file_text.strip():
        assert token == HfToken(TOKEN, f"file {path}")
    else:
        assert token is None
    if token is not None:
        assert TOKEN not in repr(token) and TOKEN not in str(token) and token.source in str(token)


def test_an_unreadable_token_file_is_no_token(tmp_path):
    (tmp_path / "token").mkdir()  # a folder where the file should be
    assert hf_token({"HF_HOME": str(tmp_path)}) is None
    (tmp_path / "t").write_bytes(b"\xff\xfe")
    assert hf_token({"HF_TOKEN_PATH": str(tmp_path / "t")}) is None


def _calls(tree: ast.AST) -> list[tuple[str, int]]:
    """``[(enclosing function, line)]`` of each call of ``hf_token`` in a module (``<module>`` at top level)."""
    out: list[tuple[str, int]] = []

    def walk(node: ast.AST, fn: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            if isinstance(child, ast.Call) and getattr(child.func, "id", getattr(child.func, "attr", None)) == "hf_token":
                out.append((fn, child.lineno))
            walk(child, name)

    walk(tree, "<module>")
    return out


HF_VARIABLES = ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME", "HUGGING_FACE_HUB_TOKEN")


def _env_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``[(line, variable)]`` where a module reads one of :data:`HF_VARIABLES` from the environment:
    ``os.environ[X]``, ``os.environ.get(X)``, ``os.getenv(X)`` (``environ``/``getenv`` by any path)."""
    def named(node: ast.AST, name: str) -> bool:
        return getattr(node, "attr", getattr(node, "id", None)) == name

    out = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and named(node.value, "environ"):
            key = node.slice
        elif isinstance(node, ast.Call) and node.args and (
                named(node.func, "getenv") or (named(node.func, "get") and named(getattr(node.func, "value", None), "environ"))):
            key = node.args[0]
        if isinstance(key, ast.Constant) and key.value in HF_VARIABLES:
            out.append((node.lineno, key.value))
    return out


def test_the_env_read_check_sees_each_form():
    code = ("import os\nfrom os import environ, getenv\na = os.environ['HF_TOKEN']\nb = os.environ.get('HF_HOME')\n"
            "c = getenv('HF_TOKEN_PATH')\nd = environ.get('HF_TOKEN', '')\ne = os.environ.get('HOME')\nf = {'HF_TOKEN': 1}\n")
    assert _env_reads(ast.parse(code)) == [(3, "HF_TOKEN"), (4, "HF_HOME"), (5, "HF_TOKEN_PATH"), (6, "HF_TOKEN")]
    assert _calls(ast.parse("def c():\n    a = hf_token()\n    b = secrets.hf_token()\nx = hf_token()\n")) == [
        ("c", 2), ("c", 3), ("<module>", 4)]


def test_each_command_reads_the_token_once_and_nothing_else_reads_it():
    """Only a command (:data:`READERS`) calls the reader, once per function; no other module of the
    control side reads ``HF_TOKEN`` from the environment (the host side reads its own hf.env)."""
    calls: dict[str, list[tuple[str, int]]] = {}
    env_reads = []
    for path in sorted([*(ROOT / "rigkit").rglob("*.py"), *(ROOT / "roles").rglob("*.py"), ROOT / "deploy.py"]):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("rigkit/host/") or rel == "rigkit/spec/secrets.py":
            continue
        tree = ast.parse(path.read_text())
        if _calls(tree):
            calls[rel] = _calls(tree)
        env_reads += [f"{rel}:{line}: {name}" for line, name in _env_reads(tree)]
    assert calls, "no command reads the token"
    outside = [rel for rel in calls if not rel.startswith(READERS)]
    assert not outside, f"the token read outside a command: {outside}"
    twice = {f"{rel}::{fn}": n for rel, found in calls.items() for fn, n in Counter(f for f, _ in found).items() if n > 1}
    assert not twice, f"read more than once in one command: {twice}"
    assert not env_reads, env_reads
