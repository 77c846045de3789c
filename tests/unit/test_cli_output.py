"""What the CLI prints is text, in a terminal and in a pipe alike: never raw rich markup (issue 61:
``[red]error:[/] …`` printed as it is by ``rigkit deploy -i inventory/rig.py --dry``), never a message's
own square brackets eaten as markup; colour only on a terminal, from a style given beside the text
(:func:`rigkit.cli.common.labelled`).

How the error paths are listed:

- **the code's error sites**: an AST walk of ``rigkit/cli/*.py`` for every call of the one way to say
  what stopped a command (:func:`rigkit.cli.common.error`, ``warn``, ``labelled``) — :func:`error_sites`;
- **click's command tree**: every leaf command (:func:`leaf_commands`), each run with an option it does not
  have (click's usage error), with an inventory that does not exist and with one whose data is invalid
  (rigkit's inventory and spec errors);
- the argument checks and host-facing paths the sites name, each a case of :data:`SPECIFIC`.

Every case runs twice, its stdout and stderr a pty (a terminal 200 columns wide) and then a pipe
(:func:`run_both`), through ``tests/unit/cli_said.py`` (a fork server: each run's consoles are made
against its own terminal or pipe), which records the site of every labelled line.
The sites no case reaches offline are :data:`NEEDS_A_HOST`, each with why; the test fails when a listed
site is neither reached nor there, or is there but reached (the table stays true).
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "rigkit" / "cli"
DRIVER = ROOT / "tests" / "unit" / "cli_said.py"
SAY = {"error": 0, "warn": 0, "labelled": 1}  # the helpers, and which argument is the message
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def markup_in(text: str) -> list[str]:
    """The rich markup tags in ``text``, as rich's own parser finds them (:data:`rich.markup.RE_TAGS`) and
    would act on them: a closing tag (``[/]``, ``[/red]``) or a tag that is a style (``[red]``, ``[bold
    yellow]``, :meth:`rich.style.Style.parse`). ``[options]``, ``[default: x]`` or ``[demo]`` are text."""
    from rich.errors import StyleSyntaxError
    from rich.markup import RE_TAGS
    from rich.style import Style

    found = []
    for match in RE_TAGS.finditer(text):
        _full, escapes, tag = match.groups()
        if escapes and len(escapes) % 2:
            continue
        if tag.startswith("/"):
            found.append(match.group(0))
            continue
        try:
            Style.parse(tag)
        except StyleSyntaxError:
            continue
        found.append(match.group(0))
    return found


def test_markup_in_finds_what_rich_would_read_and_nothing_else():
    assert markup_in("[red]error:[/] x") == ["[red]", "[/]"]
    assert markup_in("  [bold yellow]warn[/bold yellow]") == ["[bold yellow]", "[/bold yellow]"]
    assert markup_in("IgnorePkg in [options]; [default: inventory/rig.py]; [demo] Success; ['a', 'b']") == []


def error_sites() -> dict[str, tuple[str, int, int]]:
    """Every call of the CLI's error/warning helpers (:data:`SAY`) in ``rigkit/cli/*.py`` outside their
    own definitions: ``{"module:function:message source": (path, first line, last line)}``."""
    sites = {}
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text())
        rel = str(path.relative_to(ROOT))

        def visit(node, function):
            for child in ast.iter_child_nodes(node):
                name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
                if isinstance(child, ast.Call):
                    f = child.func
                    called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                    if called in SAY and not (rel.endswith("common.py") and function in SAY) \
                            and len(child.args) > SAY[called]:
                        key = f"{path.stem}:{function}:{ast.unparse(child.args[SAY[called]])[:80]}"
                        sites[key] = (rel, child.lineno, child.end_lineno)
                visit(child, name)

        visit(tree, "<module>")
    return sites


def leaf_commands() -> list[tuple[tuple[str, ...], object]]:
    """``[(("models", "lock"), command), …]``: every command of click's tree under ``rigkit``."""
    import click

    from rigkit.cli.main import cli

    def walk(command, path):
        if isinstance(command, click.Group):
            for name, sub in sorted(command.commands.items()):
                yield from walk(sub, (*path, name))
        else:
            yield path, command

    return list(walk(cli, ()))


