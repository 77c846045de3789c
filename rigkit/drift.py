"""Drift: what on a host is no longer what the inventory declares, and why (``rigkit drift``).

Each difference is a :class:`Finding` ``(host, kind, item, declared, actual, severity)``:

- ``drift``: the host differs from the declared state (exit 3);
- ``warn``: worth reading, not drift (exit stays 0, as DESIGN.md's warnings);
- ``error``: the host could not be checked — unreachable, a tool failed (exit 1).

How the facts are gathered (one connection per host): the inventory's hosts are reached with
pyinfra's own connectors and connection data (``HostSpec.connection``: ``ssh_*``, ``_sudo``),
through pyinfra's API, and each host answers **one** fact, :class:`HostProbe`: a shell script
built from rigkit's facts' own commands (``NvidiaSmi``, ``PacmanVersions``, ``PacmanIgnorePkg``,
``JsonFile``, ``KernelState``, ``DkmsStatus``) plus ``stat``/``sha256sum`` of every rendered and
secret file, ``systemctl show`` of the declared units and ``rigkit-agent`` checks, each section
parsed by the same ``process()`` the deploy uses. One round trip per host instead of ~60 facts.
The catch-all — operations of the real deploy that would still change something — is pyinfra's
own plan, ``pyinfra INVENTORY deploy.py --dry --json --limit HOST`` (its stable, documented
output; the in-process route needs ``pyinfra_cli`` internals), one subprocess per host (a
``DeployError`` on one host aborts pyinfra's whole run), all started *before* the probes so
everything runs at once; each opens its own connection.

The comparison functions (``compare_*``) are pure: declared values and parsed facts in, findings
out; they are what the unit tests pin. Secrets: the HF token is compared by hash only, never
sent or shown; every string that leaves this module passes :func:`mask`.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pyinfra.api import FactBase

from rigkit import exitcodes, hoststate, paths
from rigkit.facts import DkmsStatus, JsonFile, KernelState, NvidiaSmi, PacmanIgnorePkg, PacmanVersions
from rigkit.operations.config import merge_json

PROJECT = Path(__file__).resolve().parent.parent
SEVERITIES = ("error", "drift", "warn")
SECTION = "__RIGKIT_DRIFT__"
MASK = "***"
#: Files larger than this are compared by hash only (no diff): rendered files are configs.
MAX_DIFF_BYTES = 1 << 20
ENABLED_STATES = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated", "linked", "linked-runtime")
#: Unit properties read by ``systemctl show`` (systemd.unit(5), org.freedesktop.systemd1(5)).
UNIT_PROPS = ("Id", "LoadState", "UnitFileState", "ActiveState", "SubState", "Requires", "BindsTo", "Requisite",
              "PartOf", "FragmentPath")
#: Dependencies that tie one unit's lifetime to another's (systemd.unit(5)).
TIGHT_DEPS = ("Requires", "BindsTo", "Requisite", "PartOf")



# --------------------------------------------------------------------------------------------
# Findings and masking


@dataclass
class Finding:
    """One difference. ``declared``/``actual`` are short human strings (units in them: W, bytes);
    ``diff`` is a unified diff (declared → actual) for a rendered file, only with ``--diff``."""

    host: str
    kind: str
    item: str
    declared: str
    actual: str
    severity: str = "drift"
    diff: str | None = None

    def record(self, with_diff: bool = False) -> dict[str, Any]:
        """The JSON record: ``{host, kind, item, declared, actual, severity}`` (+ ``diff``)."""
        out = asdict(self)
        if not with_diff or self.diff is None:
            out.pop("diff")
        return out


_SECRET_ASSIGN = re.compile(
    r"(?i)(\b[A-Z0-9_.-]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|APIKEY)[A-Z0-9_.-]*[\"']?\s*[=:]\s*[\"']?)([^\s\"',}]+)")
_SECRET_FLAG = re.compile(r"(?i)(--(?:api-key|token|hf-token|password)[= ])(\S+)")
_BEARER = re.compile(r"(?i)(\bBearer\s+)(\S+)")
_HF_TOKEN_SHAPE = re.compile(r"\bhf_[A-Za-z0-9]{16,}\b")


def mask(text: str | None, secrets: list[str] | tuple[str, ...] = ()) -> str | None:
    """``text`` with secret values replaced by ``***``: each known value in ``secrets`` (e.g. the
    HF token at hand), then any ``*TOKEN*``/``*SECRET*``/``*PASSWORD*``/``*API_KEY*`` assignment's
    value (``KEY=v``, ``key: v``), ``--api-key v``/``--token v`` flags, ``Bearer v`` and
    hf-token-shaped words. An ``${...}`` reference is kept (it names, not holds, a secret)."""
    if text is None:
        return None
    for value in secrets:
        if value and len(value) >= 4:
            text = text.replace(value, MASK)

    def keep_refs(m: re.Match) -> str:
        value = m.group(2)
        if value.startswith("${") or value.startswith("$") or value == MASK:
            return m.group(0)
        return m.group(1) + MASK

    text = _SECRET_ASSIGN.sub(keep_refs, text)
    text = _SECRET_FLAG.sub(keep_refs, text)
    text = _BEARER.sub(keep_refs, text)
    return _HF_TOKEN_SHAPE.sub(MASK, text)


def exit_code(findings: list[Finding]) -> int:
    """DESIGN.md's code for one host's findings: 1 any ``error``, else 3 any ``drift``, else 0
    (``warn`` and ``expected`` — what an open window explains — are reported, not counted)."""
    severities = {f.severity for f in findings}
    if "error" in severities:
        return exitcodes.FAILED
    if "drift" in severities:
        return exitcodes.FINDINGS
    return exitcodes.OK


# --------------------------------------------------------------------------------------------
# What is declared


@dataclass
class Declared:
    """The declared state of one host, from its RigSpec (nothing here touches the host).

    ``files``: ``{path: RenderedFile}`` (:func:`rigkit.render.render`); ``secrets``: ``{path:
    (owner "user:group", mode "0640", sha256 of the wanted content or None)}``; ``units``:
    ``{unit: {"enabled": bool | None, "active": bool | None}}`` (None: not checked), plus
    ``installed_only`` (must exist, must not be enabled) and ``legacy`` units; ``members``: unit
    names llama-swap must not be tied to; ``lock``: the model lock (dict) or None with
    ``lock_note`` saying why.
    """

    host: str
    spec: Any
    files: dict[str, Any]
    secrets: dict[str, tuple[str, str, str | None]]
    units: dict[str, dict[str, bool | None]]
    installed_only: list[str]
    legacy: list[str]
    members: list[str]
    packages: list[str]
    lock: dict[str, Any] | None = None
    lock_note: str | None = None
    secret_values: list[str] = field(default_factory=list)


def lock_for(spec: Any, inventory: str) -> tuple[dict[str, Any] | None, str | None]:
    """The model lock declared for ``inventory``: ``spec.models_lock`` when set, else the file
    ``rigkit models lock`` writes beside the inventory (:func:`rigkit.models.lock_path_for`).
    Returns ``(lock, None)`` or ``(None, why not)``; never raises for a missing or bad file."""
    from rigkit.models import load_lock, lock_path_for

    path = Path(getattr(spec, "models_lock", None) or lock_path_for(inventory))
    if not path.is_file():
        return None, f"no model lock at {path} (run `rigkit models lock -i {inventory}`); model files not checked"
    try:
        return load_lock(path), None
    except Exception as exc:  # noqa: BLE001 - any unreadable lock is reported, never a crash
        return None, f"model lock {path} unreadable ({exc}); model files not checked"


def declared_for(name: str, spec: Any, inventory: str, hf_token: str | None) -> Declared:
    """Everything drift compares for host ``name``: rendered files, secret files, units (DESIGN.md
    "Host paths and units"), pinned packages, the model lock. ``hf_token`` is the value at hand
    on the control machine (:func:`rigkit.secrets.read_hf_token`) or None."""
    from rigkit import members as members_mod
    from rigkit.render import AGENT_TIMERS, render

    files = render(spec)
    ls_group = spec.llama_swap.user
    secrets: dict[str, tuple[str, str, str | None]] = {
        paths.HYPERQWEN_SECRET_FILE: (f"root:{ls_group}", "0640", None),
    }
    if hf_token:
        secrets[paths.HF_TOKEN_FILE] = ("root:root", "0600", hashlib.sha256(f"HF_TOKEN={hf_token}\n".encode()).hexdigest())
    else:  # not at hand: presence is not required, owner and mode are checked when it is there
        secrets[paths.HF_TOKEN_FILE] = ("root:root", "0600", "")
    units: dict[str, dict[str, bool | None]] = {
        "llama-swap.service": {"enabled": True, "active": True},
        "gpu-power-limit.service": {"enabled": True, "active": None},
        "docker.service": {"enabled": True, "active": True},
        "nvidia-persistenced.service": {"enabled": True, "active": True},
    }
    for stem in AGENT_TIMERS:
        units[f"{stem}.timer"] = {"enabled": True, "active": True}
    try:
        member_ids = list(members_mod.resolve_members(spec))
    except Exception:  # noqa: BLE001 - an unresolvable member is the spec's problem, reported by check
        member_ids = []
    members = sorted({*spec.legacy_units, "hyperqwen.service", *(f"{m}.service" for m in member_ids)})
    packages = sorted({*(spec.pacman_pins or {}), spec.driver_flavour, "nvidia-utils", "cuda"})
    lock, note = lock_for(spec, inventory)
    return Declared(host=name, spec=spec, files=files, secrets=secrets, units=units,
                    installed_only=["hyperqwen.service"], legacy=list(spec.legacy_units), members=members,
                    packages=packages, lock=lock, lock_note=note, secret_values=[hf_token] if hf_token else [])


# --------------------------------------------------------------------------------------------
# The probe: one fact, one round trip


_MODELS_PY = r"""
import base64, json, sys
from pathlib import Path
from rigkit.host import fetch
try:
    from rigkit.hoststate import PREPARED_MODELS
