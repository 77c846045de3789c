"""What the probe sees of each operation of the deploy: the table ``rigkit drift`` stands on.

Every operation that ``roles/`` adds (a call with ``name=``, :func:`deploy_operations` reads them
from the source, so a new one is seen without running anything) has exactly one
:class:`Coverage` row in :data:`COVERAGE`: how drift sees a breakage of what it manages —

- ``probe``: the probe reports it; ``breakage`` is a shell command that breaks it on a converged
  sandbox host (``restore`` puts it back), ``findings`` the ``(kind, item)`` the probe reports then
  (``fnmatch`` patterns), ``plan`` the plan rows (``"Role | op"``, patterns) ``pyinfra --dry`` shows
  for it: the two must agree (benchmarks/drift_coverage.py builds the whole table on a sandbox
  host, tests/harness/test_drift.py keeps a batched sample);
- ``gated``: runs only after another operation changed (``_if``), never on its own: that operation's
  row covers it;
- ``outside``: findings the deploy never acts on, or operations whose change is not the rig's
  (a pending reboot, rigkit's own generation record): outside the equivalence, each says why;
- ``plan-only``: the probe cannot see it; ``rigkit drift --plan`` does (listed in ``--help``).

tests/drift/test_coverage.py fails when an operation has no row, a row names no operation, or
a ``probe`` row names a finding kind the probe does not produce.
"""

from __future__ import annotations

import ast
import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

PROJECT = Path(__file__).resolve().parents[2]
HOW = ("probe", "gated", "outside", "plan-only")

#: Held around a batch of breakages on a sandbox host: the agent's timers (keeper, watchdog, the
#: power healer) stand down while the host lock is held, so nothing puts a breakage back meanwhile.
#: Let go by stopping :data:`LOCK_UNIT` (the agent's ``lock hold`` releases on SIGTERM); the harness
#: waits for :data:`LOCK_WHAT` to hold it, not merely for the lock to be held.
LOCK_UNIT = "rk-coverage-hold.service"
LOCK_WHAT = "drift coverage"
LOCK_HOLDER = (f"systemd-run --unit={LOCK_UNIT} --collect sh -c "
               f"'sleep 600 | /opt/rigkit/venv/bin/rigkit-agent lock hold --what \"{LOCK_WHAT}\" --lease t-cov'")


@dataclass(frozen=True)
class Coverage:
    """One operation of ``roles/`` and what drift reports when what it manages breaks.

    + role: the module (``roles/<role>.py``); op: its ``name=`` as written, ``{...}`` for an f-string field
    + how: one of :data:`HOW`; note: why (for ``gated``/``outside``/``plan-only``) or what is compared
    + breakage/restore: shell commands run as root on a converged sandbox host (``probe`` rows)
    + findings: ``(kind, item)`` fnmatch patterns of the probe's ``drift`` findings after ``breakage``
    + plan: ``"Role | op"`` fnmatch patterns of the plan rows after ``breakage``
    + alone: True when the breakage cannot share a batch (it restarts or reloads something)
    + seen_with: for a ``probe`` row without a breakage of its own, the op (same role) whose breakage
      breaks what this one manages too (both show in the plan)
    """

    role: str
    op: str
    how: str
    note: str
    breakage: str | None = None
    restore: str | None = None
    findings: tuple[tuple[str, str], ...] = ()
    plan: tuple[str, ...] = ()
    alone: bool = False
    seen_with: str | None = None

    @property
    def op_pattern(self) -> str:
        """``op`` as an fnmatch pattern: each ``{...}`` field ``*``, every other character literal
        (``[options]`` stays brackets); it matches the rendered name."""
        out, depth = [], 0
        for ch in self.op:
            if ch == "{":
                depth += 1
                if depth == 1:
                    out.append("*")
            elif ch == "}":
                depth -= 1
            elif depth == 0:
                out.append({"[": "[[]", "]": "[]]", "*": "[*]", "?": "[?]"}.get(ch, ch))  # literal in fnmatch
        return "".join(out)


