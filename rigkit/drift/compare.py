"""Comparisons: declared values and parsed facts in, :class:`Finding` s out. Pure: no host, no
pyinfra, no operation, no build here (what compare needs that must be made or read elsewhere comes
in as data: the wheelhouse built here as its sums, :func:`compare_host`'s ``wheelhouse``); the
findings carry what was compared as it is, and :func:`rigkit.drift.masking.masked` masks every
string of them where they leave the drift check (tests/unit/test_one_piece.py holds both)."""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass
from typing import Any

from rigkit import hints, paths
from rigkit.common import versions
from rigkit.common.gpu import parse_query
from rigkit.render import declared_state
from rigkit.drift.declared import Declared
from rigkit.drift.severity import EXPECTED, HELD, severity_of

ENABLED_STATES = ("enabled", "enabled-runtime", "static", "alias", "indirect", "generated", "linked", "linked-runtime")
#: Dependencies that tie one unit's lifetime to another's (systemd.unit(5)).
TIGHT_DEPS = ("Requires", "BindsTo", "Requisite", "PartOf")


@dataclass
class Finding:
    """One difference. ``declared``/``actual`` are short human strings (units in them: W, bytes);
    ``diff`` is a unified diff (declared → actual) for a rendered file, only with ``--diff``."""

    host: str
    kind: str
    item: str
    declared: str
    actual: str
    severity: str = ""
    diff: str | None = None

    def __post_init__(self) -> None:
        # one severity per kind (rigkit.drift.severity): never chosen where a finding is made
        self.severity = severity_of(self.kind)

    def record(self, with_diff: bool = False) -> dict[str, Any]:
        """The JSON record: ``{host, kind, item, declared, actual, severity}`` (+ ``diff``)."""
        out = asdict(self)
        if not with_diff or self.diff is None:
            out.pop("diff")
        return out

def _short(sha: str | None) -> str:
    return f"sha256:{sha[:12]}" if sha else "unknown"


def _mode(value: str | None) -> str:
    try:
        return f"0{int(value, 8):03o}" if value else "?"
    except ValueError:
        return value or "?"


def compare_files(host: str, files: dict[str, Any], actual: dict[str, Any], diff: bool = False) -> list[Finding]:
    """Rendered files vs the host's: presence, content (sha256), mode, owner; one finding each.
    With ``diff`` a unified diff (declared → host) rides on the content finding (unmasked here: it is
    masked with the rest where findings leave the check, :func:`rigkit.drift.masking.masked`)."""
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


def compare_pins(host: str, pins: dict[str, str] | None, installed: dict[str, str | None],
                 ignorepkg: dict[str, Any] | None) -> list[Finding]:
    """Each pin installed at its full version, and held: an entry of the effective ``IgnorePkg``
    (``pacman-conf IgnorePkg``, :class:`~rigkit.operations.facts.pacman.PacmanIgnorePkg`) matches it as
    libalpm matches (:func:`rigkit.common.pacman.ignored_by`). pacman-conf failing (a missing
    ``Include`` target, no pacman.conf) is one finding naming its error."""
    from rigkit.common.pacman import ignored_by

    out = []
    for pkg, want in sorted((pins or {}).items()):
        got = installed.get(pkg)
        if got != want:
            out.append(Finding(host, "pin", pkg, want, got or "not installed"))
    if pins:
        if ignorepkg is None or ignorepkg.get("error"):
            out.append(Finding(host, "pin-held", paths.PACMAN_CONF, "pacman-conf IgnorePkg holds every pin",
                               f"pacman-conf: {(ignorepkg or {}).get('error') or 'not read'}"))
        else:
            entries = ignorepkg["entries"]
            for pkg in sorted(pins):
                if not ignored_by(pkg, entries):
                    out.append(Finding(host, "pin-held", pkg, "held by IgnorePkg (pacman-conf IgnorePkg)",
                                       "not held" + (f" (IgnorePkg: {' '.join(entries)})" if entries else "")))
    return out