except ImportError:  # an agent installed before it existed
    PREPARED_MODELS = frozenset({"hyperqwen"})
lock = json.loads(base64.b64decode(sys.argv[1]))
deep = sys.argv[2] == "1"
out = {}
for name, entry in sorted(lock.get("models", {}).items()):
    directory = Path(fetch.MODELS_ROOT) / entry["source"]["path"]
    try:
        if hasattr(fetch, "status"):
            try:
                reasons = fetch.status(lock, name, prepared=name in PREPARED_MODELS)
            except TypeError:  # an agent installed before status() took prepared
                reasons = fetch.status(lock, name)
        else:
            reasons = fetch.compare(name, directory)
        if deep:
            rec = fetch.load_record(fetch.STATE_DIR, name)
            if rec:
                rels = [r for r in sorted(rec["files"]) if (directory / r).is_file()]
                digests = fetch.hash_files([directory / r for r in rels])
                for rel, d in zip(rels, digests):
                    if d["sha256"] != rec["files"][rel]["sha256"]:
                        reasons.append(f"{name}: {rel}: content differs from the record (sha256)")
    except Exception as exc:
        reasons = [f"{name}: cannot check: {type(exc).__name__}: {exc}"]
    out[name] = reasons
print(json.dumps(out))
"""


def probe_sections(decl: Declared, deep: bool = False) -> list[tuple[str, str]]:
    """The probe's sections ``[(key, shell command)]``; each command's stdout is parsed by
    :func:`parse_probe`. Commands of rigkit's facts are reused verbatim."""
    q = shlex.quote
    sections: list[tuple[str, str]] = []
    for path, f in sorted(decl.files.items()):
        content = "" if not f else (f"[ \"$(stat -c %s {q(path)})\" -le {MAX_DIFF_BYTES} ] && "
                                    f"base64 -w0 {q(path)}; echo")
        sections.append((f"file:{path}", f"if [ -f {q(path)} ]; then echo \"$(stat -c '%a %U %G %s' {q(path)}) "
                                         f"$(sha256sum {q(path)} | cut -d' ' -f1)\"; {content}; else echo missing; fi"))
    for path in sorted(decl.secrets):
        # never the content: owner, mode and sha256 only
        sections.append((f"secret:{path}", f"if [ -f {q(path)} ]; then echo \"$(stat -c '%a %U %G %s' {q(path)}) "
                                           f"$(sha256sum {q(path)} | cut -d' ' -f1)\"; else echo missing; fi"))
    sections.append(("pacman", PacmanVersions().command(decl.packages)))
    sections.append(("ignorepkg", PacmanIgnorePkg().command()))
    sections.append(("kernel", KernelState().command()))
    sections.append(("dkms", "command -v dkms >/dev/null 2>&1 && " + DkmsStatus().command()))
    sections.append(("smi", NvidiaSmi().command()))
    sections.append(("smi-cuda", "nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\\([0-9][0-9.]*\\).*/\\1/p' | head -n 1"))
    sections.append(("daemon-json", JsonFile().command(paths.DOCKER_DAEMON_JSON)))
    sections.append(("window", JsonFile().command(paths.WINDOW_JOURNAL)))
    sections.append(("holds", JsonFile().command(paths.HOLDS_FILE)))
    sections.append(("agent", f"out=$({paths.AGENT_BIN} version 2>&1); rc=$?; printf '%s\\n' \"$out\" | tail -n 3; "
                              f"echo __RC__=$rc"))
    units = sorted({*decl.units, *decl.installed_only, *decl.legacy, *decl.members})
    sections.append(("units", f"systemctl show --no-pager -p {','.join(UNIT_PROPS)} {' '.join(q(u) for u in units)}"))
    sections.append(("llama-swap-start", "systemctl show --no-pager --timestamp=unix -p ExecMainStartTimestamp "
                                         f"llama-swap.service; stat -c 'mtime=%Y' {q(paths.LLAMA_SWAP_CONFIG)}"))
    if decl.lock is not None:
        lock_b64 = base64.b64encode(json.dumps(decl.lock).encode()).decode()
        py = f"{paths.AGENT_VENV}/bin/python"
        sections.append(("models", f"if [ -x {py} ]; then {py} -c {q(_MODELS_PY)} {lock_b64} {int(deep)} 2>&1; "
                                   "else echo __NOAGENT__; fi"))
    return sections


