"""The operator's user crontabs that call the proxy (issue 63): what a window warns about.

A window stops llama-swap; a cron job calling :8080 meanwhile gets "connection refused" (nothing
reloads Strata next to the tenant: the proxy is down). rigkit cannot pause cron without editing the
operator's crontab, which it never does, so the window *warns*, naming each line
(docs/operating.md "Cron jobs that call the proxy"). Only the crontab line is read: a script the
line runs is not looked into.

The lines are read as cronie reads a user crontab (Arch's cron; its user crontabs in ``SPOOL_DIR``,
``${localstatedir}/spool/cron``: ``/var/spool/cron/<user>``; cronie-crond/cronie ``src/env.c``
``load_env`` at 730b23d8a741342fad62363a9d54eae6d75adbd8, ``src/entry.c`` ``load_entry``): leading
blanks skipped; an empty line or one whose first non-blank character is ``#`` is a comment; a name
(unquoted: up to a blank or ``=``; or in quotes, without ``=``), blanks, ``=`` sets the environment;
otherwise an entry:
``@keyword`` (``@reboot``, ``@yearly``, ``@annually``, ``@monthly``, ``@weekly``, ``@daily``,
``@midnight``, ``@hourly``) or five time fields, then the command; an unescaped ``%`` ends the
command (the rest is its standard input, cron(5)).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

#: where cronie keeps user crontabs on Arch (cronie's ``SPOOL_DIR``, ``/var/spool/cron``)
SPOOL = "/var/spool/cron"
#: load_env's states NAMEI..EQ1: a name (unquoted: up to a blank or ``=``; quoted: no ``=`` inside), then
#: blanks, then ``=`` (any other character there: not an environment line)
_ENV = re.compile(r"""^[ \t]*(?:"[^"=]*"|'[^'=]*'|[^=\s]+)[ \t]*=""")
_KEYWORDS = ("@reboot", "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
_LOCAL = r"(?:localhost|127(?:\.\d{1,3}){3}|\[::1\]|0\.0\.0\.0)"


def commands(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, command)`` of each cron entry in a user crontab's ``text`` (1-based; the
    command without its ``%``-stdin part). Comments, environment lines and lines cronie would reject
    (too few fields) yield nothing."""
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(" \t")
        if not line or line.startswith("#") or _ENV.match(line):
            continue
        if line.startswith("@"):
            word, _, rest = line.partition(" ") if " " in line else line.partition("\t")
            if word not in _KEYWORDS:
                continue
            fields = [rest]
        else:
            fields = line.split(None, 5)
            if len(fields) < 6:
                continue
            fields = fields[5:]
        cmd = re.split(r"(?<!\\)%", fields[0].strip(), maxsplit=1)[0].strip()
        if cmd:
            yield n, cmd


def calls_to(text: str, port: int) -> list[tuple[int, str]]:
    """The entries of ``text`` whose command names this host's ``port`` on a loopback or
    any-address host (``localhost:8080``, ``127.0.0.1:8080``, ``[::1]:8080``, ``0.0.0.0:8080``):
    ``[(line number, command)]``."""
    pat = re.compile(rf"(?<![\w.]){_LOCAL}:{int(port)}(?!\d)")
    return [(n, cmd) for n, cmd in commands(text) if pat.search(cmd)]


def proxy_callers(port: int, spool: str | os.PathLike = SPOOL) -> list[str]:
    """One line per cron entry in the user crontabs under ``spool`` that calls ``port``:
    ``"<user>'s crontab (<path>) line <n>: <command>"``, sorted by user. An unreadable or missing
    spool is no finding (no cron installed)."""
    out = []
    try:
        files = sorted(p for p in Path(spool).iterdir() if p.is_file() and not p.name.startswith("."))
    except OSError:
        return []
    for f in files:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        out += [f"{f.name}'s crontab ({f}) line {n}: {cmd}" for n, cmd in calls_to(text, port)]
    return out
