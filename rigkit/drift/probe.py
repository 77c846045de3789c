"""The probe: one fact (:class:`HostProbe`), one round trip per host. A shell script built from
rigkit's facts' own commands plus ``stat``/``sha256sum`` of every rendered and secret file,
``systemctl show`` of the declared units and ``rigkit-agent`` checks (:func:`probe_sections`,
:func:`probe_script`); each section parsed by the same ``process()`` the deploy uses
(:func:`parse_probe`). :func:`connect_and_probe` reaches the hosts with pyinfra's connectors."""

from __future__ import annotations

import base64
import json
import shlex
from typing import Any

from pyinfra.api import FactBase

from rigkit import paths
from rigkit.common import gpu
from rigkit.render import declared_state
from rigkit.drift.declared import Declared
from rigkit.operations.facts.dkms import DkmsStatus
from rigkit.operations.facts.files import FileStates, FolderFiles, JsonFile, parse_file_state
from rigkit.operations.facts.mkinitcpio import MkinitcpioHooks
from rigkit.operations.facts.nvidia import NvidiaSmi
from rigkit.operations.facts.pacman import PacmanIgnorePkg, PacmanVersions
from rigkit.operations.facts.rig import Holds, RigLockState
from rigkit.operations.facts.server import PYTHON_VERSION_COMMAND, KernelState

SECTION = "__RIGKIT_DRIFT__"
GROUPS_MARK, GROUP_MARK, PRESENT_MARK, ABSENT_MARK, WHEELS_MARK = ("__GROUPS__", "__GROUP__", "__PRESENT__", "__ABSENT__",
                                                                   "__WHEELS__")
#: The section of ``rigkit-agent probe`` (the agent's health and the model files); ``agent`` when no
#: lock is declared (``rigkit-agent version`` only). Each ends with ``__RC__=<exit status>``.
AGENT_MODELS, RC = "agent+models", "__RC__="
#: Where the deploy syncs the agent's wheelhouse (roles/agent.py).
WHEELS_DIR = f"{paths.AGENT_DIR}/wheels"
#: Files larger than this are compared by hash only (no diff): rendered files are configs.
MAX_DIFF_BYTES = 1 << 20
#: The docker CLI's default daemon socket (docker/cli ``opts/hosts.go`` ``DefaultUnixSocket``; sudo resets
#: ``DOCKER_HOST``).
DOCKER_SOCKET = "/var/run/docker.sock"
#: docker's own answer to which cgroup driver is in effect: dockerd's ``GET /info`` (Docker Engine API
#: "System information", its ``CgroupDriver`` field) — the call ``docker info --format '{{.CgroupDriver}}'``
#: makes — asked over the daemon's socket with curl (on every Arch host: pacman depends on curl). The docker
#: CLI lists its CLI plugins first whatever the format (docker/cli ``cli/command/system/info.go`` ``runInfo``:
#: ``pluginmanager.ListPlugins`` before ``Client().Info``): ~50 ms of the host's CPU against curl's ~13 ms,
#: dockerd's own work included (issue 67); nothing printed when docker does not answer (:func:`docker_cgroup_driver`).
DOCKER_CGROUP_DRIVER_COMMAND = f"curl -sf --unix-socket {DOCKER_SOCKET} http://localhost/info 2>/dev/null"
#: Unit properties read by ``systemctl show`` (systemd.unit(5), org.freedesktop.systemd1(5)).
UNIT_PROPS = ("Id", "LoadState", "UnitFileState", "ActiveState", "SubState", "Requires", "BindsTo", "Requisite",
              "PartOf", "FragmentPath")


def agent_probe_args(decl: Declared, deep: bool = False) -> list[str] | None:
    """``[LOCK_B64, DEEP, PREPARED]`` of ``rigkit-agent probe`` (the agent's health and the model files,
    :func:`rigkit.host.modelcheck.main`) for ``decl``; None when it declares no lock (``version`` only)."""
    if decl.lock is None:
        return None
    lock_b64 = base64.b64encode(json.dumps(decl.lock).encode()).decode()
    return [lock_b64, str(int(deep)), ",".join(sorted(declared_state.PREPARED_MODELS)) or ","]