def compare_driver(host: str, driver: str, flavour: str, installed: dict[str, str | None],
                   kernel: dict[str, Any], smi: dict[str, Any]) -> list[Finding]:
    """The driver version as ``pacman -Q`` (``nvidia-utils`` and the flavour's module package),
    the loaded module (``/sys/module/nvidia/version``) and ``nvidia-smi`` each report it, vs
    ``driver`` (:func:`rigkit.render.declared_state.pinned_driver`: the pin's full version, or
    ``nvidia_driver_version``, a series or a full version), each by
    :func:`rigkit.common.versions.agrees` (``610.57`` agrees with ``610.57.04``); an nvidia-smi that
    cannot answer (mismatch, no GPU) is a finding."""
    out = []
    for pkg in ("nvidia-utils", flavour):
        got = installed.get(pkg)
        if not versions.agrees(driver, got):
            out.append(Finding(host, "driver", f"pacman -Q {pkg}", driver, versions.release(got) or "not installed"))
    loaded = kernel.get("nvidia_module")
    if not versions.agrees(driver, loaded):
        out.append(Finding(host, "driver", "loaded module", driver, loaded or "not loaded"))
    if smi.get("state") != "ok":
        out.append(Finding(host, "driver", "nvidia-smi", driver, f"{smi.get('state')}: {smi.get('message', '')}".strip()))
    else:
        for gpu in smi["gpus"]:
            if not versions.agrees(driver, gpu["driver_version"]):
                out.append(Finding(host, "driver", f"nvidia-smi GPU {gpu['index']}", driver, gpu["driver_version"]))
    return out


def compare_cuda(host: str, cuda: str, installed: dict[str, str | None], smi_cuda: str | None,
                 smi_ok: bool) -> list[Finding]:
    """The ``cuda`` package in the declared series (``13.3`` → ``13.3.x-<pkgrel>``,
    :func:`rigkit.common.versions.agrees`) and the driver's CUDA level (nvidia-smi's header,
    :func:`rigkit.common.gpu.driver_cuda`) at least the declared one (:func:`rigkit.common.versions.supports`)."""
    out = []
    got = installed.get("cuda")
    if not versions.agrees(cuda, got):
        out.append(Finding(host, "cuda", "pacman -Q cuda", f"{cuda}.x", versions.release(got) or "not installed"))
    if smi_ok:
        if smi_cuda is None:
            out.append(Finding(host, "cuda", "driver CUDA level", f">= {cuda}", "not reported by nvidia-smi"))
        elif not versions.supports(smi_cuda, cuda):
            out.append(Finding(host, "cuda", "driver CUDA level", f">= {cuda}", smi_cuda))
    return out


def compare_reboot(host: str, reasons: list[str]) -> list[Finding]:
    """:func:`rigkit.render.declared_state.reboot_reasons` (the deploy's own gate) as one finding when non-empty."""
    if not reasons:
        return []
    return [Finding(host, "reboot", "reboot pending", "running kernel and module are the installed ones",
                    "; ".join(reasons))]


def compare_power(host: str, watts: int, smi: dict[str, Any]) -> list[Finding]:
    """``enforced.power.limit`` (and the requested ``power.limit``) vs ``gpu_power_limit_w``, in W;
    a reading is the declared limit as :func:`rigkit.common.powerlimit.limit_agrees` judges it."""
    from rigkit.common.powerlimit import limit_agrees

    out = []
    for gpu in smi.get("gpus", []) if smi.get("state") == "ok" else []:
        for key, label in (("power_enforced_w", "enforced.power.limit"), ("power_limit_w", "power.limit")):
            got = gpu.get(key)
            if not limit_agrees(got, watts):
                out.append(Finding(host, "power", f"GPU {gpu['index']} {label}", f"{watts} W",
                                   f"{got:g} W" if got is not None else "unknown"))
    return out


