"""Declared host state that the deploy enforces and drift compares: one definition for both.

Sources: ``notes/nvidia-arch.md`` §1.4 (what ``nvidia-ctk runtime configure --runtime=docker``
writes) and §5 (the cgroup mitigation), §2.2 (reboot pending); ``notes/hyperqwen.md``
(``prepare`` rewrites the base model in place).
"""

from __future__ import annotations

from typing import Any

from rigkit import paths
from rigkit.common import versions

#: What rigkit owns in ``/etc/docker/daemon.json``: the nvidia runtime exactly as ``nvidia-ctk
#: runtime configure --runtime=docker`` writes it, and NVIDIA's documented mitigation for
#: containers losing the GPU on ``systemctl daemon-reload``. Other keys are the operator's.
DAEMON_JSON_KEYS = {
    "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    "exec-opts": ["native.cgroupdriver=cgroupfs"],
}

#: Timers of the host agent: unit stem -> (description, agent sub-command, period in s).
AGENT_TIMERS = {
    "hyperqwen-watchdog": ("HyperQwen watchdog: restart a member that answers 500", "watchdog", 60),
    "rigkit-keeper": ("rigkit keeper: bring the resident member back when none is loaded", "keeper", 60),
    "rigkit-power": ("rigkit power: re-apply the declared GPU power limit when the enforced one differs", "power", 30),
}


#: Models rewritten in place by HyperQwen's ``prepare``: after it, their record (not the lock) is
#: the reference.
PREPARED_MODELS = frozenset({"hyperqwen"})
#: What the rig installs from the repos with ``pacman -Syu --needed`` (pinned packages come from the
#: archive): docker, Compose v2, buildx and the NVIDIA container toolkit (Arch's package names).
REPO_PACKAGES = ("docker", "docker-compose", "docker-buildx", "nvidia-container-toolkit")


def pinned_driver(spec) -> str:
    """The driver the host is held to (the boot gate, drift): the driver flavour's pin without its
    epoch and pkgrel — the full version the deploy installs (``610.57.04-1`` → ``610.57.04``) — when
    pinned and in the declared series, else ``nvidia_driver_version`` itself (the series ``610.57`` or a
    full version). A pin bump within one series (``550.54.14-1`` → ``550.54.15-1`` under ``550.54``)
    thus still needs its reboot. Compared with what runs by :func:`rigkit.common.versions.agrees`."""
    pin = (spec.pacman_pins or {}).get(spec.driver_flavour)
    if isinstance(pin, str) and versions.agrees(spec.nvidia_driver_version, pin):
        return versions.release(pin) or spec.nvidia_driver_version
    return spec.nvidia_driver_version


def reboot_reasons(kernel: dict, dkms: list[dict], driver_version: str, flavour: str) -> list[str]:
    """Why the GPU steps cannot run on the running boot (empty: they can).

    + kernel: the ``KernelState`` fact (running release, loaded nvidia module, installed kernels)
    + dkms: the ``DkmsStatus`` fact
    + driver_version: the driver held to (:func:`pinned_driver`: the pin's full version, or
      ``nvidia_driver_version``, a series or a full version); flavour: ``driver_flavour``

    The running kernel must still be installed (its ``/usr/lib/modules`` entry), and the loaded
    ``nvidia`` module must be the pinned driver; with a DKMS flavour the module must also be built
    for every installed kernel (so whichever boots has it). The module and DKMS report the full
    version (``610.57.04``); ``610.57`` agrees with it, ``610.60.02`` does not
    (:func:`rigkit.common.versions.agrees`). Each reason names both versions.
    """
    reasons = []
    kernels = sorted(kernel.get("installed_kernels", []))
    running = kernel.get("running", "")
    if kernels and running not in kernels:
        reasons.append(f"running kernel {running} is no longer installed (installed: {', '.join(kernels)})")
    loaded = kernel.get("nvidia_module")
    if not versions.agrees(driver_version, loaded):
        reasons.append(f"loaded nvidia module is {loaded or 'none'}, the pinned driver is {driver_version}")
    if flavour.endswith("-dkms") and kernels:
        nvidia = [d for d in dkms if d["module"] == "nvidia"]
        built = {d["kernel"] for d in nvidia if versions.agrees(driver_version, d["version"])
                 and d["status"].startswith("installed")}
        missing = [k for k in kernels if k not in built]
        if missing:
            seen = sorted({d["version"] for d in nvidia})
            reasons.append(f"DKMS has not built nvidia {driver_version} for {', '.join(missing)}"
                           + (f" (dkms status: nvidia {', '.join(seen)})" if seen else ""))
    return reasons