def test_the_static_guard_no_console_reads_markup_and_no_string_holds_it():
    """Where rigkit prints with rich, the console is made with ``markup=False`` and no call turns markup
    on; no string of the CLI's code (docstrings aside) holds markup — a string that did would print raw.
    (Text elsewhere may hold what looks like a tag, docker's ``[/proto]``: printed as it is.)"""
    for path in sorted((ROOT / "rigkit").rglob("*.py")):
        if "host" in path.relative_to(ROOT / "rigkit").parts[:1]:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        rich_console = any(isinstance(n, ast.ImportFrom) and n.module == "rich.console"
                           and any(a.name == "Console" for a in n.names) for n in ast.walk(tree))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                kw = {k.arg: k.value for k in node.keywords}
                assert not (isinstance(kw.get("markup"), ast.Constant) and kw["markup"].value is True), \
                    f"{path}:{node.lineno}: markup=True"
                if rich_console and isinstance(node.func, ast.Name) and node.func.id == "Console":
                    assert isinstance(kw.get("markup"), ast.Constant) and kw["markup"].value is False, \
                        f"{path}:{node.lineno}: a rich Console without markup=False"
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and path.parent == CLI \
                    and id(node) not in docstrings:
                assert not markup_in(node.value), f"{path}:{node.lineno}: markup in {node.value[:60]!r}"


@settings(max_examples=50, deadline=None)
@given(st.sampled_from(["error:", "warn", "warning:", "refused:"]),
       st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), max_size=80)
       | st.sampled_from(["[red]x[/]", "[bold]", "\\[not]", "[/]", "a [link=http://x]y[/link]"]))
def test_a_labelled_line_prints_its_text_exactly_in_a_terminal_and_a_pipe(label, text):
    """Whatever the message holds (brackets, rich's own tags, backslashes), it prints exactly as given
    after its label; in a terminal the label has a colour, in a pipe nothing does."""
    from rich.console import Console

    from rigkit.cli.common import labelled

    for terminal in (False, True):
        buf = io.StringIO()
        console = Console(file=buf, force_terminal=terminal, color_system="standard" if terminal else None,
                          width=10_000, highlight=False, soft_wrap=True, markup=False)
        labelled(label, text, console=console)
        printed = buf.getvalue()
        assert ANSI.sub("", printed) == f"{label} {text}\n"
        assert ("\x1b[" in printed) == terminal


# ---- every error path, as the operator meets it ---------------------------------------------------

BAD_DATA = 'hosts = [("box", {"ssh_hostname": "box.lan", "llama_swap": {"port": "eighty"}})]\n'
TWO_HOSTS = 'hosts = [("a", {"ssh_hostname": "a.lan"}), ("b", {"ssh_hostname": "b.lan"})]\n'
#: two hosts that declare one lock entry (the archive, a model's repo) differently
SPLIT = ('hosts = [("a", {"ssh_hostname": "a.lan", "arch_archive_url": "http://a.lan/archive", '
         '"models": {"strata": {"repo_id": "org/a"}}}), ("b", {"ssh_hostname": "b.lan", '
         '"arch_archive_url": "http://b.lan/archive", "models": {"strata": {"repo_id": "org/b"}}})]\n')
#: two hosts with one model source but two hubs
TWO_HUBS = ('hosts = [("a", {"ssh_hostname": "a.lan", "hf_endpoint": "http://a.lan"}), '
            '("b", {"ssh_hostname": "b.lan", "hf_endpoint": "http://b.lan"})]\n')
#: two hosts whose specs name different lock files (issue 64's ``lockfile`` key)
TWO_LOCKS = ('hosts = [("a", {"ssh_hostname": "a.lan", "lockfile": "a.lock.json"}), '
             '("b", {"ssh_hostname": "b.lan", "lockfile": "b.lock.json"})]\n')
