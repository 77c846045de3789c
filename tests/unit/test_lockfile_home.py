"""The lock file's home (issue #64, Build 2): ``rigkit/lockfile/`` holds the document, the one path
function, the resolvers and the resolved view; ``rigkit/spec/`` asks no network and reads no lock file;
the spec key ``models_lock`` is read as its new name ``lockfile`` with a warning naming both.

The no-network proof is two-fold: an AST walk of every module ``rigkit.spec`` reaches (function-level
imports included, through :func:`tests.unit.test_import_graph.graph`) finds no network client and no
``rigkit.lockfile`` module, and the real spec loading of both committed inventories runs in a process whose
sockets refuse to connect or resolve a name."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rigkit.lockfile.path import lock_file_path
from rigkit.spec.problems import SpecError
from rigkit.spec.validate import spec_from_dict, spec_from_layers, spec_warnings
from tests.unit.test_import_graph import graph, modules, reachable

ROOT = Path(__file__).resolve().parents[2]

#: Modules that open connections (or are a client made to): imported anywhere, they can ask the network.
NETWORK = ("requests", "httpx", "httpx2", "urllib3", "urllib.request", "http.client", "socket", "ssl", "aiohttp",
           "huggingface_hub", "ftplib", "smtplib", "xmlrpc")
#: Names of huggingface-hub that ask nothing: a repo id's validator (rigkit.spec.types) and the constants.
PURE = ("huggingface_hub.utils.validate_repo_id", "huggingface_hub.utils.HFValidationError",
        "huggingface_hub.constants")


def network_imports(tree: ast.AST) -> list[str]:
    """The dotted names ``tree`` imports (anywhere in its body) that are, or are inside, a :data:`NETWORK`
    module and not :data:`PURE`: ``import requests`` → ``requests``; ``from huggingface_hub import HfApi``
    → ``huggingface_hub.HfApi``."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names += [f"{node.module}.{a.name}" for a in node.names]

    def within(name: str, roots: tuple[str, ...]) -> bool:
        return any(name == r or name.startswith(r + ".") for r in roots)

    return sorted(n for n in names if within(n, NETWORK) and not within(n, PURE))


def test_the_network_detector_sees_what_it_must():
    hit = network_imports(ast.parse("import socket\ndef f():\n    from huggingface_hub import HfApi\n"
                                    "    import urllib.request\n"))
    assert hit == ["huggingface_hub.HfApi", "socket", "urllib.request"]
    assert network_imports(ast.parse("from urllib.parse import urlsplit\n"
                                     "from huggingface_hub.utils import validate_repo_id\n"
                                     "from huggingface_hub.constants import HF_TOKEN_PATH\n")) == []
    # the lock file's resolvers are where the network is asked; the detector finds them there
    mods = modules()
    assert network_imports(ast.parse(mods["rigkit.lockfile.hub"].read_text()))
    assert "requests" in network_imports(ast.parse(mods["rigkit.lockfile.resolve"].read_text()))


def test_spec_imports_no_network_client_and_no_lockfile_module():
    edges, mods = graph(), modules()
    spec = {m for m in edges if m == "rigkit.spec" or m.startswith("rigkit.spec.")}
    reached = set(spec).union(*(reachable(edges, m) for m in spec))  # spec's modules and all they import
    assert "rigkit.spec.validate" in reached and "rigkit.spec.inventory" in reached
    assert sorted(m for m in reached if m.split(".")[:2] == ["rigkit", "lockfile"]) == []
    found = {m: network_imports(ast.parse(mods[m].read_text())) for m in sorted(reached)}
    assert {m: names for m, names in found.items() if names} == {}


#: Load both committed inventories the way every command does (pyinfra's loader, the layers, the checks,
#: the warnings) with sockets that refuse to connect or to resolve a name; print each host's name and the
#: keys of its warnings. The resolved view (rigkit.lockfile.view: the lock file read, nothing asked) runs too.
_OFFLINE = r"""
import json, socket, sys

def refuse(*args, **kwargs):
    raise OSError("network refused by the test: rigkit.spec asked it")

socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = socket.gethostbyname = refuse

from rigkit.lockfile.view import locked_hosts
from rigkit.spec.inventory import load_hosts
from rigkit.spec.validate import spec_warnings

out = {}
for inv in sys.argv[1:]:
    hosts = load_hosts(inv)
    locked = locked_hosts(hosts, inv)
    out[inv] = [[h.name, sorted({w.key for w in spec_warnings(h.spec)})] for h in locked]
print(json.dumps(out))
"""


