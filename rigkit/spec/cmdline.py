"""A member's command line read the way it will run (llama-swap has no shell): llama-swap's own split
(:func:`split_command`: ``#`` comment lines, ``\\`` continuations, then POSIX words), the shell operators
a word would be to a shell (:func:`shell_operators`), the programs that run the rest of their arguments
(:func:`unwrap`: ``env``, ``nice``, ``sh -c`` …), a ``docker run``'s and a compose command's own
options (:func:`container_command`) and the container it names (:func:`container_name`). Pure
functions; :mod:`rigkit.spec.validate` and :mod:`rigkit.spec.members` use them."""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass
from typing import Any


def sanitized(cmd: str) -> str:
    """A member command as llama-swap hands it to its splitter (v250 ``internal/config/commands.go``
    ``SanitizeCommand``): lines whose trimmed text starts with ``#`` dropped, a line ending in ``\\``
    replaced by its trimmed text without the backslash plus a space, the lines joined by newlines."""
    lines = []
    for line in cmd.split("\n"):
        trimmed = line.strip()
        if trimmed.startswith("#"):
            continue
        lines.append(trimmed[:-1] + " " if trimmed.endswith("\\") else line)
    return "\n".join(lines)


def unbalanced_quote(cmd: str) -> bool:
    """True when the command's quotes do not close (POSIX words, :func:`sanitized` first): llama-swap's
    splitter would read the rest of the line as one word, so the member would not start as written."""
    return not _split(cmd)[1]


def split_command(cmd: str) -> list[str]:
    """Split a member command like llama-swap does: :func:`sanitized`, then POSIX words (no shell).
    A command whose quotes do not close (:func:`unbalanced_quote`, refused by the spec check) is split
    on whitespace. The validators, the renderer and drift split the same command several times, and
    shlex reads a character at a time (a 120 kB word takes ~0.1 s), so each split is kept."""
    return list(_split(cmd)[0])


@functools.lru_cache(maxsize=256)
def _split(cmd: str) -> tuple[tuple[str, ...], bool]:
    """``(words, quotes balanced)`` of a member command (:func:`split_command`)."""
    text = sanitized(cmd)
    try:
        return tuple(shlex.split(text)), True
    except ValueError:
        return tuple(text.split()), False


def container_name(cmd: str) -> str | None:
    """The ``--name`` of a ``docker run`` / the ``--project-name`` of a compose command, looked
    for in every command :func:`unwrap` finds (so ``sh -c '… docker run --name x …'`` counts)."""
    for argv in unwrap(split_command(cmd)).commands:
        for flag in ("--name", "--project-name", "-p"):
            if flag == "-p" and "compose" not in argv and not argv[0].endswith("-compose"):
                continue
            if flag in argv:
                i = argv.index(flag)
                if i + 1 < len(argv):
                    return argv[i + 1]
            for a in argv:
                if a.startswith(flag + "="):
                    return a.split("=", 1)[1]
    return None


#: Characters a shell would read as operators (``;`` ``&`` ``|`` ``<`` ``>`` ``(`` ``)``) plus the
#: backtick; llama-swap has no shell, so unquoted they stay literal words.
SHELL_PUNCTUATION = ";&|<>()`"
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ash", "ksh", "busybox"})
#: Programs that run the rest of their arguments as the command (after their own options).
_WRAPPER_VALUE_OPTS = {
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
    "nice": {"-n", "--adjustment"},
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "stdbuf": {"-i", "-o", "-e", "--input", "--output", "--error"},
    "exec": {"-a"},
    "nohup": set(),
    "setsid": set(),
    "command": set(),
    "chrt": set(),
    "ionice": {"-c", "-n", "-p", "--class", "--classdata"},
    "taskset": set(),
}


def _lexer_words(text: str) -> list[str]:
    import shlex as _shlex

    lex = _shlex.shlex(text, posix=True, punctuation_chars=SHELL_PUNCTUATION)
    lex.whitespace_split = False
    lex.commenters = ""
    try:
        return list(lex)
    except ValueError:  # an unclosed quote: shlex.split falls back the same way
        return text.split()


def shell_operators(cmd: str) -> list[str]:
    """Unquoted shell operators in a command run without a shell (llama-swap's ``cmd``):
    ``a&&b``, ``a;b``, ``a|b``, ``>f``, ``2>f``, a trailing ``&``, ``$(…)``, backticks, with or
    without spaces around them. Quoted, the same characters are a plain argument and not listed.
    Comment lines and ``\\`` continuations are dropped first, as llama-swap does."""
    lines = [ln.rstrip() for ln in cmd.splitlines() if not ln.strip().startswith("#")]
    joined = " ".join(ln[:-1] if ln.endswith("\\") else ln for ln in lines)
    return [w for w in _lexer_words(joined) if w and all(c in SHELL_PUNCTUATION for c in w)]