def probe_sections(decl: Declared, deep: bool = False, diff: bool = False, agent: bool = True) -> list[tuple[str, str]]:
    """The probe's sections ``[(key, shell command)]``; each command's stdout is parsed by
    :func:`parse_probe`. Commands of rigkit's facts are reused verbatim. Every rendered file and
    upload is read by one :class:`~rigkit.operations.facts.files.FileStates` (the deploy's own fact); with
    ``diff`` their content too (base64, up to :data:`MAX_DIFF_BYTES`). ``agent`` False leaves out the
    :data:`AGENT_MODELS` section (the locked probe has the agent that takes the lock run it:
    :class:`LockedProbe`)."""
    q = shlex.quote
    sections: list[tuple[str, str]] = []
    file_paths = sorted({**decl.files, **decl.uploads})
    sections.append(("files", FileStates().command(file_paths)))
    for path in file_paths if diff else ():
        sections.append((f"content:{path}", f"[ -f {q(path)} ] && [ \"$(stat -c %s {q(path)})\" -le {MAX_DIFF_BYTES} ] && "
                                            f"base64 -w0 {q(path)}; echo"))
    for path in sorted(decl.secrets):
        # never the content: owner, mode and sha256 only
        sections.append((f"secret:{path}", f"if [ -d {q(path)} ]; then echo \"$(stat -c '%a %U %G %s' {q(path)}) dir\"; "
                                           f"elif [ -f {q(path)} ]; then echo \"$(stat -c '%a %U %G %s' {q(path)}) "
                                           f"$(sha256sum {q(path)} | cut -d' ' -f1)\"; else echo missing; fi"))
    for path in sorted(decl.directories):
        sections.append((f"dir:{path}", f"if [ -d {q(path)} ]; then stat -c '%a %U %G' {q(path)}; else echo missing; fi"))
    for user, want in sorted(decl.accounts.items()):
        group = f"; echo {GROUP_MARK}; getent group {q(want['group'])} || echo missing" if want.get("group") else ""
        sections.append((f"account:{user}", f"getent passwd {q(user)} || echo missing; echo {GROUPS_MARK}; "
                                            f"id -nG {q(user)}{group}"))
    sections.append(("llama-swap-binary", f"head -n 1 {q(paths.LLAMA_SWAP_MARKER)}; echo; "
                                          f"[ -f {q(paths.LLAMA_SWAP_BIN)} ] && echo {PRESENT_MARK}"))
    sections.append(("mkinitcpio", MkinitcpioHooks().command()))
    if decl.legacy:
        backup = declared_state.LEGACY_BACKUP_DIR
        sections.append(("legacy-backup", "; ".join(
            f"[ -f {q(paths.UNIT_DIR + '/' + u)} ] && {{ [ -f {q(backup + '/' + u)} ] && echo {q(u)} backed "
            f"|| echo {q(u)} unbacked; }}" for u in decl.legacy) + "; true"))
    sections.append(("wheels", f"{PYTHON_VERSION_COMMAND}; echo {WHEELS_MARK}; "
                               + FolderFiles().command(WHEELS_DIR)))
    sections.append(("pacman", PacmanVersions().command(decl.packages)))
    sections.append(("ignorepkg", PacmanIgnorePkg().command()))
    sections.append(("kernel", KernelState().command()))
    sections.append(("dkms", "command -v dkms >/dev/null 2>&1 && " + DkmsStatus().command()))
    sections.append(("smi", NvidiaSmi().command()))
    # the header line that names the driver's CUDA level (rigkit.common.gpu.driver_cuda reads both spellings)
    sections.append(("smi-cuda", "nvidia-smi | grep -m 1 'CUDA'"))
    sections.append(("daemon-json", JsonFile().command(paths.DOCKER_DAEMON_JSON)))
    # the owner's answer to which cgroup driver is in effect (declared_state.cgroup_driver_problem)
    sections.append(("docker-cgroup-driver", DOCKER_CGROUP_DRIVER_COMMAND))
    sections.append(("window", JsonFile().command(paths.WINDOW_JOURNAL)))
    sections.append(("holds", Holds().command(paths.HOLDS_FILE)))
    sections.append(("generations", JsonFile().command(f"{paths.GENERATIONS_DIR}/index.json")))
    sections.append(("rig-lock", RigLockState().command(paths.RIG_LOCK)))
    sections.append(("power-healer", JsonFile().command(paths.POWER_STATE)))
    units = sorted({*decl.units, *decl.installed_only, *decl.legacy, *decl.members, *decl.if_present})
    sections.append(("units", f"systemctl show --no-pager -p {','.join(UNIT_PROPS)} {' '.join(q(u) for u in units)}"))
    sections.append(("llama-swap-start", "systemctl show --no-pager --timestamp=unix -p ExecMainStartTimestamp "
                                         f"llama-swap.service; stat -c 'mtime=%Y' {q(paths.LLAMA_SWAP_CONFIG)}"))
    # the agent's health and the model files in one process: `rigkit-agent probe` prints its version line,
    # then (given the lock) the model check's JSON line; its exit status is the agent's health
    args = agent_probe_args(decl, deep)
    if args is None:
        sections.append(("agent", f"{paths.AGENT_BIN} version 2>&1; echo {RC}$?"))
    elif agent:
        sections.append((AGENT_MODELS, f"{paths.AGENT_BIN} probe {' '.join(map(q, args))} 2>&1; echo {RC}$?"))
    return sections


