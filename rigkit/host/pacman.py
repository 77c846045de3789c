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