def _shell_commands(script: str) -> tuple[list[list[str]], list[str]]:
    """A ``sh -c`` script split into simple commands (at ``;`` ``&&`` ``||`` ``|`` ``&`` and new
    lines; redirections dropped with their target): ``(commands, separators)``."""
    commands: list[list[str]] = [[]]
    seps: list[str] = []
    for line in script.splitlines() or [script]:
        words = _lexer_words(line)
        skip = False
        for w in words:
            if skip:
                skip = False
                continue
            if w and all(c in SHELL_PUNCTUATION for c in w):
                if w in (">", ">>", "<", ">&", "<&", ">|", "&>", "&>>"):
                    skip = True
                    if commands[-1] and commands[-1][-1].isdigit():
                        commands[-1].pop()  # the fd of 2>file
                    continue
                seps.append(w)
                commands.append([])
                continue
            commands[-1].append(w)
        commands.append([])
    return [c for c in commands if c], seps


@dataclass(frozen=True)
class Unwrapped:
    """A member command with its wrappers taken off: ``commands`` the simple commands that run
    (argv lists; several for a shell script), ``shells`` the shell wrappers met (``sh -c`` …),
    ``separators`` the shell operators between the commands of a script (``&`` = background)."""

    commands: list[list[str]]
    shells: list[str]
    separators: list[str]


def unwrap(argv: list[str]) -> Unwrapped:
    """Take the wrappers off a command: ``sh -c SCRIPT`` / ``bash -lc SCRIPT`` (the script split
    into its simple commands), ``env [-i] [NAME=value…] CMD``, ``exec``, ``nohup``, ``nice``,
    ``timeout``, ``stdbuf``, ``setsid``… recursively, so the checks see what really runs."""
    commands: list[list[str]] = []
    shells: list[str] = []
    seps: list[str] = []

    def visit(words: list[str], depth: int) -> None:
        if not words or depth > 8:
            if words:
                commands.append(words)
            return
        prog = words[0].rsplit("/", 1)[-1]
        if prog in SHELLS:
            rest = words[1:]
            if prog == "busybox" and rest and rest[0] in SHELLS:
                rest = rest[1:]
            for i, w in enumerate(rest):
                if w.startswith("-") and not w.startswith("--") and "c" in w[1:] and i + 1 < len(rest):
                    shells.append(f"{prog} {w}")
                    script_cmds, script_seps = _shell_commands(rest[i + 1])
                    seps.extend(script_seps)
                    for c in script_cmds:
                        visit(c, depth + 1)
                    return
                if not w.startswith("-"):
                    break
            commands.append(words)
            return
        if prog in _WRAPPER_VALUE_OPTS:
            takes_value = _WRAPPER_VALUE_OPTS[prog]
            positional_first = prog in ("timeout", "chrt", "taskset")  # the duration, priority, cpu mask
            i = 1
            while i < len(words):
                w = words[i]
                if w == "--":
                    i += 1
                    break
                if w in takes_value:
                    i += 2
                    continue
                if w.startswith("-") or (prog == "env" and "=" in w and not w.startswith("=")):
                    i += 1
                    continue
                if positional_first:
                    positional_first = False
                    i += 1
                    continue
                break
            visit(words[i:], depth + 1)
            return
        commands.append(words)

    visit(list(argv), 0)
    return Unwrapped(commands=commands, shells=shells, separators=seps)


#: ``docker run`` / ``docker create`` options that take no value (docker 27); every other option takes one.
DOCKER_RUN_BOOL = frozenset({"--rm", "--init", "-d", "--detach", "-i", "--interactive", "-t", "--tty", "--privileged",
                             "-P", "--publish-all", "--read-only", "--sig-proxy", "--no-healthcheck",
                             "--oom-kill-disable", "-q", "--quiet", "--help", "--disable-content-trust", "--use-api-socket"})
#: ``docker compose`` global options that take a value.
COMPOSE_GLOBAL_VALUE = frozenset({"-f", "--file", "-p", "--project-name", "--project-directory", "--env-file",
                                  "--profile", "--ansi", "--progress", "--parallel"})
#: compose sub-command options that take a value (up, run, start, …).
COMPOSE_SUB_VALUE = frozenset({"-t", "--timeout", "--scale", "--exit-code-from", "--attach", "--no-attach", "--pull",
                               "--wait-timeout", "-e", "--env", "-l", "--label", "--name", "-p", "--publish", "-u",
                               "--user", "-v", "--volume", "-w", "--workdir", "--entrypoint", "--cap-add",
                               "--cap-drop", "--env-from-file"})


@dataclass(frozen=True)
class ContainerCommand:
    """A container command read option by option: ``tool`` (``docker``/``podman``), ``verb``
    (``run``, ``create``, ``compose up``, ``compose start``, …), its ``options`` (each flag as
    written, a short cluster split into ``-i -t -d``, values left out), ``image`` for a run."""

    tool: str
    verb: str
    options: list[str]
    written: list[str]
    image: str | None = None

    def has(self, *flags: str) -> str | None:
        """The option as written (``-itd``, ``--detach=true``) when any of ``flags`` is set."""
        for flag, written in zip(self.options, self.written):
            if flag in flags:
                return written
        return None