def probe_script(sections: list[tuple[str, str]]) -> str:
    """One POSIX shell script running every section, each after a ``__RIGKIT_DRIFT__ <key>`` line
    (printed after a newline: a file without a final newline must not swallow the marker), each in
    its own subshell (one that exits, fails or changes directory leaves the others as they are).
    The whole output travels as one line: gzip (when the host has it) then ``base64 -w0`` — pyinfra's
    SSH connector reads a command's output line by line at a cost per line (paramiko), ~440 lines
    per host otherwise; :class:`HostProbe` decodes it (:func:`decode_output`). Exits 0 (a failing
    section shows in its own output)."""
    parts = []
    for key, cmd in sections:
        # a subshell each: a fact's command may `exit` or `cd` (FolderFiles, NvidiaSmi), which would
        # end the script or move the next sections
        parts.append(f"printf '\\n%s\\n' '{SECTION} {key}'; ( {cmd} ) 2>/dev/null")
    body = "\n".join(parts)
    return (f"{{\n{body}\n}} | {{ if command -v gzip >/dev/null 2>&1; then gzip -1; else cat; fi; }} | base64 -w0\n"
            "echo; exit 0")


def decode_output(lines: list[str]) -> list[str]:
    """The probe's output lines as its sections printed them: ``lines`` as they are when they hold a
    section marker (a script run without :func:`probe_script`'s encoding), else their base64 decoded,
    gunzipped when it is gzip (magic ``1f 8b``), split on newlines. Raises ValueError when it is
    neither. A line is ended by ``\\n`` only (as pyinfra splits a command's output)."""
    import binascii
    import gzip

    if any(line.startswith(SECTION) for line in lines):
        return lines
    try:
        data = base64.b64decode("".join(line.strip() for line in lines), validate=True)
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (binascii.Error, OSError, EOFError) as exc:
        raise ValueError(f"the probe's output is neither sections nor their encoding: {exc}") from None
    lines = data.decode(errors="replace").split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines  # the last line's newline ends it


