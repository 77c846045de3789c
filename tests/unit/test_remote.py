"""SSH to the host is one path: rigkit/remote.py builds every ``ssh`` argv (:func:`ssh_base_args`,
:class:`Remote`); wire-in, window, generations, rollback, drift and the bench use it."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path
from types import SimpleNamespace

from rigkit.remote import Remote

ROOT = Path(__file__).resolve().parents[2]


#: The one module besides remote.py that may start from ``ssh_base_args``: the bench's local
#: forward (``ssh -N -L``, no remote command); its commands go through ``Remote.argv``.
FORWARD = ROOT / "rigkit" / "bench" / "tunnel.py"


def _ssh_argv_builders(path: Path) -> list[int]:
    """Lines of ``path`` where a list or tuple starts with the string ``"ssh"`` or a call runs
    ``"ssh"`` (an argv being built), ``ssh_base_args`` is used outside the forward, or ``"sudo -n"``
    is prefixed to a command."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if path != FORWARD and isinstance(node, (ast.Name, ast.Attribute, ast.alias)) and \
                "ssh_base_args" in (getattr(node, "id", None), getattr(node, "attr", None), getattr(node, "name", None)):
            out.append(getattr(node, "lineno", 0))
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts and isinstance(node.elts[0], ast.Constant) \
                and node.elts[0].value == "ssh":
            out.append(node.lineno)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and node.args[0].value == "ssh":
            out.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("sudo -n"):
            out.append(node.lineno)
    return out


def test_no_module_but_remote_builds_an_ssh_argv():
    offenders = [f"{path.relative_to(ROOT)}:{line}"
                 for path in sorted([*(ROOT / "rigkit").rglob("*.py"), *(ROOT / "roles").rglob("*.py")])
                 if path != ROOT / "rigkit" / "remote.py" for line in _ssh_argv_builders(path)]
    assert not offenders, "an ssh argv built outside rigkit/remote.py:\n" + "\n".join(offenders)
    assert _ssh_argv_builders(ROOT / "rigkit" / "remote.py")  # the check sees the one that exists


def test_wire_in_runs_its_commands_through_remote_as_root(monkeypatch):
    from rigkit.cli import wirein as wirein_cli

    seen = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: seen.append((argv, kw)) or
                        subprocess.CompletedProcess(argv, 0, "__RIGKIT_NONE__\n", ""))
    hs = SimpleNamespace(name="h1", connection={"ssh_hostname": "rig.lan", "ssh_user": "op", "_sudo": True})
    assert wirein_cli.live_config(hs) is None
    (argv, kw), = seen
    assert argv[:-1] == Remote("h1", hs.connection).argv("x")[:-1]
    assert argv[-1].startswith("sudo -n sh -c ") and kw["timeout"] == 60.0


def test_a_wire_in_timeout_is_a_failure_naming_the_host(monkeypatch):
    from rigkit.cli import wirein as wirein_cli

    def hang(argv, **kw):
        raise subprocess.TimeoutExpired(argv, kw["timeout"])

    monkeypatch.setattr(subprocess, "run", hang)
    hs = SimpleNamespace(name="h1", connection={})
    try:
        wirein_cli.live_config(hs)
    except wirein_cli._Fail as exc:
        assert exc.message == "h1: cannot read /etc/llama-swap/config.yaml (ssh exit 255): ssh: timed out after 60 s"
    else:
        raise AssertionError("no failure")