def compare_daemon_json(host: str, owned: dict[str, Any], actual: dict[str, Any],
                        driver: str | None = None) -> list[Finding]:
    """The keys rigkit owns in ``/etc/docker/daemon.json``, compared as JSON: a key differs when
    merging rigkit's value into the host's would change it (the deploy's own
    :func:`~rigkit.render.declared_state.merge_json`); an operator's other ``native.cgroupdriver``
    (:func:`~rigkit.render.declared_state.cgroup_driver_problem`) and the driver docker itself says is in
    effect (``driver``: dockerd's ``GET /info`` ``CgroupDriver``, what ``docker info --format
    '{{.CgroupDriver}}'`` prints; None or "" when docker did not answer) other than ``cgroupfs`` are findings. Keys rigkit does not own are never drift."""
    path = paths.DOCKER_DAEMON_JSON
    if not actual.get("exists"):
        return [Finding(host, "daemon.json", path, "present with " + ", ".join(sorted(owned)), "missing")]
    if actual.get("error"):
        return [Finding(host, "daemon.json", path, "a JSON object", actual["error"])]
    data = actual.get("data") or {}
    merged = declared_state.merge_json(data, owned)
    out = []
    for key, want in sorted(owned.items()):
        if key not in data or merged[key] != data[key]:
            out.append(Finding(host, "daemon.json", key, json.dumps(want, sort_keys=True),
                               json.dumps(data[key], sort_keys=True) if key in data else "absent"))
    problem = declared_state.cgroup_driver_problem(data)
    if problem and not any(f.item == "exec-opts" for f in out):
        out.append(Finding(host, "daemon.json", "exec-opts", json.dumps(owned.get("exec-opts")), problem))
    want_driver = declared_state.CGROUP_DRIVER
    if driver and driver != want_driver:
        out.append(Finding(host, "daemon.json", "docker's cgroup driver (docker info)", want_driver,
                           f"{driver}: the cgroup mitigation is not in effect (restart docker after fixing daemon.json)"))
    return out


def compare_directories(host: str, declared: dict[str, dict[str, str]], actual: dict[str, Any]) -> list[Finding]:
    """Folders the deploy creates (:func:`rigkit.render.declared_state.directories`): present, owner, mode."""
    out = []
    for path, want in sorted(declared.items()):
        st = actual.get(path)
        if st is None:
            out.append(Finding(host, "directory", path, f"present {want['user']}:{want['group']} {_mode(want['mode'])}",
                               "missing"))
            continue
        if _mode(st.get("mode")) != _mode(want["mode"]):
            out.append(Finding(host, "directory-mode", path, _mode(want["mode"]), _mode(st.get("mode"))))
        if (st.get("user"), st.get("group")) != (want["user"], want["group"]):
            out.append(Finding(host, "directory-owner", path, f"{want['user']}:{want['group']}",
                               f"{st.get('user')}:{st.get('group')}"))
    return out


def compare_accounts(host: str, declared: dict[str, dict[str, Any]], actual: dict[str, Any]) -> list[Finding]:
    """Accounts the deploy manages (:func:`rigkit.render.declared_state.accounts`) as pyinfra's
    ``server.group``/``server.user`` compare them: the primary group exists and is the user's, the
    supplementary groups (exactly, or at least, the declared), home and shell."""
    out = []
    for user, want in sorted(declared.items()):
        got = actual.get(user)
        if got is None:
            out.append(Finding(host, "account", user, "present" + (" (system)" if want.get("system") else ""), "missing"))
            continue
        groups = got.get("groups") or []
        primary, supplementary = (groups[0], groups[1:]) if groups else (None, [])
        if want.get("group"):
            if got.get("group_exists") is False:
                out.append(Finding(host, "account", f"group {want['group']}", "present", "missing"))
            if primary != want["group"]:
                out.append(Finding(host, "account", f"{user} primary group", want["group"], primary or "none"))
        wanted = set(want.get("groups") or [])
        if (set(supplementary) != wanted) if want.get("exact") else not wanted <= set(groups):
            out.append(Finding(host, "account", f"{user} groups", ("exactly " if want.get("exact") else "in ")
                               + ", ".join(sorted(wanted)), ", ".join(supplementary) or "none"))
        for key in ("home", "shell"):
            if want.get(key) and got.get(key) != want[key]:
                out.append(Finding(host, "account", f"{user} {key}", want[key], got.get(key) or "none"))
    return out


