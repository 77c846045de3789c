"""One piece for each job (issue #44): the power limit is set, read back and judged in one module
(rigkit/common/powerlimit.py), the holds file is read over SSH by one function
(:func:`rigkit.remote.read_holds`), the Bearer header is built once and llama-swap's ``/running``
is read once (rigkit/bench/llama_swap.py), one HF-token shape (rigkit/spec/secrets.py), the enabled
units listed once (rigkit/render/declared_state.py). Each rule is read from the source tree (AST),
so a second definition coming back fails here; the property tests drive every consumer of the power
limit with readings near the limit and ask that all of them agree with the one rule."""

from __future__ import annotations

import ast
import functools
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigkit.common import powerlimit
from tests.unit.test_hints import _docstrings

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "rigkit").rglob("*.py"), *(ROOT / "roles").rglob("*.py"), ROOT / "deploy.py"])


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


@functools.lru_cache(maxsize=1)
def _trees() -> tuple[tuple[str, ast.Module], ...]:
    """``(path from the root, its AST)`` for every source file, parsed once for the module."""
    return tuple((_rel(p), ast.parse(p.read_text(), str(p))) for p in SOURCES if p.exists())


def _string_parts(tree: ast.AST):
    """Every literal string piece of code (constants and f-string parts), docstrings excluded."""
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node, node.value


def _where(pred) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for rel, tree in _trees():
        for node, text in _string_parts(tree):
            if pred(text):
                out.setdefault(rel, []).append(node.lineno)
    return out


# --- the power limit ---------------------------------------------------------------------------

#: Every consumer of "enforced equals declared", and what it must call.
POWER_CONSUMERS = {
    "rigkit/operations/gpu.py": {"limit_agrees", "read_back_problem", "set_argv"},
    "rigkit/host/power.py": {"limit_agrees", "read_back_problem", "set_limit"},
    "rigkit/host/window/sweep.py": {"read_back_problem", "set_limit"},
    "rigkit/host/confirm.py": {"limit_agrees"},
    "rigkit/drift/compare.py": {"limit_agrees"},
    "rigkit/render/files.py": {"set_argv", "GPU_INDEX"},
}


def test_one_tolerance_one_set_command_one_card():
    """``TOLERANCE_W`` and a power-limit comparison live in powerlimit.py only; ``--power-limit=`` is
    spelled there only (the operation, the healer, the sweep and the boot unit take its argv); the
    unit template names no card of its own."""
    tolerance, compares, set_cmd = [], [], _where(lambda s: "--power-limit=" in s)
    for rel, tree in _trees():
        if rel == "rigkit/common/powerlimit.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and "TOLERANCE" in t.id for t in targets):
                    tolerance.append(f"{rel}:{node.lineno}")
            if isinstance(node, ast.Compare):
                text = ast.unparse(node)
                limit = any(k in text for k in ("power_enforced_w", "power_limit_w", "enforced", "watts", "want"))
                if limit and ("abs(" in text or any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
                              and ("power_enforced_w" in text or "power_limit_w" in text)):
                    compares.append(f"{rel}:{node.lineno}: {text}")
    assert not tolerance, f"a second tolerance: {tolerance}"
    assert not compares, f"a power limit judged outside rigkit.common.powerlimit: {compares}"
    assert set(set_cmd) <= {"rigkit/common/powerlimit.py"}, f"a second --power-limit command: {set_cmd}"
    unit = (ROOT / "templates/systemd/gpu-power-limit.service.j2").read_text()
    assert "--id" not in unit and "--power-limit" not in unit, "the unit's command is powerlimit.set_argv's"


