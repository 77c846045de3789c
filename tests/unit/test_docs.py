"""The operator's documents name only what exists: every ``rigkit`` command and flag they show is
in that command's ``--help``, every ``rigkit-agent`` job in the agent's usage line, every ``make``
target in the Makefile, every file of the project they name on disk — and the README stays a
README (about 200 lines: the rest lives in ``docs/``).

The commands are read from the documents' code (inline spans and fenced blocks), where an
operator copies them from; a command's flags are its own tokens up to the end of the span or line."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rigkit.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 200
#: Folders of this project a document may name a file in (``../shared`` is not the project's).
PROJECT_DIRS = ("rigkit/", "tests/", "benchmarks/", "notes/", "docs/", "templates/", "roles/", "inventory/",
                "group_data/")


def code_of(text: str) -> list[str]:
    """The code an operator copies from a Markdown text: each inline span, and each line of a fenced
    block, in order. A span inside a fence is the fence's line."""
    chunks: list[str] = []
    fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            chunks.append(line)
        else:
            chunks.extend(re.findall(r"`([^`]+)`", line))
    return chunks


PROGRAMS = ("rigkit", "rigkit-agent")
#: Files a document names that a command writes (they exist after it runs, not in a checkout).
WRITTEN_BY_COMMANDS = {"inventory/rig.lock.json"}


def commands_in(chunk: str) -> list[tuple[str, list[str]]]:
    """``[(program, tokens)]`` for each ``rigkit …``/``rigkit-agent …`` in one piece of code; a
    command's tokens end at a shell separator (``;``, ``&&``, ``||``, a ``|`` outside brackets, ``#``)."""
    found: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    depth = 0
    for tok in chunk.replace("\\|", "|").split():
        bare = tok.lstrip("($").rstrip(")")
        if current is None:
            if bare in PROGRAMS:
                current, depth = [], 0
                found.append((bare, current))
            continue
        if tok.startswith("#") or tok in ("&&", ";", "||") or (tok == "|" and depth == 0):
            current = None
            continue
        depth += tok.count("[") + tok.count("(") - tok.count("]") - tok.count(")")
        current.append(tok)
    return found


@lru_cache(maxsize=None)
def help_text(path: tuple[str, ...]) -> str:
    """``rigkit PATH --help`` as the operator sees it (click's own rendering)."""
    res = CliRunner().invoke(cli, [*path, "--help"], terminal_width=200)
    assert res.exit_code == 0, f"rigkit {' '.join(path)} --help: exit {res.exit_code}\n{res.output}"
    return res.output


@lru_cache(maxsize=None)
def agent_jobs() -> frozenset[str]:
    """The jobs the agent's usage line lists (``rigkit-agent`` with no job prints it, exit 2)."""
    res = subprocess.run([sys.executable, "-m", "rigkit.host"], capture_output=True, text=True, cwd=ROOT)
    m = re.search(r"usage: rigkit-agent \{([^}]*)\}", res.stderr)
    assert m, f"rigkit-agent's usage line not found in: {res.stderr!r}"
    return frozenset(m.group(1).split(","))


def _words(tokens: list[str]) -> list[str]:
    """Tokens with the docs' notation taken off: ``[--x]``, ``(--a|--b)``, ``--x=V``, ``…``."""
    out = []
    for tok in tokens:
        for part in re.split(r"[|\[\]()]", tok):
            part = part.strip("…,.:'\"")
            if part:
                out.append(part.split("=", 1)[0])
    return out


def problems_of(program: str, tokens: list[str]) -> list[str]:
    """What is wrong with one command a document shows: an unknown sub-command, or a flag its
    ``--help`` does not list. ``[]`` when it is right. Placeholders (``COMMAND``, ``NAME``) pass."""
    words = _words(tokens)
    if program == "rigkit-agent":
        if words and re.fullmatch(r"[a-z][a-z-]*", words[0]) and words[0] not in agent_jobs():
            return [f"rigkit-agent {words[0]}: no such job (the agent lists {', '.join(sorted(agent_jobs()))})"]
        return []
    cmd: click.Command = cli
    path: list[str] = []
    rest = words
    while isinstance(cmd, click.Group) and rest and re.fullmatch(r"[a-z][a-z-]*", rest[0]):
        sub = cmd.commands.get(rest[0])
        if sub is None:
            return [f"rigkit {' '.join([*path, rest[0]])}: no such command "
                    f"(rigkit {' '.join(path)} --help lists {', '.join(sorted(cmd.commands))})"]
        cmd, path, rest = sub, [*path, rest[0]], rest[1:]
    if isinstance(cmd, click.Group) and cmd is not cli and rest and rest[0].startswith("-"):
        pass  # a group's own options (rigkit models --help)
    shown = help_text(tuple(path))
    flags = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", shown))
    return [f"rigkit {' '.join(path)}: {w} is not in `rigkit {' '.join(path)} --help`".replace("  ", " ")
            for w in rest if w.startswith("-") and w not in ("-", "--") and w not in flags]