def _unit(name: str) -> str:
    return f"/etc/systemd/system/{name}"


def _chmod(path: str, bad: str, good: str, kind: str, role_op: str) -> dict:
    return {"breakage": f"chmod {bad} {path}", "restore": f"chmod {good} {path}",
            "findings": ((kind, path),), "plan": (role_op,)}


def _append(path: str, role_op: str, kind: str = "file") -> dict:
    """A comment line appended to a config file, the copy kept in /root/coverage/."""
    keep = "/root/coverage" + path
    return {"breakage": f"mkdir -p {keep.rsplit('/', 1)[0]} && cp -a {path} {keep} && echo '# drift coverage' >> {path}",
            "restore": f"cp -a {keep} {path}", "findings": ((kind, path),), "plan": (role_op,)}


C = Coverage
ENV = "/opt/rigkit/hyperqwen/.env"
COVERAGE: tuple[Coverage, ...] = (
    # roles/preflight.py and roles/generation.py add no operation that changes the rig but the record
    C("generation", "RECORD_OP", "outside",
      "rigkit's own record of the host, not the rig; drift's generation line says when the spec is not what it recorded"),
    C("generation", "BISECT_END_OP", "outside",
      "rigkit's own journal of an interrupted bisect, not the rig; runs only when the deploy puts such a host back"),
    # pins
    C("pins", "Hold the pinned packages: rigkit's pins file", "probe", "pacman-conf IgnorePkg holds every pin",
      breakage="cp -a /etc/rigkit/pacman-pins.conf /root/pins.conf.cov && echo '# emptied' > /etc/rigkit/pacman-pins.conf",
      restore="cp -a /root/pins.conf.cov /etc/rigkit/pacman-pins.conf", findings=(("pin-held", "*"),),
      plan=("Pins | Hold the pinned packages: rigkit's pins file*",)),
    C("pins", "Hold the pinned packages: Include rigkit's pins file from [options]", "probe",
      "pacman-conf IgnorePkg holds every pin",
      breakage="cp -a /etc/pacman.conf /root/pacman.conf.cov && sed -i 's|^Include = /etc/rigkit/pacman-pins.conf|#&|' /etc/pacman.conf",
      restore="cp -a /root/pacman.conf.cov /etc/pacman.conf", findings=(("pin-held", "*"),),
      plan=("Pins | Hold the pinned packages: Include*",)),
    C("pins", "Install docker, compose, buildx and the NVIDIA container toolkit (pacman -Syu --needed)", "probe",
      "each repo package installed (any version)",
      breakage="pacman -Rdd --noconfirm docker-buildx >/dev/null",
      restore="pacman -Udd --noconfirm /var/cache/pacman/pkg/docker-buildx-*.pkg.tar.zst >/dev/null",
      findings=(("package", "docker-buildx"),), plan=("Pins | Install docker, compose, buildx*",)),
    C("pins", "Install the pinned packages from the archive", "probe", "each pin at its full version",
      breakage="pacman -Udd --noconfirm {archive}/n/nvidia-utils/nvidia-utils-610.60.02-1-x86_64.pkg.tar.zst >/dev/null",
      restore="pacman -Udd --noconfirm /var/cache/pacman/pkg/nvidia-utils-610.57.04-1-x86_64.pkg.tar.zst >/dev/null",
      findings=(("pin", "nvidia-utils"), ("driver", "pacman -Q nvidia-utils"), ("driver", "nvidia-smi")),
      plan=("Pins | Install the pinned packages from the archive", "Power limit | Set the GPU power limit to *"),
      alone=True),
    # agent
    C("agent", "Create /opt/rigkit", "probe", "folder owner and mode",
      **_chmod("/opt/rigkit", "700", "755", "directory-mode", "Host agent | Create /opt/rigkit")),
    C("agent", "Install the host config (/etc/rigkit/host.json)", "probe", "content, mode, owner",
      **_chmod("/etc/rigkit/host.json", "600", "644", "file-mode", "Host agent | Install the host config*")),
    C("agent", "Sync the agent wheelhouse", "probe",
      "the wheels' sha256 against the wheelhouse this checkout builds for the host's Python",
      breakage="cp -a /opt/rigkit/wheels/.complete /root/complete.cov && echo '# cov' >> /opt/rigkit/wheels/.complete",
      restore="cp -a /root/complete.cov /opt/rigkit/wheels/.complete",
      findings=(("agent-wheelhouse", "/opt/rigkit/wheels"),), plan=("Host agent | Sync the agent wheelhouse",)),
    C("agent", "Create the agent venv", "gated",
      "_if the venv's python is missing: the plan shows it as conditional, never as a change; the probe's "
      "`rigkit-agent probe` (kind agent, the agent's health) reports that venv"),
    C("agent", "Install the agent from the wheelhouse (no index)", "gated", "_if the wheelhouse or the venv changed"),
    C("agent", "Reload systemd for the agent's units", "gated", "_if a unit file of the agent changed"),
    C("agent", "Install {stem}.{kind}", "probe", "content, mode, owner of each agent unit",
      **_chmod(_unit("rigkit-keeper.timer"), "600", "644", "file-mode", "Host agent timers | Install rigkit-keeper.timer")),
    C("agent", "Enable and start {stem}.timer", "probe", "timer enabled and active",
      breakage="systemctl disable --now hyperqwen-watchdog.timer",
      restore="systemctl enable --now hyperqwen-watchdog.timer",
      findings=(("unit", "hyperqwen-watchdog.timer"),), plan=("Host agent timers | Enable and start hyperqwen-watchdog.timer",)),
    # metrics (issue 66: only when metrics_textfile_dir is set, as the sandbox inventory sets it)
    C("metrics", "Create the metrics textfile folder", "probe", "folder owner and mode",
      **_chmod("/var/lib/prometheus/node-exporter", "700", "755", "directory-mode",
               "Metrics | Create the metrics textfile folder")),
    C("metrics", "Install node_exporter's arguments", "probe", "content, mode, owner",
      **_append("/etc/conf.d/prometheus-node-exporter", "Metrics | Install node_exporter's arguments")),
    C("metrics", "Enable and start prometheus-node-exporter", "probe", "enabled and active",
      breakage="systemctl disable --now prometheus-node-exporter.service 2>/dev/null",
      restore="systemctl enable --now prometheus-node-exporter.service 2>/dev/null",
      findings=(("unit", "prometheus-node-exporter.service"),),
      plan=("Metrics | Enable and start prometheus-node-exporter",)),
    C("metrics", "Restart prometheus-node-exporter for its new arguments", "gated", "_if its arguments changed"),
    # boot
    C("boot", "Blacklist nouveau", "probe", "content, mode, owner",
      **_append("/etc/modprobe.d/rigkit-nouveau.conf", "Boot | Blacklist nouveau")),
    C("boot", "Keep the kms hook out of mkinitcpio's HOOKS (rigkit's drop-in)", "probe",
      "no kms in the effective HOOKS (the op's own fact: mkinitcpio's loading)",
      breakage="mv /etc/mkinitcpio.conf.d/zz-rigkit-no-kms.conf /root/no-kms.conf.cov",
      restore="mv /root/no-kms.conf.cov /etc/mkinitcpio.conf.d/zz-rigkit-no-kms.conf",
      findings=(("boot", "/etc/mkinitcpio.conf HOOKS (as mkinitcpio loads them)"),),
      plan=("Boot | Keep the kms hook out*",)),
    C("boot", "Reboot gate: the running kernel and driver are the installed ones", "outside",
      "a pending reboot (kind reboot): the deploy reboots only with reboot: true, else it stops; not a change the "
      "plan can show"),
    # docker
    C("docker", "Merge the nvidia runtime and the cgroup mitigation into daemon.json", "probe", "rigkit's keys, as JSON",
      breakage="cp -a /etc/docker/daemon.json /root/daemon.json.cov && python3 -c \"import json; p='/etc/docker/daemon.json'; "
               "d=json.load(open(p)); d.pop('runtimes'); json.dump(d, open(p, 'w'), indent=4)\"",
      restore="cp -a /root/daemon.json.cov /etc/docker/daemon.json", findings=(("daemon.json", "runtimes"),),
      plan=("Docker | Merge the nvidia runtime*",)),
    C("docker", "Enable and start docker", "probe", "docker.service enabled and active",
      breakage="systemctl disable docker.service 2>/dev/null", restore="systemctl enable docker.service 2>/dev/null",
      findings=(("unit", "docker.service"),), plan=("Docker | Enable and start docker",)),
    C("docker", "Restart docker for the new daemon.json (under the host lock)", "gated", "_if daemon.json changed"),
    C("docker", "Enable and start nvidia-persistenced", "probe", "enabled and active",
      breakage="systemctl disable nvidia-persistenced.service 2>/dev/null",
      restore="systemctl enable nvidia-persistenced.service 2>/dev/null",
      findings=(("unit", "nvidia-persistenced.service"),), plan=("Docker | Enable and start nvidia-persistenced",)),
    C("docker", "Put {spec.operator_user} in the docker group", "probe", "the operator in docker (append)",
      breakage="gpasswd -d rig docker >/dev/null", restore="usermod -aG docker rig",
      findings=(("account", "rig groups"),), plan=("Docker | Put rig in the docker group",)),
    C("docker", "Enable the CDI refresh the toolkit ships", "probe",
      "nvidia-cdi-refresh.path enabled and active when the toolkit installed it",
      breakage="printf '[Path]\\nPathExists=/dev/null\\n[Install]\\nWantedBy=multi-user.target\\n' > "
               "/usr/lib/systemd/system/nvidia-cdi-refresh.path && systemctl daemon-reload",
      restore="systemctl disable --now nvidia-cdi-refresh.path 2>/dev/null; rm -f /usr/lib/systemd/system/nvidia-cdi-refresh.path"
              " && systemctl daemon-reload",
      findings=(("unit", "nvidia-cdi-refresh.path"),), plan=("Docker | Enable the CDI refresh*",), alone=True),
    C("docker", "Pull the {name} image by its locked digest", "plan-only",
      "an image the engine no longer has (docker rmi): the plan shows its pull; the probe lists no images — a "
      "member that runs it pulls it again, by the same digest"),
    # power
    C("power", "Install gpu-power-limit.service", "probe", "content, mode, owner",
      **_chmod(_unit("gpu-power-limit.service"), "600", "644", "file-mode", "Power limit | Install gpu-power-limit.service")),
    C("power", "Reload systemd for gpu-power-limit.service", "gated", "_if the unit changed"),
    C("power", "Enable gpu-power-limit.service", "probe", "enabled",
      breakage="systemctl disable gpu-power-limit.service 2>/dev/null",
      restore="systemctl enable gpu-power-limit.service 2>/dev/null",
      findings=(("unit", "gpu-power-limit.service"),), plan=("Power limit | Enable gpu-power-limit.service",)),
    C("power", "Set the GPU power limit to {spec.gpu_power_limit_w} W", "probe", "power.limit and enforced.power.limit",
      breakage="nvidia-smi -pl 300 >/dev/null", restore="nvidia-smi -pl 420 >/dev/null",
      findings=(("power", "GPU 0 power.limit"), ("power", "GPU 0 enforced.power.limit")),
      plan=("Power limit | Set the GPU power limit to *",)),
    # secrets
    C("secrets", "Create the {user} group", "probe",
      "not broken: the group exists (it is llama-swap's primary group, so it cannot be removed alone on a sandbox "
      "host; the probe reads it with `getent group`)"),
    C("secrets", "Create the {user} system user", "probe", "present, primary group, exactly its groups, home, shell",
      breakage="usermod -s /bin/sh llama-swap", restore="usermod -s /usr/bin/nologin llama-swap",
      findings=(("account", "llama-swap shell"),), plan=("Secrets | Create the llama-swap system user",)),
    C("secrets", "Create /etc/rigkit/secrets (root:llama-swap 0750)", "probe", "owner and mode",
      **_chmod("/etc/rigkit/secrets", "755", "750", "secret-mode", "Secrets | Create /etc/rigkit/secrets*")),
    C("secrets", "Generate HyperQwen's VLLM_API_KEY once on the host", "probe", "presence, owner, mode (never content)",
      **_chmod("/etc/rigkit/secrets/hyperqwen.env", "644", "640", "secret-mode", "Secrets | Generate HyperQwen's*")),
    C("secrets", "Install the HF token from the control machine's {token.source}", "probe",
      "owner, mode; content by sha256 when the token is at hand",
      **_chmod("/etc/rigkit/secrets/hf.env", "644", "600", "secret-mode", "Secrets | Install the HF token*")),
    # hyperqwen
    C("hyperqwen", "Create HyperQwen's compose directory", "probe", "folder owner and mode",
      **_chmod("/opt/rigkit/hyperqwen", "700", "755", "directory-mode", "HyperQwen | Create HyperQwen's compose directory")),
    C("hyperqwen", "Create HyperQwen's MODELS_DIR", "probe", "folder owner and mode",
      **_chmod("/srv/models/hyperqwen", "700", "755", "directory-mode", "HyperQwen | Create HyperQwen's MODELS_DIR")),
    C("hyperqwen", "Install HyperQwen's compose.yaml", "probe", "content, mode, owner",
      **_append("/opt/rigkit/hyperqwen/compose.yaml", "HyperQwen | Install HyperQwen's compose.yaml")),
    C("hyperqwen", "Install HyperQwen's .env", "probe", "content, mode, owner",
      breakage=f"chmod 0644 {ENV} && chown root:root {ENV}", restore=f"chown root:llama-swap {ENV} && chmod 0640 {ENV}",
      findings=(("file-mode", ENV), ("file-owner", ENV)), plan=("HyperQwen | Install HyperQwen's .env",)),
    C("hyperqwen", "Install hyperqwen.service (for windows, never enabled)", "probe", "content, mode, owner",
      **_append(_unit("hyperqwen.service"), "HyperQwen | Install hyperqwen.service*")),
    C("hyperqwen", "Reload systemd for hyperqwen.service", "gated", "_if the unit changed"),
    # models
    C("models", "Create /var/lib/rigkit", "probe", "folder owner and mode",
      **_chmod("/var/lib/rigkit", "700", "755", "directory-mode", "Models | Create /var/lib/rigkit")),
    C("models", "Install the model lock", "probe", "the lock beside the inventory, byte for byte; mode, owner",
      **_chmod("/var/lib/rigkit/models.lock.json", "600", "644", "file-mode", "Models | Install the model lock")),
    C("models", "Fetch and verify model {name}", "probe", "each file against the lock and the verified record "
      "(size and mtime; sha256 with --deep)",
      breakage="cp -a /srv/models/hyperqwen/Qwen3.8-27B-W4A16-AutoRound/model-00002-of-00002.safetensors /root/model.cov "
               "&& truncate -s 100 /srv/models/hyperqwen/Qwen3.8-27B-W4A16-AutoRound/model-00002-of-00002.safetensors",
      restore="cp -a /root/model.cov /srv/models/hyperqwen/Qwen3.8-27B-W4A16-AutoRound/model-00002-of-00002.safetensors",
      findings=(("model", "hyperqwen"),),
      plan=("Models | Fetch and verify model hyperqwen", "Models | Run HyperQwen's prepare*")),
    C("models", "Run HyperQwen's prepare (NO_DOWNLOAD=1) and record its files", "probe",
      "a prepared model's files against its record (kind model)", seen_with="Fetch and verify model {name}"),
    # legacy
    C("legacy", "Create the legacy-unit backup folder", "gated", "only when a legacy unit file is on the host: the "
      "legacy rows cover it"),
    C("legacy", "Back up {unit} to {BACKUP_DIR}", "probe", "a legacy unit file on the host has its copy",
      breakage="printf '[Service]\\nExecStart=/bin/sleep infinity\\n[Install]\\nWantedBy=multi-user.target\\n' > "
               "/etc/systemd/system/strata.service && systemctl daemon-reload",
      restore="rm -f /etc/systemd/system/strata.service && systemctl daemon-reload",
      findings=(("legacy-unit", "strata.service backup"),),
      plan=("Legacy and operator units | Back up strata.service to *", "Legacy and operator units | Create the legacy-unit*"),
      alone=True),
    C("legacy", "Stop and disable legacy {unit}", "probe", "a legacy unit enabled or active",
      breakage="printf '[Service]\\nExecStart=/bin/sleep infinity\\n[Install]\\nWantedBy=multi-user.target\\n' > "
               "/etc/systemd/system/strata.service && mkdir -p /var/lib/rigkit/legacy-units && "
               "cp -a /etc/systemd/system/strata.service /var/lib/rigkit/legacy-units/ && systemctl daemon-reload && "
               "systemctl enable --now strata.service 2>/dev/null",
      restore="systemctl disable --now strata.service 2>/dev/null; rm -rf /etc/systemd/system/strata.service "
              "/var/lib/rigkit/legacy-units && systemctl daemon-reload",
      findings=(("legacy-unit", "strata.service"),),
      plan=("Legacy and operator units | Stop and disable legacy strata.service",
            "Legacy and operator units | Create the legacy-unit*"), alone=True),
    C("legacy", "Install the operator's {name}", "probe", "content, mode, owner",
      **_chmod(_unit("agent-sync.timer"), "600", "644", "file-mode", "Legacy and operator units | Install the operator's agent-sync.timer")),
    C("legacy", "Reload systemd for the operator's units", "gated", "_if an operator unit changed"),
    C("legacy", "Enable and start the operator's {name}", "probe", "the operator's timers enabled and active",
      breakage="systemctl disable --now agent-sync.timer 2>/dev/null",
      restore="systemctl enable --now agent-sync.timer 2>/dev/null",
      findings=(("unit", "agent-sync.timer"),),
      plan=("Legacy and operator units | Enable and start the operator's agent-sync.timer",)),
    # llama-swap
    C("llama_swap", "Install llama-swap {ls.version} from its pinned release tarball", "probe",
      "the executable present, its marker naming the pinned tarball",
      breakage="cp -a /usr/local/lib/rigkit/llama-swap.sha256 /root/marker.cov && echo 0 > /usr/local/lib/rigkit/llama-swap.sha256",
      restore="cp -a /root/marker.cov /usr/local/lib/rigkit/llama-swap.sha256",
      findings=(("binary", "/usr/local/bin/llama-swap"),), plan=("llama-swap | Install llama-swap * from its pinned*",)),
    C("llama_swap", "Create /etc/llama-swap", "probe", "folder owner and mode",
      **_chmod("/etc/llama-swap", "755", "750", "directory-mode", "llama-swap | Create /etc/llama-swap")),
    C("llama_swap", "Install the staged llama-swap config for review", "probe", "content, mode, owner",
      **_append("/etc/llama-swap/config.staged.yaml", "llama-swap | Install the staged llama-swap config*")),
    C("llama_swap", "Upload the declared live llama-swap config for activation", "probe",
      "the staging copy: content, mode, owner",
      **_append("/var/lib/rigkit/llama-swap/config.next.yaml", "llama-swap | Upload the declared live*")),
    C("llama_swap", "Install llama-swap.service", "probe", "content, mode, owner",
      **_chmod(_unit("llama-swap.service"), "600", "644", "file-mode", "llama-swap | Install llama-swap.service")),
    C("llama_swap", "Reload systemd for llama-swap.service", "gated", "_if the unit changed"),
    C("llama_swap", "Enable llama-swap", "probe", "enabled",
      breakage="systemctl disable llama-swap.service 2>/dev/null", restore="systemctl enable llama-swap.service 2>/dev/null",
      findings=(("unit", "llama-swap.service"),), plan=("llama-swap | Enable llama-swap",)),
    C("llama_swap", "Activate the declared live llama-swap config (on the host)", "probe",
      "the live config's content, mode, owner; a file newer than the running proxy",
      breakage="cp -a /etc/llama-swap/config.yaml /root/config.cov && echo '# drift coverage' >> /etc/llama-swap/config.yaml",
      restore="cp -a /root/config.cov /etc/llama-swap/config.yaml",
      findings=(("file", "/etc/llama-swap/config.yaml"), ("llama-swap-live", "/etc/llama-swap/config.yaml")),
      plan=("llama-swap | Activate the declared live*",)),
    C("llama_swap", "Restart llama-swap for its new unit or binary, a docker restart or new model files, through the activation path",
      "gated", "_if the unit, the binary, docker or a model's files changed"),
    C("llama_swap", "llama-swap is running", "probe", "active",
      breakage="systemctl stop llama-swap.service", restore="systemctl start llama-swap.service",
      findings=(("unit", "llama-swap.service"),), plan=("llama-swap | llama-swap is running",), alone=True),
)

