"""What is installed on this host: ``pacman -Q NAME...`` run here and read by
:func:`rigkit.common.pacman.parse_query` (the parser the deploy's fact uses too)."""

from __future__ import annotations

import subprocess

from rigkit.common.pacman import parse_query


def installed_versions(packages: list[str]) -> dict[str, str | None]:
    """Run ``pacman -Q PACKAGES`` here: :func:`parse_query` of its output; every package None when
    pacman cannot run."""
    try:
        proc = subprocess.run(["pacman", "-Q", *packages], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return {p: None for p in packages}
    return parse_query((proc.stdout + proc.stderr).splitlines(), packages)