#: what each command needs besides -i to reach its inventory (a host, an action)
REACH = {"bench": ["--host", "box", "--member", "strata"], "generations": ["--host", "box"],
         "rollback": ["--host", "box", "--to", "1"], "wire-in": ["--host", "box", "--show"], "window": [],
         "bisect": ["--host", "box", "--good", "1", "--bad", "2"]}


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    """``rig``: the defaults, operator values unset (``inventory/rig.py``), an inventory whose data is
    invalid (``bad.py``) and one of two hosts (``two.py``); ``sbx``: the sandbox test project
    (tests/harness/sandbox_project.py) with an empty harness state — every value set, no lock, the host
    not up (``sandbox-host-is-not-up``: unreachable); ``off``: sources that refuse every connection."""
    sys.path.insert(0, str(ROOT / "tests" / "harness"))
    import sandbox_project

    rig = tmp_path_factory.mktemp("rig")
    (rig / "inventory").mkdir()
    (rig / "group_data").mkdir()
    (rig / "inventory" / "rig.py").write_text('gpu_rigs = [("box", {"ssh_hostname": "box.lan", "_sudo": True})]\n')
    (rig / "inventory" / "bad.py").write_text(BAD_DATA)
    (rig / "inventory" / "two.py").write_text(TWO_HOSTS)
    (rig / "inventory" / "split.py").write_text(SPLIT)
    (rig / "inventory" / "hubs.py").write_text(TWO_HUBS)
    (rig / "inventory" / "locks.py").write_text(TWO_LOCKS)
    (rig / "inventory" / "broken.py").write_text('hosts = [("box", {"ssh_hostname": "box.lan"})]\n')
    (rig / "inventory" / "broken.lock.json").write_text('{"version": 2, "models": {"strata": 1}}\n')
    (rig / "inventory" / "units.py").write_text(
        'hosts = [("box", {"ssh_hostname": "box.lan", "operator_units": ["units/sync.service"]})]\n')
    (rig / "units").mkdir()
    (rig / "units" / "sync.service").write_text("[Service]\nExecStart=/bin/true\nRestartt=no\n")
    (rig / "group_data" / "all.py").write_text('"""The tests\' own: no overrides."""\n')
    sbx = sandbox_project.make(tmp_path_factory.mktemp("sbx") / "project")
    state = tmp_path_factory.mktemp("state")
    off = tmp_path_factory.mktemp("off")
    (off / "inventory").mkdir()
    (off / "group_data").mkdir()
    (off / "inventory" / "off.py").write_text('hosts = [("box", {"ssh_hostname": "box.lan"})]\n')
    (off / "group_data" / "all.py").write_text(
        "arch_archive_url = 'http://127.0.0.1:1/archive'\n"
        "llama_swap = {'release_url': 'http://127.0.0.1:1/releases/llama-swap_250_linux_amd64.tar.gz'}\n")
    return {"rig": rig, "sbx": sbx, "off": off, "state": state}


def cases(projects) -> list[tuple]:
    """``[(case name, argv, project[, env])]``: click's tree × (an unknown option, a missing inventory,
    invalid data), then :data:`SPECIFIC`."""
    out = []
    for path, command in leaf_commands():
        name = " ".join(path)
        out.append((f"{name}: unknown option", [*path, "--no-such-option"], "rig"))
        if any("-i" in p.opts for p in command.params):
            extra = REACH.get(name, [])
            out.append((f"{name}: no such inventory", [*path, "-i", "inventory/missing.py", *extra], "rig"))
            out.append((f"{name}: invalid data", [*path, "-i", "inventory/bad.py", *extra], "rig"))
    return out + SPECIFIC


