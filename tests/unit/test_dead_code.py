"""rigkit keeps no dead code (issue #26): every top-level function and class of every module of the
package and of ``roles/`` is named somewhere outside its own definition (a call, an import, an
attribute, a string such as an entry point), so a helper that loses its last caller fails here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED = [ROOT / "rigkit", ROOT / "roles"]
SOURCES = ["rigkit", "roles", "tests", "benchmarks"]


def names_used(nodes: list[ast.AST]) -> set[str]:
    """Every name, attribute, imported name and identifier-like string under ``nodes``."""
    out: set[str] = set()
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Name):
                out.add(node.id)
            elif isinstance(node, ast.Attribute):
                out.add(node.attr)
            elif isinstance(node, ast.alias):
                out.add(node.name.rsplit(".", 1)[-1])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
                out.add(node.value)
    return out


def uncalled(trees: dict[Path, ast.Module], modules: list[Path], extra: str = "") -> list[str]:
    """``path:line: name`` of each top-level def/class of ``modules`` named nowhere else."""
    used = {p: names_used([t]) for p, t in trees.items()}
    out = []
    for p in modules:
        for node in trees[p].body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            here = names_used([n for n in trees[p].body if n is not node])
            if not (node.name in here or node.name in extra
                    or any(node.name in u for q, u in used.items() if q != p)):
                out.append(f"{p.relative_to(ROOT)}:{node.lineno}: {node.name}")
    return out


def test_every_function_and_class_has_a_caller():
    files = [p for d in SOURCES if (ROOT / d).is_dir() for p in sorted((ROOT / d).rglob("*.py"))] + [ROOT / "deploy.py"]
    trees = {p: ast.parse(p.read_text(), str(p)) for p in files}
    modules = [p for d in CHECKED for p in sorted(d.rglob("*.py"))]
    assert len(modules) > 100
    dead = uncalled(trees, modules, (ROOT / "pyproject.toml").read_text())
    assert not dead, "no caller:\n" + "\n".join(dead)


def test_the_check_finds_a_helper_without_a_caller():
    mod = ROOT / "rigkit" / "report" / "chart.py"
    tree = ast.parse(mod.read_text() + "\n\ndef parse_time(ts):\n    return ts\n")
    assert any(x.endswith(": parse_time") for x in uncalled({mod: tree}, [mod]))