def compare_repo_packages(host: str, packages: list[str], installed: dict[str, str | None]) -> list[Finding]:
    """What ``pacman -Syu --needed`` installs (:data:`rigkit.render.declared_state.REPO_PACKAGES`):
    installed, at any version (the deploy does not upgrade an installed one)."""
    return [Finding(host, "package", p, "installed", "not installed") for p in declared_state.missing_packages(installed, packages)]


def compare_release_binary(host: str, sha256: str | None, binary: dict[str, Any]) -> list[Finding]:
    """llama-swap's executable is there and its marker names the pinned tarball (what
    :func:`rigkit.operations.release.release_binary` checks before it reinstalls)."""
    if not sha256:
        return []
    out = []
    if not binary.get("present"):
        out.append(Finding(host, "binary", paths.LLAMA_SWAP_BIN, "installed from the pinned tarball", "missing"))
    elif (binary.get("marker") or "") != sha256:
        out.append(Finding(host, "binary", paths.LLAMA_SWAP_BIN, f"from tarball sha256:{sha256[:12]}",
                           f"marker says {_short(binary.get('marker'))}" if binary.get("marker") else "no marker"))
    return out


def compare_mkinitcpio(host: str, loaded: dict[str, Any] | None) -> list[Finding]:
    """No ``kms`` hook in mkinitcpio's effective HOOKS (:class:`~rigkit.operations.facts.mkinitcpio.MkinitcpioHooks`,
    the deploy's own reading: the main file and the drop-ins as mkinitcpio v41 loads them); a preset
    naming its own config that holds kms or does not load (:func:`rigkit.common.mkinitcpio.preset_problem`;
    one without kms is clean), or a configuration that does not load, is a finding (the deploy refuses
    them); no ``/etc/mkinitcpio.conf``: nothing to check, as the deploy."""
    from rigkit.common.mkinitcpio import KMS, preset_problem, refusal

    if not loaded or not loaded.get("present"):
        return []
    item = f"{paths.MKINITCPIO_CONF} HOOKS (as mkinitcpio loads them)"
    want = "no kms hook (nouveau stays out of the initramfs)"
    if preset_problem(loaded) or loaded["error"]:
        return [Finding(host, "boot", item, want, refusal(loaded) or "")]
    if KMS in loaded["hooks"]:
        return [Finding(host, "boot", item, want, f"kms hook in effect: HOOKS=({' '.join(loaded['hooks'])})")]
    return []


def compare_legacy_backups(host: str, backups: dict[str, bool]) -> list[Finding]:
    """Each legacy unit file still on the host has its copy in
    :data:`rigkit.render.declared_state.LEGACY_BACKUP_DIR` (the deploy makes it before disabling)."""
    return [Finding(host, "legacy-unit", f"{unit} backup", f"copied to {declared_state.LEGACY_BACKUP_DIR}/", "no copy")
            for unit, backed in sorted(backups.items()) if not backed]


