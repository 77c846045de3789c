"""The holds file has one name, one parser, one reader and one writer (rigkit.common.holds), and a
corrupt one is an error for every caller, never "no hold" (issue #26)."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyinfra.api import DeployError

from rigkit.operations.facts.rig import Holds
from rigkit.operations.facts.util import RC_MARK
from rigkit.common import holds

ROOT = Path(__file__).resolve().parents[2]
ADVICE = ("; it records rollbacks the deploy must respect, so it is not read as \"no hold\": fix it, or remove it "
          "by hand once no hold should stay")


def test_absent_empty_and_good_holds_read_as_they_are(tmp_path):
    p = tmp_path / "holds.json"
    assert holds.read_holds(p) == {}
    p.write_text("")
    assert holds.read_holds(p) == {}
    holds.write_holds(p, {holds.LLAMA_SWAP: {"since": "x"}})
    assert holds.read_holds(str(p)) == {"llama-swap": {"since": "x"}}
    assert json.loads(p.read_text()) == {"llama-swap": {"since": "x"}}


@pytest.mark.parametrize("text, why", [
    ("[1]", "not a JSON object"),
    ('{"llama-swap": 1}', "not a JSON object of hold records"),
    ("{", "not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
])
def test_a_corrupt_holds_file_is_an_error_naming_the_file_and_what_to_do(tmp_path, text, why):
    p = tmp_path / "holds.json"
    p.write_text(text)
    with pytest.raises(holds.HoldsError) as exc:
        holds.read_holds(p)
    assert str(exc.value) == f"{p}: {why}{ADVICE}"
    assert Holds().process([text]) == {"exists": True, "data": {},
                                       "error": f"/var/lib/rigkit/holds.json: {why}{ADVICE}"}


def test_the_holds_fact_reads_an_absent_file_as_no_hold():
    assert Holds().process([f"{RC_MARK}404"]) == {"exists": False, "data": {}, "error": None}
    assert Holds().process(['{"generation": {"generation": 3}}'])["data"] == {"generation": {"generation": 3}}


class _FactHost:
    name = "h1"
    print_prefix = "[h1] "

    def __init__(self, facts):
        self.facts = facts

    def get_fact(self, fact, **kwargs):
        return self.facts[fact.__name__]


def test_the_deploy_refuses_a_corrupt_holds_file_instead_of_ignoring_a_generation_hold(monkeypatch):
    from rigkit.deploy import source as deploy

    monkeypatch.setattr(deploy, "_declared", lambda host: None)
    bad = Holds().process(["{"])
    with pytest.raises(DeployError, match=r"^h1: /var/lib/rigkit/holds.json: not valid JSON"):
        deploy.source_for(_FactHost({"Holds": bad}))


def test_rigkit_generations_exits_1_on_a_corrupt_holds_file(capsys):
    from rigkit.cli import generations as generations_cli

    remote = SimpleNamespace(name="h1", run=lambda cmd, **kw: subprocess.CompletedProcess(cmd, 0, "{", ""))
    with pytest.raises(SystemExit) as exc:
        generations_cli._holds(remote)
    assert exc.value.code == 1
    assert "h1: /var/lib/rigkit/holds.json: not valid JSON" in " ".join(capsys.readouterr().err.split())


def test_wire_in_fails_on_a_corrupt_holds_file(monkeypatch):
    from rigkit.deploy import wirein

    from rigkit import remote

    monkeypatch.setattr(remote.Remote, "run", lambda self, cmd, **kw: subprocess.CompletedProcess(cmd, 0, "[1]", ""))
    hs = SimpleNamespace(name="h1", connection={})
    with pytest.raises(wirein.WireInFailed) as exc:
        wirein.host_holds(hs)
    assert str(exc.value) == f"h1: /var/lib/rigkit/holds.json: not a JSON object{ADVICE}"
    assert exc.value.exit_code == 1


def _code_strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_only_the_holds_module_names_the_file_and_its_keys():
    """No second ``HOLD_KEY``, no ``"holds.json"`` in code elsewhere, no other json.loads of it."""
    offenders = []
    for path in sorted((ROOT / "rigkit").rglob("*.py")) + sorted((ROOT / "roles").rglob("*.py")):
        if path == ROOT / "rigkit" / "common" / "holds.py":
            continue
        src = path.read_text()
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and ("HOLD_KEY" in t.id or t.id.endswith("_HOLD"))
                                                    for t in node.targets):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: assigns a hold name")
        offenders += [f"{path.relative_to(ROOT)}:{line}: {v!r}" for line, v in _code_strings(path) if "holds.json" in v]
    assert not offenders, "\n".join(offenders)


def test_the_lease_variable_is_named_once():
    """``RIGKIT_LOCK_LEASE`` is used as a name in one place, rigkit.common.lock.LEASE_ENV: no other
    string in the package is that name or sets it (``RIGKIT_LOCK_LEASE=``); prose may mention it."""
    import ast
    from pathlib import Path

    hits = []
    for path in sorted(Path(__file__).resolve().parents[2].joinpath("rigkit").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if id(node) in docs:
                continue
            parts = node.values if isinstance(node, ast.JoinedStr) else [node]
            for part in parts:
                if isinstance(part, ast.Constant) and isinstance(part.value, str) and (
                        part.value == "RIGKIT_LOCK_LEASE" or "RIGKIT_LOCK_LEASE=" in part.value):
                    hits.append((path.name, getattr(node, "lineno", 0)))
    lock_py = Path(__file__).resolve().parents[2] / "rigkit" / "common" / "lock.py"
    assignment = next(n.lineno for n in ast.parse(lock_py.read_text()).body if isinstance(n, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == "LEASE_ENV" for t in n.targets))
    assert hits == [("lock.py", assignment)]  # the one place: the assignment of LEASE_ENV


def test_a_recorded_generation_or_a_combination_deploys_whatever_the_inventorys_lock_resolves(monkeypatch, tmp_path):
    """A bisect's combination (and a recorded generation: a rollback, the way back) carries its own resolved
    spec and lock; of the inventory only the run's switches count, so a lock that no longer resolves the
    inventory's spec (an operator's ``rigkit lock --data …`` rewrote it) must not stop it — it did, every step and
    the way back of a walk failed. The inventory's own spec is still refused on such a lock."""
    from rigkit.deploy import source as deploy
    from rigkit.render.generations import spec_snapshot
    from rigkit.spec.validate import spec_from_dict

    declared = spec_from_dict({})

    def unresolved(host, declared=None):
        raise DeployError("the lock does not resolve what the spec declares:\n  images.strata: …")

    monkeypatch.setattr(deploy, "_declared", lambda host: declared)
    monkeypatch.setattr(deploy, "spec_for", unresolved)
    combo = tmp_path / "combination.json"
    combo.write_text(json.dumps({"spec": spec_snapshot(declared), "lock_text": None,
                                 "bisect": {"id": "b", "step": 2, "entries": [], "reason": "bisect b step 2"}}))
    monkeypatch.setenv(deploy.COMBINATION_ENV, str(combo))
    source, hold = deploy.source_for(_FactHost({}))
    assert hold is None and source.bisect["step"] == 2
    monkeypatch.delenv(deploy.COMBINATION_ENV)
    no_hold = Holds().process([])
    with pytest.raises(DeployError, match="the lock does not resolve"):
        deploy.source_for(_FactHost({"Holds": no_hold, "JsonFile": {"data": None}}))
