"""The package's layout shows the way data flows (issue #26): the commands in ``rigkit/cli/``,
inventory → spec with its validation in ``rigkit/spec/``, rendering in ``rigkit/render/``, deploying
in ``rigkit/deploy/`` (with ``rigkit/operations/``), the host side in ``rigkit/host/``; ``rigkit/``
itself keeps only what every room shares. A module that comes back flat, or a second public class of
one name, fails here. (The import direction between the folders is test_import_graph.py's.)"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RIGKIT = ROOT / "rigkit"

#: What ``rigkit/`` itself holds: the version, the entry point, and what every folder shares
#: (the host paths and unit names, the exit codes, SSH to the host, the commands that reach the
#: agent, the control machine's download cache, the build of this rigkit that generations record and
#: the deploy and its validators' verdict memory ask).
SHARED = {"__init__.py", "__main__.py", "paths.py", "exitcodes.py", "remote.py", "agentcmd.py", "cache.py",
          "hints.py", "build.py"}
FOLDERS = {"cli", "spec", "render", "deploy", "operations", "drift", "bench", "report", "host", "resolve"}


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
        "parse_config": "rigkit/host/swapconfig.py", "probe_order": "rigkit/host/swapconfig.py",
        "holds_text": "rigkit/host/swapconfig.py", "refusals": "rigkit/deploy/preflight.py",
        "remote_command": "rigkit/agentcmd.py", "dotenv_value": "rigkit/host/envfile.py",
        "hash_file": "rigkit/host/modelrecords.py", "compare": "rigkit/host/modelrecords.py",
        "status": "rigkit/host/modelrecords.py", "is_open": "rigkit/host/journal.py",
        "agrees": "rigkit/host/versions.py", "supports": "rigkit/host/versions.py",  # one driver/CUDA version rule
    }
    defined = defaultdict(list)
    for p in sorted([*RIGKIT.rglob("*.py"), *(ROOT / "roles").rglob("*.py")]):
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in homes:
                defined[node.name].append(str(p.relative_to(ROOT)))
    assert {name: [home] for name, home in homes.items()} == dict(defined)
