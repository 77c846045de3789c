"""Where ``rigkit deploy`` goes: an AST walk of the calls reachable from the deploy command, the
import floors it walks across, and the size of ``rigkit/cli/`` (issue 64's "Must show").

Not a test: prints figures. Nothing is imported from ``rigkit``; every figure is read from the source.

- **floors**: the folders of ``rigkit/`` ranked by tests/unit/test_import_graph.py's folder graph
  (:func:`folder_graph`): a folder's floor is the longest chain of folder imports below it (0: it
  imports no other folder), so every import goes down at least one floor.
- **walk**: depth first from the deploy command's function (``rigkit/cli/main.py:deploy``), each
  call or function reference in source order (a callback handed on counts where it is named) that
  resolves to a function or class of ``rigkit`` — through the module's own definitions and its
  imports, module level or inside the function (``from X import f``, ``from X import mod`` then
  ``mod.f``, a package's re-export followed); method calls on objects are not followed. Printed: the
  functions in the order first reached, the modules visited ("rooms"), and the **climbs**: steps of
  that order into a module on a higher floor than the one before (the flow going back up).
- **cli**: the line count of ``rigkit/cli/*.py``; the **longest functions** of ``rigkit/`` (top 5 by
  lines, ``end_lineno - lineno + 1``, decorators excluded).

The walk is printed two and three calls deep (the top of the flow: where the deploy's own decisions
are) and whole (down to every parser the validators use).

Run: ``.venv/bin/python benchmarks/deploy_walk.py [--entry rigkit.cli.main:deploy] [--depth 2 3] [--top 5]``
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))

import test_import_graph as graph  # noqa: E402 - the floors are that test's graph


def floors() -> dict[str, int]:
    """``{folder: floor}`` over :func:`test_import_graph.folder_graph` (a DAG: that test holds it)."""
    edges = graph.folder_graph()
    memo: dict[str, int] = {}

    def floor(node: str) -> int:
        if node not in memo:
            memo[node] = 1 + max((floor(n) for n in edges.get(node, ())), default=-1)
        return memo[node]

    return {node: floor(node) for node in edges}


class Index:
    """Every module's AST, module-level definitions and import bindings."""

    def __init__(self) -> None:
        self.paths = graph.modules()
        self.trees = {name: ast.parse(path.read_text(), str(path)) for name, path in self.paths.items()}
        self.defs = {name: {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
                     for name, tree in self.trees.items()}
        self.imports = {name: self.bindings(name, tree.body) for name, tree in self.trees.items()}

    def bindings(self, module: str, body) -> dict[str, tuple[str, str | None]]:
        """``{local name: (module, attribute or None for the module itself)}`` of the imports directly in
        ``body`` (a list of statements) and, for a function's body, anywhere inside it."""
        package = module if self.paths[module].name == "__init__.py" else module.rpartition(".")[0]
        out: dict[str, tuple[str, str | None]] = {}
        nodes = body if isinstance(body, list) else list(ast.walk(body))
        for node in nodes:
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    src = ".".join(base + ([node.module] if node.module else []))
                else:
                    src = node.module or ""
                for alias in node.names:
                    full = f"{src}.{alias.name}"
                    out[alias.asname or alias.name] = (full, None) if full in self.paths else (src, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in self.paths:
                        out[alias.asname] = (alias.name, None)
        return out

    def resolve(self, module: str, name: str, seen: int = 0) -> tuple[str, str] | None:
        """Where ``module.name`` is defined (following a package's re-exports), or None."""
        if module not in self.defs or seen > 5:
            return None
        if name in self.defs[module]:
            return module, name
        bound = self.imports[module].get(name)
        if bound and bound[1] is not None:
            return self.resolve(bound[0], bound[1], seen + 1)
        return None


def references(index: Index, module: str, fn: ast.AST) -> list[tuple[str, str]]:
    """The ``rigkit`` functions and classes ``fn`` (a def in ``module``) names, in source order."""
    local = {**index.imports[module], **index.bindings(module, fn)}
    found = []
    for node in ast.walk(fn):
        target = None
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in local and local[node.id][1] is not None:
                target = index.resolve(*local[node.id])
            elif node.id in index.defs[module]:
                target = (module, node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            bound = local.get(node.value.id)
            if bound and bound[1] is None:
                target = index.resolve(bound[0], node.attr)
        if target and target != (module, getattr(fn, "name", None)):
            found.append((node.lineno, node.col_offset, target))
    return [t for _, _, t in sorted(found, key=lambda x: (x[0], x[1]))]


def walk(index: Index, entry: tuple[str, str], depth: int | None = None) -> list[tuple[str, str]]:
    """Every function and class reachable from ``entry`` (within ``depth`` calls of it; None: any),
    depth first, in the order first reached."""
    order: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()

    def visit(target: tuple[str, str], level: int = 0) -> None:
        if target in seen or (depth is not None and level > depth):
            return
        seen.add(target)
        order.append(target)
        module, name = target
        node = index.defs[module][name]
        if isinstance(node, ast.ClassDef):
            bodies = [n for n in node.body if isinstance(n, ast.FunctionDef)]
        else:
            bodies = [node]
        for body in bodies:
            for ref in references(index, module, body):
                visit(ref, level + 1)

    visit(entry)
    return order


def folder(module: str, index: Index) -> str:
    return graph.folder_of(module, index.paths[module])


def longest(index: Index, top: int) -> list[tuple[int, str]]:
    """The ``top`` longest functions and methods of ``rigkit/`` as ``(lines, module:qualname)``."""
    out = []
    for module, tree in index.trees.items():
        def scan(body, prefix):
            for n in body:
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.append((n.end_lineno - n.lineno + 1, f"{module}:{prefix}{n.name}"))
                    scan(n.body, f"{prefix}{n.name}.")
                elif isinstance(n, ast.ClassDef):
                    scan(n.body, f"{prefix}{n.name}.")
        scan(tree.body, "")
    return sorted(out, reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entry", default="rigkit.cli.main:deploy", help="MODULE:FUNCTION to walk from")
    parser.add_argument("--top", type=int, default=5, help="how many of the longest functions to print")
    parser.add_argument("--depth", type=int, nargs="*", default=[2, 3],
                        help="also walk only this many calls deep (the top of the flow), each; the whole walk last")
    args = parser.parse_args()
    index = Index()
    floor = floors()
    print("floors (tests/unit/test_import_graph.py's folder graph; an import goes down):")
    for level in sorted(set(floor.values()), reverse=True):
        print(f"  {level:>2}  " + ", ".join(sorted(f for f, n in floor.items() if n == level)))
    module, name = args.entry.split(":")
    node = index.defs[module][name]
    print(f"\n{args.entry}: {node.end_lineno - node.lineno + 1} lines")
    for depth in (*args.depth, None):
        order = walk(index, (module, name), depth)
        steps = [m for m, _ in order]
        steps = [m for i, m in enumerate(steps) if i == 0 or steps[i - 1] != m]
        climbs = [(a, b) for a, b in zip(steps, steps[1:]) if floor[folder(b, index)] > floor[folder(a, index)]]
        rooms = sorted(set(steps))
        print(f"\nwalk from {args.entry}, {'every call' if depth is None else f'{depth} calls deep'}: {len(order)} "
              f"functions, {len(rooms)} modules (rooms), {len(climbs)} climbs back up")
        print("  modules: " + ", ".join(rooms))
        for a, b in climbs:
            print(f"  climb: {a} (floor {floor[folder(a, index)]}) -> {b} (floor {floor[folder(b, index)]})")
    cli = sorted((ROOT / "rigkit" / "cli").glob("*.py"))
    print(f"\nrigkit/cli/: {sum(len(p.read_text().splitlines()) for p in cli)} lines in {len(cli)} files")
    print(f"longest functions (top {args.top}, lines):")
    for lines, where in longest(index, args.top):
        print(f"  {lines:>4}  {where}")


if __name__ == "__main__":
    main()