def _read_options(words: list[str], takes_value: Any, bools: frozenset[str] | None = None
                  ) -> tuple[list[str], list[str], int]:
    """Options at the head of ``words`` until the first positional: ``(flags, as written, index
    of the first positional)``. A short cluster ``-itd`` is read as ``-i -t -d``; with ``bools``
    every option outside it takes a value, else those in ``takes_value`` do."""
    flags: list[str] = []
    written: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--" or not w.startswith("-") or w == "-":
            break
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            if eq:
                if value.lower() not in ("false", "0"):
                    flags.append(name)
                    written.append(w)
                i += 1
                continue
            flags.append(name)
            written.append(w)
            needs = (name not in bools) if bools is not None else (name in takes_value)
            i += 2 if needs else 1
            continue
        # a short option or a cluster: -itd, -p8080:80, -e X
        j = 1
        while j < len(w):
            flag = "-" + w[j]
            flags.append(flag)
            written.append(w)
            needs = (flag not in bools) if bools is not None else (flag in takes_value)
            if needs:
                i += 1 if j + 1 < len(w) else 2  # value attached (-p8080) or the next word
                break
            j += 1
        else:
            i += 1
    return flags, written, i


def container_command(words: list[str]) -> ContainerCommand | None:
    """Read a ``docker``/``podman`` command (``run``, ``create``, ``start``, ``compose …``, or
    ``docker-compose …``); None for anything else."""
    if not words:
        return None
    prog = words[0].rsplit("/", 1)[-1]
    if prog in ("docker-compose", "podman-compose"):
        tool, rest = prog.split("-")[0], ["compose", *words[1:]]
    elif prog in ("docker", "podman"):
        tool, rest = prog, words[1:]
        # docker's own global options (--context X, -H X, --log-level X, -D)
        _, _, i = _read_options(rest, {"-c", "--context", "-H", "--host", "-l", "--log-level", "--config"})
        rest = rest[i:]
    else:
        return None
    if not rest:
        return ContainerCommand(tool, "", [], [])
    if rest[0] == "container" and len(rest) > 1:
        rest = rest[1:]
    if rest[0] == "compose":
        _, _, i = _read_options(rest[1:], COMPOSE_GLOBAL_VALUE)
        sub = rest[1 + i:]
        if not sub:
            return ContainerCommand(tool, "compose", [], [])
        flags, written, _ = _read_options(sub[1:], COMPOSE_SUB_VALUE)
        return ContainerCommand(tool, f"compose {sub[0]}", flags, written)
    verb = rest[0]
    if verb in ("run", "create"):
        flags, written, i = _read_options(rest[1:], None, bools=DOCKER_RUN_BOOL)
        image = rest[1 + i] if 1 + i < len(rest) else None
        return ContainerCommand(tool, verb, flags, written, image)
    flags, written, _ = _read_options(rest[1:], set())
    return ContainerCommand(tool, verb, flags, written)


@dataclass(frozen=True)
class Publish:
    """One port a ``docker run``/``create`` publishes, read by docker's grammar ``-p
    [ip:][hostPort:]containerPort[/protocol]`` (an IPv6 ip in brackets; docs.docker.com/reference/cli/
    docker/container/run/#publish): ``written`` (the value, or ``-P`` for ``--publish-all``),
    ``address`` (the host ip; None: docker binds every interface), ``host_port`` (as written; None when
    docker picks it or for ``-P``)."""

    written: str
    address: str | None
    host_port: str | None


def publishes(words: list[str]) -> list[Publish]:
    """Each port the ``docker run``/``create`` in ``words`` publishes (:class:`Publish`), ``-P`` /
    ``--publish-all`` as one with neither address nor port; empty for any other command."""
    cc = container_command(words)
    if cc is None or cc.verb not in ("run", "create"):
        return []
    head = words[:words.index(cc.image)] if cc.image in words else words
    values = []
    for i, w in enumerate(head):
        if w in ("-p", "--publish") and i + 1 < len(head):
            values.append(head[i + 1])
        elif w.startswith("--publish="):
            values.append(w.split("=", 1)[1])
        elif w.startswith("-p") and len(w) > 2 and not w.startswith("--"):
            values.append(w[2:])
    out = [Publish("-P", None, None)] if cc.has("-P", "--publish-all") else []
    for value in values:
        spec = value.split("/", 1)[0]
        address = None
        if spec.startswith("[") and "]" in spec:
            address, spec = spec[1:spec.index("]")], spec[spec.index("]") + 1:].lstrip(":")
            parts = ["", *spec.split(":")]
        else:
            parts = spec.split(":")
            if len(parts) >= 3:
                address = parts[0] or None
        host = parts[-2] if len(parts) >= 2 and parts[-2] else None
        out.append(Publish(value, address, host))
    return out