def directories(spec) -> dict[str, dict[str, str]]:
    """Every folder the deploy creates with an owner and mode, ``{path: {"user", "group", "mode"}}``
    (mode as pyinfra's ``files.directory`` takes it, ``"755"``): the roles create them from this and
    drift stats them (``/etc/rigkit/secrets/`` is the secrets' own, :func:`secret_files`); the metrics
    textfile folder when ``metrics_textfile_dir`` is set."""
    ls = spec.llama_swap.user
    out = {
        paths.AGENT_DIR: {"user": "root", "group": "root", "mode": "755"},
        paths.HYPERQWEN_DIR: {"user": "root", "group": "root", "mode": "755"},
        spec.hyperqwen.models_dir: {"user": "root", "group": "root", "mode": "755"},
        paths.LLAMA_SWAP_DIR: {"user": "root", "group": ls, "mode": "750"},
        paths.STATE_DIR: {"user": "root", "group": "root", "mode": "755"},
    }
    if spec.metrics_textfile_dir:  # the agent's writers put rigkit's *.prom files there; node_exporter reads them
        out[spec.metrics_textfile_dir] = {"user": "root", "group": "root", "mode": "755"}
    return out


def secret_files(spec) -> dict[str, dict[str, str]]:
    """The secrets' folder and files, ``{path: {"user", "group", "mode"}}`` (DESIGN.md "Secrets": one
    owner and mode for the folder, declared once; the roles and drift both read it)."""
    ls = spec.llama_swap.user
    return {
        paths.SECRETS_DIR: {"user": "root", "group": ls, "mode": "750"},
        paths.HYPERQWEN_SECRET_FILE: {"user": "root", "group": ls, "mode": "640"},
        paths.HF_TOKEN_FILE: {"user": "root", "group": "root", "mode": "600"},
    }


def accounts(spec) -> dict[str, dict[str, Any]]:
    """The accounts the deploy manages, ``{user: {"system", "group" (primary, or None: not managed),
    "groups" (supplementary), "exact" (True: exactly these, pyinfra's ``server.user`` without
    ``append``; False: at least these), "home", "shell" (None: not managed)}}``: llama-swap's system
    user in its own group and ``docker``; the operator in ``docker`` when ``operator_user`` is set."""
    ls = spec.llama_swap.user
    out: dict[str, dict[str, Any]] = {
        ls: {"system": True, "group": ls, "groups": ["docker"], "exact": True, "home": f"/var/lib/{ls}",
             "shell": "/usr/bin/nologin"},
    }
    if spec.operator_user:
        out[spec.operator_user] = {"system": False, "group": None, "groups": ["docker"], "exact": False,
                                   "home": None, "shell": None}
    return out


#: Uploads that are not rendered files but are the deploy's all the same: the live config staged
#: for the activation (rigkit's scratch copy, root 0600) and the model lock it installs.
STAGING_OWNER_MODE = ("root:root", "0600")
MODELS_LOCK_OWNER_MODE = ("root:root", "0644")
#: Where the deploy keeps a copy of each legacy unit file before it disables the unit (root 0700).
LEGACY_BACKUP_DIR = f"{paths.STATE_DIR}/legacy-units"
#: Path unit the NVIDIA toolkit ships; enabled by the deploy when the package installed it.
CDI_REFRESH = "nvidia-cdi-refresh.path"
CDI_REFRESH_FILE = f"/usr/lib/systemd/system/{CDI_REFRESH}"


def enabled_units(spec: Any) -> dict[str, bool | None]:
    """The units the deploy enables, the one list (a generation's ``units.enabled``:
    :func:`rigkit.render.generations.declared_units`; drift's units: :func:`rigkit.drift.declared.declared`):
    ``{unit name: whether it must be active}`` (None: a oneshot, not checked). llama-swap, the power
    limit (``gpu-power-limit.service``, a oneshot), docker, nvidia-persistenced, the agent's timers
    (:data:`AGENT_TIMERS`), the operator's timers (``spec.operator_units``
    ending ``.timer``) and, when ``metrics_textfile_dir`` is set, node_exporter (Arch's
    ``prometheus-node-exporter.service``), each enabled and started by its role (``roles/``)."""
    from pathlib import Path

    units: dict[str, bool | None] = {"llama-swap.service": True, "gpu-power-limit.service": None,
                                     "docker.service": True, "nvidia-persistenced.service": True}
    units.update({f"{stem}.timer": True for stem in AGENT_TIMERS})
    units.update({Path(p).name: True for p in spec.operator_units if p.endswith(".timer")})
    if spec.metrics_textfile_dir:
        units[paths.NODE_EXPORTER_UNIT] = True
    return units


def merge_json(current: Any, wanted: Any) -> Any:
    """``wanted`` (the keys rigkit owns) merged into the document ``current``; keys rigkit does not own
    are kept. A key whose value is an object in both is merged entry by entry, **each entry of
    ``wanted`` replacing the current one whole** — as ``nvidia-ctk runtime configure --runtime=docker``
    replaces ``runtimes.nvidia`` (its extra ``runtimeArgs`` and args go: the real tool built from
    v1.17.8 is the oracle, tests/unit/test_daemon_json.py); a list in both is a union keeping
    ``current``'s order; anything else is replaced. What the deploy writes into a JSON file it owns keys
    of (:func:`rigkit.operations.config.json_keys`, ``/etc/docker/daemon.json`` with
    :data:`DAEMON_JSON_KEYS`) and what drift expects there. Refuse first what a union cannot fix
    (:func:`cgroup_driver_problem`)."""
    if not (isinstance(current, dict) and isinstance(wanted, dict)):
        return wanted
    out = dict(current)
    for key, value in wanted.items():
        have = current.get(key)
        if isinstance(have, dict) and isinstance(value, dict):
            out[key] = {**have, **value}
        elif isinstance(have, list) and isinstance(value, list):
            out[key] = have + [item for item in value if item not in have]
        else:
            out[key] = value
    return out