#: Shown by ``rigkit drift --help``: what only ``--plan`` sees.
PLAN_ONLY = tuple(c for c in COVERAGE if c.how == "plan-only")


def plan_only_help() -> str:
    """The ``--help`` lines naming each ``plan-only`` operation (or saying there is none)."""
    if not PLAN_ONLY:
        return ("none: every operation that can change the host is seen by the probe; --plan is the "
                "deploy's own second opinion (operations gated on another's change never show in it)")
    return "\n".join(f"- {c.role}: {c.op} ({c.note})" for c in PLAN_ONLY)


class Operation(NamedTuple):
    """One operation call of ``roles/``: ``role`` (module), ``title`` (its ``@deploy`` title),
    ``name`` (as written), ``gated`` (it has an ``_if``)."""

    role: str
    title: str
    name: str
    gated: bool


def deploy_operations(roles_dir: Path | None = None) -> list[Operation]:
    """Every operation call in ``roles/*.py`` with a ``name=`` (:class:`Operation`); an f-string
    name keeps its fields as ``{expr}``, a name that is a variable its variable's name. Read from
    the source (``ast``), nothing is run."""
    roles_dir = roles_dir or PROJECT / "roles"
    out: list[Operation] = []
    for path in sorted(roles_dir.glob("*.py")):
        if path.stem == "__init__":
            continue
        tree = ast.parse(path.read_text())
        for fn in tree.body:
            if not isinstance(fn, ast.FunctionDef):
                continue
            title = next((d.args[0].value for d in fn.decorator_list if isinstance(d, ast.Call)
                          and getattr(d.func, "id", "") == "deploy" and d.args and isinstance(d.args[0], ast.Constant)), None)
            if title is None:
                continue
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                for kw in node.keywords:
                    if kw.arg != "name":
                        continue
                    v = kw.value
                    if isinstance(v, ast.Constant):
                        name = str(v.value)
                    elif isinstance(v, ast.JoinedStr):
                        name = "".join(str(p.value) if isinstance(p, ast.Constant) else "{" + ast.unparse(p.value) + "}"
                                       for p in v.values)
                    else:
                        name = ast.unparse(v)
                    out.append(Operation(path.stem, title, name, any(k.arg == "_if" for k in node.keywords)))
    return out


