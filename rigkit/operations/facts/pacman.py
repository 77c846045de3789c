"""Facts of pacman: installed versions (``pacman -Q``), the effective ``IgnorePkg`` (``pacman-conf``),
the sync databases present."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase

from rigkit.common import pacman


class PacmanVersions(FactBase):
    """Installed versions of the named packages: ``{name: "[epoch:]pkgver-pkgrel" | None}``.

    Command: ``pacman -Q NAME...`` (lines ``name version``; ``error: package 'x' was not found``
    for a missing one), parsed by :func:`rigkit.common.pacman.parse_query` (the host side's one reader).
    Unlike pyinfra's ``PacmanPackages`` it keys by the exact names asked for.
    """

    def command(self, packages: list[str]) -> str:
        self._asked = list(packages)
        return f"pacman -Q {' '.join(shlex.quote(p) for p in packages)} 2>&1 || true"

    def requires_command(self, *args, **kwargs) -> str:
        return "pacman"

    @staticmethod
    def default() -> dict[str, str | None]:
        return {}

    def process(self, output: list[str]) -> dict[str, str | None]:
        return pacman.parse_query(output, getattr(self, "_asked", []))


class PacmanIgnorePkg(FactBase):
    """The effective ``IgnorePkg`` as pacman reads it, every ``Include`` followed:
    :func:`rigkit.common.pacman.parse_ignorepkg` of ``pacman-conf IgnorePkg``
    (:data:`rigkit.common.pacman.IGNOREPKG_COMMAND`): ``{"entries": [...], "rc", "messages", "error"}``;
    ``error`` set (pacman-conf exited non-zero: a missing ``Include`` target, no pacman.conf) is a
    finding for the caller, not a crash. Whether a pin is held: :func:`rigkit.common.pacman.ignored_by`."""

    def command(self) -> str:
        return pacman.IGNOREPKG_COMMAND

    def process(self, output: list[str]) -> dict[str, Any]:
        return pacman.parse_ignorepkg(output)


class PacmanSyncDbs(FactBase):
    """Names of the sync databases present (``core``, ``extra``...): the files
    ``/var/lib/pacman/sync/<repo>.db`` (pacman(8) ``-Sy`` writes them). Empty on a host that
    never synced."""

    def command(self) -> str:
        return "for f in /var/lib/pacman/sync/*.db; do [ -e \"$f\" ] && basename \"$f\" .db; done; true"

    def process(self, output: list[str]) -> list[str]:
        return [line.strip() for line in output if line.strip()]
