"""Facts of files: a JSON file as data, the mode/owner/size/sha256 of several files, the plain files
of a folder (``stat``, ``sha256sum``, ``find``)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from pyinfra.api import FactBase

from rigkit.operations.facts.util import RC_MARK, split_rc


class JsonFile(FactBase):
    """A JSON file as data: ``{"exists": bool, "data": dict | None, "error": str | None}``
    (``error`` when it is not valid JSON or not an object). Command: ``cat PATH``.
    Used for ``/etc/docker/daemon.json``, compared as JSON, never as text."""

    def command(self, path: str) -> str:
        return f"if [ -e {shlex.quote(path)} ]; then cat {shlex.quote(path)}; else echo {RC_MARK}404; fi"

    def process(self, output: list[str]) -> dict[str, Any]:
        lines, rc = split_rc(output)
        if rc == 404:
            return {"exists": False, "data": None, "error": None}
        text = "\n".join(lines)
        if not text.strip():
            return {"exists": True, "data": {}, "error": None}
        try:
            data = json.loads(text)
        except ValueError as exc:
            return {"exists": True, "data": None, "error": f"not valid JSON: {exc}"}
        if not isinstance(data, dict):
            return {"exists": True, "data": None, "error": "not a JSON object"}
        return {"exists": True, "data": data, "error": None}


def _stat_line(text: str) -> dict[str, Any] | None:
    """``"<mode> <user> <group> <size> <sha256>"`` → ``{mode, user, group, size (bytes), sha256}``."""
    parts = text.split()
    if len(parts) != 5 or not parts[3].isdigit():
        return None
    return {"mode": parts[0], "user": parts[1], "group": parts[2], "size": int(parts[3]), "sha256": parts[4]}


def parse_file_state(line: str) -> dict[str, Any] | None:
    """A ``"<mode> <user> <group> <size> <sha256>"`` line (``dir`` for a folder's sha256) → ``{mode,
    user, group, size, sha256}``; None for ``missing`` (a line that cannot be read gives every value
    None)."""
    if line.strip() == "missing":
        return None
    return _stat_line(line) or {"mode": None, "user": None, "group": None, "size": None, "sha256": None}


_STAT = "S"


def _states(lines: list[str], strip: str = "") -> dict[str, dict[str, Any]]:
    """The lines of :func:`_states_command` → ``{name: {mode, user, group, size, sha256}}`` for each
    name that has both its ``stat`` line and its ``sha256sum`` line (``strip``: a prefix dropped from
    the names, ``./`` for ``find``'s)."""
    stats: dict[str, list[str]] = {}
    sums: dict[str, str] = {}
    for line in lines:
        if line.startswith(_STAT + " "):
            parts = line[2:].split(" ", 4)
            if len(parts) == 5 and parts[3].isdigit():
                stats[parts[4]] = parts[:4]
        else:
            digest, sep, name = line.partition("  ")
            if sep and len(digest) == 64:
                sums[name] = digest
    out = {}
    for name, (mode, user, group, size) in stats.items():
        key = name[len(strip):] if strip and name.startswith(strip) else name
        if name in sums:
            out[key] = {"mode": mode, "user": user, "group": group, "size": int(size), "sha256": sums[name]}
    return out


class FileStates(FactBase):
    """Mode (octal, as ``stat %a``: ``"644"``), owner, size (bytes) and sha256 of several files in one
    command: ``{path: {mode, user, group, size, sha256}}`` for each path that is a readable file
    (absent: no such file). Command: one ``stat -c 'S %a %U %G %s %n'`` and one ``sha256sum`` of every
    path. One fact for every rendered file of a deploy (:func:`rigkit.operations.config.rendered_file`)
    instead of four commands per file; drift's probe reads its files with it too."""

    def command(self, paths: list[str]) -> str:
        if not paths:
            return "true"
        args = " ".join(shlex.quote(p) for p in paths)
        return f"stat -c '{_STAT} %a %U %G %s %n' -- {args} 2>/dev/null; sha256sum -- {args} 2>/dev/null; true"

    @staticmethod
    def default() -> dict[str, Any]:
        return {}

    def process(self, output: list[str]) -> dict[str, dict[str, Any]]:
        return _states(output)


class FolderFiles(FactBase):
    """The plain files directly in a folder (dot files too): ``{name: {mode, user, group, size,
    sha256}}``, or None when the folder is missing. Command: ``find -maxdepth 1 -type f`` printing
    each file's mode, owner and size, then one ``sha256sum`` of them all. The agent's wheelhouse is
    compared with it by the deploy (:func:`rigkit.operations.wheels.wheelhouse_synced`) and by drift."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (f"cd {q} 2>/dev/null || {{ echo {RC_MARK}1; exit 0; }}; "
                f"find . -maxdepth 1 -type f -printf '{_STAT} %m %u %g %s %p\\n'; "
                f"find . -maxdepth 1 -type f -exec sha256sum -- {{}} +; echo {RC_MARK}0")

    @staticmethod
    def default() -> None:
        return None

    def process(self, output: list[str]) -> dict[str, dict[str, Any]] | None:
        lines, rc = split_rc(output)
        if rc != 0:
            return None
        return _states(lines, strip="./")
