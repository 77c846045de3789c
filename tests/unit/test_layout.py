"""The package's layout shows the way data flows (issue #26): the commands in ``rigkit/cli/``,
inventory → spec with its validation in ``rigkit/spec/``, rendering in ``rigkit/render/``, deploying
in ``rigkit/deploy/`` (with ``rigkit/operations/``), the host side in ``rigkit/host/``; ``rigkit/``
itself keeps only what every room shares. A module that comes back flat, or a second public class of
one name, fails here. (The import direction between the folders is test_import_graph.py's.)

Where code runs is visible from its folder (issue #44): ``rigkit/common/`` is what both sides read
(standard library only), ``rigkit/bench/`` the bench both sides run (plus ``requests``),
``rigkit/host/`` what runs on the rig (plus the agent's wheelhouse), everything else the control side,
which never imports ``rigkit.host``. :func:`boundary_violations` checks every import by AST, function
level included; the agent's wheel ships exactly the host side and what it shares."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RIGKIT = ROOT / "rigkit"

#: What ``rigkit/`` itself holds: the version, the entry point, and what every folder shares
#: (the host paths and unit names, the exit codes, SSH to the host, the commands that reach the
#: agent, the control machine's download cache, the build of this rigkit that generations record and
#: the deploy and its validators' verdict memory ask).
SHARED = {"__init__.py", "__main__.py", "paths.py", "exitcodes.py", "remote.py", "agentcmd.py", "cache.py",
          "hints.py", "build.py"}
FOLDERS = {"cli", "spec", "render", "deploy", "operations", "drift", "bench", "report", "host", "lockfile", "common"}


def test_the_root_holds_only_what_every_folder_shares():
    flat = {p.name for p in RIGKIT.glob("*.py")}
    assert flat == SHARED, f"move into a folder: {sorted(flat - SHARED)}; gone: {sorted(SHARED - flat)}"
    folders = {p.name for p in RIGKIT.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == FOLDERS
    for d in folders:
        init = RIGKIT / d / "__init__.py"
        assert init.exists() and ast.get_docstring(ast.parse(init.read_text())), f"{init}: say what the folder holds"


def test_no_public_class_is_defined_twice():
    where = defaultdict(list)
    for p in sorted(RIGKIT.rglob("*.py")):
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(str(p.relative_to(ROOT)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twice, twice


def test_each_split_concern_has_one_home():
    """The concerns split out of modules that held several (issue #26): one module defines each."""
    homes = {
        "scan_raw": "rigkit/spec/secrets.py", "merge_layers": "rigkit/spec/layers.py",
        "validate_layers": "rigkit/spec/layers.py", "SpecProblem": "rigkit/spec/problems.py",
        "split_command": "rigkit/spec/cmdline.py", "container_command": "rigkit/spec/cmdline.py",
        "parse_config": "rigkit/common/swapconfig.py", "probe_order": "rigkit/common/swapconfig.py",
        "holds_text": "rigkit/common/swapconfig.py", "refusals": "rigkit/deploy/preflight.py",
        "remote_command": "rigkit/agentcmd.py", "dotenv_value": "rigkit/common/envfile.py",
        "hash_file": "rigkit/host/modelrecords.py", "compare": "rigkit/host/modelrecords.py",
        "status": "rigkit/host/modelrecords.py", "is_open": "rigkit/common/journal.py",
        "agrees": "rigkit/common/versions.py", "supports": "rigkit/common/versions.py",  # one driver/CUDA version rule
    }
    defined = defaultdict(list)
    for p in sorted([*RIGKIT.rglob("*.py"), *(ROOT / "roles").rglob("*.py")]):
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in homes:
                defined[node.name].append(str(p.relative_to(ROOT)))
    assert {name: [home] for name, home in homes.items()} == dict(defined)


# --- where code runs: the import boundary (issue #44) ------------------------------------------

#: What the bench may import besides the standard library and rigkit.common/rigkit.bench: ``requests``
#: (the HTTP client; both sides pin the same version) and ``pynvml`` (nvidia-ml-py, the card's energy
#: counter read by rigkit.bench.nvml, imported inside its functions; both sides pin it too).
BENCH_THIRD_PARTY = {"requests", "pynvml"}


@lru_cache(maxsize=1)
def agent_import_names() -> frozenset[str]:
    """The import names the agent's wheelhouse provides: every top-level name that
    ``importlib.metadata.packages_distributions`` maps to a distribution pinned in
    :data:`rigkit.render.wheelhouse.AGENT_REQUIREMENTS` (``pyyaml`` → ``yaml``, ``nvidia-ml-py`` → ``pynvml``)."""
    from importlib.metadata import packages_distributions

    from rigkit.render.wheelhouse import AGENT_REQUIREMENTS

    norm = lambda name: name.lower().replace("_", "-")  # noqa: E731
    pinned = {norm(r.split("==")[0]) for r in AGENT_REQUIREMENTS}
    return frozenset(mod for mod, dists in packages_distributions().items() if any(norm(d) in pinned for d in dists))


def side(rel: str) -> str:
    """``common``, ``bench``, ``host`` or ``control``: where the file at ``rel`` (``rigkit/...``) runs."""
    parts = rel.split("/")
    if len(parts) < 3 or parts[1] not in ("common", "bench", "host"):
        return "control"
    return parts[1]


def imports_of(path: Path) -> list[tuple[int, str]]:
    """``[(line, module)]`` of every absolute import in ``path``, anywhere in its body: ``import a.b``
    gives ``a.b``; ``from a.b import c`` gives ``a.b.c`` when ``a.b`` is a rigkit package folder that
    holds ``c`` as a module, else ``a.b`` (so ``from rigkit.host import gpu`` is ``rigkit.host.gpu``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [(node.lineno, f"{node.module}.{a.name}" if node.module.startswith("rigkit") else node.module)
                    for a in node.names]
    return out


#: The rigkit folders each side may import (the control side: any but rigkit.host).
RIGKIT_FOLDERS = {"common": {"common"}, "bench": {"common", "bench"}, "host": {"common", "bench", "host"}}


def allowed(where: str, module: str) -> bool:
    """Whether a module of side ``where`` (:func:`side`) may import ``module``."""
    parts = module.split(".")
    if parts[0] != "rigkit":
        if where == "control" or parts[0] in sys.stdlib_module_names or parts[0] == "__future__":
            return True
        return parts[0] in (agent_import_names() if where == "host" else
                            BENCH_THIRD_PARTY if where == "bench" else set())
    if len(parts) == 1 or parts[1] == "__version__":  # the package root: the version
        return True
    return parts[1] != "host" if where == "control" else parts[1] in RIGKIT_FOLDERS[where]


def boundary_violations(root: Path = RIGKIT) -> list[str]:
    """``path:line: <side> module imports <module>`` for every import across the boundary, over every
    module under ``root`` (a ``rigkit`` tree): rigkit.common imports only the standard library and
    rigkit.common; rigkit.bench also rigkit.bench and :data:`BENCH_THIRD_PARTY`; rigkit.host also
    rigkit.host and the agent's wheelhouse (:func:`agent_import_names`); the control side never
    imports rigkit.host."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        where = side(rel)
        for line, module in imports_of(path):
            if not allowed(where, module):
                out.append(f"{rel}:{line}: a {where} module imports {module}")
    return out


def test_each_side_imports_only_what_it_may():
    assert side("rigkit/common/gpu.py") == "common" and side("rigkit/bench/client.py") == "bench"
    assert side("rigkit/host/window/steps.py") == "host" and side("rigkit/drift/compare.py") == "control"
    assert {"requests", "yaml", "huggingface_hub", "pynvml"} <= agent_import_names()
    violations = boundary_violations()
    assert not violations, "\n".join(violations)


def test_the_boundary_check_names_the_file_the_line_and_the_module(tmp_path):
    pkg = tmp_path / "rigkit"
    for d in ("common", "bench", "host", "cli"):
        (pkg / d).mkdir(parents=True)
    (pkg / "common" / "ok.py").write_text("import re\nfrom rigkit.common import ok\n")
    (pkg / "common" / "bad.py").write_text("import re\n\ndef f():\n    import requests\n    from rigkit.bench import client\n")
    (pkg / "bench" / "bad.py").write_text("import requests\nfrom rigkit.common import gpu\nfrom rigkit.spec.model import RigSpec\n")
    (pkg / "host" / "bad.py").write_text("import yaml\nfrom rigkit.bench import nvml\nimport pydantic\n")
    (pkg / "cli" / "bad.py").write_text("from rigkit.common import holds\n\n\ndef g():\n    from rigkit.host import gpu\n")
    (pkg / "paths.py").write_text("import rigkit.host.lock\n")
    assert boundary_violations(pkg) == [
        "rigkit/bench/bad.py:3: a bench module imports rigkit.spec.model.RigSpec",
        "rigkit/cli/bad.py:5: a control module imports rigkit.host.gpu",
        "rigkit/common/bad.py:4: a common module imports requests",
        "rigkit/common/bad.py:5: a common module imports rigkit.bench.client",
        "rigkit/host/bad.py:3: a host module imports pydantic",
        "rigkit/paths.py:1: a control module imports rigkit.host.lock",
    ]


def test_the_agent_wheel_ships_the_host_side_and_what_it_shares(tmp_path):
    """The staged project holds exactly rigkit/__init__.py and rigkit/{common,bench,host}/ ; every rigkit module a staged file imports is staged too, and
    the agent's entry point imports from the staged copy alone (``python -I -S``: no site-packages,
    only that folder on the path)."""
    from rigkit.render import wheelhouse

    staged = wheelhouse.stage_host_project(tmp_path / "src")
    files = {p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()}
    want = {p.relative_to(ROOT).as_posix() for pkg in ("common", "bench", "host") for p in (RIGKIT / pkg).rglob("*.py")
            if "__pycache__" not in p.parts}
    assert files == want | {"rigkit/__init__.py", "pyproject.toml"}
    assert {p.split("/")[1] for p in files if p.count("/") > 1} == {"common", "bench", "host"}
    modules = {p[:-3].replace("/", ".").removesuffix(".__init__") for p in files if p.endswith(".py")}
    missing = []
    for rel in sorted(f for f in files if f.endswith(".py")):
        for line, module in imports_of(staged / rel):
            if module.startswith("rigkit") and module not in modules and module.rpartition(".")[0] not in modules:
                missing.append(f"{rel}:{line}: {module}")
    assert not missing, missing
    probe = ("import json, sys; sys.path.insert(0, sys.argv[1]); import rigkit.host.__main__, rigkit.common.gpu, "
             "rigkit.common.holds, rigkit.bench.sse; print(json.dumps(sorted({getattr(v, '__file__', '') or '' "
             "for k, v in sys.modules.items() if k.split('.')[0] == 'rigkit'})))")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(staged)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert loaded and all(f.startswith(str(staged)) for f in loaded), loaded
