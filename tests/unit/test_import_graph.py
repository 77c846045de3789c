"""rigkit's import graph is one-way: no module under ``rigkit/`` (the host side ``rigkit/host/``
included; what it may import at all is test_host_side.py's business) imports, at module level or
inside a function, a ``rigkit`` module that imports it back, directly or through others. At folder
(subpackage) level the same is asked, less the cycles the flat control-side layout still has
(:data:`KNOWN_FOLDER_CYCLES`, until the control-side modules move into folders, issue #26)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RIGKIT = ROOT / "rigkit"


def modules(root: Path = RIGKIT) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module under ``root`` (a ``rigkit`` tree); a package
    is named by its ``__init__.py``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` (at ``path``) imports, anywhere in its body.

    ``from a.b import c`` counts ``a.b.c`` when that is a module, else ``a.b``; a relative import
    is resolved against the module's package; a name that is no known module counts as the
    nearest known module above it (``rigkit.drift.check`` → ``rigkit.drift``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                targets.add(full if full in known else module)
    out = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def graph(root: Path = RIGKIT) -> dict[str, set[str]]:
    """``{module: modules it imports}`` over :func:`modules`."""
    mods = modules(root)
    return {name: imported(name, path, set(mods)) for name, path in mods.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None when the graph is acyclic (depth-first search)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def folder_graph(root: Path = RIGKIT) -> dict[str, set[str]]:
    """``{folder: folders its modules import}`` (a folder is a package: ``rigkit.host.window``; a
    folder's own modules importing each other is no edge)."""
    mods = modules(root)
    folder = {name: ".".join(path.parent.relative_to(root.parent).parts) for name, path in mods.items()}
    out: dict[str, set[str]] = {}
    for name, targets in graph(root).items():
        out.setdefault(folder[name], set()).update(folder[t] for t in targets if folder[t] != folder[name])
    return out


def cyclic_edges(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The edges ``(a, b)`` that lie on some cycle (``a`` reaches itself through ``b``)."""
    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(edges.get(node, ()))
        return False
    return {(a, b) for a, bs in edges.items() for b in bs if reaches(b, a)}


#: Folder-level cycles the layout still has: the control side's modules sit in ``rigkit/`` beside the
#: folders that use them (drift, bench and operations import rigkit.spec/paths/...; rigkit.cli and the
#: *_cli modules import them back), and ``rigkit/host/``'s own modules (agent, standdown) sit beside
#: the window they run. They go when those modules move into folders (issue #26, later steps).
KNOWN_FOLDER_CYCLES = {
    ("rigkit", "rigkit.bench"), ("rigkit.bench", "rigkit"),
    ("rigkit", "rigkit.drift"), ("rigkit.drift", "rigkit"),
    ("rigkit.operations", "rigkit"),
    ("rigkit", "rigkit.host"), ("rigkit.host", "rigkit"),
    ("rigkit", "rigkit.host.window"), ("rigkit.host.window", "rigkit.host"), ("rigkit.host", "rigkit.host.window"),
    ("rigkit.drift", "rigkit.host.window"), ("rigkit.drift", "rigkit.host"), ("rigkit.drift", "rigkit.operations"),
    ("rigkit.bench", "rigkit.host"), ("rigkit.operations", "rigkit.host"),
}


def test_the_whole_package_has_no_import_cycle_between_modules():
    edges = graph()
    assert "rigkit.cli" in edges and "rigkit.drift.run" in edges and "rigkit.host.window.steps" in edges
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_new_import_cycle_between_folders():
    edges = folder_graph()
    assert {"rigkit", "rigkit.host", "rigkit.host.window", "rigkit.host.bench"} <= set(edges)
    new = sorted(cyclic_edges(edges) - KNOWN_FOLDER_CYCLES)
    assert not new, "folder-level import cycle through: " + ", ".join(f"{a} -> {b}" for a, b in new)
    gone = sorted(KNOWN_FOLDER_CYCLES - cyclic_edges(edges))
    assert not gone, "no longer on a cycle, remove from KNOWN_FOLDER_CYCLES: " + ", ".join(f"{a} -> {b}" for a, b in gone)


def test_the_graph_sees_function_level_and_package_imports(tmp_path):
    pkg = tmp_path / "rigkit"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "host").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from rigkit.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("from .b import g\n")
    (pkg / "sub" / "b.py").write_text("import rigkit.a\n")
    (pkg / "host" / "x.py").write_text("import rigkit.a\n")
    edges = graph(pkg)
    assert edges == {"rigkit": set(), "rigkit.a": {"rigkit.sub.b"}, "rigkit.sub": {"rigkit.sub.b"},
                     "rigkit.sub.b": {"rigkit.a"}, "rigkit.host.x": {"rigkit.a"}}
    assert folder_graph(pkg) == {"rigkit": {"rigkit.sub"}, "rigkit.sub": {"rigkit"}, "rigkit.host": {"rigkit"}}
    assert cyclic_edges(folder_graph(pkg)) == {("rigkit", "rigkit.sub"), ("rigkit.sub", "rigkit")}
    assert find_cycle(edges) == ["rigkit.a", "rigkit.sub.b", "rigkit.a"]
    (pkg / "sub" / "b.py").write_text("from rigkit import paths\n")
    assert find_cycle(graph(pkg)) is None
