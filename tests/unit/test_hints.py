"""Every command rigkit prints for the operator to run ("hints", :mod:`rigkit.hints`) is complete:
pasted as printed, it reaches the inventory and the host it was printed for.

The hints are collected from the code, not listed by hand: an AST walk over ``rigkit/``, ``roles/``
and ``deploy.py`` finds every call of :func:`rigkit.hints.command` (its words are literals) and every
backticked ```rigkit VERB …``` in a string the host side prints (completed by
:func:`rigkit.hints.complete` where the control side relays it). A backticked hint written out by
hand on the control side is a failure of its own: it would be printed as written. Each hint is then
run, as printed, against the sandbox inventory (``inventory/sandbox.py``) for a sandbox host that is
not up — no command may fail for want of ``-i`` or ``--host`` (the default inventory,
``inventory/rig.py``, has no such host: ``error: --host …: not in inventory/rig.py``), or because the
hint names an option the command does not have; reaching for the host and failing there (exit 1)
is what a complete hint does when the host is down.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rigkit import hints

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "rigkit").rglob("*.py"), *(ROOT / "roles").rglob("*.py"), ROOT / "deploy.py"])
INVENTORY = "inventory/sandbox.py"
HOST = "r-hint"
#: What a starred argument of a hints.command call can stand for, each choice (a new one must be added here).
STARRED = {"again": [[], ["--data", 'llama_swap={"members": {"hyperqwen": {"staged": false}}}']],
           "extra": [[], ["--reboot"]]}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _text(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's with ``{}`` for each value put in."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def collect() -> tuple[list[tuple[str, str]], list[str]]:
    """``([(where, hint as printed for HOST in INVENTORY)], [hand-written control-side hints])``."""
    found, hand_written = [], []
    old = os.environ.get(hints.INVENTORY_ENV)
    os.environ[hints.INVENTORY_ENV] = INVENTORY
    try:
        for path in SOURCES:
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(), filename=rel)
            skip = _docstrings(tree)
            parts_of_fstrings = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
            for node in ast.walk(tree):
                where = f"{rel}:{getattr(node, 'lineno', '?')}"
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "command" \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "hints":
                    variants: list[list[str]] = [[]]
                    for arg in node.args:
                        if isinstance(arg, ast.Starred):
                            name = arg.value.id if isinstance(arg.value, ast.Name) else ast.unparse(arg.value)
                            assert name in STARRED, f"{where}: say what *{name} stands for in STARRED"
                            variants = [v + choice for v in variants for choice in STARRED[name]]
                        else:
                            assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), \
                                f"{where}: a hint's words are literals ({ast.unparse(arg)})"
                            variants = [v + [arg.value] for v in variants]
                    host = HOST if "host" in {k.arg for k in node.keywords} else None
                    found += [(where, hints.command(w[0], *w[1:], host=host, inventory_path=INVENTORY)) for w in variants]
                    continue
                text = _text(node)
                if text is None or id(node) in skip or id(node) in parts_of_fstrings:
                    continue
                for m in hints.HINT_RE.finditer(text):
                    if rel.startswith("rigkit/host/"):
                        assert "{}" not in m.group(0), f"{where}: a host-side hint with a value put in: {m.group(0)}"
                        found.append((where, hints.complete(m.group(0), host=HOST).strip("`")))
                    else:
                        hand_written.append(f"{where}: {m.group(0)}")
    finally:
        if old is None:
            os.environ.pop(hints.INVENTORY_ENV, None)
        else:
            os.environ[hints.INVENTORY_ENV] = old
    return found, hand_written


FOUND, HAND_WRITTEN = collect()


def test_the_collection_finds_the_hints_the_issue_named():
    """The premise: the walk sees hints of both kinds (else the runs below would prove nothing)."""
    printed = {h for _, h in FOUND}
    assert f"rigkit wire-in -i {INVENTORY} --host {HOST} --release" in printed  # the host side's, completed
    assert f"rigkit rollback -i {INVENTORY} --host {HOST} --release" in printed
    assert any(h.startswith(f"rigkit wire-in -i {INVENTORY} --host {HOST} --activate --data ") for h in printed)
    assert f"rigkit deploy -i {INVENTORY} --host {HOST}" in printed  # drift's repair line
    assert len(printed) >= 12, sorted(printed)


def test_no_control_side_hint_is_written_out_by_hand():
    assert not HAND_WRITTEN, "print these through rigkit.hints.command:\n" + "\n".join(HAND_WRITTEN)


def test_every_hint_names_the_inventory_and_the_host():
    for where, hint in FOUND:
        argv = shlex.split(hint)
        assert argv[0] == "rigkit", (where, hint)
        assert argv[argv.index("-i") + 1] == INVENTORY, (where, hint)
        if argv[1] not in ("models", "lock", "check"):  # a lock, and the check of it, are the inventory's: all its hosts
            assert argv[argv.index("--host") + 1] == HOST, (where, hint)


#: A line a command prints once it has reached for the host and keeps trying (``rigkit window
#: --follow`` reconnects for a minute): the run has shown what it must, and is stopped there.
RETRYING = "reconnecting"


def _run(hint: str, project: Path, state: Path) -> subprocess.CompletedProcess:
    """Run ``hint`` as printed in ``project`` for the sandbox host HOST, which is not up (its SSH
    port refuses at once). Returns the finished process, or — when it prints :data:`RETRYING` —
    the output so far with exit code 1 after stopping it."""
    env = {k: v for k, v in os.environ.items() if k not in ("RIGKIT_INVENTORY", "HF_TOKEN")}
    env.update(RIGKIT_HARNESS_STATE=str(state), RIGKIT_SANDBOX_HOST=HOST,
               RIGKIT_SANDBOX_DATA=json.dumps({"ssh_hostname": "127.0.0.1", "ssh_port": 9,
                                               "llama_swap": {"release_sha256": "0" * 64}}))
    argv = [sys.executable, "-m", "rigkit", *shlex.split(hint)[1:]]
    proc = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    said = []
    for line in proc.stderr:  # until it exits (EOF), or says it is retrying the host
        said.append(line)
        if RETRYING in line:
            proc.kill()
            break
    out = proc.stdout.read()
    code = proc.wait(timeout=240)
    return subprocess.CompletedProcess(argv, 1 if RETRYING in "".join(said) else code, out, "".join(said))


#: Writes ``$RIGKIT_HARNESS_STATE/sandbox.lock.json`` for the sandbox spec as the hints run it, with no
#: source reachable: the committed models section, and pins, images and the release "resolved" by a
#: resolver that answers from the spec alone (versions of the declared series, digests and sha256 of
#: zeros) — enough for a deploy to get past its lock and reach for the host, as the hints must.
_OFFLINE_LOCK = r"""
import json, sys
from pathlib import Path
from rigkit.lockfile import resolve, view
from rigkit.spec.inventory import load_hosts
from rigkit.lockfile.document import write_lock

