"""The one parser of ``pacman -Q NAME...`` (the deploy's ``PacmanVersions`` fact and a generation's
record of what is installed both use it), of the effective ``IgnorePkg`` (``pacman-conf IgnorePkg``:
pacman's own reading of pacman.conf and every file it ``Include``s) and of where rigkit's one
``Include`` line stands in pacman.conf. Running ``pacman -Q`` on the host: :func:`rigkit.host.pacman.installed_versions`.

Source: pacman(8) ``-Q``: one ``name version`` line per installed package, ``error: package 'x' was
not found`` for a missing one.
"""

from __future__ import annotations

import re

_PACMAN_Q = re.compile(r"^(?P<name>\S+) (?P<version>\S+)$")
_PACMAN_MISSING = re.compile(r"^error: package '(?P<name>[^']+)' was not found$")


def parse_query(lines: list[str], asked: list[str]) -> dict[str, str | None]:
    """``{name: "[epoch:]pkgver-pkgrel" | None}`` for each name ``asked`` (None: not installed) from
    ``pacman -Q``'s output lines (stdout and stderr together)."""
    found: dict[str, str | None] = {name: None for name in asked}
    for line in lines:
        line = line.strip()
        m = _PACMAN_Q.match(line)
        if m and not line.startswith("error:"):
            found[m.group("name")] = m.group("version")
        elif (miss := _PACMAN_MISSING.match(line)) is not None:
            found[miss.group("name")] = None
    return found


#: The effective ``IgnorePkg`` as pacman itself reads it: ``pacman-conf`` (pacman >= 5.1) follows every
#: ``Include`` (globs too) and prints one entry per line, as written (a glob stays a glob). Its stderr
#: comes back prefixed with ``stderr: `` (an entry never holds a space) and its exit status last
#: (``__RC__=N``): 1 when a file it must read (an ``Include`` target) is missing or unreadable.
IGNOREPKG_COMMAND = ("{ { pacman-conf IgnorePkg; echo \"__RC__=$?\"; } 2>&1 1>&3 | sed 's/^/stderr: /'; } 3>&1")
_RC = "__RC__="
_STDERR = "stderr: "


def parse_ignorepkg(lines: list[str]) -> dict:
    """``{"entries": [str], "rc": int | None, "messages": [str], "error": str | None}`` from the output
    of :data:`IGNOREPKG_COMMAND`: the entries in pacman's order (globs as written), pacman-conf's exit
    status, its stderr lines (``warning: config file ..., line N: directive 'X' in section 'options'
    not recognized.`` for a newer pacman's directive: a warning, not an error) and ``error``: None
    when it exited 0, else its ``error:`` lines joined (or ``pacman-conf exited N``)."""
    entries, messages, rc = [], [], None
    for line in lines:
        if line.startswith(_RC) and line[len(_RC):].strip().isdigit():
            rc = int(line[len(_RC):])
        elif line.startswith(_STDERR):
            messages.append(line[len(_STDERR):])
        elif line.strip():
            entries.append(line.strip())
    error = None
    if rc != 0:
        errors = [m for m in messages if m.startswith("error")] or messages
        error = "; ".join(errors) if errors else f"pacman-conf exited {rc}"
    return {"entries": entries, "rc": rc, "messages": messages, "error": error}


def _libc_fnmatch():
    import ctypes
    import ctypes.util

    fn = ctypes.CDLL(ctypes.util.find_library("c") or None).fnmatch
    fn.argtypes, fn.restype = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int), ctypes.c_int
    return fn


_FNMATCH = None


def ignored_by(name: str, entries: list[str]) -> list[str]:
    """The ``IgnorePkg`` entries that hold package ``name``, as libalpm matches them:
    ``alpm_pkg_should_ignore`` (lib/libalpm/package.c) is ``alpm_list_find(handle->ignorepkg,
    pkg->name, _alpm_fnmatch)`` and ``_alpm_fnmatch`` (lib/libalpm/util.c) is C's
    ``fnmatch(pattern, string, 0)`` — called here through libc itself (``*``, ``?``, ``[...]``,
    ``[!...]``, backslash escapes; no negation)."""
    global _FNMATCH
    if _FNMATCH is None:
        _FNMATCH = _libc_fnmatch()
    return [e for e in entries if _FNMATCH(e.encode(), name.encode(), 0) == 0]


def _section(line: str) -> str | None:
    """The section a pacman.conf line opens (``[options]`` → ``options``), or None (pacman.conf(5):
    as pacman's ini parser: the line stripped, ``#`` a comment only at its start, the name between the
    brackets as it is)."""
    text = line.strip()
    return text[1:-1] if text.startswith("[") and text.endswith("]") else None


def options_include(lines: list[str], target: str) -> tuple[int | None, bool]:
    """Where rigkit's ``Include = <target>`` line stands in pacman.conf ``lines``: ``(index of the
    [options] header or None when there is none, whether a live ``Include = target`` line is inside
    [options])``. Only rigkit's own line is looked for: what the operator's lines hold is read
    through pacman-conf (:data:`IGNOREPKG_COMMAND`)."""
    start = next((i for i, ln in enumerate(lines) if _section(ln) == "options"), None)
    if start is None:
        return None, False
    for line in lines[start + 1:]:
        if _section(line) is not None:
            break
        key, eq, value = line.strip().partition("=")
        if eq and key.strip() == "Include" and value.strip() == target:
            return start, True
    return start, False


def pins_conf(packages: list[str]) -> str:
    """The content of rigkit's pins file (:data:`rigkit.paths.PINS_CONF`, ``Include``'d from ``[options]``
    of pacman.conf: pacman.conf(5) has no drop-in folder): one ``IgnorePkg`` line holding ``packages``."""
    return ("# Written by rigkit (roles/pins.py): the pinned packages, held. Included from [options] of\n"
            "# /etc/pacman.conf; hold your own packages there or in your own files, not here.\n"
            f"IgnorePkg = {' '.join(packages)}\n")