#: The exec-opt the cgroup mitigation sets (:data:`DAEMON_JSON_KEYS`), and the driver it names.
CGROUP_DRIVER_OPT, CGROUP_DRIVER = "native.cgroupdriver", "cgroupfs"


def cgroup_drivers(exec_opts: Any) -> list[str]:
    """The values of every ``native.cgroupdriver`` entry of daemon.json's ``exec-opts``, in order, as
    dockerd reads an entry: the key before the first ``=``, spaces trimmed, compared without case
    (moby ``daemon/config/config.go`` ``parseExecOptions``: ``strings.Cut(keyValue, "=")``,
    ``strings.ToLower(strings.TrimSpace(k))``, ``strings.TrimSpace(v)``; docker ≤ 28's ``getCD``:
    ``strings.EqualFold(key, "native.cgroupdriver")``). Not a list: none."""
    if not isinstance(exec_opts, list):
        return []
    out = []
    for entry in exec_opts:
        if isinstance(entry, str) and "=" in entry:
            key, _, value = entry.partition("=")
            if key.strip().lower() == CGROUP_DRIVER_OPT:
                out.append(value.strip())
    return out


def cgroup_driver_problem(data: Any) -> str | None:
    """Why daemon.json ``data`` (a JSON object) keeps rigkit's cgroup mitigation from taking effect, or
    None. dockerd reads a repeated ``native.cgroupdriver`` differently by version — docker ≤ 28 takes
    the **first** (moby v28.5.0 ``daemon/daemon_unix.go`` ``getCD``: returns at the first match), docker ≥ 29
    the **last** (commit d7f59cec05, ``parseExecOptions`` fills a map, the last entry wins) — so adding
    rigkit's entry beside the operator's other driver would leave the mitigation off on one and make
    drift's JSON comparison say clean. rigkit decides: an operator's ``native.cgroupdriver`` other than
    ``cgroupfs`` is refused, before anything is touched, naming it; rigkit never rewrites it (it is the
    operator's line). The owner's answer to which driver is in effect is ``docker info --format
    '{{.CgroupDriver}}'``, dockerd's ``GET /info`` (drift reads it there: ``rigkit.drift.probe``)."""
    other = [d for d in cgroup_drivers((data or {}).get("exec-opts")) if d != CGROUP_DRIVER]
    if not other:
        return None
    return (f"{paths.DOCKER_DAEMON_JSON}: exec-opts sets native.cgroupdriver={other[0]}; rigkit sets "
            f"native.cgroupdriver={CGROUP_DRIVER} there (NVIDIA's documented fix for containers losing the GPU on "
            "`systemctl daemon-reload` under the systemd driver), and dockerd reads a repeated option by version "
            "(docker <= 28 the first, >= 29 the last). Remove your native.cgroupdriver entry (rigkit then adds "
            f"{CGROUP_DRIVER}), then deploy again")


def missing_packages(installed: dict[str, str | None], packages: list[str] | tuple[str, ...]) -> list[str]:
    """The names of ``packages`` the ``PacmanVersions`` fact (``{name: version | None}``) says are not
    installed, at any version (:data:`REPO_PACKAGES`: the deploy installs them, drift reports them)."""
    return [p for p in packages if not installed.get(p)]


#: Owner and mode of each wheel in the agent's wheelhouse on the host (and of the folder: 0755).
WHEEL_OWNER, WHEEL_MODE, WHEEL_DIR_MODE = ("root", "root"), "644", "755"


def wheel_differences(want: dict[str, str], got: dict[str, dict[str, Any]] | None) -> dict[str, list[str]]:
    """What keeps the host's wheelhouse folder (``got``: :class:`~rigkit.operations.facts.files.FolderFiles`,
    ``{name: {mode, user, group, size, sha256}}``) from being ``want`` (``{name: sha256}`` of the
    wheelhouse built here) as ``files.sync(..., delete=True)`` leaves it: ``{"missing" (absent or
    other content), "extra" (not in ``want``), "wrong" (not root 0644)}`` of file names; all empty
    when they agree. ``got`` None (no folder): every wanted file is missing."""
    got = got or {}
    return {"missing": sorted(n for n in want if n not in got or got[n]["sha256"] != want[n]),
            "extra": sorted(n for n in got if n not in want),
            "wrong": sorted(n for n in got if n in want
                            and (got[n]["mode"], (got[n]["user"], got[n]["group"])) != (WHEEL_MODE, WHEEL_OWNER))}