def row_for(role: str, op: str) -> Coverage | None:
    """The :data:`COVERAGE` row of one operation (``role`` module, ``op`` as written)."""
    return next((c for c in COVERAGE if c.role == role and c.op == op), None)


def matches(pattern_pairs: tuple[tuple[str, str], ...] | list[tuple[str, str]], kind: str, item: str) -> bool:
    """Whether ``(kind, item)`` matches one of the ``(kind, item)`` fnmatch patterns."""
    return any(fnmatch.fnmatchcase(kind, k) and fnmatch.fnmatchcase(item, i) for k, i in pattern_pairs)


def plan_matches(patterns: tuple[str, ...] | list[str], row: str) -> bool:
    """Whether plan row ``row`` (``"Role | op"``) matches one of ``patterns`` (fnmatch)."""
    return any(fnmatch.fnmatchcase(row, p) for p in patterns)


#: Findings outside the equivalence with the plan: what the deploy never acts on (DESIGN.md), or
#: state rather than drift; they may be reported whatever the plan says.
OUTSIDE_KINDS = ("reboot", "agent", "hold", "window", "lock", "unreadable", "unit-dependency", "llama-swap-live",
                 "power-healed", "not-compared", "model-lock")


def role_title(role: str, op: str) -> str:
    """The ``@deploy`` title of the role function that adds ``op`` (``"Host agent timers"``)."""
    for o in deploy_operations():
        if o.role == role and o.name == op:
            return o.title
    raise KeyError(f"no operation {op!r} in roles/{role}.py")


