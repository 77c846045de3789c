"""Facts of the rig's own state on the host: the holds file, the host lock, whether the rig is busy."""

from __future__ import annotations

import shlex
from typing import Any

from pyinfra.api import FactBase

from rigkit import paths
from rigkit.common import busy
from rigkit.common.lock import parse_state
from rigkit.operations.facts.files import JsonFile
from rigkit.operations.facts.util import split_rc


class Holds(JsonFile):
    """The holds file (``/var/lib/rigkit/holds.json``) read by its one parser,
    :func:`rigkit.common.holds.parse`: ``{"exists": bool, "data": {name: record}, "error": str | None}``
    (``data`` ``{}`` when absent; ``error`` — the parser's message — when it is not a JSON object of
    hold records: a caller refuses, never reads it as "no hold"). Command: ``cat PATH``."""

    def process(self, output: list[str]) -> dict[str, Any]:
        from rigkit.common import holds

        lines, rc = split_rc(output)
        if rc == 404:
            return {"exists": False, "data": {}, "error": None}
        try:
            return {"exists": True, "data": holds.parse("\n".join(lines), paths.HOLDS_FILE), "error": None}
        except holds.HoldsError as exc:
            return {"exists": True, "data": {}, "error": str(exc)}


class RigLockState(FactBase):
    """The host lock's state (DESIGN.md "One host lock"): :func:`rigkit.common.lock.parse_state` of
    whether ``flock -n -s PATH true`` (util-linux) fails — someone holds it — and the holder record
    the file holds. Returns ``{"held": bool, "holder": record|None, "stale": record|None}``."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (f"if [ -e {q} ]; then if flock -n -s {q} true; then echo FREE; else echo HELD; fi; cat {q}; "
                "else echo FREE; fi")

    @staticmethod
    def default() -> dict[str, Any]:
        return parse_state(False, "")

    def process(self, output: list[str]) -> dict[str, Any]:
        return parse_state(bool(output) and output[0] == "HELD", "\n".join(output[1:]))


class RigBusy(FactBase):
    """Is the rig busy (:func:`rigkit.common.busy.facts`, the one answer the window uses too):
    ``{"port", "clients": [peer address:port], "locks": [declared lock files present]}``, rigkit's
    own requests (processes in ``own_units``) left out of the clients. Command: ``cat /proc/net/tcp
    /proc/net/tcp6``, the socket inodes of processes whose ``/proc/<pid>/cgroup`` names one of
    ``own_units``, then each of ``lock_files`` that exists (``test -e``)."""

    _MARK = "__RIGKIT_OWN_INODES__"
    _LOCKS = "__RIGKIT_LOCKS__"
    _PORT = "__RIGKIT_PORT__="

    def command(self, port: int, own_units: tuple[str, ...] | list[str] = (),
                lock_files: tuple[str, ...] | list[str] = ()) -> str:
        # a unit or its instances (rigkit-activate-<id>.service): the stem matches both
        pattern = "|".join(u.removesuffix(".service").replace(".", "\\.") for u in own_units) or "^$"
        locks = "".join(f"if [ -e {shlex.quote(f)} ]; then echo {shlex.quote(f)}; fi; " for f in lock_files)
        return (f"echo {self._PORT}{int(port)}; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; "
                f"echo {self._MARK}; "
                f"for c in $(grep -lE {shlex.quote(pattern)} /proc/[0-9]*/cgroup 2>/dev/null); do "
                "ls -l \"${c%/cgroup}/fd\" 2>/dev/null; done | sed -n 's/.*socket:\\[\\([0-9]*\\)\\].*/\\1/p'; "
                f"echo {self._LOCKS}; {locks}true")

    @staticmethod
    def default() -> dict:
        return {"port": 0, "clients": [], "locks": []}

    def process(self, output: list[str]) -> dict:
        port = next((int(x[len(self._PORT):]) for x in output if x.startswith(self._PORT)), 0)
        output = [x for x in output if not x.startswith(self._PORT)]
        locks: list[str] = []
        if self._LOCKS in output:
            i = output.index(self._LOCKS)
            output, locks = output[:i], [x for x in output[i + 1:] if x.strip()]
        if self._MARK in output:
            i = output.index(self._MARK)
            tables, inodes = output[:i], output[i + 1:]
        else:
            tables, inodes = output, []
        own = {int(x) for x in inodes if x.strip().isdigit()}
        return busy.facts(port, ["\n".join(tables)], own, locks, exists=lambda _path: True)  # the command kept the present ones