SANDBOX = ["-i", "inventory/sandbox.py"]
SPECIFIC = [
    ("deploy: the issue's --dry (operator values unset)", ["deploy", "-i", "inventory/rig.py", "--dry"], "rig"),
    ("deploy: no lock yet", ["deploy", *SANDBOX, "--dry"], "sbx"),
    ("deploy: --smoke and --no-smoke", ["deploy", "--smoke", "--no-smoke"], "rig"),
    ("bisect: --abort with --good", ["bisect", "--host", "box", "--abort", "--good", "1"], "rig"),
    ("bisect: neither --good/--bad nor --abort", ["bisect", "--host", "box", "--good", "1"], "rig"),
    ("bisect: --member not a member", ["bisect", "-i", "inventory/rig.py", "--host", "box", "--good", "1", "--bad", "2",
                                       "--member", "nosuch"], "rig"),
    ("deploy: --canary beyond the hosts", ["deploy", "-i", "inventory/two.py", "--canary", "3"], "rig"),
    ("deploy: --retry-failed and --host", ["deploy", "--retry-failed", "--host", "box"], "rig"),
    ("deploy: --retry-failed, no run recorded", ["deploy", "--retry-failed"], "rig", {"RIGKIT_STATE": "/nonexistent/state"}),
    ("check: warnings (no lock yet)", ["check", *SANDBOX], "sbx"),
    ("lock: NAME without --update", ["lock", "cuda"], "rig"),
    ("lock: --write without --update", ["lock", "--write"], "rig"),
    ("lock: --update of no entry", ["lock", "--update", "no-such-entry"], "rig"),
    ("lock: offline", ["lock", "-i", "inventory/off.py"], "off"),
    ("lock: hosts declare an entry differently", ["lock", "-i", "inventory/split.py"], "rig"),
    ("lock: a lock file that is not one", ["lock", "-i", "inventory/broken.py"], "rig"),
    ("models lock: hosts declare a model differently", ["models", "lock", "-i", "inventory/split.py"], "rig"),
    ("models lock: two hubs", ["models", "lock", "-i", "inventory/hubs.py"], "rig"),
    ("models lock: hosts name different lock files", ["models", "lock", "-i", "inventory/locks.py"], "rig"),
    ("models check: a lock file that is not one", ["models", "check", "-i", "inventory/broken.py"], "rig"),
    ("render: a validator rejects a file", ["render", "-i", "inventory/units.py", "--out", "out"], "rig"),
    ("deploy: a validator could not run (offline, no schema)", ["deploy", *SANDBOX, "--dry"], "sbx",
     {"RIGKIT_LLAMA_SWAP_SCHEMA_URL": "file:///nonexistent/config-schema.json", "RIGKIT_CACHE": "/nonexistent"}),
    ("models check: no lock", ["models", "check", "-i", "inventory/rig.py"], "rig"),
    ("models lock: unset sources", ["models", "lock", "-i", "inventory/rig.py"], "rig"),
    ("wire-in: no action", ["wire-in", "--host", "box"], "rig"),
    ("wire-in: --no-revert without --activate", ["wire-in", "--host", "box", "--show", "--no-revert"], "rig"),
    ("wire-in: host unreachable", ["wire-in", *SANDBOX, "--host", "demo", "--show"], "sbx"),
    ("rollback: neither --to nor --release", ["rollback", "--host", "box"], "rig"),
    ("rollback: --to 0", ["rollback", "--host", "box", "--to", "0"], "rig"),
    ("rollback: host unreachable", ["rollback", *SANDBOX, "--host", "demo", "--to", "1"], "sbx"),
    ("generations: host unreachable", ["generations", *SANDBOX, "--host", "demo"], "sbx"),
    ("generations: --host of no host", ["generations", "--host", "nobody"], "rig"),
    ("window: several hosts", ["window", "-i", "inventory/two.py"], "rig"),
    ("window: operator values unset", ["window", "-i", "inventory/rig.py"], "rig"),
    ("window: host unreachable", ["window", *SANDBOX, "--restore"], "sbx"),
    ("drift: host unreachable", ["drift", *SANDBOX], "sbx"),
    ("bench: host unreachable", ["bench", *SANDBOX, "--host", "demo", "--member", "strata"], "sbx"),
]