def own_plan_row(c: Coverage) -> str:
    """The plan row pattern of ``c``'s own operation: ``"<role title> | <op pattern>"``."""
    return f"{role_title(c.role, c.op)} | {c.op_pattern}"


def agreement(rows: list[Coverage], findings: list[tuple[str, str, str]], plan_rows: list[str]) -> list[str]:
    """What breaks the equivalence "the probe reports it exactly when ``pyinfra --dry`` would change
    something", for one batch of breakages (``rows``, applied together; none: the converged host).

    + findings: the probe's ``(kind, item, severity)``; only ``drift`` ones count, and the kinds of
      :data:`OUTSIDE_KINDS` need no breakage to explain them (a row may still expect one)
    + plan_rows: ``"Role | op"`` of each operation the plan would change (the generation record left out)

    Returns one line per problem (empty: they agree): an expected finding the probe did not report,
    a row's own operation the plan did not show, a finding or a plan row no breakage of the batch
    explains."""
    problems = []
    reported = [(k, i) for k, i, sev in findings if sev == "drift" and k != "plan"]
    counted = [(k, i) for k, i in reported if k not in OUTSIDE_KINDS]
    for c in rows:
        for pat in c.findings:
            if not any(matches((pat,), k, i) for k, i in reported):
                problems.append(f"{c.role}: {c.op}: the probe did not report {pat[0]} {pat[1]}")
        own = own_plan_row(c)
        if not any(fnmatch.fnmatchcase(r, own) for r in plan_rows):
            problems.append(f"{c.role}: {c.op}: the plan did not show it")
    for k, i in counted:
        if not any(matches(c.findings, k, i) for c in rows):
            problems.append(f"the probe reported {k} {i}, which no breakage of the batch explains")
    for r in plan_rows:
        if not any(plan_matches(c.plan, r) for c in rows):
            problems.append(f"the plan would change {r}, which no breakage of the batch explains")
    return problems


def batches(rows: list[Coverage], size: int) -> list[list[Coverage]]:
    """The ``probe`` rows with a breakage in batches of at most ``size`` independent ones (an
    ``alone`` row is a batch of its own), in table order."""
    together = [c for c in rows if c.breakage and not c.alone]
    out = [together[i:i + size] for i in range(0, len(together), size)]
    return out + [[c] for c in rows if c.breakage and c.alone]