class HostProbe(FactBase):
    """Every fact drift needs, in one command (:func:`probe_script`); returns ``{section key:
    [stdout lines]}`` (its output decoded, :func:`decode_output`), or None when the command failed as a
    whole (the connection dropped). Raises ValueError for output that is not the probe's."""

    def command(self, script: str) -> str:
        return script

    @staticmethod
    def default() -> None:
        return None

    def process(self, output: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        current = None
        for line in decode_output(output):
            if line.startswith(SECTION + " "):
                if current is not None and out[current] and out[current][-1] == "":
                    out[current].pop()  # the newline printed before the marker (a line of spaces is output)
                current = line[len(SECTION) + 1:].strip()
                out[current] = []
            elif current is not None:
                out[current].append(line)
        return out


def _stat(lines: list[str]) -> dict[str, Any] | None:
    """A section's first line read as :func:`~rigkit.operations.facts.files.parse_file_state` (``"640 root
    llama-swap 123 <sha256>"``, ``dir`` for a folder's sha256) → ``{mode, user, group, size, sha256}``;
    None: missing."""
    return parse_file_state(lines[0]) if lines else None


def parse_units(lines: list[str]) -> dict[str, dict[str, str]]:
    """``systemctl show -p ...`` of several units (blocks of ``Key=value`` separated by blank
    lines) → ``{Id: {prop: value}}``."""
    out: dict[str, dict[str, str]] = {}
    block: dict[str, str] = {}
    for line in [*lines, ""]:
        if not line.strip():
            if block.get("Id"):
                out[block["Id"]] = block
            block = {}
            continue
        key, _, value = line.partition("=")
        block[key.strip()] = value.strip()
    return out


def parse_account(lines: list[str]) -> dict[str, Any] | None:
    """The ``account:`` section (``getent passwd``, the marker, ``id -nG``, then the primary group's
    ``getent group``) → ``{"home", "shell", "groups": [names, primary first], "group_exists": bool |
    None}``, or None when the user does not exist."""
    text = [ln.strip() for ln in lines]
    if not text or text[0] == "missing" or ":" not in text[0]:
        return None
    fields = text[0].split(":")
    after = text[text.index(GROUPS_MARK) + 1:] if GROUPS_MARK in text else []
    groups = after[0].split() if after and after[0] != GROUP_MARK else []
    group_exists = None
    if GROUP_MARK in text:
        rest = text[text.index(GROUP_MARK) + 1:]
        group_exists = bool(rest) and rest[0] != "missing"
    return {"home": fields[5] if len(fields) > 5 else None, "shell": fields[6] if len(fields) > 6 else None,
            "groups": groups, "group_exists": group_exists}


def parse_agent(lines: list[str], models: bool) -> tuple[dict[str, Any], Any]:
    """The agent's section (``rigkit-agent probe …`` or ``version``, its output then
    ``__RC__=<status>``) → ``({"rc": status | None, "output": text}, models)``: ``output`` is the
    version line when the agent ran (exit 0), else its last 3 lines (why it did not). ``models``
    (None unless asked): the model check's ``{name: [reasons]}`` (its last line, JSON), ``"no-agent"``
    when the agent did not run (its own finding says why), ``{"*": ["model check failed: …"]}`` when
    it ran but printed no JSON object."""
    rc: int | None = None
    body: list[str] = []
    for line in lines:
        if line.startswith(RC) and line[len(RC):].strip().isdigit():
            rc = int(line[len(RC):])
        elif line.strip():
            body.append(line.rstrip())
    agent = {"rc": rc, "output": (body[0] if rc == 0 and body else "\n".join(body[-3:])).strip()}
    if not models:
        return agent, None
    if rc != 0:
        return agent, "no-agent"
    try:
        found = json.loads(body[-1]) if len(body) > 1 else None
    except ValueError:
        found = None
    if not isinstance(found, dict):
        tail = " ".join(body[1:])[-300:] or "no output"
        return agent, {"*": [f"model check failed: {tail}"]}
    return agent, found


def docker_cgroup_driver(lines: list[str]) -> str | None:
    """The ``CgroupDriver`` of dockerd's ``GET /info`` answer (:data:`DOCKER_CGROUP_DRIVER_COMMAND`'s
    output ``lines``, one JSON object), or None when docker did not answer (nothing, not a JSON object, no
    such string field)."""
    try:
        info = json.loads("\n".join(lines))
    except ValueError:
        return None
    driver = info.get("CgroupDriver") if isinstance(info, dict) else None
    return driver.strip() or None if isinstance(driver, str) else None


def parse_probe(raw: dict[str, list[str]], packages: list[str]) -> dict[str, Any]:
    """The probe's raw sections (:class:`HostProbe`) → facts: ``files``/``secrets`` ``{path:
    stat | None}`` (+ ``content`` bytes for files), ``pacman`` (for ``packages``), ``ignorepkg``,
    ``kernel``, ``dkms``, ``smi``, ``smi_cuda`` (str | None), ``daemon_json``, ``docker_cgroup_driver`` (dockerd's answer, :func:`docker_cgroup_driver`; None when
    docker did not answer), ``power_healer`` (the
    healer's record, :mod:`rigkit.host.power`), ``agent`` ``{rc,
    output}``, ``units``, ``llama_swap_start`` ``{started, mtime}`` (epoch s | None), ``models``
    (``{name: [reasons]}``, ``"no-agent"``, or None when not asked)."""
    facts: dict[str, Any] = {"files": {}, "secrets": {}, "models": None}
    contents: dict[str, str] = {}
    pacman_fact = PacmanVersions()
    pacman_fact.command(packages)  # its process() reads the names its command() was given
    for key, lines in raw.items():
        if key == "files":
            facts["files"].update(FileStates().process(lines))
        elif key.startswith("content:"):
            contents[key[8:]] = lines[0].strip() if lines else ""
        elif key.startswith("secret:"):
            facts["secrets"][key[7:]] = _stat(lines)
        elif key.startswith("dir:"):
            parts = lines[0].split() if lines else []
            facts.setdefault("dirs", {})[key[4:]] = (
                None if not parts or parts == ["missing"] else
                {"mode": parts[0], "user": parts[1] if len(parts) > 1 else None,
                 "group": parts[2] if len(parts) > 2 else None})
        elif key.startswith("account:"):
            facts.setdefault("accounts", {})[key[8:]] = parse_account(lines)
        elif key == "llama-swap-binary":
            facts["llama_swap_binary"] = {"marker": (lines[0].strip() or None) if lines else None,
                                          "present": PRESENT_MARK in [ln.strip() for ln in lines]}
        elif key == "mkinitcpio":
            facts["mkinitcpio"] = MkinitcpioHooks().process(lines)
        elif key == "legacy-backup":
            facts["legacy_backup"] = {p[0]: p[1] == "backed" for p in (ln.split() for ln in lines) if len(p) == 2}
        elif key == "wheels":
            at = lines.index(WHEELS_MARK) if WHEELS_MARK in lines else len(lines)
            version = " ".join(lines[:at]).strip()
            facts["wheels"] = {"python": version or None, "files": FolderFiles().process(lines[at + 1:]) or {}}
        elif key == "pacman":
            facts["pacman"] = pacman_fact.process(lines)
        elif key == "ignorepkg":
            facts["ignorepkg"] = PacmanIgnorePkg().process(lines)
        elif key == "kernel":
            facts["kernel"] = KernelState().process(lines)
        elif key == "dkms":
            facts["dkms"] = DkmsStatus().process(lines)
        elif key == "smi":
            facts["smi"] = NvidiaSmi().process(lines)
        elif key == "smi-cuda":
            facts["smi_cuda"] = gpu.driver_cuda("\n".join(lines))
        elif key == "daemon-json":
            facts["daemon_json"] = JsonFile().process(lines)
        elif key == "docker-cgroup-driver":
            facts["docker_cgroup_driver"] = docker_cgroup_driver(lines)
        elif key == "window":
            facts["window"] = JsonFile().process(lines)
        elif key == "holds":
            facts["holds"] = Holds().process(lines)
        elif key == "generations":
            facts["generations"] = JsonFile().process(lines)
        elif key == "rig-lock":
            facts["rig_lock"] = RigLockState().process(lines)
        elif key == "power-healer":
            facts["power_healer"] = JsonFile().process(lines)
        elif key in ("agent", AGENT_MODELS):
            facts["agent"], models = parse_agent(lines, models=key == AGENT_MODELS)
            if key == AGENT_MODELS:
                facts["models"] = models
        elif key == "units":
            facts["units"] = parse_units(lines)
        elif key == "llama-swap-start":
            started = mtime = None
            for line in lines:
                if line.startswith("ExecMainStartTimestamp=@"):
                    try:
                        started = int(line.split("@", 1)[1].split(".")[0])
                    except ValueError:
                        started = None
                elif line.startswith("mtime="):
                    mtime = int(line[6:]) if line[6:].isdigit() else None
            facts["llama_swap_start"] = {"started": started, "mtime": mtime}
    for path, text in contents.items():
        st = facts["files"].get(path)
        if st is not None and text:
            try:
                st["content"] = base64.b64decode(text)
            except ValueError:
                st["content"] = None
    return facts


def connect_and_probe(decls: list[Declared], connections: dict[str, dict[str, Any]], deep: bool = False,
                      connect_timeout: int = 10, diff: bool = False) -> dict[str, tuple[dict[str, Any] | None, str]]:
    """Reach every host with pyinfra (its connectors, the hosts' own connection data, in
    parallel) and run :class:`HostProbe` once on each. Returns ``{host: (facts, "")}`` or
    ``{host: (None, why)}`` for a host that could not be reached or probed."""
    decl_by_name = {d.host: d for d in decls}

    def read(name: str, raw: dict[str, list[str]]) -> dict[str, Any]:
        return parse_probe(raw, decl_by_name[name].packages)

    return _each_host(decls, connections, connect_timeout, HostProbe,
                      {d.host: {"script": probe_script(probe_sections(d, deep=deep, diff=diff))} for d in decls}, read)


class LockedProbe(FactBase):
    """The probe (:func:`probe_script`) run under the host lock, in one command: ``rigkit-agent lock
    run --what WHAT --lease ID --current -- sh -c SCRIPT`` (:mod:`rigkit.host.__main__`; the script
    travels base64-encoded, decoded by the host's shell before the agent starts, so the command
    line quotes nothing). ``agent``: :func:`agent_probe_args`' — the lock run itself runs the agent's
    checks (``--probe``) and carries them in its first line, read as the :data:`AGENT_MODELS` section
    (the script then leaves it out: ``probe_sections(agent=False)``; one agent start, issue 67).
    Returns ``{"lock": the agent's first line (``held`` with the current
    generation, or ``refused`` with why; None when no agent answered that way), "sections": the
    probe's (as :class:`HostProbe`'s; None when it did not run or its output is not the probe's),
    "said": what else the command printed (an agent that is missing or predates ``--current``)}``."""

    def command(self, script: str, what: str, lease: str, agent: list[str] | None = None) -> str:
        encoded = base64.b64encode(script.encode()).decode()
        probe = f"--probe {' '.join(map(shlex.quote, agent))} " if agent is not None else ""
        return (f"{paths.AGENT_BIN} lock run --what {shlex.quote(what)} --lease {shlex.quote(lease)} --current "
                f"{probe}-- sh -c \"$(printf %s {encoded} | base64 -d)\" 2>&1; true")

    @staticmethod
    def default() -> None:
        return None

    def process(self, output: list[str]) -> dict[str, Any]:
        lock = None
        if output:
            try:
                lock = json.loads(output[0])
            except ValueError:
                lock = None
        if not isinstance(lock, dict) or not isinstance(lock.get("held"), bool):
            return {"lock": None, "sections": None, "said": [line for line in output if line.strip()]}
        sections = None
        agent = lock.pop("probe", None)
        if lock["held"]:
            try:
                sections = HostProbe().process(output[1:])
            except ValueError:
                sections = None
        if sections is not None and isinstance(agent, dict):  # the agent's checks, as `rigkit-agent probe` said them
            sections[AGENT_MODELS] = [*str(agent.get("output") or "").splitlines(), f"{RC}{agent.get('rc')}"]
        return {"lock": lock, "sections": sections, "said": []}


def probe_under_lock(decls: list[Declared], connections: dict[str, dict[str, Any]], what: str, lease: str,
                     connect_timeout: int = 10) -> dict[str, tuple[dict[str, Any] | None, str]]:
    """:func:`connect_and_probe` with each host's lock taken around its probe (:class:`LockedProbe`,
    the lock recorded as ``what`` under ``lease``): ``{host: ({"lock": …, "facts": the parsed probe
    (:func:`parse_probe`) or None, "said": […]}, "")}``, or ``{host: (None, why)}`` for a host that
    could not be reached (``why`` starts ``unreachable:``) or whose command did not complete."""
    decl_by_name = {d.host: d for d in decls}

    def read(name: str, raw: dict[str, Any]) -> dict[str, Any]:
        sections = raw.get("sections")
        facts = parse_probe(sections, decl_by_name[name].packages) if sections is not None else None
        return {"lock": raw.get("lock"), "facts": facts, "said": raw.get("said") or []}

    kwargs = {}
    for d in decls:
        agent = agent_probe_args(d)
        kwargs[d.host] = {"script": probe_script(probe_sections(d, agent=agent is None)), "what": what, "lease": lease,
                          "agent": agent}
    return _each_host(decls, connections, connect_timeout, LockedProbe, kwargs, read)


def _each_host(decls: list[Declared], connections: dict[str, dict[str, Any]], connect_timeout: int, fact: type,
               kwargs: dict[str, dict[str, Any]], read) -> dict[str, tuple[Any, str]]:
    """Run pyinfra fact ``fact`` (its ``kwargs[host]``) once on every host of ``decls`` (pyinfra's
    connectors, the hosts' own connection data, all at once in gevent), each result passed through
    ``read(host, result)``: ``{host: (read's, "")}`` or ``{host: (None, why)}``."""
    import gevent
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.facts import get_fact
    from pyinfra.context import ctx_host, ctx_state

    inventory = Inventory(([(d.host, dict(connections.get(d.host, {}))) for d in decls], {}))
    state = State(inventory=inventory, config=Config(CONNECT_TIMEOUT=connect_timeout, FAIL_PERCENT=None))
    results: dict[str, tuple[Any, str]] = {}

    def one(host) -> tuple[Any, str]:
        with ctx_state.use(state), ctx_host.use(host):
            try:
                host.connect(show_errors=False, raise_exceptions=True)
            except Exception as exc:  # noqa: BLE001 - ConnectError and friends: the host is reported
                return None, f"unreachable: {exc}"
            state.activate_host(host)
            try:
                raw = get_fact(state, host, fact, kwargs=kwargs[host.name], apply_failed_hosts=False)
            except Exception as exc:  # noqa: BLE001
                return None, f"probe failed: {type(exc).__name__}: {exc}"
            finally:
                try:
                    host.disconnect()
                except Exception:  # noqa: BLE001
                    pass
            if raw is None:
                return None, "probe failed (the command did not complete)"
            return read(host.name, raw), ""

    import logging

    logging.getLogger("pyinfra").addHandler(logging.NullHandler())
    logging.getLogger("pyinfra").propagate = False
    greenlets = {gevent.spawn(one, host): host.name for host in inventory}
    gevent.joinall(list(greenlets))
    for g, name in greenlets.items():
        results[name] = g.value if g.successful() else (None, f"probe failed: {g.exception}")
    return results