def test_the_checker_catches_what_it_must():
    """The checks can fail: an unknown command, an unknown flag, a flag of another command."""
    assert problems_of("rigkit", ["deploy", "--dry", "[--reboot]"]) == []
    assert problems_of("rigkit", ["models", "lock"]) == []
    assert problems_of("rigkit", ["COMMAND", "--help"]) == []
    assert problems_of("rigkit", ["deploy", "--no-such-flag"]) != []
    assert problems_of("rigkit", ["deplyo"]) != []
    assert problems_of("rigkit", ["drift", "--reboot"]) != []  # deploy's flag, not drift's
    assert problems_of("rigkit", ["models", "unlock"]) != []
    assert problems_of("rigkit-agent", ["lock", "status"]) == []
    assert problems_of("rigkit-agent", ["teleport"]) != []
    assert commands_in("rigkit drift --json | jq . && rigkit deploy --dry") == [
        ("rigkit", ["drift", "--json"]), ("rigkit", ["deploy", "--dry"])]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_commands_in_the_docs_exist(doc: Path):
    """Every ``rigkit``/``rigkit-agent`` command a document shows, with each of its flags."""
    bad = []
    for chunk in code_of(doc.read_text()):
        for program, tokens in commands_in(chunk):
            bad += [f"{doc.name}: `{chunk}`: {p}" for p in problems_of(program, tokens)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_files_and_make_targets_in_the_docs_exist(doc: Path):
    """Every project file or folder a document names in its code exists; every ``make X`` is a target."""
    targets = set(re.findall(r"(?m)^([a-z][\w-]*):", (ROOT / "Makefile").read_text()))
    bad = []
    for chunk in code_of(doc.read_text()):
        for m in re.finditer(r"(?:^|[\s(])make ([a-z][\w-]*)", chunk):
            if m.group(1) not in targets:
                bad.append(f"`{chunk}`: make {m.group(1)}: no such target")
        for tok in re.findall(r"[\w./-]+", chunk):
            tok = tok.rstrip(".,:")
            if not tok.startswith(PROJECT_DIRS) or re.search(r"[<>*{}]|\.\.\.", tok):
                continue
            path = tok.split("::", 1)[0]
            if ("." in Path(path).name or path.endswith("/")) and path not in WRITTEN_BY_COMMANDS:
                if not (ROOT / path).exists():
                    bad.append(f"`{chunk}`: {path} does not exist")
    assert not bad, f"{doc.name}:\n" + "\n".join(bad)


def test_links_between_the_docs_resolve():
    """A relative Markdown link (``[x](docs/bench.md)``, ``(developing.md#the-sandbox)``) names a file
    that exists, and its ``#anchor`` a heading of that file (GitHub's slugs)."""
    bad = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (doc.parent / file) if file else doc
            if not dest.is_file():
                bad.append(f"{doc.name}: ({target}): {dest.relative_to(ROOT)} does not exist")
                continue
            if anchor:
                slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                         for h in re.findall(r"(?m)^#+ (.*)$", dest.read_text())}
                if anchor not in slugs:
                    bad.append(f"{doc.name}: ({target}): no heading #{anchor} in {dest.name}")
    assert not bad, "\n".join(bad)


def test_the_readme_is_short():
    """The README is what an operator reads first: about 200 lines, the rest in ``docs/``."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"
    assert lines[0] == "# rigkit"
    assert any(line.startswith("make demo") for line in lines[:6]) and any(line.startswith("make test") for line in lines[:6])


def test_make_demo_names_its_host_after_the_harness_prefix():
    """The operator's report: ``make demo`` always used the host ``demo`` (``hostctl.py clean --prefix P``
    left it; two sessions' demos would clash). With ``RIGKIT_HARNESS_PREFIX`` set, every host the demo
    and demo-clean recipes name is ``<prefix>demo``; without it, ``demo`` as the docs say."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "RIGKIT_HARNESS_PREFIX"}

    def recipes(prefix: str | None) -> list[str]:
        extra = [f"RIGKIT_HARNESS_PREFIX={prefix}"] if prefix is not None else []
        done = subprocess.run(["make", "-n", "-C", str(ROOT), "demo", "demo-clean", *extra], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return [ln for ln in done.stdout.splitlines() if "host.sh up" in ln or "host.sh down" in ln
                or "host.sh reach" in ln]

    named = recipes("rq9-")
    assert len(named) == 3 and all("rq9-demo" in ln for ln in named), named
    assert all(re.search(r"host\.sh (up|down|reach) demo\b", ln) for ln in recipes(None))