def probe_script(sections: list[tuple[str, str]]) -> str:
    """One POSIX shell script running every section, each after a ``__RIGKIT_DRIFT__ <key>`` line
    (printed after a newline: a file without a final newline must not swallow the marker);
    always exits 0 (a failing section shows in its own output)."""
    parts = []
    for key, cmd in sections:
        parts.append(f"printf '\\n%s\\n' '{SECTION} {key}'; {{ {cmd} ; }} 2>/dev/null")
    return "\n".join(parts + ["exit 0"])


class HostProbe(FactBase):
    """Every fact drift needs, in one command (:func:`probe_script`); returns ``{section key:
    [stdout lines]}``, or None when the command failed as a whole (the connection dropped)."""

    def command(self, script: str) -> str:
        return script

    @staticmethod
    def default() -> None:
        return None

    def process(self, output: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        current = None
        for line in output:
            if line.startswith(SECTION + " "):
                if current is not None and out[current] and not out[current][-1].strip():
                    out[current].pop()  # the newline printed before the marker
                current = line[len(SECTION) + 1:].strip()
                out[current] = []
            elif current is not None:
                out[current].append(line)
        return out


def _stat(lines: list[str]) -> dict[str, Any] | None:
    """``"640 root llama-swap 123 <sha256>"`` → ``{mode, user, group, size, sha256}``; None: missing."""
    if not lines or lines[0].strip() == "missing":
        return None
    parts = lines[0].split()
    if len(parts) != 5:
        return {"mode": None, "user": None, "group": None, "size": None, "sha256": None}
    return {"mode": parts[0], "user": parts[1], "group": parts[2], "size": int(parts[3]), "sha256": parts[4]}


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


def parse_probe(raw: dict[str, list[str]], packages: list[str]) -> dict[str, Any]:
    """The probe's raw sections (:class:`HostProbe`) → facts: ``files``/``secrets`` ``{path:
    stat | None}`` (+ ``content`` bytes for files), ``pacman`` (for ``packages``), ``ignorepkg``,
    ``kernel``, ``dkms``, ``smi``, ``smi_cuda`` (str | None), ``daemon_json``, ``agent`` ``{rc,
    output}``, ``units``, ``llama_swap_start`` ``{started, mtime}`` (epoch s | None), ``models``
    (``{name: [reasons]}``, ``"no-agent"``, or None when not asked)."""
    facts: dict[str, Any] = {"files": {}, "secrets": {}, "models": None}
    pacman_fact = PacmanVersions()
    pacman_fact.command(packages)  # its process() reads the names its command() was given
    for key, lines in raw.items():
        if key.startswith("file:"):
            st = _stat(lines)
            if st is not None and len(lines) > 1 and lines[1].strip():
                try:
                    st["content"] = base64.b64decode(lines[1].strip())
                except ValueError:
                    st["content"] = None
            facts["files"][key[5:]] = st
        elif key.startswith("secret:"):
            facts["secrets"][key[7:]] = _stat(lines)
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
            facts["smi_cuda"] = lines[0].strip() if lines and lines[0].strip() else None
        elif key == "daemon-json":
            facts["daemon_json"] = JsonFile().process(lines)
        elif key == "window":
            facts["window"] = JsonFile().process(lines)
        elif key == "holds":
            facts["holds"] = JsonFile().process(lines)
        elif key == "agent":
            rc = None
            body = []
            for line in lines:
                if line.startswith("__RC__="):
                    rc = int(line[7:] or 1)
                else:
                    body.append(line)
            facts["agent"] = {"rc": rc, "output": "\n".join(body).strip()}
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
        elif key == "models":
            text = "\n".join(lines).strip()
            if text == "__NOAGENT__":
                facts["models"] = "no-agent"
            else:
                try:
                    facts["models"] = json.loads(text.splitlines()[-1]) if text else {}
                except ValueError:
                    facts["models"] = {"*": [f"model check failed: {text[-300:]}"]}
    return facts


# --------------------------------------------------------------------------------------------
# Comparisons (pure)


def _short(sha: str | None) -> str:
    return f"sha256:{sha[:12]}" if sha else "unknown"


def _mode(value: str | None) -> str:
    try:
        return f"0{int(value, 8):03o}" if value else "?"
    except ValueError:
        return value or "?"


def compare_files(host: str, files: dict[str, Any], actual: dict[str, Any], diff: bool = False,
                  secrets: list[str] | tuple[str, ...] = ()) -> list[Finding]:
    """Rendered files vs the host's: presence, content (sha256), mode, owner; one finding each.
    With ``diff`` a masked unified diff (declared → host) rides on the content finding."""
    out = []
    for path, f in sorted(files.items()):
        st = actual.get(path)
        if st is None:
            out.append(Finding(host, "file", path, f"present {_short(f.sha256)} {f.mode} {f.owner}", "missing"))
            continue
        if st.get("sha256") != f.sha256:
            text_diff = None
            if diff and st.get("content") is not None:
                host_text = st["content"].decode(errors="replace")
                text_diff = "".join(difflib.unified_diff(
                    f.text.splitlines(keepends=True), host_text.splitlines(keepends=True),
                    fromfile=f"declared {path}", tofile=f"{host} {path}"))
                text_diff = mask(text_diff, secrets)
            out.append(Finding(host, "file", path, f"content {_short(f.sha256)}",
                               f"content {_short(st.get('sha256'))} ({st.get('size')} bytes)", diff=text_diff))
        if st.get("mode") is not None and _mode(st["mode"]) != _mode(f.mode):
            out.append(Finding(host, "file-mode", path, _mode(f.mode), _mode(st["mode"])))
        owner = f"{st.get('user')}:{st.get('group')}"
        if st.get("user") is not None and owner != f.owner:
            out.append(Finding(host, "file-owner", path, f.owner, owner))
    return out


def compare_secrets(host: str, declared: dict[str, tuple[str, str, str | None]], actual: dict[str, Any],
                    token_source: str | None = None) -> list[Finding]:
    """The secret files' presence, owner and mode; content only when the value is at hand
    (declared sha256 non-empty; ``""`` means: the value is not at hand, the file is optional).
    Never a value or hash in a finding."""
    out = []
    for path, (owner, mode, sha) in sorted(declared.items()):
        st = actual.get(path)
        if st is None:
            if sha == "":
                continue
            out.append(Finding(host, "secret", path, f"present {owner} {mode}", "missing"))
            continue
        got_owner = f"{st.get('user')}:{st.get('group')}"
        if got_owner != owner:
            out.append(Finding(host, "secret-owner", path, owner, got_owner))
        if _mode(st.get("mode")) != _mode(mode):
            out.append(Finding(host, "secret-mode", path, _mode(mode), _mode(st.get("mode"))))
        if sha and st.get("sha256") != sha:
            out.append(Finding(host, "secret", path, f"the value from {token_source or 'the control machine'}",
                               "a different value (not shown)"))
    return out


def pkgver(version: str | None) -> str | None:
    """``"1:610.57-2"`` → ``"610.57"`` (epoch and pkgrel dropped; pacman(8) version format)."""
    if not version:
        return None
    v = version.split(":", 1)[-1]
    return v.rsplit("-", 1)[0] if "-" in v else v


def compare_pins(host: str, pins: dict[str, str] | None, installed: dict[str, str | None],
                 held: list[str] | None) -> list[Finding]:
    """Each pin installed at its full version, and held by ``IgnorePkg`` inside ``[options]``."""
    out = []
    for pkg, want in sorted((pins or {}).items()):
        got = installed.get(pkg)
        if got != want:
            out.append(Finding(host, "pin", pkg, want, got or "not installed"))
    if pins:
        if held is None:
            out.append(Finding(host, "pin-held", "/etc/pacman.conf", "IgnorePkg in [options]", "file missing"))
        else:
            for pkg in sorted(pins):
                if pkg not in held:
                    out.append(Finding(host, "pin-held", pkg, "IgnorePkg in [options] of /etc/pacman.conf",
                                       "not held" + (f" (held: {' '.join(held)})" if held else "")))
    return out


def compare_driver(host: str, driver: str, flavour: str, installed: dict[str, str | None],
                   kernel: dict[str, Any], smi: dict[str, Any]) -> list[Finding]:
    """The driver version as ``pacman -Q`` (``nvidia-utils`` and the flavour's module package),
    the loaded module (``/sys/module/nvidia/version``) and ``nvidia-smi`` each report it, vs
    ``nvidia_driver_version``; an nvidia-smi that cannot answer (mismatch, no GPU) is a finding."""
    out = []
    for pkg in ("nvidia-utils", flavour):
        got = pkgver(installed.get(pkg))
        if got != driver:
            out.append(Finding(host, "driver", f"pacman -Q {pkg}", driver, got or "not installed"))
    loaded = kernel.get("nvidia_module")
    if loaded != driver:
        out.append(Finding(host, "driver", "loaded module", driver, loaded or "not loaded"))
    if smi.get("state") != "ok":
        out.append(Finding(host, "driver", "nvidia-smi", driver, f"{smi.get('state')}: {smi.get('message', '')}".strip()))
    else:
        for gpu in smi["gpus"]:
            if gpu["driver_version"] != driver:
                out.append(Finding(host, "driver", f"nvidia-smi GPU {gpu['index']}", driver, gpu["driver_version"]))
    return out


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", v))


def compare_cuda(host: str, cuda: str, installed: dict[str, str | None], smi_cuda: str | None,
                 smi_ok: bool) -> list[Finding]:
    """The ``cuda`` package in the declared series (``13.3`` → ``13.3.x``) and the driver's CUDA
    level (nvidia-smi's ``CUDA Version``) at least the declared one."""
    out = []
    got = pkgver(installed.get("cuda"))
    if got is None or _vtuple(got)[:2] != _vtuple(cuda)[:2]:
        out.append(Finding(host, "cuda", "pacman -Q cuda", f"{cuda}.x", got or "not installed"))
    if smi_ok:
        if smi_cuda is None:
            out.append(Finding(host, "cuda", "driver CUDA level", f">= {cuda}", "not reported by nvidia-smi"))
        elif _vtuple(smi_cuda) < _vtuple(cuda):
            out.append(Finding(host, "cuda", "driver CUDA level", f">= {cuda}", smi_cuda))
    return out


def compare_reboot(host: str, reasons: list[str]) -> list[Finding]:
    """``roles.boot.reboot_reasons`` (the deploy's own gate) as one finding when non-empty."""
    if not reasons:
        return []
    return [Finding(host, "reboot", "reboot pending", "running kernel and module are the installed ones",
                    "; ".join(reasons))]


def compare_power(host: str, watts: int, smi: dict[str, Any]) -> list[Finding]:
    """``enforced.power.limit`` (and the requested ``power.limit``) vs ``gpu_power_limit_w``, in W."""
    out = []
    for gpu in smi.get("gpus", []) if smi.get("state") == "ok" else []:
        for key, label in (("power_enforced_w", "enforced.power.limit"), ("power_limit_w", "power.limit")):
            got = gpu.get(key)
            if got is None or abs(got - watts) > 0.5:
                out.append(Finding(host, "power", f"GPU {gpu['index']} {label}", f"{watts} W",
                                   f"{got:g} W" if got is not None else "unknown"))
    return out


def compare_daemon_json(host: str, owned: dict[str, Any], actual: dict[str, Any]) -> list[Finding]:
    """The keys rigkit owns in ``/etc/docker/daemon.json``, compared as JSON: a key differs when
    merging rigkit's value into the host's would change it (the deploy's own
    :func:`~rigkit.operations.merge_json`). Keys rigkit does not own are never drift."""
    path = paths.DOCKER_DAEMON_JSON
    if not actual.get("exists"):
        return [Finding(host, "daemon.json", path, "present with " + ", ".join(sorted(owned)), "missing")]
    if actual.get("error"):
        return [Finding(host, "daemon.json", path, "a JSON object", actual["error"])]
    data = actual.get("data") or {}
    out = []
    for key, want in sorted(owned.items()):
        if key not in data or merge_json(data[key], want) != data[key]:
            out.append(Finding(host, "daemon.json", key, json.dumps(want, sort_keys=True),
                               json.dumps(data[key], sort_keys=True) if key in data else "absent"))
    return out


def compare_agent(host: str, agent: dict[str, Any]) -> list[Finding]:
    """``/opt/rigkit/venv/bin/rigkit-agent version`` must exit 0 (its venv's Python still there)."""
    if agent.get("rc") == 0:
        return []
    why = agent.get("output") or ""
    return [Finding(host, "agent", paths.AGENT_BIN, "`rigkit-agent version` runs",
                    f"exit {agent.get('rc')}" + (f": {why.splitlines()[-1]}" if why else ""))]


def _enabled(props: dict[str, str]) -> bool:
    return props.get("UnitFileState", "") in ENABLED_STATES


def _exists(props: dict[str, str] | None) -> bool:
    return bool(props) and props.get("LoadState") not in ("not-found", "")


def compare_units(host: str, decl: Declared, units: dict[str, dict[str, str]]) -> list[Finding]:
    """Units enabled/active as DESIGN.md says; installed-not-enabled ones; legacy units back
    (present and enabled or active); a ``Requires=``/``BindsTo=``/``Requisite=``/``PartOf=``
    between ``llama-swap.service`` and a member or legacy unit, either way."""
    out = []
    for unit, want in sorted(decl.units.items()):
        props = units.get(unit)
        if not _exists(props):
            out.append(Finding(host, "unit", unit, "installed", "not found"))
            continue
        if want.get("enabled") is not None and _enabled(props) != want["enabled"]:
            out.append(Finding(host, "unit", unit, "enabled" if want["enabled"] else "disabled",
                               props.get("UnitFileState") or "unknown"))
        if want.get("active") is not None and (props.get("ActiveState") == "active") != want["active"]:
            out.append(Finding(host, "unit", unit, "active" if want["active"] else "inactive",
                               f"{props.get('ActiveState')} ({props.get('SubState')})"))
    for unit in decl.installed_only:
        props = units.get(unit)
        if not _exists(props):
            out.append(Finding(host, "unit", unit, "installed, not enabled", "not found"))
        elif props.get("UnitFileState") in ("enabled", "enabled-runtime"):
            out.append(Finding(host, "unit", unit, "installed, not enabled", props["UnitFileState"]))
    for unit in decl.legacy:
        props = units.get(unit)
        if not _exists(props):
            continue
        state = props.get("UnitFileState", "")
        active = props.get("ActiveState") == "active"
        if state in ("enabled", "enabled-runtime") or active:
            out.append(Finding(host, "legacy-unit", unit, "stopped and disabled (retired by the deploy)",
                               f"{state or 'unknown'}, {props.get('ActiveState')}"))
    proxy = units.get("llama-swap.service") or {}
    for dep in TIGHT_DEPS:
        for other in proxy.get(dep, "").split():
            if other in decl.members:
                out.append(Finding(host, "unit-dependency", f"llama-swap.service {dep}={other}",
                                   "no Requires=/BindsTo= on a member", f"{dep}={other}"))
    for unit in decl.members:
        props = units.get(unit) or {}
        for dep in TIGHT_DEPS:
            if "llama-swap.service" in props.get(dep, "").split():
                out.append(Finding(host, "unit-dependency", f"{unit} {dep}=llama-swap.service",
                                   "no Requires=/BindsTo= with the proxy", f"{dep}=llama-swap.service"))
    return out


def compare_llama_swap_live(host: str, start: dict[str, Any]) -> list[Finding]:
    """llama-swap reads its config at start only: a config file changed after the running
    process started is not the live config (``ExecMainStartTimestamp`` vs the file's mtime, s)."""
    started, mtime = start.get("started"), start.get("mtime")
    if started and mtime and mtime > started:
        return [Finding(host, "llama-swap-live", paths.LLAMA_SWAP_CONFIG, "the running llama-swap loaded the file",
                        f"file changed {mtime - started} s after llama-swap started (restart pending)")]
    return []


def compare_models(host: str, lock_note: str | None, models: Any) -> list[Finding]:
    """Model files vs the lock and the verified records (on the host, by ``rigkit.host.fetch`` in the
    agent's venv): each reason a finding; no lock → one ``warn``; agent gone → one ``warn``."""
    if lock_note:
        return [Finding(host, "model", "lock", "a model lock for the inventory", lock_note, severity="warn")]
    if models is None:
        return []
    if models == "no-agent":
        return [Finding(host, "model", "*", "checked by the host agent", "agent venv has no python; not checked",
                        severity="warn")]
    out = []
    for name, reasons in sorted(models.items()):
        for reason in reasons:
            text = reason[len(name) + 2:] if reason.startswith(f"{name}: ") else reason
            out.append(Finding(host, "model", name, "as locked and recorded", text))
    return out


def plan_findings(host: str, plan: dict[str, Any] | None) -> list[Finding]:
    """pyinfra's ``--dry --json`` plan for ``host``: each operation that would change something
    is drift (kind ``plan``, item its name, e.g. ``Host agent | Sync the agent wheelhouse``).

    Operations gated on ``_if`` land in ``hosts_with_conditional_change`` on *every* run,
    converged or not (the condition is evaluated at execute time), so alone they say nothing:
    they are reported separately (kind ``plan-conditional``, ``warn``) only in a role (the name
    before `` | ``) where an operation would change — they are what that change would trigger.
    """
    if plan is None:
        return []
    changes, conditional = [], []
    for op in plan.get("plan", []):
        name = " | ".join(op.get("names") or []) or op.get("name") or op.get("op_hash", "?")
        if host in (op.get("hosts_with_change") or []):
            changes.append(Finding(host, "plan", name, "no change", "the deploy would change this"))
        elif host in (op.get("hosts_with_conditional_change") or []):
            conditional.append(Finding(host, "plan-conditional", name, "no change",
                                       "runs if the change before it happens", severity="warn"))
    roles = {f.item.split(" | ")[0] for f in changes if " | " in f.item}
    return changes + [f for f in conditional if f.item.split(" | ")[0] in roles]


def compare_host(decl: Declared, facts: dict[str, Any], diff: bool = False, token_source: str | None = None) -> list[Finding]:
    """Every comparison for one host's parsed probe."""
    spec = decl.spec
    host = decl.host
    secrets = decl.secret_values
    installed = facts.get("pacman") or {}
    smi = facts.get("smi") or NvidiaSmi.default()
    kernel = facts.get("kernel") or {}
    out: list[Finding] = []
    out += compare_files(host, decl.files, facts.get("files", {}), diff=diff, secrets=secrets)
    out += compare_secrets(host, decl.secrets, facts.get("secrets", {}), token_source)
    out += compare_pins(host, spec.pacman_pins, installed, facts.get("ignorepkg"))
    out += compare_driver(host, spec.nvidia_driver_version, spec.driver_flavour, installed, kernel, smi)
    out += compare_cuda(host, spec.cuda_version, installed, facts.get("smi_cuda"), smi.get("state") == "ok")
    out += compare_reboot(host, hoststate.reboot_reasons(kernel, facts.get("dkms") or [], spec.nvidia_driver_version,
                                                          spec.driver_flavour))
    out += compare_power(host, spec.gpu_power_limit_w, smi)
    out += compare_daemon_json(host, hoststate.DAEMON_JSON_KEYS, facts.get("daemon_json") or {})
    out += compare_agent(host, facts.get("agent") or {})
    out += compare_units(host, decl, facts.get("units") or {})
    out += compare_llama_swap_live(host, facts.get("llama_swap_start") or {})
    out += compare_models(host, decl.lock_note, facts.get("models"))
    out += compare_holds(host, facts.get("holds") or {})
    return apply_window(host, out, (facts.get("window") or {}).get("data"))


def window_open(facts: dict[str, Any]) -> bool:
    """True when the probe found an open window journal (:func:`rigkit.host.window.is_open`)."""
    from rigkit.host.window import is_open

    return is_open((facts.get("window") or {}).get("data"))


def apply_window(host: str, findings: list[Finding], journal: dict | None) -> list[Finding]:
    """While a window is open: report it (``warn``), and mark the findings it explains — its
    tenant swapped in, the proxy down, the paused timers — as ``expected`` (not drift), from
    :func:`rigkit.host.window.expected_deviations`. Without an open window, ``findings`` unchanged."""
    from rigkit.host.window import expected_deviations, is_open

    if not is_open(journal):
        return findings
    deviations = expected_deviations(journal)
    explained = {d.split()[0]: d for d in deviations}
    for f in findings:
        if f.kind == "unit" and f.item in explained:
            f.severity = "expected"
            f.actual = f"{f.actual} — {explained[f.item].split(': ', 1)[-1]}"
    plan = journal.get("plan") or {}
    findings.append(Finding(host, "window", f"window {journal.get('id', '?')}",
                            "steady state (no window open)",
                            f"{journal.get('state')}: tenant {plan.get('tenant', '?')}; expected meanwhile: "
                            + ("; ".join(deviations) or "nothing yet"), severity="warn"))
    return findings


def compare_holds(host: str, holds: dict[str, Any]) -> list[Finding]:
    """A hold recorded by a manual rollback (``/var/lib/rigkit/holds.json``, written by
    :mod:`rigkit.host.activate`): the declared llama-swap config is held back until released
    (DESIGN.md "Staged vs live"). One finding per hold, naming the members it holds back and
    where the held-back config was kept."""
    if holds.get("error"):
        return [Finding(host, "hold", paths.HOLDS_FILE, "a JSON object", holds["error"], severity="error")]
    out = []
    for name, hold in sorted((holds.get("data") or {}).items()):
        if not isinstance(hold, dict):
            continue
        members = hold.get("held_back_members") or {}
        parts = [f"{k}: {', '.join(v)}" for k, v in sorted(members.items()) if v]
        out.append(Finding(host, "hold", name, "the declared config active (no hold)",
                           f"held since {hold.get('since', '?')} by {hold.get('by', '?')}; held back "
                           + ("; ".join(parts) or "a changed config") + f" (copy: {hold.get('held_back_copy', '?')}); "
                           "release with `rigkit wire-in --release`"))
    return out


# --------------------------------------------------------------------------------------------
# Running it


def start_plan(inventory: str, hosts: list[str], cwd: str | None = None) -> subprocess.Popen:
    """Start ``pyinfra INVENTORY deploy.py --dry --json --limit H...`` (stdout: the JSON plan;
    stderr: pyinfra's log). The project root goes on ``PYTHONPATH`` as ``rigkit deploy`` does."""
    pyinfra = str(Path(sys.executable).parent / "pyinfra")
    cmd = [pyinfra, inventory, str(PROJECT / "deploy.py"), "--dry", "--json"]
    for name in hosts:
        cmd += ["--limit", name]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")])),
           "NO_COLOR": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, env=env, cwd=cwd)


