"""rigkit's import graph is one-way: no module under ``rigkit/`` (the host side ``rigkit/host/``
included; what each side may import at all is test_layout.py's business) imports, at module level or
inside a function, a ``rigkit`` module that imports it back, directly or through others. At folder
(subpackage) level the same is asked with no exception: the control side's folders (``cli`` → ``report``,
``bench``, ``deploy`` → ``drift`` → ``operations`` → ``lockfile``, ``render`` → ``spec`` → the shared ``rigkit``
modules → ``host``) and the host side's (``host.window`` → ``host`` → ``bench`` → ``common``) import one way; the
change to the rig's floors (:data:`ORDER`: ``cli`` → ``deploy`` → ``drift``, issue 64) in that order.

``lockfile`` (issue #64) stands above ``spec`` and below ``render``: the lock file is the spec resolved
(its entries are keyed by what the spec declares, its view is the spec with the lock's answers in place), so
it reads the spec; the spec (inventory to RigSpec, validated) knows no lock file and asks no network
(test_lockfile_home.py). ``render`` reads it for a generation's manifest (the lock's text is part of what a
deploy leaves: rigkit/render/generations.py, moved there from deploy/ by the same issue), and ``deploy``,
``drift`` and ``cli`` read the spec through it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RIGKIT = ROOT / "rigkit"
#: Folders from the top down: none imports, directly or through others, a folder before it (the deploy
#: holds every change to the rig and reads drift's probe; what drift reads of a generation is in render).
ORDER = ("rigkit.cli", "rigkit.deploy", "rigkit.drift", "rigkit.operations", "rigkit.render", "rigkit.spec")


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


def folder_of(name: str, path: Path, root: Path = RIGKIT) -> str:
    """The folder module ``name`` belongs to (its package: ``rigkit.host.window``), except the entry
    points and the version: a package's ``__main__`` (``rigkit.__main__``, ``rigkit.host.__main__``,
    the ``rigkit-agent`` command, which dispatches into the folders below it) and the root package's
    ``__init__`` (``__version__`` only; named ``rigkit.__init__``) are each a node of their own."""
    if name == root.name:
        return f"{name}.__init__"
    if path.name == "__main__.py":
        return name
    return ".".join(path.parent.relative_to(root.parent).parts)


def folder_graph(root: Path = RIGKIT) -> dict[str, set[str]]:
    """``{folder: folders its modules import}`` (:func:`folder_of`; a folder's own modules importing
    each other is no edge)."""
    mods = modules(root)
    folder = {name: folder_of(name, path, root) for name, path in mods.items()}
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


def test_the_whole_package_has_no_import_cycle_between_modules():
    edges = graph()
    assert "rigkit.cli.main" in edges and "rigkit.drift.run" in edges and "rigkit.host.window.steps" in edges
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycle_between_folders():
    edges = folder_graph()
    assert {"rigkit", "rigkit.__init__", "rigkit.cli", "rigkit.spec", "rigkit.render", "rigkit.deploy", "rigkit.host",
            "rigkit.host.window", "rigkit.bench", "rigkit.common", "rigkit.host.__main__"} <= set(edges)
    cyclic = sorted(cyclic_edges(edges))
    assert not cyclic, "folder-level import cycle through: " + ", ".join(f"{a} -> {b}" for a, b in cyclic)


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every node ``start`` reaches through ``edges`` (itself excluded unless on a cycle)."""
    seen: set[str] = set()
    todo = list(edges.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(edges.get(node, ()))
    return seen


def test_the_folders_stand_in_order():
    edges = folder_graph()
    for i, folder in enumerate(ORDER):
        above = set(ORDER[:i]) & reachable(edges, folder)
        assert not above, f"{folder} imports {sorted(above)}, above it in {' -> '.join(ORDER)}"
    for upper, lower in zip(ORDER, ORDER[1:]):  # each floor uses the next: the order is not vacuous
        assert lower in reachable(edges, upper), (upper, lower)


def test_reachable_follows_every_path():
    edges = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}
    assert reachable(edges, "a") == {"b", "c"} and reachable(edges, "c") == set() and reachable(edges, "d") == {"a", "b", "c"}


def test_the_graph_sees_function_level_and_package_imports(tmp_path):
    pkg = tmp_path / "rigkit"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "host").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from rigkit.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("from .b import g\n")
    (pkg / "sub" / "b.py").write_text("import rigkit.a\n")
    (pkg / "host" / "x.py").write_text("import rigkit.a\n")
    (pkg / "host" / "__main__.py").write_text("import rigkit.host.x\nimport rigkit.sub\n")
    edges = graph(pkg)
    assert edges == {"rigkit": set(), "rigkit.a": {"rigkit.sub.b"}, "rigkit.sub": {"rigkit.sub.b"},
                     "rigkit.sub.b": {"rigkit.a"}, "rigkit.host.x": {"rigkit.a"},
                     "rigkit.host.__main__": {"rigkit.host.x", "rigkit.sub"}}
    assert folder_graph(pkg) == {"rigkit.__init__": set(), "rigkit": {"rigkit.sub"}, "rigkit.sub": {"rigkit"},
                                 "rigkit.host": {"rigkit"},
                                 "rigkit.host.__main__": {"rigkit.host", "rigkit.sub"}}
    assert cyclic_edges(folder_graph(pkg)) == {("rigkit", "rigkit.sub"), ("rigkit.sub", "rigkit")}
    assert find_cycle(edges) == ["rigkit.a", "rigkit.sub.b", "rigkit.a"]
    (pkg / "sub" / "b.py").write_text("from rigkit import paths\n")
    assert find_cycle(graph(pkg)) is None


def test_the_lock_file_stands_above_the_spec_and_below_what_reads_it():
    edges = folder_graph()
    above = {"rigkit.cli", "rigkit.deploy", "rigkit.drift", "rigkit.operations", "rigkit.render", "rigkit.report",
             "rigkit.bench", "rigkit.host"}
    assert "rigkit.spec" in edges["rigkit.lockfile"] and not edges["rigkit.lockfile"] & above
    assert "rigkit.lockfile" not in edges["rigkit.spec"]
    assert {"rigkit.cli", "rigkit.deploy", "rigkit.drift", "rigkit.render"} <= {k for k, v in edges.items()
                                                                               if "rigkit.lockfile" in v}


def test_importing_the_cli_loads_no_heavy_library():
    """``rigkit --help`` imports every command module (rigkit/cli/__init__.py): what they import at module
    level loads none of the libraries the commands import inside themselves — pydantic (the spec),
    requests and urllib3 (which must not load before pyinfra's CLI package gevent-patches the process),
    matplotlib (the report's charts), pyinfra and gevent (drift; importing ``pyinfra_cli`` patches)."""
    import subprocess
    import sys

    heavy = ("pydantic", "requests", "urllib3", "matplotlib", "pyinfra", "pyinfra_cli", "gevent")
    code = f"import sys, rigkit.cli.main; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded
