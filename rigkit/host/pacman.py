"""The one reader of ``pacman -Q NAME...`` (the deploy's ``PacmanVersions`` fact and a generation's
record of what is installed both use it).

Source: pacman(8) ``-Q``: one ``name version`` line per installed package, ``error: package 'x' was
not found`` for a missing one.
"""

from __future__ import annotations

import re
import subprocess

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


def installed_versions(packages: list[str]) -> dict[str, str | None]:
    """Run ``pacman -Q PACKAGES`` here: :func:`parse_query` of its output; every package None when
    pacman cannot run."""
    try:
        proc = subprocess.run(["pacman", "-Q", *packages], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return {p: None for p in packages}
    return parse_query((proc.stdout + proc.stderr).splitlines(), packages)


def _section(line: str) -> str | None:
    """The section a pacman.conf line opens (``[options]`` → ``options``), or None."""
    text = line.split("#", 1)[0].strip()
    return text[1:-1].strip() if text.startswith("[") and text.endswith("]") else None


def ignorepkg_lines(lines: list[str]) -> tuple[int | None, int, list[tuple[int, bool, list[str]]]]:
    """Where pacman.conf(5) ``lines`` hold packages with ``IgnorePkg``: the one parser of it.

    Returns ``(start, end, entries)``: ``start`` the index of the ``[options]`` header (None when the
    file has none), ``end`` the index of the next section header (or ``len(lines)``), ``entries`` one
    ``(index, commented, packages)`` per ``IgnorePkg = ...`` line between them — a commented one
    (``#IgnorePkg   =``, as Arch ships it) has ``commented`` True and holds nothing for pacman.
    Lines under other sections do not count (pacman ignores them)."""
    start = next((i for i, ln in enumerate(lines) if _section(ln) == "options"), None)
    if start is None:
        return None, len(lines), []
    end = next((i for i in range(start + 1, len(lines)) if _section(lines[i]) is not None), len(lines))
    entries = []
    for i in range(start + 1, end):
        stripped = lines[i].strip()
        commented = stripped.startswith("#")
        body = stripped.lstrip("#").strip() if commented else stripped
        key, eq, value = body.partition("=")
        if eq and key.strip() == "IgnorePkg":
            entries.append((i, commented, value.split("#", 1)[0].split()))
    return start, end, entries


def ignored_packages(lines: list[str]) -> list[str]:
    """The packages ``IgnorePkg`` holds in pacman.conf ``lines`` (:func:`ignorepkg_lines`), in order."""
    return [p for _, commented, pkgs in ignorepkg_lines(lines)[2] if not commented for p in pkgs]