#: Error sites no offline case reaches, and why. They print through the same helper as every case above
#: (the static guard and the property test hold it); most need a host that answers.
_HOST = "needs a host that answers over SSH"
_WINDOW = "needs a host that answers, in a window"
NEEDS_A_HOST = {
    "bench:_not_running:why": "needs a member that answers its forward and is not running",
    "bench:host_target:f'GPU context of {host} unknown: {exc}'": _HOST,
    "bench:host_target:f'could not read {KEY_NAME} from {host}:{REMOTE_KEY_FILE}; sending no API key'": _HOST,
    "bench:host_target:f'nvidia-smi on {host} failed (exit {rc}): {err.strip()[:200]}; GPU context unkn": _HOST,
    "bench:host_target:f'{exc}; sending no API key'": _HOST,
    "deployout:note:text": "the notes with error=True of a change to the rig (rigkit.deploy: the deploy, a rollback, "
                           "the wire-in's activation), each on a host that answers",
    "generations:_agent_json:what": "the agent on a host that answers, failing",
    "generations:_holds:msg": "a host whose holds.json is not readable",
    "generations:_one_host:f'--host {host!r}: expected one host of the inventory, got {len(specs)}'":
        "defensive: load_or_exit already refuses a --host the inventory lacks (the case above)",
    "generations:generations:f\"--diff {diff_pair[0]} {diff_pair[1]}: {hs.name} has no generation {unknown[0]}": _HOST,
    "main:_print_fits:f'{hs.name}: {f.error}'": "a member that does not fit the GPU (tests/models/test_check_vram.py)",
    "main:_print_fits:f'{hs.name}: {problem} (figures: the larger of declared and estimated)'":
        "members that cannot load together (tests/models/test_check_vram.py)",
    "main:_print_fits:f.warning": "a member whose estimate warns (tests/models/test_check_vram.py)",
    "main:check:f'{hs.name}: {problem}'": "a model lock that disagrees with the spec (tests/unit/test_lock_cli.py)",
    "main:check:problem": "a rig lock that lacks an entry (tests/unit/test_lock_cli.py)",
    "main:check:str(warning)": "a spec with an unsafe override (tests/unit/test_spec_types.py)",
    "bisect:bisect:str(exc)": "the good and bad generations read from the host (rigkit.deploy.bisect.read_setup over SSH; "
                              "tests/harness/test_bisect.py)",
    "main:_retry_failed:f'--retry-failed: {exc}'": "an outcome record that is not one (tests/unit/test_fleet.py reads one)",
    "models:check:p": "a model lock that disagrees with the spec (tests/unit/test_lock_cli.py)",
    "models:lock:f\"hosts declare different hf_endpoint values: {', '.join(map(str, endpoints))}\"":
        "hosts declaring one model source, then the hub",
    "models:lock:f'models.{name}: source unset (operator-supplied repo_id or url + sha256); not l":
        "said after the hub locked the other models",
    "window:_report:f'chart for bench {preset} not drawn: {exc}'": _WINDOW,
    "window:_report:f'copying the results of window {wid} failed: {exc}'": _WINDOW,
    "window:_report:str(journal.get('error'))": _WINDOW,
    "window:_sweep_plan:f\"{hs.name}: --resume: no {key} sweep journal on the host (the last window, {las": _HOST,
    "window:_sweep_plan:f\"{hs.name}: window {last.get('id')} is still open (state {last.get('state')!r})": _HOST,
    "window:_sweep_plan:f'{hs.name}: {exc}'": _HOST,
    "window:_sweep_plan:f'{hs.name}: {hints.complete((proc.stderr or proc.stdout).strip()[-400:], host=h": _HOST,
    "window:_sweep_report:f'the sweep result could not be written to {folder}: {exc}'": _WINDOW,
    "window:follow:f\"lost {remote.name} ({stderr[-200:] or f'ssh exit {rc}'}); the window goes on o": _WINDOW,
    "window:on_interrupt:f'abort failed: {(r.stderr or r.stdout).strip()[-300:]}'": _WINDOW,
    "window:on_interrupt:f'abort failed: {exc}'": _WINDOW,
    "window:window:f'{hs.name}: {hints.complete((proc.stderr or proc.stdout).strip()[-400:], host=h": _HOST,
}