class Offline(resolve.Resolver):
    def __init__(self):
        pass
    def pins(self, spec, names=None):
        out = {}
        for pkg, (want, _key) in view.declared_pins(spec).items():
            version = want if "-" in want else f"{want}.1-1"
            file = f"{pkg}-{version}-x86_64.pkg.tar.zst"
            out[pkg] = {"want": want, "version": version, "file": file, "url": f"http://127.0.0.1:9/{file}",
                        "sha256": "0" * 64, "csize": 0, "sig_url": None, "repo_db": "offline"}
        return out
    def image(self, name, image):
        return {"repository": image.repository, "ref": image.ref, "registry": image.registry,
                "digest": "sha256:" + "0" * 64, "kind": "manifest",
                "media_type": "application/vnd.oci.image.manifest.v1+json"}
    def release(self, spec):
        ls = spec.llama_swap
        return {"version": ls.version, "url": ls.release_url, "sha256": ls.release_sha256 or "0" * 64,
                "from": "offline"}

(hs,) = load_hosts("inventory/sandbox.py")
lock = {"version": 2, "models": json.loads(Path("inventory/sandbox.lock.json").read_text())["models"],
        **resolve.lock_sections(hs.spec, {}, resolver=Offline())}
write_lock(lock, Path(sys.argv[1]))
"""


def test_every_hint_runs_as_printed_against_the_sandbox_inventory(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "harness"))
    import sandbox_project

    project = sandbox_project.make(tmp_path / "project")
    (tmp_path / "state").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RIGKIT_INVENTORY", "HF_TOKEN")}
    env.update(RIGKIT_HARNESS_STATE=str(tmp_path / "state"), RIGKIT_SANDBOX_HOST=HOST,
               RIGKIT_SANDBOX_DATA=json.dumps({"llama_swap": {"release_sha256": "0" * 64}}))
    subprocess.run([sys.executable, "-c", _OFFLINE_LOCK, str(tmp_path / "state" / "sandbox.lock.json")],
                   cwd=project, env=env, check=True, timeout=120)
    unique = sorted({h for _, h in FOUND})
    with ThreadPoolExecutor(max_workers=3) as pool:
        procs = dict(zip(unique, pool.map(lambda h: _run(h, project, tmp_path / "state"), unique)))
    bad = []
    for hint, proc in procs.items():
        said = proc.stdout + proc.stderr
        if proc.returncode == 2 or "not in inventory" in said or "No such option" in said or "Usage:" in said:
            bad.append(f"$ {hint}\n  exit {proc.returncode}: {said.strip()[-600:]}")
    assert not bad, "\n".join(bad)
    # the premise: each reached for the host (or the hub) and stopped there, not earlier
    assert all(p.returncode in (0, 1, 3) for p in procs.values())
    assert sum(p.returncode == 1 for p in procs.values()) >= len(procs) - 2


def test_every_command_has_the_inventory_its_hints_name():
    """The hints name the inventory the command was run with (:func:`rigkit.hints.inventory` reads the
    running command's ``inventory`` parameter): every rigkit command has one, ``-i``."""
    import click

    from rigkit.cli.main import cli

    def commands(group, prefix=""):
        for name, cmd in group.commands.items():
            if isinstance(cmd, click.Group):
                yield from commands(cmd, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", cmd

    found = dict(commands(cli))
    assert len(found) >= 11
    for name, cmd in found.items():
        (param,) = [p for p in cmd.params if p.name == "inventory"]
        assert "-i" in param.opts, f"rigkit {name}"


def test_a_hint_names_the_inventory_the_running_command_was_given(monkeypatch):
    import click

    monkeypatch.delenv(hints.INVENTORY_ENV, raising=False)
    seen = []

    @click.command()
    @click.option("-i", "--inventory", "inventory", default=None)
    def cmd(inventory):
        seen.append(hints.command("drift", host="demo"))

    cmd.main(["-i", "inventory/sandbox.py"], standalone_mode=False)
    cmd.main([], standalone_mode=False)
    assert seen == ["rigkit drift -i inventory/sandbox.py --host demo", "rigkit drift -i inventory/rig.py --host demo"]
    assert hints.command("drift", host="demo") == "rigkit drift -i inventory/rig.py --host demo"  # nothing left behind