def test_every_power_limit_consumer_uses_the_one_api():
    for rel, names in POWER_CONSUMERS.items():
        tree = ast.parse((ROOT / rel).read_text())
        used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
               {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert names <= used, f"{rel} no longer uses {sorted(names - used)} of rigkit.common.powerlimit"


def test_the_unit_sets_the_limit_with_the_one_command_on_the_one_card():
    from rigkit import paths
    from rigkit.render.files import render
    from rigkit.spec.validate import spec_from_layers

    spec = spec_from_layers([{"gpu_power_limit_w": 390}])
    unit = render(spec)[f"{paths.UNIT_DIR}/gpu-power-limit.service"].text
    want = " ".join(powerlimit.set_argv(powerlimit.GPU_INDEX, 390, paths.NVIDIA_SMI_BIN))
    assert f"ExecStart={want}\n" in unit


#: Readings as nvidia-smi prints them (two decimals, from NVML's mW) near a whole-watt limit.
near = st.tuples(st.integers(100, 500), st.integers(-150, 150)).map(lambda t: (t[0], round(t[0] + t[1] / 100, 2)))


def _smi(reading: float, limit: float | None = None) -> dict:
    return {"state": "ok", "message": "", "gpus": [{"index": 0, "power_enforced_w": reading,
                                                    "power_limit_w": reading if limit is None else limit,
                                                    "power_min_w": 100.0, "power_max_w": 600.0}]}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(near)
def test_every_consumer_agrees_for_every_reading_near_the_limit(tmp_path, monkeypatch, case):
    """For a declared limit W and a reading r within 1.5 W of it: the deploy's operation (no change,
    and its read-back), the healer (no re-application), the sweep's restore, the confirmation and
    drift all call r the declared limit exactly when :func:`powerlimit.limit_agrees` does."""
    from rigkit.drift.compare import compare_power
    from rigkit.host import confirm as confirm_mod
    from rigkit.host import power
    from rigkit.host.config import HostConfig
    from rigkit.host.journal import StepFailed
    from rigkit.host.window import sweep as sweep_mod
    from rigkit.operations import gpu as op_mod
    from rigkit.render.files import render_host_config
    from rigkit.spec.validate import spec_from_layers

    declared, reading = case
    want = powerlimit.limit_agrees(reading, declared)
    assert want == (abs(reading - declared) <= 0.5)
    verdicts: dict[str, bool] = {}

    # drift
    verdicts["drift"] = not compare_power("h", declared, _smi(reading))

    # the deploy's operation: a no-op when it agrees; else its read-back judges the reading after setting
    fake_host = SimpleNamespace(get_fact=lambda fact, **kw: _smi(reading), noop=lambda msg: None)
    monkeypatch.setattr(op_mod, "host", fake_host)
    monkeypatch.setattr(op_mod, "state", SimpleNamespace(is_executing=True))
    cmds = list(op_mod.gpu_power_limit._inner(watts=declared))
    verdicts["operation (no change)"] = not cmds
    if cmds:
        assert str(cmds[0]) == " ".join(powerlimit.set_argv(0, declared))
        try:
            cmds[1].function(None, fake_host)
            verdicts["operation (read-back)"] = True
        except op_mod.OperationError:
            verdicts["operation (read-back)"] = False
    else:
        verdicts["operation (read-back)"] = True

    # the healer
    data = __import__("json").loads(render_host_config(spec_from_layers([{"gpu_power_limit_w": declared}])))
    data["paths"].update(lock=str(tmp_path / "rig.lock"), window_journal=str(tmp_path / "window.json"),
                         power_state=str(tmp_path / "power.json"))
    applied: list[float] = []
    rc = power.heal(HostConfig(data, str(tmp_path / "host.json")), query=lambda: _smi(reading),
                    apply=lambda i, w: (applied.append(w) or True, "ok"))
    verdicts["healer"] = not applied
    assert rc == (0 if want else 1)  # after setting, the reading is the same r: held iff it agrees

    # the sweep's restore
    monkeypatch.setattr(sweep_mod.host_powerlimit, "set_limit", lambda i, w, t=30.0: (True, ""))
    monkeypatch.setattr(sweep_mod.host_gpu, "enforced_w", lambda i: (reading, None))
    j = SimpleNamespace(data={"changed": {"power_limit": {"index": 0, "declared_w": float(declared)}}},
                        save=lambda: None)
    try:
        sweep_mod.restore_power(j)
        verdicts["sweep restore"] = True
    except StepFailed:
        verdicts["sweep restore"] = False

    # the confirmation
    probe = SimpleNamespace(unit_state=lambda u: "active", enforced_w=lambda i: (reading, None),
                            file_problems=lambda f: [], health=lambda: True, complete=lambda m, t: "1 token(s)")
    result = confirm_mod.confirm({"n": 1, "spec": {"gpu_power_limit_w": declared}, "units": {"enabled": []}},
                                 [], probe, 5, 0, lambda line: None, files=False)
    verdicts["confirm"] = next(c["ok"] for c in result["checks"] if c["check"] == "power limit")

    assert verdicts == {k: want for k in verdicts}, (declared, reading, verdicts)


def test_the_tolerance_is_half_the_specs_resolution():
    """Whole watts declared: every reading agrees with at most one of them, and a whole-watt reading
    only with itself."""
    assert powerlimit.limit_agrees(419.9, 420) and powerlimit.limit_agrees(420.01, 420)
    assert not powerlimit.limit_agrees(419.4, 420) and not powerlimit.limit_agrees(None, 420)
    for r in (419.49, 419.51, 420.0, 420.49):
        assert sum(powerlimit.limit_agrees(r, w) for w in range(410, 431)) == 1


# --- the holds file over SSH ---------------------------------------------------------------------

def test_one_holds_reader_over_ssh():
    """Outside the host side, the holds text is parsed by :func:`rigkit.remote.read_holds` (direct SSH)
    and the pyinfra fact (rigkit/operations/facts/rig.py, the deploy's and drift's probe) only."""
    callers = []
    for rel, tree in _trees():
        if rel.startswith("rigkit/host/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "parse" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "holds":
                callers.append(rel)
    assert sorted(set(callers)) == ["rigkit/operations/facts/rig.py", "rigkit/remote.py"], callers


class _LocalRemote:
    """:class:`rigkit.remote.Remote`'s ``run`` through a real local shell (``sh -c``), or a failed ssh
    (raised as :meth:`rigkit.remote.Remote.run` raises it)."""

    name = "box"

    def __init__(self, fail: bool = False):
        self.fail = fail

    def run(self, command, *, as_root, stdin=None, timeout=60):
        from rigkit.remote import HostUnreachable

        if self.fail:
            raise HostUnreachable("box: cannot reach the host over SSH (ssh exit 255): ssh: connect to host box "
                                  "port 22: Connection refused")
        return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout)


def test_the_holds_reader_tells_a_failed_read_from_no_hold(tmp_path, monkeypatch):
    from rigkit import paths, remote
    from rigkit.common.holds import HoldsError

    f = tmp_path / "holds.json"
    monkeypatch.setattr(paths, "HOLDS_FILE", str(f))
    assert remote.read_holds(_LocalRemote()) == {}  # absent: no hold
    f.write_text('{"generation": {"generation": 3, "since": "x"}}')
    assert remote.read_holds(_LocalRemote()) == {"generation": {"generation": 3, "since": "x"}}
    with pytest.raises(remote.HostUnreachable, match=r"box: cannot reach the host over SSH \(ssh exit 255\)"):
        remote.read_holds(_LocalRemote(fail=True))
    f.write_text("[1]")
    with pytest.raises(HoldsError):
        remote.read_holds(_LocalRemote())
    f.unlink()
    f.mkdir()  # present but cannot be read: cat fails, never "no hold"
    with pytest.raises(remote.HostReadError, match="holds.json"):
        remote.read_holds(_LocalRemote())


def test_rigkit_generations_exits_1_when_the_holds_cannot_be_read(capsys):
    """The bug of issue #44: ``_holds`` read an SSH failure as "no hold"; now the failed connection
    raises through it and the command says so (exit 1)."""
    from rigkit import exitcodes
    from rigkit.cli import generations
    from rigkit.cli.common import exits_when_unreachable

    for command in (generations.generations, generations.rollback):
        assert command.callback.__wrapped__  # the command turns a host not reached into exit 1
    with pytest.raises(SystemExit) as exc:
        exits_when_unreachable(generations._holds)(_LocalRemote(fail=True))
    assert exc.value.code == exitcodes.FAILED
    assert "box: cannot reach the host over SSH (ssh exit 255)" in capsys.readouterr().err.replace("\n", "")


# --- one SSH runner ----------------------------------------------------------------------------

REMOTE = "rigkit/remote.py"


def _ssh_builders(tree: ast.AST) -> list[int]:
    """Lines where an ssh argv is built or ssh is started: a list or tuple starting with ``"ssh"``,
    a call whose first argument is ``"ssh"``, ``ssh_base_args`` or a ``.argv(``/``.popen(`` of a
    Remote used, ``"sudo -n"`` prefixed to a command."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute, ast.alias)) and "ssh_base_args" in (
                getattr(node, "id", None), getattr(node, "attr", None), getattr(node, "name", None)):
            out.append(getattr(node, "lineno", 0))
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts and isinstance(node.elts[0], ast.Constant) \
                and node.elts[0].value == "ssh":
            out.append(node.lineno)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and node.args[0].value == "ssh":
            out.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "argv":
            out.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("sudo -n"):
            out.append(node.lineno)
    return out


def test_one_ssh_runner():
    """No module but rigkit/remote.py builds an ssh argv or starts ssh (its ``run`` raises on a
    failed connection; ``popen`` hands a session to the caller); the exceptions are defined there
    once; sudo is explicit (``as_root``, keyword, no default)."""
    import inspect

    from rigkit.remote import HostReadError, HostUnreachable, Remote, RemoteError, RemoteTimeout

    offenders = {rel: _ssh_builders(tree) for rel, tree in _trees() if rel != REMOTE and _ssh_builders(tree)}
    assert not offenders, f"an ssh argv built outside {REMOTE}: {offenders}"
    assert _ssh_builders(dict(_trees())[REMOTE])  # the check sees the one that exists
    assert not (ROOT / "rigkit" / "bench" / "tunnel.py").exists()
    errors = {"RemoteError", "HostUnreachable", "RemoteTimeout", "HostReadError", "ForwardError", "TunnelError"}
    defined = sorted((rel, node.name) for rel, tree in _trees() for node in ast.walk(tree)
                     if isinstance(node, ast.ClassDef) and node.name in errors)
    assert defined == sorted((REMOTE, n) for n in errors - {"TunnelError"}), defined
    assert all(issubclass(e, RemoteError) for e in (HostUnreachable, RemoteTimeout, HostReadError))
    for method in (Remote.run, Remote.popen, Remote.argv):
        p = inspect.signature(method).parameters["as_root"]
        assert p.default is inspect.Parameter.empty, method


def test_every_caller_of_the_runner_handles_the_raise():
    """A module that reaches the host through :class:`rigkit.remote.Remote` (or the holds reader)
    names what it does when the host is not reached: it catches :class:`rigkit.remote.RemoteError`
    (or a subclass) or its command is :func:`rigkit.cli.common.exits_when_unreachable`."""
    handles = {"RemoteError", "HostUnreachable", "RemoteTimeout", "exits_when_unreachable"}
    unhandled = []
    for rel, tree in _trees():
        if rel == REMOTE:
            continue
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
                {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        uses = {"Remote", "read_holds"} & {a.name for n in ast.walk(tree)
                                           if isinstance(n, ast.ImportFrom) and n.module == "rigkit.remote"
                                           for a in n.names}
        if uses and not (handles & names):
            unhandled.append((rel, sorted(uses)))
    assert not unhandled, unhandled


# --- the deploy's transaction ------------------------------------------------------------------

#: The transaction's pieces and the pyinfra run: defined in rigkit/deploy/ only.
TRANSACTION = {"LockHold", "Change", "ChangeRefused", "held", "begin_all", "begin", "settle", "put_back", "relock",
               "end", "confirm", "record_failed", "mark_failed", "agent_json", "run_pyinfra", "host_result",
               "failed_operations", "smoke"}
#: The changes to the rig (deploy, rollback, the wire-in's activation): each under the change context.
CHANGES = ("rigkit/deploy/changes.py", "rigkit/deploy/wirein.py", "rigkit/deploy/bisect.py")


def test_the_transaction_is_not_in_cli():
    where: dict[str, set[str]] = {}
    for rel, tree in _trees():
        for node in tree.body:  # module level: what a module defines
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in TRANSACTION:
                where.setdefault(node.name, set()).add(rel)
    in_cli = {name: sorted(r for r in rels if r.startswith("rigkit/cli/")) for name, rels in where.items()}
    assert not any(in_cli.values()), in_cli
    home = {name: "rigkit/deploy/run.py" if name in ("run_pyinfra", "host_result", "failed_operations", "smoke")
            else "rigkit/deploy/transaction.py" for name in TRANSACTION}
    assert all(home[name] in where.get(name, ()) for name in TRANSACTION), where
    trees = dict(_trees())
    importers = {rel for rel, tree in trees.items() for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module == "rigkit.deploy.transaction"}
    # one change context (issue 64): lock, begin and end are transaction.held's alone, every change goes
    # through it, and cli/ begins nothing (it parses, calls one function, prints)
    assert importers <= {*CHANGES, "rigkit/deploy/converged.py", "rigkit/cli/generations.py"}, importers
    held_by = {rel for rel in importers for n in ast.walk(trees[rel]) if isinstance(n, ast.ImportFrom)
               and n.module == "rigkit.deploy.transaction" and "held" in {a.name for a in n.names}}
    assert held_by == set(CHANGES), held_by
    began = {rel for rel, tree in trees.items() for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, "id", getattr(n.func, "attr", None)) in ("begin", "begin_all", "LockHold")}
    assert began == {"rigkit/deploy/transaction.py"}, began
    for rel in ("rigkit/deploy/transaction.py", "rigkit/deploy/run.py", *CHANGES):  # they print nothing: cli does
        mods = {n.module for n in ast.walk(trees[rel]) if isinstance(n, ast.ImportFrom)} | \
               {a.name for n in ast.walk(trees[rel]) if isinstance(n, ast.Import) for a in n.names}
        assert not {m for m in mods if m and (m.startswith("rigkit.cli") or m.startswith("rich"))}, (rel, mods)
        calls = {n.func.id for n in ast.walk(trees[rel]) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert "print" not in calls, rel


def test_the_transaction_says_everything_through_its_output(monkeypatch, capsys):
    """A confirmed change and a lost host, with an :class:`Output` that records: nothing reaches the
    terminal but through it."""
    from rigkit.deploy import transaction
    from rigkit.remote import HostUnreachable

    class Said:
        def __init__(self):
            self.lines = []

        def note(self, text, error=False):
            self.lines.append((text, error))

        def pyinfra_log(self, line):
            self.lines.append((line, False))

        def pyinfra_ended(self, proc, dry):
            pass

    class Lost:
        name = "box"

        def agent(self, *args, **kw):
            raise HostUnreachable("box: cannot reach the host over SSH (ssh exit 255): Connection refused")

        popen = agent  # the lock's session (begin takes the lock and reads where it starts in one)

    said = Said()
    ch = transaction.Change(SimpleNamespace(name="box"), Lost(), "the deploy", start=2, out=said)
    ran = subprocess.CompletedProcess([], 0, '{"results": {"operations": [{"name": "x", "success": ["box"]}]}}',
                                      "--> Beginning operation run\n")
    assert transaction.settle(ch, ran, "inv.py", {}, 0, "lease", {}, False, None) == 1
    [(line, error)] = said.lines
    assert error and line.startswith("box: the deploy: the host was lost (box: cannot reach the host over SSH")
    assert capsys.readouterr() == ("", "")
    with pytest.raises(HostUnreachable):  # begin: never "no agent yet"
        transaction.begin(SimpleNamespace(name="box"), Lost(), "the deploy", "lease", "rigkit deploy", said)


# --- drift's compare is pure -------------------------------------------------------------------

def test_compare_is_pure_and_findings_are_masked_in_one_place():
    trees = dict(_trees())
    tree = trees["rigkit/drift/compare.py"]
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
           {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    impure = ("rigkit.operations", "rigkit.remote", "subprocess", "pyinfra", "rigkit.deploy", "rigkit.drift.masking",
              "rigkit.spec.secrets", "socket", "requests")
    assert not {m for m in mods if m and m.startswith(impure)}, mods
    calls = {rel: [n.lineno for n in ast.walk(t) if isinstance(n, ast.Call) and
                   getattr(n.func, "id", getattr(n.func, "attr", None)) in ("mask", "masked")]
             for rel, t in trees.items() if rel.startswith("rigkit/drift/") or rel == "rigkit/deploy/converged.py"}
    # findings leave drift in two places: `rigkit drift` (run.check, every finding masked at once) and the
    # deploy's path choice (converged: the reasons it prints, each named finding and a failed probe's message)
    assert {rel: len(lines) for rel, lines in calls.items() if lines} == {"rigkit/drift/run.py": 1,
                                                                        "rigkit/deploy/converged.py": 3,
                                                                        "rigkit/drift/masking.py": 4}, calls


@given(st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-", min_size=8, max_size=40),
       st.sampled_from(["item", "declared", "actual", "diff"]))
def test_a_secret_value_in_any_field_of_a_finding_is_masked_where_findings_leave(secret, where):
    from rigkit.drift.compare import Finding
    from rigkit.drift.masking import masked

    f = Finding("h", "file", "/etc/x", "a", "b", diff="")
    setattr(f, where, f"before {secret} after")
    [out] = masked([f], [secret])
    assert all(secret not in (getattr(out, k) or "") for k in ("item", "declared", "actual", "diff"))
    assert getattr(out, where) == "before *** after"


# --- llama-swap: the Bearer header and /running ------------------------------------------------

def test_one_bearer_header_and_one_running_reader():
    bearer = _where(lambda s: s.startswith("Bearer"))
    auth = _where(lambda s: s == "Authorization")
    running = _where(lambda s: s == "/running" or s.endswith("/running") and s.startswith(("/", "http")))
    # the one other Bearer: a registry's anonymous token in the OCI distribution token flow (rigkit lock's
    # image look-ups) — another credential for another server, built once there
    other = {"rigkit/lockfile/registry.py"}
    assert set(bearer) - other == {"rigkit/bench/llama_swap.py"}, bearer
    assert set(auth) - other == {"rigkit/bench/llama_swap.py"}, auth
    assert all(len(bearer.get(f, [])) <= 1 and len(auth.get(f, [])) <= 1 for f in other), (bearer, auth)
    assert set(running) == {"rigkit/bench/llama_swap.py"}, running


def test_the_running_reader_sends_the_key(monkeypatch):
    import requests

    from rigkit.bench import llama_swap

    seen = {}

    class Resp:
        def raise_for_status(self):
            pass

        def json(self):
            return {"running": [{"model": "coder", "state": "ready"}]}

    monkeypatch.setattr(requests, "get", lambda url, headers, timeout: seen.update(url=url, headers=headers) or Resp())
    assert llama_swap.running("http://h:8080/", api_key="k")[0]["state"] == "ready"
    assert seen == {"url": "http://h:8080/running", "headers": {"Authorization": "Bearer k"}}
    assert llama_swap.headers(None) == {} and llama_swap.headers("") == {}


# --- one secret shape, one list of enabled units -------------------------------------------------

def test_one_hf_token_shape():
    shapes = _where(lambda s: "hf_[" in s)
    assert set(shapes) == {"rigkit/spec/secrets.py"}, shapes


@given(st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", min_size=0, max_size=40))
def test_what_the_spec_refuses_as_a_token_drift_masks(tail):
    from rigkit.drift.masking import mask
    from rigkit.spec.secrets import HF_TOKEN_RE

    text = f"HF_HOME=/x hf_{tail} end"
    assert bool(HF_TOKEN_RE.search(text)) == (len(tail) >= 20)
    assert (f"hf_{tail}" not in mask(text)) == (len(tail) >= 20)


def test_the_enabled_units_are_listed_once():
    from rigkit.render.generations import declared_units
    from rigkit.render.declared_state import enabled_units
    from rigkit.spec.validate import spec_from_layers

    lists = _where(lambda s: s == "nvidia-persistenced.service")
    roles = {r for r in lists if r.startswith("roles/")}
    assert set(lists) - roles - {"rigkit/drift/coverage.py"} == {"rigkit/render/declared_state.py"}, lists
    spec = spec_from_layers([{}])
    assert declared_units(spec)["enabled"] == sorted(enabled_units(spec))


# --- one bench session, one failure classifier (items 3 and 5) ---------------------------------

def _module_rel(module) -> str:
    return _rel(Path(module.__file__))


def _calls(tree: ast.AST, names: set[str]) -> list[tuple[str, int]]:
    """``(name, line)`` of every call of a function named in ``names`` (``f(...)`` or ``x.f(...)``)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in names:
                out.append((name, node.lineno))
    return out


def _imports(tree: ast.AST) -> set[str]:
    """Every module a file imports (``import a.b`` → ``a.b``; ``from a import b`` → ``a`` and ``a.b``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


#: What a bench session does: only the session calls these (the runner defines the first two).
SESSION_STEPS = {"run_workloads", "build_summary", "build_workloads", "mark_unrunnable", "probe_engine",
                 "summarize_workload"}


def test_one_bench_session():
    from rigkit.cli import bench as cli_bench
    from rigkit.bench import runner, session
    from rigkit.host.window import bench as window_bench

    home = _module_rel(session)
    allowed = {home: SESSION_STEPS, _module_rel(runner): {"summarize_workload"}}  # the runner's workload loop
    found = {}
    for rel, tree in _trees():
        steps = {n for n, _ in _calls(tree, SESSION_STEPS)} - allowed.get(rel, set())
        if steps:
            found[rel] = sorted(steps)
    assert found == {}, f"a bench step called outside {home}: {found}"
    trees = dict(_trees())
    for caller in (cli_bench, window_bench):
        assert session.__name__ in _imports(trees[_module_rel(caller)]), f"{caller.__name__} does not use the session"
    # one rule for the host's settings: nothing but the session reads the sizing out of spec.bench
    # (the spec defines the field; ``max_tokens``/``reasoning_effort`` are also request fields)
    sizing = _where(lambda s: s == "quoting_prompt_tokens")
    sizing.update({rel: [n.lineno] for rel, tree in _trees() for n in ast.walk(tree)
                   if isinstance(n, ast.Attribute) and n.attr == "quoting_prompt_tokens"})
    assert set(sizing) == {home}, sizing


def test_the_failure_kind_is_decided_in_one_module():
    from rigkit.bench import client, result, stream, transport

    home = _module_rel(result)
    stores = {rel: lines for rel, tree in _trees()
              if (lines := [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                            and n.attr == "error_kind" and isinstance(n.ctx, ast.Store)])}
    assert set(stores) == {home}, stores
    kinds = _where(lambda s: s in result.KINDS)
    # the client's parts never name a kind; everywhere else a kind is only read (compared, in a set)
    for part in (client, stream, transport):
        assert _module_rel(part) not in kinds, kinds
    trees = dict(_trees())
    for rel, lines in kinds.items():
        if rel == home:
            continue
        for node in ast.walk(trees[rel]):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in result.KINDS:
                raise AssertionError(f"{rel}:{node.lineno}: a kind assigned outside {home}")
            if isinstance(node, ast.keyword) and node.arg and "kind" in node.arg \
                    and isinstance(node.value, ast.Constant) and node.value.value in result.KINDS:
                raise AssertionError(f"{rel}:{node.value.lineno}: a kind passed outside {home}")
    # every failure goes through the classifier: failed(r, Happened(...), message)
    for rel, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "failed":
                assert isinstance(node.args[1], ast.Call) and node.args[1].func.id == "Happened", (rel, node.lineno)


def test_every_kind_named_in_the_tree_is_a_documented_kind():
    from rigkit.bench.result import ABORT_KINDS, KINDS, WAIT_KINDS
    from rigkit.common.sweepgrid import CRASH_KINDS

    assert set(ABORT_KINDS) | set(WAIT_KINDS) | set(CRASH_KINDS) <= set(KINDS)
    assert set(WAIT_KINDS) <= set(ABORT_KINDS)