def _env(projects) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_TOKEN", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "RIGKIT_INVENTORY", "TERM")}
    env.update(TERM="xterm-256color", RIGKIT_HARNESS_STATE=str(projects["state"]),
               HF_HOME=str(projects["state"] / "hf"), RIGKIT_SANDBOX_HOST="demo",
               RIGKIT_LLAMA_SWAP_SCHEMA_URL=(ROOT.parent / "shared" / "data" / "llama-swap" / "config-schema.json").as_uri())
    return env


@pytest.fixture(scope="module")
def run_both():
    """``run_both(argv, cwd, env) -> ((exit code, text, sites), …)``: ``rigkit ARGV`` with stdout and stderr a pty
    (200 columns), then a pipe, through the fork server ``tests/unit/cli_said.py`` (``sites``: where each
    labelled line was said)."""
    import json

    server = subprocess.Popen([sys.executable, str(DRIVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)

    def ask(argv: list[str], cwd: Path, env: dict[str, str]):
        server.stdin.write(json.dumps({"argv": argv, "cwd": str(cwd), "env": env}) + "\n")
        server.stdin.flush()
        line = server.stdout.readline()
        assert line, "the fork server ended"
        return tuple(tuple(answer) for answer in json.loads(line))

    yield ask
    server.stdin.close()
    server.wait(timeout=60)


@pytest.mark.slow
def test_every_listed_error_path_prints_no_markup_in_a_terminal_or_a_pipe(projects, run_both):
    sites = error_sites()
    # the walk sees the CLI's sites (a broken walk would see none); a change's own errors (deploy, rollback,
    # the wire-in's activation) are rigkit.deploy's, said through the Output's note (deployout:note:text)
    assert len(sites) > 50, len(sites)
    reached: set[str] = set()
    problems = []
    for name, argv, where, *env in cases(projects):
        env = {**_env(projects), **(env[0] if env else {})}
        (tty_code, tty, said), (pipe_code, pipe, _) = run_both(argv, projects[where], env)
        plain = ANSI.sub("", tty)
        for how, text in (("terminal", plain), ("pipe", pipe)):
            if markup_in(text):
                problems.append(f"{name} ({how}): markup {markup_in(text)} in {text[-300:]!r}")
        if "\x1b" in pipe:
            problems.append(f"{name}: colour in a pipe: {pipe[-200:]!r}")
        if tty_code != pipe_code or sorted(plain.splitlines()) != sorted(pipe.splitlines()):
            problems.append(f"{name}: the terminal and the pipe differ: {tty_code} {plain[-300:]!r} / "
                            f"{pipe_code} {pipe[-300:]!r}")
        if pipe_code == 0 and not name.endswith("(no lock yet)"):  # a warning path exits 0
            problems.append(f"{name}: exit 0, not an error path: {pipe[-200:]!r}")
        if re.search(r"^(  )?error: ", plain, re.M) and not re.search(r"\x1b\[[0-9;]*m(error:)", tty):
            problems.append(f"{name}: error: not coloured in a terminal: {tty[-200:]!r}")
        for line in said:
            rel, _, lineno = line.rpartition(":")
            reached |= {k for k, (p, a, b) in sites.items() if p == rel and a <= int(lineno) <= b}
    assert not problems, "\n".join(problems)
    missing = sorted(set(sites) - reached - set(NEEDS_A_HOST))
    assert not missing, "error sites no case reaches (add a case, or say in NEEDS_A_HOST why a host is needed):\n" \
        + "\n".join(missing)
    stale = sorted(k for k in NEEDS_A_HOST if k not in sites or k in reached)
    assert not stale, f"NEEDS_A_HOST names sites that are gone or reached: {stale}"
