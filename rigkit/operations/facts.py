"""pyinfra facts rigkit reads on the host, shaped like pyinfra's own (``command()`` +
``process()``); each docstring names the command and the output it parses.

The sandbox host answers the same commands through its stand-ins; nothing here knows about it.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from pyinfra.api import FactBase

from rigkit import paths
from rigkit.common import busy, gpu, mkinitcpio, pacman
from rigkit.common.lock import parse_state

RC_MARK = "__RIGKIT_RC__="
#: The host's Python as the agent's wheelhouse is built for it (``"3.13"``): the deploy's ``Command``
#: fact (roles/agent.py) and drift's probe. ``python3 -V`` prints ``Python 3.13.1`` (CPython's
#: ``--version``, on stdout since 3.4) without starting the interpreter (1 ms, not 7); the shell keeps
#: the major and minor parts. No ``python3``: empty, as before.
PYTHON_VERSION_COMMAND = 'v=$(python3 -V 2>/dev/null) && v=${v#Python } && echo "${v%.*}"'

def _num(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def _split_rc(output: list[str]) -> tuple[list[str], int | None]:
    if output and output[-1].startswith(RC_MARK):
        return output[:-1], int(output[-1][len(RC_MARK):])
    return output, None


class NvidiaSmi(FactBase):
    """The GPUs as ``nvidia-smi`` reports them, or why it cannot: :func:`rigkit.common.gpu.parse_query`
    of ``nvidia-smi --query-gpu=<rigkit.common.gpu.FIELDS> --format=csv,noheader,nounits`` (the host
    side reads the GPU with the same parser). ``missing`` means no ``nvidia-smi`` on PATH.
    """

    def command(self) -> str:
        return (f"command -v nvidia-smi >/dev/null 2>&1 || {{ echo {RC_MARK}127; exit 0; }}; "
                f"{gpu.QUERY_COMMAND} 2>&1; echo {RC_MARK}$?")

    @staticmethod
    def default() -> dict[str, Any]:
        return gpu.parse_query("", 127)

    def process(self, output: list[str]) -> dict[str, Any]:
        lines, rc = _split_rc(output)
        return gpu.parse_query("\n".join(lines), rc)




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


class MkinitcpioHooks(FactBase):
    """mkinitcpio's effective HOOKS as mkinitcpio v41 loads its configuration, now and with rigkit's
    drop-in as declared: :func:`rigkit.common.mkinitcpio.parse_load` of ``bash -c``
    :func:`rigkit.common.mkinitcpio.load_script` (the main file, the drop-ins sorted, sourced by bash,
    a string HOOKS made an array): ``{"present", "presets", "dropins", "hooks", "with_rigkit", "error"}``."""

    def command(self) -> str:
        return f"bash -c {shlex.quote(mkinitcpio.load_script())}"

    def requires_command(self, *args, **kwargs) -> str:
        return "bash"

    @staticmethod
    def default() -> dict[str, Any]:
        return mkinitcpio.parse_load([])

    def process(self, output: list[str]) -> dict[str, Any]:
        return mkinitcpio.parse_load(output)


class JsonFile(FactBase):
    """A JSON file as data: ``{"exists": bool, "data": dict | None, "error": str | None}``
    (``error`` when it is not valid JSON or not an object). Command: ``cat PATH``.
    Used for ``/etc/docker/daemon.json``, compared as JSON, never as text."""

    def command(self, path: str) -> str:
        return f"if [ -e {shlex.quote(path)} ]; then cat {shlex.quote(path)}; else echo {RC_MARK}404; fi"

    def process(self, output: list[str]) -> dict[str, Any]:
        lines, rc = _split_rc(output)
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


class Holds(JsonFile):
    """The holds file (``/var/lib/rigkit/holds.json``) read by its one parser,
    :func:`rigkit.common.holds.parse`: ``{"exists": bool, "data": {name: record}, "error": str | None}``
    (``data`` ``{}`` when absent; ``error`` — the parser's message — when it is not a JSON object of
    hold records: a caller refuses, never reads it as "no hold"). Command: ``cat PATH``."""

    def process(self, output: list[str]) -> dict[str, Any]:
        from rigkit.common import holds

        lines, rc = _split_rc(output)
        if rc == 404:
            return {"exists": False, "data": {}, "error": None}
        try:
            return {"exists": True, "data": holds.parse("\n".join(lines), paths.HOLDS_FILE), "error": None}
        except holds.HoldsError as exc:
            return {"exists": True, "data": {}, "error": str(exc)}


class KernelState(FactBase):
    """The running kernel and what will boot next.

    Command: ``uname -r``, ``cat /proc/sys/kernel/random/boot_id``, ``cat
    /sys/module/nvidia/version`` (the loaded module; empty when not loaded) and the installed
    kernels: each ``/usr/lib/modules/<version>/`` holding its image ``vmlinuz`` (Arch's kernel
    packages install it there; a folder left behind by a removed kernel, or by DKMS, holds none and
    is no kernel). Returns ``{"running": str, "boot_id": str, "nvidia_module": str | None,
    "installed_kernels": [str]}``.

    Seam (documented, sandbox only): when ``/etc/rigkit/fact-seams.sh`` exists it may set
    ``RIGKIT_KERNEL_RELEASE_FILE`` (read instead of ``uname -r``) and
    ``RIGKIT_NVIDIA_MODULE_VERSION_FILE`` (read instead of ``/sys/module/nvidia/version``): a
    container cannot have a kernel or a module of its own. A real rig has no such file.
    """

    SEAMS = "/etc/rigkit/fact-seams.sh"

    def command(self) -> str:
        return (f"[ -r {self.SEAMS} ] && . {self.SEAMS}; "
                "if [ -n \"$RIGKIT_KERNEL_RELEASE_FILE\" ]; then echo running=$(cat \"$RIGKIT_KERNEL_RELEASE_FILE\"); "
                "else echo running=$(uname -r); fi; "
                "echo boot_id=$(cat /proc/sys/kernel/random/boot_id); "
                "echo nvidia=$(cat \"${RIGKIT_NVIDIA_MODULE_VERSION_FILE:-/sys/module/nvidia/version}\" 2>/dev/null); "
                "for d in /usr/lib/modules/*/; do [ -f \"${d}vmlinuz\" ] && echo kernel=$(basename \"$d\"); done; true")

    def process(self, output: list[str]) -> dict[str, Any]:
        state: dict[str, Any] = {"running": "", "boot_id": "", "nvidia_module": None, "installed_kernels": []}
        for line in output:
            key, _, value = line.partition("=")
            value = value.strip()
            if key == "running":
                state["running"] = value
            elif key == "boot_id":
                state["boot_id"] = value
            elif key == "nvidia":
                state["nvidia_module"] = value or None
            elif key == "kernel" and value:
                state["installed_kernels"].append(value)
        return state


_DKMS = re.compile(r"^(?P<module>[^/,\s]+)/(?P<version>[^,\s]+), (?P<kernel>[^,\s]+), (?P<arch>[^:\s]+): (?P<status>.+)$")


class DkmsStatus(FactBase):
    """``dkms status`` as ``[{"module", "version", "kernel", "arch", "status"}]`` (dkms(8):
    lines ``nvidia/610.57.04, 6.12.60-1-lts, x86_64: installed``: the full driver version, compared with the
    declared one by :func:`rigkit.common.versions.agrees`); empty without dkms."""

    def requires_command(self, *args, **kwargs) -> str:
        return "dkms"

    def command(self) -> str:
        return "dkms status 2>/dev/null || true"

    @staticmethod
    def default() -> list[dict[str, str]]:
        return []

    def process(self, output: list[str]) -> list[dict[str, str]]:
        out = []
        for line in output:
            m = _DKMS.match(line.strip())
            if m:
                out.append(m.groupdict())
        return out


class PacmanSyncDbs(FactBase):
    """Names of the sync databases present (``core``, ``extra``...): the files
    ``/var/lib/pacman/sync/<repo>.db`` (pacman(8) ``-Sy`` writes them). Empty on a host that
    never synced."""

    def command(self) -> str:
        return "for f in /var/lib/pacman/sync/*.db; do [ -e \"$f\" ] && basename \"$f\" .db; done; true"

    def process(self, output: list[str]) -> list[str]:
        return [line.strip() for line in output if line.strip()]


class ModelStatus(FactBase):
    """Whether each locked model is converged on the host, from the host agent:
    ``rigkit-agent status --lock LOCK --model NAME [--prepared]`` (names in ``prepared`` must be
    recorded after HyperQwen's prepare) (JSON ``{"model", "converged", "reasons"}``,
    see :func:`rigkit.host.modelrecords.status`). Returns ``{name: [reasons]}`` (empty list: converged); a
    host without the agent yet gets ``["host agent not installed"]`` for every model."""

    def command(self, agent: str, lock: str, names: list[str], prepared: list[str] | None = None) -> str:
        self._names = list(names)
        prepared = prepared or []
        failed = {n: json.dumps({"model": n, "converged": False, "reasons": ["status failed"]}) for n in names}
        checks = "; ".join(shlex.join([agent, "status", "--lock", lock, "--model", n, *(["--prepared"] if n in prepared else [])])
                           + f" 2>/dev/null || echo {shlex.quote(failed[n])}" for n in names)
        return f"if [ -x {shlex.quote(agent)} ] && [ -f {shlex.quote(lock)} ]; then {checks}; else echo {RC_MARK}1; fi"

    def process(self, output: list[str]) -> dict[str, list[str]]:
        names = getattr(self, "_names", [])
        lines, rc = _split_rc(output)
        if rc == 1:
            return {n: ["host agent or lock not installed"] for n in names}
        out: dict[str, list[str]] = {n: ["no status"] for n in names}
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and item.get("model") in out:
                out[item["model"]] = [] if item.get("converged") else list(item.get("reasons") or ["not converged"])
        return out


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


class GenerationBundle(FactBase):
    """One recorded generation with its stored files: ``rigkit-agent generation show N --files``
    (:func:`rigkit.host.generations.show`: ``{"record": {...}, "contents": {path: text}}``), or
    ``{"error": "..."}`` when the host has no such generation or no agent."""

    def command(self, agent: str, n: int) -> str:
        return f"{shlex.quote(agent)} generation show {int(n)} --files 2>&1; echo {RC_MARK}$?"

    def process(self, output: list[str]) -> dict[str, Any]:
        lines, rc = _split_rc(output)
        text = "\n".join(lines)
        if rc == 0:
            try:
                data = json.loads(lines[-1])
            except (ValueError, IndexError):
                return {"error": f"not a generation: {text[-300:]}"}
            return data if isinstance(data, dict) else {"error": "not a generation"}
        return {"error": text.strip()[-300:] or f"exit {rc}"}


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
        lines, rc = _split_rc(output)
        if rc != 0:
            return None
        return _states(lines, strip="./")