def test_spec_loading_runs_with_sockets_refused():
    proc = subprocess.run([sys.executable, "-c", _OFFLINE, "inventory/rig.py", "inventory/sandbox.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [h[0] for h in out["inventory/rig.py"]] and [h[0] for h in out["inventory/sandbox.py"]]
    # the committed inventories use the new name: no warning about the old one
    assert not any("models_lock" in keys for hosts in out.values() for _name, keys in hosts)


@given(folder=st.from_regex(r"(?:[a-z0-9_-]{1,8}/){0,3}", fullmatch=True),
       stem=st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,16}", fullmatch=True).filter(lambda s: not s.endswith(".")),
       given_path=st.none() | st.from_regex(r"(?:/|\./)?(?:[a-z0-9_-]{1,8}/){0,3}[a-z0-9_-]{1,12}\.json", fullmatch=True))
def test_the_lock_file_is_the_specs_else_beside_the_inventory(folder, stem, given_path):
    inventory = f"{folder}{stem}.py"
    got = lock_file_path(SimpleNamespace(lockfile=given_path), inventory)
    if given_path is None:
        assert got == Path(folder or ".") / f"{stem}.lock.json"
        assert got.parent == Path(inventory).parent
    else:
        assert got == Path(given_path)


def _control_side_sources() -> list[Path]:
    return [p for p in sorted((ROOT / "rigkit").rglob("*.py")) if "host" not in p.relative_to(ROOT).parts[1:2]] + \
        sorted((ROOT / "roles").glob("*.py")) + [ROOT / "deploy.py"]


#: Where a ``.lock.json`` name is built outside the path function, and why that is no second answer to
#: "where is this spec's lock file".
OTHER_LOCK_NAMES = {"rigkit/render/generations.py": "a recorded generation's lock written to a temporary file, "
                                                    "which then becomes that generation's spec's lockfile"}


def test_one_function_works_out_where_the_lock_file_is():
    """Nothing but rigkit/lockfile/path.py reads the spec's ``lockfile`` (an attribute, or getattr of the
    name) or builds a ``.lock.json`` name (except :data:`OTHER_LOCK_NAMES`): every reader asks
    :func:`lock_file_path`. Before issue #64 six places worked it out, two of them ignoring the spec's key."""
    home = ROOT / "rigkit" / "lockfile" / "path.py"
    found = []
    for path in _control_side_sources():
        text = path.read_text()
        if not any(word in text for word in ("lockfile", "models_lock", ".lock.json")):
            continue  # nothing to find (and no parse of the big generated tables)
        tree = ast.parse(text)
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and node.attr in ("lockfile", "models_lock"):
                found.append(f"{where}: .{node.attr}")
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) > 1 \
                    and isinstance(node.args[1], ast.Constant) and node.args[1].value in ("lockfile", "models_lock"):
                found.append(f"{where}: getattr {node.args[1].value}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                    and node.value.startswith(".lock.json") and str(path.relative_to(ROOT)) not in OTHER_LOCK_NAMES:
                found.append(f"{where}: {node.value!r}")
    assert found and all(f.startswith("rigkit/lockfile/path.py:") for f in found), found
    assert home.exists()


def test_the_old_key_is_read_as_the_new_one_with_a_warning_naming_both():
    spec = spec_from_dict({"models_lock": "inventory/x.lock.json"})
    assert spec.lockfile == "inventory/x.lock.json"
    assert [str(w) for w in spec_warnings(spec) if w.key == "models_lock"] == [
        "models_lock: renamed lockfile: read as lockfile; write lockfile where models_lock is set (the old name may go)"]
    assert not [w for w in spec_warnings(spec_from_dict({"lockfile": "inventory/x.lock.json"})) if "renamed" in str(w)]
    # across layers: each layer's old name is its new one, so the higher layer wins as for any key
    spec = spec_from_layers([{"models_lock": "low.lock.json"}, {"lockfile": "high.lock.json"}],
                            labels=["group_data/all.py", "--data"])
    assert spec.lockfile == "high.lock.json" and [w.key for w in spec_warnings(spec)][:1] == ["models_lock"]
    spec = spec_from_layers([{"lockfile": "low.lock.json"}, {"models_lock": "high.lock.json"}])
    assert spec.lockfile == "high.lock.json"
    # the resolved view keeps the warning (model_copy keeps it)
    assert spec.model_copy(update={"reboot": True})._renamed_keys == ("models_lock",)


def test_both_names_in_one_layer_is_invalid_naming_both_and_the_layer():
    with pytest.raises(SpecError) as exc:
        spec_from_layers([{"models_lock": "a.lock.json", "lockfile": "b.lock.json"}], labels=["group_data/all.py"])
    assert [str(p) for p in exc.value.problems] == [
        "models_lock (in group_data/all.py): 'a.lock.json' — renamed lockfile, which is set too: keep lockfile only"]
    with pytest.raises(SpecError):
        spec_from_dict({"models_lock": "a.lock.json", "lockfile": "b.lock.json"})