def finish_plan(proc: subprocess.Popen, timeout_s: float = 900) -> tuple[dict[str, Any] | None, str]:
    """Wait for :func:`start_plan`; returns ``(plan | None, why not)``."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, f"pyinfra --dry did not finish within {timeout_s:g} s"
    try:
        return json.loads(stdout), ""
    except ValueError:
        lines = stderr.strip().splitlines()
        start = next((i for i, ln in enumerate(lines) if "pyinfra error" in ln or "Error" in ln), max(0, len(lines) - 3))
        why = " ".join(ln.strip() for ln in lines[start:start + 6]).replace("--> ", "")
        return None, f"pyinfra --dry exited {proc.returncode} without a plan: {why}"


def connect_and_probe(decls: list[Declared], connections: dict[str, dict[str, Any]], deep: bool = False,
                      connect_timeout: int = 10) -> dict[str, tuple[dict[str, Any] | None, str]]:
    """Reach every host with pyinfra (its connectors, the hosts' own connection data, in
    parallel) and run :class:`HostProbe` once on each. Returns ``{host: (facts, "")}`` or
    ``{host: (None, why)}`` for a host that could not be reached or probed."""
    import gevent
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.facts import get_fact
    from pyinfra.context import ctx_host, ctx_state

    inventory = Inventory(([(d.host, dict(connections.get(d.host, {}))) for d in decls], {}))
    state = State(inventory=inventory, config=Config(CONNECT_TIMEOUT=connect_timeout, FAIL_PERCENT=None))
    sections = {d.host: probe_sections(d, deep=deep) for d in decls}
    decl_by_name = {d.host: d for d in decls}
    results: dict[str, tuple[dict[str, Any] | None, str]] = {}

    def one(host) -> tuple[dict[str, Any] | None, str]:
        with ctx_state.use(state), ctx_host.use(host):
            try:
                host.connect(show_errors=False, raise_exceptions=True)
            except Exception as exc:  # noqa: BLE001 - ConnectError and friends: the host is reported
                return None, f"unreachable: {exc}"
            state.activate_host(host)
            try:
                raw = get_fact(state, host, HostProbe, kwargs={"script": probe_script(sections[host.name])},
                               apply_failed_hosts=False)
            except Exception as exc:  # noqa: BLE001
                return None, f"probe failed: {type(exc).__name__}: {exc}"
            finally:
                try:
                    host.disconnect()
                except Exception:  # noqa: BLE001
                    pass
            if raw is None:
                return None, "probe failed (the command did not complete)"
            return parse_probe(raw, decl_by_name[host.name].packages), ""

    import logging

    logging.getLogger("pyinfra").addHandler(logging.NullHandler())
    logging.getLogger("pyinfra").propagate = False
    greenlets = {gevent.spawn(one, host): host.name for host in inventory}
    gevent.joinall(list(greenlets))
    for g, name in greenlets.items():
        results[name] = g.value if g.successful() else (None, f"probe failed: {g.exception}")
    return results


def check(host_specs: list[Any], inventory: str, deep: bool = False, diff: bool = False, plan: bool = True,
          connect_timeout: int = 10) -> tuple[list[Finding], dict[str, int]]:
    """Drift of every host: ``(findings, {host: exit code})``, every host reported. Findings are
    masked; an unreachable host is one ``error`` finding (kind ``host``)."""
    from rigkit.secrets import hf_token_source, read_hf_token

    token = read_hf_token()
    source = hf_token_source() if token else None
    decls = [declared_for(hs.name, hs.spec, inventory, token) for hs in host_specs]
    # one plan per host, all at once: a DeployError on one host (a refusal in preflight) aborts
    # pyinfra's whole run, and every other host must still be reported
    procs = {hs.name: start_plan(inventory, [hs.name]) for hs in host_specs} if plan else {}
    probes = connect_and_probe(decls, {hs.name: hs.connection for hs in host_specs}, deep=deep,
                               connect_timeout=connect_timeout)
    plans = {name: finish_plan(proc) for name, proc in procs.items()}
    findings: list[Finding] = []
    codes: dict[str, int] = {}
    for decl in decls:
        facts, why = probes.get(decl.host, (None, "not probed"))
        if facts is None:
            host_findings = [Finding(decl.host, "host", "connection", "reachable, probed", why, severity="error")]
        else:
            host_findings = compare_host(decl, facts, diff=diff, token_source=source)
            if plan and window_open(facts):
                host_findings.append(Finding(decl.host, "plan", "pyinfra --dry --json", "a plan",
                                             "skipped: the deploy refuses while a window is open", severity="warn"))
            elif plan:
                plan_json, plan_err = plans[decl.host]
                if plan_json is None:
                    host_findings.append(Finding(decl.host, "plan", "pyinfra --dry --json", "a plan", plan_err,
                                                 severity="error"))
                else:
                    host_findings += plan_findings(decl.host, plan_json)
        for f in host_findings:
            f.declared = mask(f.declared, decl.secret_values)
            f.actual = mask(f.actual, decl.secret_values)
            f.item = mask(f.item, decl.secret_values)
        findings += host_findings
        codes[decl.host] = exit_code(host_findings)
    return findings, codes