def compare_wheelhouse(host: str, wheels: dict[str, Any] | None, want: dict[str, str] | str | None) -> list[Finding]:
    """The agent's wheelhouse on the host (``/opt/rigkit/wheels``, ``wheels``: the probe's
    ``{"python": version, "files": FolderFiles}``) is ``want``, the wheelhouse this checkout builds
    for the host's Python (``{name: sha256}``, :func:`rigkit.drift.run.built_wheelhouse`: what the
    deploy syncs): the same files by sha256, root 0644. ``want`` a string: why it could not be built
    here (a ``warn``, not compared)."""
    if not wheels or not wheels.get("python"):
        return [Finding(host, "not-compared", paths.AGENT_DIR + "/wheels", "the agent's wheelhouse",
                        "the host has no python3")]
    if not isinstance(want, dict):
        return [Finding(host, "not-compared", paths.AGENT_DIR + "/wheels", f"built for Python {wheels['python']}",
                        f"cannot build it here ({(want or 'not built').splitlines()[0][:200]}); not compared")]
    diff = declared_state.wheel_differences(want, wheels.get("files"))
    if not any(diff.values()):
        return []
    parts = ([f"missing or different: {', '.join(diff['missing'])}"] if diff["missing"] else []) + \
        ([f"not ours: {', '.join(diff['extra'])}"] if diff["extra"] else []) + \
        ([f"not root 0644: {', '.join(diff['wrong'])}"] if diff["wrong"] else [])
    return [Finding(host, "agent-wheelhouse", paths.AGENT_DIR + "/wheels",
                    f"{len(want)} files built here for Python {wheels['python']}", "; ".join(parts))]


