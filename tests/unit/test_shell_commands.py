"""Every value that reaches a command the deploy runs is quoted by construction (issue #28): a command
yielded by an operation in ``rigkit/operations/`` or handed to ``server.shell(commands=[…])`` in
``roles/`` is :func:`rigkit.operations.shell.argv`, :func:`~rigkit.operations.shell.script` with a
constant template, a command :mod:`rigkit.agentcmd` built (it quotes its own words), pyinfra's
``FunctionCommand``/``FileUploadCommand``, a string constant, or an f-string of module constants only
(``f"{paths.AGENT_VENV}/bin/pip"``). A fact's ``command()`` puts none of its parameters into the
command except through ``shlex.quote``/``shlex.join``/``int``. Anything else fails here, naming the
file and line, so the guarantee no longer rests on each call site remembering."""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILDERS = {"argv", "script"}
#: Functions that return one ``script(<constant template>, ...)`` (checked below: they are builders too).
SCRIPT_FUNCTIONS = {"verified_fetch": "rigkit/operations/pacman.py"}
AGENT_BUILDERS = {"locked_command", "activate_command", "record_command", "bisect_end_command"}  # rigkit/agentcmd.py: each quotes its parts
PYINFRA_COMMANDS = {"FunctionCommand", "FileUploadCommand"}
QUOTING = {"quote", "join", "int"}


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def constant(node: ast.expr) -> bool:
    """A module constant: ``UPPER_CASE`` or ``module.UPPER_CASE`` (``paths.STATE_DIR``)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id.isupper()
    return isinstance(node, ast.Attribute) and node.attr.lstrip("_").isupper() and isinstance(node.value, ast.Name)


def command_problem(node: ast.expr) -> str | None:
    """Why ``node`` (a yielded command or a ``commands=`` item) is not safe by construction, or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return None
    if isinstance(node, ast.JoinedStr):
        bad = [v for v in node.values if isinstance(v, ast.FormattedValue) and not constant(v.value)]
        return f"an f-string interpolating {ast.unparse(bad[0].value)!r}" if bad else None
    if isinstance(node, ast.Call):
        name = _name(node.func)
        if name == "script":
            if not (node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                return "script() with a template that is not a constant string"
            return None
        if name in BUILDERS | AGENT_BUILDERS | PYINFRA_COMMANDS | set(SCRIPT_FUNCTIONS):
            return None
        if name in ("StringCommand", "AgentCommand") and len(node.args) == 1 and isinstance(node.args[0], ast.Call) \
                and _name(node.args[0].func) in AGENT_BUILDERS:
            return None
        return f"a {name or ast.unparse(node.func)}(...) command"
    return f"a command built as {type(node).__name__} ({ast.unparse(node)[:60]})"


def problems(tree: ast.Module, path: str) -> list[str]:
    out = []
    for node in ast.walk(tree):
        items: list[ast.expr] = []
        if isinstance(node, ast.Yield) and node.value is not None:
            items = [node.value]
        elif isinstance(node, ast.Call) and _name(node.func) == "shell":
            for kw in node.keywords:
                if kw.arg == "commands":
                    items = list(kw.value.elts) if isinstance(kw.value, (ast.List, ast.Tuple)) else [kw.value]
        elif isinstance(node, ast.Call) and _name(node.func) == "StringCommand":
            arg = node.args[0] if node.args else None
            if not (isinstance(arg, ast.Call) and _name(arg.func) in AGENT_BUILDERS):
                out.append(f"{path}:{node.lineno}: StringCommand of {ast.unparse(arg)[:60] if arg else 'nothing'}")
        for item in items:
            why = command_problem(item)
            if why:
                out.append(f"{path}:{item.lineno}: {why}")
    return out


def fact_problems(tree: ast.Module, path: str) -> list[str]:
    """A fact's ``command()`` parameter interpolated raw into an f-string."""
    out = []
    for fn in ast.walk(tree):
        if not (isinstance(fn, ast.FunctionDef) and fn.name == "command"):
            continue
        params = {a.arg for a in fn.args.args + fn.args.kwonlyargs} - {"self"}
        for node in ast.walk(fn):
            if not isinstance(node, ast.FormattedValue):
                continue
            inner = node.value
            if isinstance(inner, ast.Call) and _name(inner.func) in QUOTING:
                continue
            raw = {n.id for n in ast.walk(inner) if isinstance(n, ast.Name)} & params
            if raw:
                out.append(f"{path}:{node.lineno}: {sorted(raw)[0]} reaches the command unquoted")
    return out


def sources() -> list[Path]:
    """The operations and the roles, less the helper module itself (whose two functions quote)."""
    helper = ROOT / "rigkit" / "operations" / "shell.py"
    return sorted(p for p in [*(ROOT / "rigkit" / "operations").glob("*.py"), *(ROOT / "roles").glob("*.py")] if p != helper)


def test_every_command_the_deploy_runs_is_quoted_by_construction():
    found = []
    for path in sources():
        rel = str(path.relative_to(ROOT))
        found += problems(ast.parse(path.read_text()), rel)
    facts = sorted((ROOT / "rigkit" / "operations" / "facts").glob("*.py"))  # a module per tool
    assert len(facts) > 1
    for path in facts:
        found += fact_problems(ast.parse(path.read_text()), str(path.relative_to(ROOT)))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("code, why", [
    ('def op(p):\n    yield f"cp -a {p} /x"\n', "an f-string interpolating 'p'"),
    ('def op(p):\n    yield "rm " + p\n', "a command built as BinOp"),
    ('def op(p):\n    yield StringCommand(f"rm {p}")\n', "StringCommand of"),
    ('def op(t):\n    yield script(t)\n', "not a constant string"),
    ('def r(u):\n    server.shell(commands=[f"cp {u} /b"])\n', "an f-string interpolating 'u'"),
    ('def op(xs):\n    yield " ".join(xs)\n', "a join(...) command"),
])
def test_the_check_catches_an_unquoted_value(code, why):
    assert any(why in p for p in problems(ast.parse(code), "x.py")), problems(ast.parse(code), "x.py")


def test_the_check_passes_what_the_helpers_build():
    code = ('def op(p, v):\n    yield argv("chmod", "600", p)\n    yield script("mkdir -p {d} && echo {v} > {d}/m", d=p, v=v)\n'
            '    yield f"{paths.STATE_DIR}/x"\n    yield StringCommand(locked_command("w", ["true"]))\n    yield "mkinitcpio -P"\n')
    assert problems(ast.parse(code), "x.py") == []
    fact = 'class F:\n    def command(self, path, n):\n        return f"cat {shlex.quote(path)} {int(n)}"\n'
    assert fact_problems(ast.parse(fact), "f.py") == []
    raw = 'class F:\n    def command(self, agent):\n        return f"{agent} status"\n'
    assert fact_problems(ast.parse(raw), "f.py") == ["f.py:3: agent reaches the command unquoted"]


def test_argv_and_script_keep_any_value_one_literal_word():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from rigkit.operations.shell import argv, script

    @settings(max_examples=300, deadline=None)
    @given(st.text(min_size=0, max_size=40))
    def check(value):
        assert shlex.split(argv("echo", value).get_raw_value()) == ["echo", value]
        assert shlex.split(script("x {v} && y", v=value).get_raw_value()) == ["x", value, "&&", "y"]

    check()


@pytest.mark.parametrize("name,path", sorted(SCRIPT_FUNCTIONS.items()))
def test_a_script_function_returns_one_script_of_a_constant_template(name, path):
    """What lets :data:`SCRIPT_FUNCTIONS` count as builders: the function's only return is ``script(...)`` of
    a constant template (its values quoted by ``script``)."""
    tree = ast.parse((ROOT / path).read_text())
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    assert len(returns) == 1 and command_problem(returns[0].value) is None
    assert _name(returns[0].value.func) == "script"