def compare_agent(host: str, agent: dict[str, Any]) -> list[Finding]:
    """``/opt/rigkit/venv/bin/rigkit-agent probe`` (``version`` when no lock is declared: drift's probe,
    :func:`rigkit.drift.probe.parse_agent`) must exit 0 (its venv's Python and rigkit still there)."""
    if agent.get("rc") == 0:
        return []
    why = agent.get("output") or ""
    return [Finding(host, "agent", paths.AGENT_BIN, "the host agent runs",
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
    for unit in decl.if_present:  # enabled and active when the host has it (the deploy's own test)
        props = units.get(unit)
        if _exists(props) and not (_enabled(props) and props.get("ActiveState") == "active"):
            out.append(Finding(host, "unit", unit, "enabled, active (present on the host)",
                               f"{props.get('UnitFileState') or 'unknown'}, {props.get('ActiveState')}"))
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


def compare_llama_swap_live(host: str, start: dict[str, Any], unit: dict[str, str] | None = None) -> list[Finding]:
    """llama-swap reads its config at start only: a config file changed after the running
    process started is not the live config (``ExecMainStartTimestamp`` vs the file's mtime, s).
    Only while ``llama-swap.service`` is active (``unit``: its ``systemctl show`` properties): a stopped
    one keeps its last start time, and the unit row already says it is not running."""
    started, mtime = start.get("started"), start.get("mtime")
    if (unit or {}).get("ActiveState") != "active":
        return []
    if started and mtime and mtime > started:
        return [Finding(host, "llama-swap-live", paths.LLAMA_SWAP_CONFIG, "the running llama-swap loaded the file",
                        f"file changed {mtime - started} s after llama-swap started: not loaded (llama-swap reads it at "
                        "start only, so it serves the config it started with)")]
    return []


def compare_models(host: str, lock_note: str | None, models: Any) -> list[Finding]:
    """Model files vs the lock and the verified records (on the host, by ``rigkit-agent probe``,
    :mod:`rigkit.host.modelcheck`): each reason a finding; no lock → one ``warn``; the agent does not
    run → one ``warn`` (its own ``agent`` finding counts)."""
    if lock_note:
        return [Finding(host, "model-lock", "lock", "a model lock for the inventory", lock_note)]
    if models is None:
        return []
    if models == "no-agent":
        return [Finding(host, "not-compared", "models", "checked by the host agent",
                        "the host agent does not run (kind agent); not checked")]
    out = []
    for name, reasons in sorted(models.items()):
        for reason in reasons:
            text = reason[len(name) + 2:] if reason.startswith(f"{name}: ") else reason
            out.append(Finding(host, "model", name, "as locked and recorded", text))
    return out


def without_pacman_unanswered(found: list[Finding], ignorepkg: dict[str, Any] | None) -> list[Finding]:
    """``found`` without the "not installed" of ``pacman -Q`` when pacman cannot read its configuration
    (``pacman-conf`` failed: ``pacman -Q`` then answers nothing for any package): the one ``pin-held``
    finding naming pacman's error (:func:`compare_pins`) says why, instead of every package reported
    missing."""
    if not (ignorepkg or {}).get("error"):
        return found
    return [f for f in found if not (f.actual == "not installed" and f.kind in ("package", "pin", "driver", "cuda"))]


def compare_host(decl: Declared, facts: dict[str, Any], diff: bool = False,
                 wheelhouse: dict[str, str] | str | None = None) -> list[Finding]:
    """Every comparison for one host's parsed probe (``facts``, :func:`rigkit.drift.probe.parse_probe`)
    against ``decl``; ``wheelhouse``: the agent's wheelhouse built here (:func:`compare_wheelhouse`'s
    ``want``), compared when the probe read the host's. Findings unmasked (module docstring)."""
    spec = decl.spec
    host = decl.host
    installed = facts.get("pacman") or {}
    smi = facts.get("smi") or parse_query("", 127)  # not read: NvidiaSmi's default
    kernel = facts.get("kernel") or {}
    out: list[Finding] = []
    out += compare_files(host, decl.files, facts.get("files", {}), diff=diff)
    out += compare_files(host, decl.uploads, facts.get("files", {}), diff=diff)
    out += compare_directories(host, decl.directories, facts.get("dirs") or {})
    out += compare_accounts(host, decl.accounts, facts.get("accounts") or {})
    out += compare_repo_packages(host, decl.repo_packages, installed)
    out += compare_release_binary(host, decl.release_sha256, facts.get("llama_swap_binary") or {})
    out += compare_mkinitcpio(host, facts.get("mkinitcpio"))
    out += compare_legacy_backups(host, facts.get("legacy_backup") or {})
    if "wheels" in facts:
        out += compare_wheelhouse(host, facts.get("wheels"), wheelhouse)
    out += compare_secrets(host, decl.secrets, facts.get("secrets", {}), decl.token_source)
    out += compare_pins(host, spec.pacman_pins, installed, facts.get("ignorepkg"))
    driver = declared_state.pinned_driver(spec)
    out += compare_driver(host, driver, spec.driver_flavour, installed, kernel, smi)
    out += compare_cuda(host, spec.cuda_version, installed, facts.get("smi_cuda"), smi.get("state") == "ok")
    out += compare_reboot(host, declared_state.reboot_reasons(kernel, facts.get("dkms") or [], driver,
                                                          spec.driver_flavour))
    out += compare_power(host, spec.gpu_power_limit_w, smi)
    out += compare_daemon_json(host, declared_state.DAEMON_JSON_KEYS, facts.get("daemon_json") or {},
                               facts.get("docker_cgroup_driver"))
    out += compare_agent(host, facts.get("agent") or {})
    out += compare_units(host, decl, facts.get("units") or {})
    out += compare_llama_swap_live(host, facts.get("llama_swap_start") or {},
                                   (facts.get("units") or {}).get("llama-swap.service"))
    out = name_live_backup(out, facts.get("holds") or {})
    out = without_pacman_unanswered(out, facts.get("ignorepkg"))
    out += compare_models(host, decl.lock_note, facts.get("models"))
    out += compare_holds(host, facts.get("holds") or {})
    out = apply_holds(host, out, facts.get("holds") or {})
    out += compare_generation(host, facts.get("generations") or {})
    out += compare_rig_lock(host, facts.get("rig_lock") or {})
    out += compare_power_healer(host, (facts.get("power_healer") or {}).get("data"))
    return apply_window(host, out, (facts.get("window") or {}).get("data"))


def name_live_backup(findings: list[Finding], holds: dict[str, Any]) -> list[Finding]:
    """A live llama-swap config whose content is not the declared one (edited by hand, or not yet
    activated): its finding says what the deploy does with it — back it up as
    ``<live>.bak-<UTC stamp>`` and activate the declared one. Under a hold it is left to
    :func:`apply_holds`. ``findings`` is changed in place and returned."""
    from rigkit.common.holds import LLAMA_SWAP

    if isinstance((holds.get("data") or {}).get(LLAMA_SWAP), dict):
        return findings
    for f in findings:
        if f.kind == "file" and f.item == paths.LLAMA_SWAP_CONFIG and f.actual != "missing":
            f.actual += (f" — the deploy replaces it, keeping this one as {paths.LLAMA_SWAP_CONFIG}.bak-<UTC stamp> "
                         f"(`{hints.command('wire-in', '--show', host=f.host)}` diffs them)")
    return findings


#: The files each hold keeps as its rollback left them (:mod:`rigkit.common.holds`): the wire-in's the
#: live llama-swap config and what an activation would install in its place.
HELD_FILES = {"llama-swap": (paths.LLAMA_SWAP_CONFIG, paths.LLAMA_SWAP_NEXT)}


def apply_holds(host: str, findings: list[Finding], holds: dict[str, Any]) -> list[Finding]:
    """While a hold stands, the findings on the files it keeps (:data:`HELD_FILES`: content, mode,
    owner) are ``hold``, not ``drift``: the host is as the operator rolled it back and the deploy
    leaves them, so neither the exit code nor the repair line counts them; each says which hold keeps
    it and the command that releases it. ``findings`` is changed in place and returned."""
    data = holds.get("data") or {}
    for name, kept in HELD_FILES.items():
        if not isinstance(data.get(name), dict):
            continue
        release = hints.command("wire-in", "--release", host=host)
        for f in findings:
            if f.item in kept and f.kind in ("file", "file-mode", "file-owner"):
                f.severity = HELD
                f.actual = f"{f.actual} — kept by the {name} hold: the deploy leaves it until `{release}`"
    return findings


def generation_hold(facts: dict[str, Any]) -> dict[str, Any] | None:
    """The generation hold in the probe's ``holds`` (``{"generation": n, ...}``) or None."""
    from rigkit.common.holds import GENERATION

    hold = ((facts.get("holds") or {}).get("data") or {}).get(GENERATION)
    return hold if isinstance(hold, dict) and hold.get("generation") else None


def compare_generation(host: str, index: dict[str, Any]) -> list[Finding]:
    """The generations index (``/var/lib/rigkit/generations/index.json``): an ``error`` when it cannot
    be read. What it says otherwise is state, not a finding (:func:`rigkit.drift.run.spec_is_generation`)."""
    if index.get("error"):
        return [Finding(host, "unreadable", f"{paths.GENERATIONS_DIR}/index.json", "a JSON object", index["error"])]
    return []


def compare_rig_lock(host: str, state: dict[str, Any]) -> list[Finding]:
    """The host lock (``/var/lib/rigkit/rig.lock``, :mod:`rigkit.host.lock`): who holds it now (a
    ``warn``: something is changing the serving state), or the record a holder that died left behind
    (a ``warn``: the next command reclaims it; what it did may be half done)."""
    from rigkit.common.lock import describe

    if state.get("held"):
        return [Finding(host, "lock", paths.RIG_LOCK, "free", f"held by {describe(state.get('holder'))}")]
    if state.get("stale"):
        return [Finding(host, "lock", paths.RIG_LOCK, "free",
                        f"free, but {describe(state['stale'])} died holding it (the next command reclaims it; "
                        "check what it left half done)")]
    return []


def compare_power_healer(host: str, record: Any) -> list[Finding]:
    """The power-limit healer's record (``/var/lib/rigkit/power.json``, shape in :mod:`rigkit.host.power`):
    its last re-apply — someone's ``nvidia-smi -pl``, a driver reload — as a ``warn``
    (kind ``power-healed``): the limit is back (or the ``power`` finding says it is not), but the
    operator should know it was changed under the rig. None before any re-apply."""
    last = record.get("last_reapply") if isinstance(record, dict) else None
    if not isinstance(last, dict):
        return []

    def w(value: Any) -> str:
        return f"{value:g} W" if isinstance(value, (int, float)) else "unknown"

    outcome = (f"put back {w(last.get('to_w'))} (enforced {w(last.get('enforced_w'))})" if last.get("ok")
               else f"could not put back {w(last.get('to_w'))}: {last.get('message')}")
    return [Finding(host, "power-healed", f"GPU {record.get('index', 0)} power limit",
                    f"{w(record.get('declared_w'))}, never changed under the rig",
                    f"at {last.get('at', '?')} the healer found {w(last.get('from_w'))} and {outcome}; "
                    f"{record.get('reapplies', 1)} re-apply(s) in all")]


def window_open(facts: dict[str, Any]) -> bool:
    """True when the probe found an open window journal (:func:`rigkit.common.journal.is_open`)."""
    from rigkit.common.journal import is_open

    return is_open((facts.get("window") or {}).get("data"))


def apply_window(host: str, findings: list[Finding], journal: dict | None) -> list[Finding]:
    """While a window is open: report it (``warn``), and mark the findings it explains — its
    tenant swapped in, the proxy down, the paused timers, a sweep's .env, a power-limit sweep's limit — as ``expected`` (not drift), from
    :func:`rigkit.common.journal.expected_deviations`. Without an open window, ``findings`` unchanged."""
    from rigkit.common.journal import expected_deviations, is_open

    if not is_open(journal):
        return findings
    deviations = expected_deviations(journal)
    explained = {d.split()[0]: d for d in deviations}
    power = next((d for d in deviations if d.startswith("GPU ") and " power limit: " in d), None)
    for f in findings:
        if f.kind in ("unit", "file") and f.item in explained:
            f.severity = EXPECTED
            f.actual = f"{f.actual} — {explained[f.item].split(': ', 1)[-1]}"
        elif f.kind == "power" and power and f.item.startswith(power.split(" power limit: ")[0] + " "):
            f.severity = EXPECTED  # a power-limit sweep's limit, put back by its restore
            f.actual = f"{f.actual} — {power.split(': ', 1)[-1]}"
    plan = journal.get("plan") or {}
    findings.append(Finding(host, "window", f"window {journal.get('id', '?')}",
                            "steady state (no window open)",
                            f"{journal.get('state')}: tenant {plan.get('tenant', '?')}; expected meanwhile: "
                            + ("; ".join(deviations) or "nothing yet")))
    return findings


def compare_holds(host: str, holds: dict[str, Any]) -> list[Finding]:
    """A hold recorded by a manual rollback (``/var/lib/rigkit/holds.json``, written by
    :mod:`rigkit.host.activate`): the declared llama-swap config is held back until released
    (DESIGN.md "Staged vs live"). One finding per hold, naming the members it holds back and
    where the held-back config was kept."""
    from rigkit.common.holds import GENERATION as GENERATION_HOLD
    from rigkit.common.holds import rolled_back

    if holds.get("error"):
        return [Finding(host, "unreadable", paths.HOLDS_FILE, "a JSON object", holds["error"])]
    out = []
    for name, hold in sorted((holds.get("data") or {}).items()):
        if not isinstance(hold, dict):
            continue
        if name == GENERATION_HOLD:  # rigkit rollback's: the host is compared with the held generation
            out.append(Finding(host, "hold", f"generation {hold.get('generation')}", "the spec applied (no hold)",
                               f"held at generation {hold.get('generation')} (rollback to {hold.get('rolled_back_to')} "
                               f"by {hold.get('by', '?')} at {hold.get('since', '?')}): compared with that generation, "
                               f"not the spec; the deploy keeps it until `{hints.command('rollback', '--release', host=host)}`"))
            continue
        out.append(Finding(host, "hold", name, "the declared config active (no hold)",
                           f"held since {hold.get('since', '?')} by {hold.get('by', '?')}; {rolled_back(hold)}; "
                           f"the deploy does not activate the declared config until "
                           f"`{hints.command('wire-in', '--release', host=host)}`"))
    return out
