"""Cross-field checks of a :class:`~rigkit.spec.model.RigSpec`, run before anything is rendered or
touched, and the way to build a valid spec (:func:`spec_from_layers`, :func:`spec_from_dict`:
the models' validation in :mod:`rigkit.spec.model`, then :func:`check_spec`). Each problem names the
key, the bad value and what is allowed. The import graph is one-way: :mod:`rigkit.spec.model` (the
models) ← :mod:`rigkit.spec.members` (pure helpers over the spec) ← this module.

Sources for the rules: ``notes/llama-swap.md`` §1.1 (upstream load errors) and §7 (validator
rules), ``notes/hyperqwen.md`` (the ``.env`` knobs), the operator's write-up (the
``DFLASH_TOKENS=15`` crash at 20k context), DESIGN.md "Versions and units of measure".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rigkit import paths
from rigkit.spec import cmdline
from rigkit.spec import members as members_mod
from rigkit.spec.llama_swap_load import member_macro_problem
from rigkit.common import versions
from rigkit.common.gpu import power_limit_problem
from rigkit.spec.model import RENAMED_KEYS, SAFE_DFLASH_TOKENS, UNSAFE_SPEC_CONTEXT, RigSpec, unset_operator_fields
from rigkit.spec import claims as claims_mod
from rigkit.spec import compat
from rigkit.spec import engine_args
from rigkit.spec import limits
from rigkit.spec import unit_files
from rigkit.spec.types import (
    PACMAN_VERSION_RE, UNIT_NAME_MAX, UNIT_NAME_RE, loopback_host, secret_url_problem,
)
from rigkit.spec.layers import validate_dict, validate_layers
from rigkit.spec.problems import SpecError, SpecProblem, SpecWarning, did_you_mean
from rigkit.spec.secrets import SECRET_ADVICE, SECRET_SHOWN

#: .env keys rigkit renders from the spec itself; ``extra_env`` may not set them.
OWNED_ENV_KEYS = {
    "SPEC", "PREFIX_CACHE", "DFLASH_TOKENS", "WARMUP", "CTX", "MAX_LEN", "GPU_UTIL", "MAX_SEQS",
    "FAST_VARIANT", "DFLASH2", "PORT", "BIND", "MODELS_DIR", "GPU_COUNT", "NO_DOWNLOAD",
}
SECRET_ENV_KEYS = {"VLLM_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}
#: Absolute bounds of ``gpu_power_limit_w`` for the RTX 3090 family, checked before the host is
#: reached (the card's own range, ``gpu_power_range_w``, narrows them when known). Source:
#: ``notes/nvidia-arch.md`` §3 — reference TDP 350 W, AIB VBIOS ceilings 390–480 W, the highest
#: cited board (Galax HOF OC Lab) 500 W; 100 W is the lowest ``power.min_limit`` 3090 boards report.
POWER_LIMIT_SANITY_W = (100, 500)
#: A docker container name (moby's ``RestrictedNamePattern``), for a name read out of a member's cmd.
CONTAINER_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
#: .env / member ``env`` keys that change how compose or the container runtime reads the project.
RUNTIME_ENV_PREFIXES = ("COMPOSE_", "DOCKER_")
GPU_SELECT_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
_FOREGROUND = ("cmd must stay in the foreground and exit when the server dies, or llama-swap waits out "
               "healthCheckTimeout on a dead member")


def spec_from_layers(layers: Iterable[Mapping[str, Any]], source: str = "spec",
                     labels: list[str] | None = None) -> RigSpec:
    """The valid RigSpec of data layers, **lowest precedence first** (``all`` ... host,
    ``--data``): :func:`rigkit.spec.layers.validate_layers` (each layer's
    models, with its label), then :func:`check_spec` on the merged spec. Raises
    :class:`~rigkit.spec.problems.SpecError` naming every problem (``source`` names the spec)."""
    return _checked(validate_layers(layers, source=source, labels=labels), source)


def spec_from_dict(data: Mapping[str, Any], source: str = "spec") -> RigSpec:
    """The valid RigSpec of one already-merged overrides dict over the defaults: the models
    (:func:`rigkit.spec.layers.validate_dict`), then :func:`check_spec`. Raises
    :class:`~rigkit.spec.problems.SpecError`."""
    return _checked(validate_dict(data, source=source), source)


def _checked(spec: RigSpec, source: str) -> RigSpec:
    problems = check_spec(spec)
    if problems:
        raise SpecError(problems, source)
    return spec


def check_spec(spec: RigSpec) -> list[SpecProblem]:
    """Every cross-field problem of ``spec`` (empty when valid). Pure: reads nothing but the spec."""
    problems: list[SpecProblem] = []
    problems += _check_power(spec)
    problems += _check_speculative(spec)
    problems += _check_hyperqwen_env(spec)
    problems += _check_trust(spec)
    problems += _check_pins(spec)
    problems += _check_units(spec)
    problems += _check_members(spec)
    problems += _check_groups_and_vram(spec)
    problems += _check_vram_idle(spec)
    problems += claims_mod.check_claims(spec)
    problems += _check_dynamic_ports(spec)
    problems += _check_compat(spec)
    problems += _check_models(spec)
    problems += engine_args.check_engine_args(spec).problems
    problems += limits.limit_problems(spec)
    problems += unit_files.unit_file_problems(spec)
    return problems


def spec_warnings(spec: RigSpec) -> list[SpecWarning]:
    """What ``rigkit check`` reports but accepts: each old name of a renamed key the data gave
    (:data:`rigkit.spec.model.RENAMED_KEYS`), each unset operator value once (a tag is no longer
    warned about: ``rigkit lock`` resolves it to the digest the deploy pulls, and check reports what the
    lock has not resolved)."""
    warnings = [SpecWarning(key=old, message=f"renamed {RENAMED_KEYS[old]}: read as {RENAMED_KEYS[old]}; write "
                                         f"{RENAMED_KEYS[old]} where {old} is set (the old name may go)")
                for old in spec._renamed_keys]
    warnings += [SpecWarning(key=key, message=f"unset — {description}. Where to find it: {where}")
                 for key, description, where in unset_operator_fields(spec)]
    hq = spec.hyperqwen
    if hq.allow_unsafe_spec and _unsafe_speculation(spec):
        warnings.append(SpecWarning(
            key="hyperqwen.allow_unsafe_spec",
            message=(f"true: the DFlash guard is off and dflash_tokens {hq.dflash_tokens} runs at max_model_len "
                     f"{hq.max_model_len}; DFLASH_TOKENS=15 crashed the engine at 20k context (EngineDeadError, "
                     "marlin_gemm allocation failure) and it kept answering 500 until restarted")))
    warnings += engine_args.check_engine_args(spec).warnings
    for mid, m in members_mod.resolve_members(spec).items():
        if m.spec.service is None and m.container and m.cmd and not _labelled(m.argv, mid):
            warnings.append(SpecWarning(
                key=f"llama_swap.members.{mid}.cmd",
                message=(f"runs container {m.container!r} without --label {paths.MEMBER_LABEL}={mid}: llama-swap.service "
                         "removes an orphan of a killed proxy by that label before it starts, and cannot clear this one")))
    return warnings


def _labelled(argv: list[str], member_id: str) -> bool:
    """Whether a member's argv carries ``--label rigkit.member=<id>`` (``--label=…``, ``-l``)."""
    want = f"{paths.MEMBER_LABEL}={member_id}"
    return any(a in ("--label", "-l") and b == want for a, b in zip(argv, argv[1:])) or f"--label={want}" in argv


# --------------------------------------------------------------------------------------------


def _check_power(spec: RigSpec) -> list[SpecProblem]:
    lo, hi = POWER_LIMIT_SANITY_W
    if power_limit_problem(spec.gpu_power_limit_w, lo, hi):
        return [SpecProblem(
            key="gpu_power_limit_w", value=repr(spec.gpu_power_limit_w),
            allowed=f"outside {lo}–{hi} W, what any RTX 3090-family card accepts (reference 350 W, the highest "
                    "board VBIOS 500 W; notes/nvidia-arch.md §3); the card's own range is read on the host")]
    rng = spec.gpu_power_range_w
    if rng is None:
        return []
    out = []
    if rng.min_w > rng.max_w:
        out.append(SpecProblem(key="gpu_power_range_w", value=f"min_w {rng.min_w} > max_w {rng.max_w}",
                               allowed="min_w must not exceed max_w"))
    elif problem := power_limit_problem(spec.gpu_power_limit_w, rng.min_w, rng.max_w):
        out.append(SpecProblem(key="gpu_power_limit_w", value=repr(spec.gpu_power_limit_w),
                               allowed=problem.partition(" W is ")[2]))
    return out


def _unsafe_speculation(spec: RigSpec) -> bool:
    """DFlash2 is the speculative method with a verify block above the safe size at long context."""
    hq = spec.hyperqwen
    return hq.spec == "dflash2" and hq.dflash_tokens > SAFE_DFLASH_TOKENS and hq.max_model_len >= UNSAFE_SPEC_CONTEXT


def _check_speculative(spec: RigSpec) -> list[SpecProblem]:
    hq = spec.hyperqwen
    if _unsafe_speculation(spec) and not hq.allow_unsafe_spec:
        return [SpecProblem(
            key="hyperqwen.dflash_tokens", value=repr(hq.dflash_tokens),
            allowed=(f"above {SAFE_DFLASH_TOKENS} with max_model_len {hq.max_model_len} (≥ {UNSAFE_SPEC_CONTEXT}) is refused: "
                     "DFLASH_TOKENS=15 crashed the engine at 20k context (EngineDeadError, marlin_gemm "
                     f"allocation failure) and it kept answering 500; use ≤ {SAFE_DFLASH_TOKENS}, or set "
                     "hyperqwen.allow_unsafe_spec: true"))]
    return []


def _check_hyperqwen_env(spec: RigSpec) -> list[SpecProblem]:
    """HyperQwen's bind on loopback (:func:`rigkit.spec.types.loopback_host`, unless
    ``allow_non_loopback``) and its ``extra_env``: no secret, no key rigkit renders itself, nothing that
    changes how compose reads the project. The shapes (an IP, a folder, env names and values) are the
    fields' types (:mod:`rigkit.spec.types`)."""
    out = []
    hq = spec.hyperqwen
    if not loopback_host(hq.bind) and not spec.allow_non_loopback:
        out.append(SpecProblem(key="hyperqwen.bind", value=repr(hq.bind),
                               allowed="a loopback address (127.0.0.0/8 or ::1): everything on the rig listens on loopback "
                                       "(DESIGN.md); set allow_non_loopback: true to publish beyond it on purpose"))
    out += _env_items_problems("hyperqwen.extra_env", [f"{k}={v}" for k, v in hq.extra_env.items()], spec, mapping=True)
    for key in hq.extra_env:
        if key in SECRET_ENV_KEYS:
            out.append(SpecProblem(key=f"hyperqwen.extra_env.{key}", value=SECRET_SHOWN, allowed=SECRET_ADVICE))
        elif key in OWNED_ENV_KEYS:
            out.append(SpecProblem(key=f"hyperqwen.extra_env.{key}", value=repr(hq.extra_env[key]),
                                   allowed="rendered from the spec's own hyperqwen keys; set those instead"))
    return out


def _check_trust(spec: RigSpec) -> list[SpecProblem]:
    """A URL that carries a secret (``hf_endpoint``: the HF token) is https, or plain http to loopback or
    a host the operator lists in ``trusted_http_hosts`` (:func:`rigkit.spec.types.secret_url_problem`)."""
    if spec.hf_endpoint and (why := secret_url_problem(spec.hf_endpoint, spec.trusted_http_hosts)):
        return [SpecProblem(key="hf_endpoint", value=repr(spec.hf_endpoint), allowed=why)]
    return []


def _env_items_problems(key: str, items: list[str], spec: RigSpec, mapping: bool = False) -> list[SpecProblem]:
    """``NAME=value`` items (a member's ``env``, HyperQwen's ``extra_env``) that would change how compose
    or the container runtime reads the project (``COMPOSE_*``, ``DOCKER_*``), or point the container at a
    GPU other than the rig's one (``CUDA_VISIBLE_DEVICES``/``NVIDIA_VISIBLE_DEVICES`` other than ``0``,
    ``all`` or the declared ``gpu_uuid``)."""
    out = []
    for i, item in enumerate(items):
        name, _, value = item.partition("=")
        at = f"{key}.{name}" if mapping else f"{key}[{i}]"
        if name.startswith(RUNTIME_ENV_PREFIXES):
            out.append(SpecProblem(key=at, value=repr(name),
                                   allowed=f"{name} changes how docker compose or the engine reads the project, not the "
                                           "server; rigkit's compose project sets what it needs (COMPOSE_*/DOCKER_* refused)"))
        elif name in GPU_SELECT_ENV:
            allowed = {"0", "all"} | ({spec.gpu_uuid} if spec.gpu_uuid else set())
            if value not in allowed:
                out.append(SpecProblem(key=at, value=repr(value),
                                       allowed=f"the rig has one GPU: {name} may name only {', '.join(sorted(allowed))} "
                                               "(index 0, all, or gpu_uuid when declared)"))
    return out


def _pinned(pins: dict[str, str], pkg: str) -> str | None:
    """The pin of ``pkg`` when it is a pacman version (a malformed one is reported on its own)."""
    ver = pins.get(pkg)
    return ver if isinstance(ver, str) and PACMAN_VERSION_RE.match(ver) else None


def _check_pins(spec: RigSpec) -> list[SpecProblem]:
    pins = spec.pacman_pins
    if pins is None:
        return []
    out = []
    # a package not named here is pinned by its series (rigkit lock: nvidia_driver_version, cuda_version);
    # names and versions are typed (rigkit.spec.types: PackageName, PacmanVersion)
    # one rule for driver versions (rigkit.common.versions): the spec may name the series (610.57) or the
    # full version (610.57.04); the pins name the full version the archive has, and all name one driver
    driver = spec.nvidia_driver_version
    full = driver.count(".") >= 2
    flavour_pin = _pinned(pins, spec.driver_flavour)
    if flavour_pin is not None and not versions.agrees(driver, flavour_pin):
        flavour_pin = None  # reported below; the other pins are held to the spec alone
    for pkg in (spec.driver_flavour, *compat.DRIVER_PACKAGES, *compat.DRIVER_COMPANIONS):
        ver = _pinned(pins, pkg)
        if ver is None:
            continue
        if not versions.agrees(driver, ver):
            out.append(SpecProblem(key=f"pacman_pins.{pkg}", value=repr(ver),
                                   allowed=f"disagrees with nvidia_driver_version {driver!r}; "
                                   f"pin {pkg} at {driver}-<pkgrel>"
                                   + ("" if full else f" or {driver}.<n>-<pkgrel> (the full version, as the archive names it)")))
        elif flavour_pin is not None and pkg != spec.driver_flavour and not versions.same(ver, flavour_pin):
            out.append(SpecProblem(key=f"pacman_pins.{pkg}", value=repr(ver),
                                   allowed=f"driver {versions.release(ver)}, but {spec.driver_flavour} is pinned at "
                                   f"driver {versions.release(flavour_pin)}: the driver packages must be one driver "
                                   "(a module and a library of two drivers: \"Driver/library version mismatch\")"))
    for pkg in pins:
        if pkg.startswith("nvidia-open") and pkg != spec.driver_flavour or pkg in ("nvidia", "nvidia-dkms"):
            out.append(SpecProblem(key=f"pacman_pins.{pkg}", value=repr(pins[pkg]),
                                   allowed=f"a second driver flavour; driver_flavour is {spec.driver_flavour!r}"))
    cuda = _pinned(pins, "cuda")
    if cuda is not None and not versions.agrees(spec.cuda_version, cuda):
        out.append(SpecProblem(key="pacman_pins.cuda", value=repr(cuda),
                               allowed=f"not in the cuda_version {spec.cuda_version!r} series ({spec.cuda_version}.x-<pkgrel>)"))
    return out


def _check_units(spec: RigSpec) -> list[SpecProblem]:
    """Units and files the spec names beyond their shapes (the types): a legacy unit is not one rigkit
    manages, an operator's unit file exists on the control machine and is not one rigkit renders."""
    out = []
    for i, unit in enumerate(spec.legacy_units):
        if unit in {"llama-swap.service", "hyperqwen.service", "docker.service"}:
            out.append(SpecProblem(key=f"legacy_units[{i}]", value=repr(unit),
                                   allowed="a unit rigkit manages itself cannot be legacy"))
    for i, path in enumerate(spec.operator_units):
        name = path.rsplit("/", 1)[-1]
        if not UNIT_NAME_RE.match(name) or len(name.encode()) > UNIT_NAME_MAX or not name.endswith((".service", ".timer")):
            out.append(SpecProblem(key=f"operator_units[{i}]", value=repr(path),
                                   allowed="a .service or .timer unit file (its name a systemd unit name, "
                                           f"at most {UNIT_NAME_MAX} bytes)"))
        elif not Path(path).is_file():
            out.append(SpecProblem(key=f"operator_units[{i}]", value=repr(path),
                                   allowed=f"no such file (relative to {Path.cwd()})"))
        elif name in claims_mod.OWN_UNITS:
            out.append(SpecProblem(key=f"operator_units[{i}]", value=repr(path),
                                   allowed="a unit rigkit renders itself"))
    return out


#: Seconds llama-swap.service's TimeoutStopSec (``llama_swap.stop_timeout_s``) keeps beyond the longest
#: member stop: HyperQwen's ExecStopPost and llama-swap's own exit run after it.
_STOP_GRACE_S = 30


def _own_server_problems(spec: RigSpec, mid: str, key: str) -> list[SpecProblem]:
    """A member declared with ``llamacpp`` (:class:`rigkit.spec.model.MemberServer`): rigkit derives its
    command, so neither ``service`` nor ``cmd`` beside it; its model is a key of ``models``, and its
    GGUF file named or served by Strata or the GGUF baseline from the same model."""
    s = spec.llama_swap.members[mid]
    own = s.llamacpp
    assert own is not None
    out = []
    for field_key, value in (("service", s.service), ("cmd", s.cmd)):
        if value is not None:
            out.append(SpecProblem(key=f"{key}.{field_key}", value=repr(value),
                                   allowed=f"unset beside {key}.llamacpp, from which rigkit derives the member's command"))
    if own.model not in spec.models:
        out.append(SpecProblem(key=f"{key}.llamacpp.model", value=repr(own.model),
                               allowed=f"not a key of models{did_you_mean(own.model, spec.models)}; models: {', '.join(spec.models)}"))
    elif members_mod.own_server(mid, spec).model_file is None:
        out.append(SpecProblem(key=f"{key}.llamacpp.model_file", value="None",
                               allowed=f"the GGUF file served, by name inside {paths.MODELS_ROOT}/{spec.models[own.model].path}/ "
                                       "(neither strata nor gguf_baseline serves this model, so there is no file to default to)"))
    return out


def _check_members(spec: RigSpec) -> list[SpecProblem]:
    out: list[SpecProblem] = []
    ls = spec.llama_swap
    resolved = members_mod.resolve_members(spec)
    for mid, m in resolved.items():
        key = f"llama_swap.members.{mid}"
        s = m.spec
        if not m.cmd:
            out.append(SpecProblem(key=f"{key}.cmd", value="None", allowed="a member without service: needs cmd, the server in the foreground"))
            continue
        uses_port = "${PORT}" in m.cmd
        if m.proxy and _proxy_host(m.proxy) is None:
            out.append(SpecProblem(key=f"{key}.proxy", value=repr(m.proxy),
                                   allowed="not a URL: llama-swap proxies to http(s)://host[:port][/path], "
                                           "e.g. http://127.0.0.1:18050 or http://127.0.0.1:${PORT}"))
        elif not uses_port and not s.proxy and s.service is None and s.llamacpp is None:
            out.append(SpecProblem(
                key=f"{key}.proxy", value="None",
                allowed="a fixed-port member (its cmd has no ${PORT}) must set proxy, e.g. http://127.0.0.1:<port>; "
                        "llama-swap's default http://localhost:${PORT} would point elsewhere"))
        elif m.proxy and "${PORT}" in m.proxy and not uses_port:
            out.append(SpecProblem(key=f"{key}.proxy", value=repr(m.proxy),
                                   allowed="proxy uses ${PORT} but cmd does not (llama-swap refuses this config)"))
        elif m.proxy and uses_port and "${PORT}" not in m.proxy:
            out.append(SpecProblem(key=f"{key}.proxy", value=repr(m.proxy),
                                   allowed="cmd listens on llama-swap's ${PORT} but proxy names a fixed port; use "
                                           "http://127.0.0.1:${PORT} (or leave proxy unset)"))
        if s.llamacpp is not None:
            out += _own_server_problems(spec, mid, key)
        if s.service is None and s.vram_gib is None:
            out.append(SpecProblem(key=f"{key}.vram_gib", value="None", allowed="GiB the member holds while loaded (nvidia-smi MiB / 1024)"))
        if s.service is not None and s.service != "hyperqwen" and s.vram_gib is None:
            out.append(SpecProblem(key=f"{key}.vram_gib", value="None", allowed="GiB the member holds while loaded (nvidia-smi MiB / 1024)"))
        for field_key, value in [("cmd", m.cmd), ("cmd_stop", m.cmd_stop), ("proxy", m.proxy), ("name", s.name),
                                 ("description", s.description), ("use_model_name", m.use_model_name),
                                 ("check_endpoint", s.check_endpoint)] \
                + [(f"env[{i}]", e) for i, e in enumerate(s.env)] + [(f"aliases[{i}]", a) for i, a in enumerate(s.aliases)]:
            problem = member_macro_problem(value, m.cmd, stop=field_key == "cmd_stop") if value else None
            if problem:
                out.append(SpecProblem(key=f"{key}.{field_key}", value=repr(value), allowed=problem))
        out += _check_command(f"{key}.cmd", m.cmd, m.cmd_stop, f"{key}.cmd_stop")
        if m.cmd_stop:
            out += _check_command(f"{key}.cmd_stop", m.cmd_stop, None, None, stop=True)
        if m.container and not CONTAINER_NAME_RE.match(m.container):
            out.append(SpecProblem(key=f"{key}.cmd" if s.service is None else key, value=repr(m.container),
                                   allowed="a container name is at least two characters, letters, digits and _ . - "
                                           "(docker's rule), starting with a letter or digit"))
        proxy_host = _proxy_host(m.proxy) if m.proxy else None
        if proxy_host is not None and not loopback_host(proxy_host) and not spec.allow_non_loopback:
            out.append(SpecProblem(key=f"{key}.proxy", value=repr(m.proxy),
                                   allowed="a loopback address (127.0.0.0/8, localhost, ::1): everything on the rig listens "
                                           "on 127.0.0.1 (DESIGN.md); set allow_non_loopback: true to reach beyond it on purpose"))
        out += _env_items_problems(f"{key}.env", s.env, spec)
        if m.unload_timeout_s and m.unload_timeout_s + _STOP_GRACE_S > ls.stop_timeout_s:
            out.append(SpecProblem(
                key=f"{key}.unload_timeout_s", value=repr(m.unload_timeout_s),
                allowed=f"at most {ls.stop_timeout_s - _STOP_GRACE_S} s (llama_swap.stop_timeout_s {ls.stop_timeout_s} "
                        f"− {_STOP_GRACE_S} s: systemd would kill llama-swap while it stops this member), or raise "
                        "llama_swap.stop_timeout_s"))
        if s.ttl and spec.llama_swap.preload and mid in ls.preload:
            out.append(SpecProblem(key=f"{key}.ttl", value=repr(s.ttl),
                                   allowed="a preloaded (resident) member keeps ttl 0, or it unloads and nothing brings it back"))
    slowest = max((m.spec.cold_boot_s for m in resolved.values()), default=0)
    need = slowest * 1.5
    if ls.health_check_timeout_s < need:
        worst = max(resolved.values(), key=lambda m: m.spec.cold_boot_s)
        out.append(SpecProblem(
            key="llama_swap.health_check_timeout_s", value=repr(ls.health_check_timeout_s),
            allowed=f"must cover the slowest cold boot x 1.5: {worst.id} boots in {worst.spec.cold_boot_s:g} s, so ≥ {need:g} s"))
    for i, pid in enumerate(ls.preload):
        if pid not in ls.members:
            out.append(SpecProblem(key=f"llama_swap.preload[{i}]", value=repr(pid),
                                   allowed=f"not a member{did_you_mean(pid, ls.members)}; members: {', '.join(ls.members)}"))
        elif ls.members[pid].staged:
            out.append(SpecProblem(key=f"llama_swap.preload[{i}]", value=repr(pid),
                                   allowed="a staged member is not in the live config; preload only live members"))
    return out


def _proxy_host(url: str) -> str | None:
    """The host of a proxy URL ``http(s)://host[:port][/path]`` (``${PORT}`` may stand for the port),
    or None when ``url`` is not one."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.replace("${PORT}", "1"))
        _ = parts.port
    except ValueError:
        return None
    ok = parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.query and not parts.fragment \
        and not parts.username and " " not in url
    return parts.hostname if ok else None


def _check_command(key: str, cmd: str, cmd_stop: str | None, stop_key: str | None,
                   stop: bool = False) -> list[SpecProblem]:
    """What llama-swap would get wrong running ``cmd`` (no shell, in the foreground): unquoted shell
    operators, then, with every wrapper taken off (``sh -c``, ``bash -lc``, ``env X=1``, ``exec``,
    ``nice`` …, :func:`rigkit.spec.cmdline.unwrap`), a background ``&``, a detached container (``-d``,
    ``-itd``, ``--detach``, ``compose up --wait``, ``compose start``), ``docker run`` without ``--rm``
    or ``--name``, ``compose up --abort-on-container-exit``, a container without ``cmd_stop``.
    ``stop``: ``cmd`` is a cmdStop (it may run detached: only the operators are checked)."""
    out: list[SpecProblem] = []
    shown = repr(cmd)
    if cmdline.unbalanced_quote(cmd):
        out.append(SpecProblem(key=key, value=shown,
                               allowed="a quote that does not close: llama-swap splits cmd into POSIX words and would "
                                       "read the rest as one word; close it or quote the ' as \"'\""))
    if cmdline.shell_operators(cmd):
        out.append(SpecProblem(key=key, value=shown,
                               allowed="llama-swap runs cmd without a shell, so ; && | > stay literal; wrap it in sh -c '...'"))
    if stop:
        return out
    unwrapped = cmdline.unwrap(cmdline.split_command(cmd))
    if "&" in unwrapped.separators:
        out.append(SpecProblem(key=key, value=shown,
                               allowed=f"runs a command in the background (&) inside {unwrapped.shells[0]}; {_FOREGROUND}"))
    container = False
    for words in unwrapped.commands:
        cc = cmdline.container_command(words)
        if cc is None:
            continue
        container = True
        detached = None
        if cc.verb in ("run", "compose up", "compose run"):
            detached = cc.has("-d", "--detach") or (cc.verb == "compose up" and cc.has("--wait"))
        elif cc.verb == "start" and not cc.has("-a", "--attach"):
            detached = "start"
        elif cc.verb in ("compose start", "compose restart", "create"):
            detached = cc.verb
        if detached:
            out.append(SpecProblem(key=key, value=shown, allowed=f"runs detached ({detached}); {_FOREGROUND}"))
        if cc.verb == "run" and (not cc.has("--rm") or not cc.has("--name")):
            out.append(SpecProblem(key=key, value=shown,
                                   allowed="docker run needs --rm and a fixed --name so cmdStop can stop it"))
        if cc.verb == "compose run" and not cc.has("--rm"):
            out.append(SpecProblem(key=key, value=shown,
                                   allowed="compose run needs --rm, or each start leaves a stopped container behind"))
        if cc.verb == "compose up" and cc.has("--abort-on-container-exit"):
            out.append(SpecProblem(key=key, value=shown,
                                   allowed="--abort-on-container-exit also fires when `prepare` exits; start the service alone with --no-deps"))
    if container and not cmd_stop and stop_key:
        out.append(SpecProblem(
            key=stop_key, value="None",
            allowed="a container member needs cmdStop (e.g. docker stop <name>): SIGTERM to the docker "
                    "client does not stop the container, which then keeps the VRAM"))
    return out


#: One llama-swap group as the co-load check reads it: ``(swap, exclusive, persistent, member ids)``.
GroupShape = tuple[bool, bool, bool, list[str]]


def _groups_with_default(spec: RigSpec) -> dict[str, GroupShape]:
    """The spec's groups, and llama-swap's ``(default)`` group (swap, exclusive, not persistent) of the
    members no group names."""
    groups = {name: (g.swap, g.exclusive, g.persistent, list(g.members)) for name, g in spec.llama_swap.groups.items()}
    grouped = {m for g in spec.llama_swap.groups.values() for m in g.members}
    ungrouped = [m for m in spec.llama_swap.members if m not in grouped]
    if ungrouped:
        groups["(default)"] = (True, True, False, ungrouped)
    return groups


def loaded_members(group: GroupShape, vram: Mapping[str, float]) -> list[str]:
    """The members of ``group`` loaded together at the most: the heaviest one of a swap group, all of
    another."""
    swap, _exclusive, _persistent, mids = group
    return [max(mids, key=lambda m: vram[m])] if swap else list(mids)


def heaviest_co_load(groups: Mapping[str, GroupShape], vram: Mapping[str, float]) -> tuple[float, list[str]]:
    """``(GiB, group names)`` of the heaviest set of groups llama-swap can hold loaded at once, in
    O(groups + members).

    llama-swap (v250): loading a member of an *exclusive* group unloads every other group that is not
    *persistent*; a non-exclusive group unloads nothing. So a set of groups can be loaded together iff
    at most one of them is exclusive and not persistent (load the persistent ones first, then that one,
    then the non-exclusive ones). With every figure ≥ 0 the heaviest such set is every persistent and
    every non-exclusive group plus the heaviest exclusive non-persistent one. Groups that add nothing
    (0 GiB) are left out of the names. ``vram``: GiB per member id (:func:`rigkit.spec.members.vram_by_member`)."""
    weight = {g: sum(vram[m] for m in loaded_members(shape, vram)) for g, shape in groups.items()}
    always = [g for g, (_s, exclusive, persistent, _m) in groups.items() if persistent or not exclusive]
    evicting = [g for g, (_s, exclusive, persistent, _m) in groups.items() if exclusive and not persistent]
    chosen = always + ([max(evicting, key=lambda g: weight[g])] if evicting else [])
    chosen = [g for g in groups if g in set(chosen) and weight[g] > 0]
    return sum(weight[g] for g in chosen), chosen


def co_load_problems(spec: RigSpec, figures: Mapping[str, float]) -> list[SpecProblem]:
    """The group and co-load check with each member's figure the larger of its declared ``vram_gib``
    and ``figures[member]`` (GiB; :func:`rigkit.spec.vram.member_fits`' estimates), as ``rigkit check`` runs it."""
    return _check_groups_and_vram(spec, figures)


def _check_groups_and_vram(spec: RigSpec, figures: Mapping[str, float] | None = None) -> list[SpecProblem]:
    """Each member's VRAM within the card, the heaviest co-load (:func:`heaviest_co_load`) within it,
    and the preloaded members able to stay loaded together (:func:`_preload_problems`). A member in two
    groups, or named twice, is a claim problem (:mod:`rigkit.spec.claims`). Each member's figure is the
    larger of its declared ``vram_gib`` and ``figures[member]`` (GiB) when given."""
    out: list[SpecProblem] = []
    ls = spec.llama_swap
    for gname, g in ls.groups.items():
        for i, mid in enumerate(g.members):
            if mid not in ls.members:
                out.append(SpecProblem(key=f"llama_swap.groups.{gname}.members[{i}]", value=repr(mid),
                                       allowed=f"not a member{did_you_mean(mid, ls.members)}; members: {', '.join(ls.members)}"))
    if out:
        return out
    usable = spec.gpu_vram_gib - spec.vram_reserve_gib
    vram = members_mod.vram_by_member(spec, figures)
    for mid, v in vram.items():
        if v > usable:
            out.append(SpecProblem(key=f"llama_swap.members.{mid}.vram_gib", value=repr(v),
                                   allowed=f"more than the card holds: {usable:g} GiB usable (gpu_vram_gib {spec.gpu_vram_gib:g} − vram_reserve_gib {spec.vram_reserve_gib:g})"))
    if out:
        return out
    groups = _groups_with_default(spec)
    out += _preload_problems(spec, groups)
    total, subset = heaviest_co_load(groups, vram)
    if total > usable + 1e-9:
        mids = [m for g in subset for m in loaded_members(groups[g], vram)]
        listing = " + ".join(f"{m} ({vram[m]:g} GiB)" for m in mids)
        if len(subset) == 1:
            gname = subset[0]
            key, value = f"llama_swap.groups.{gname}.swap", "False"
            fix = "set swap: true so at most one member of the group runs"
        else:
            key, value = "llama_swap.groups", ", ".join(subset)
            fix = ("put them in one group with swap: true, or make the groups exclusive and not persistent "
                   "(one big model at a time fits in the card)")
        out.append(SpecProblem(
            key=key, value=value,
            allowed=f"lets {listing} run at once = {total:g} GiB > {usable:g} GiB usable "
                    f"(gpu_vram_gib {spec.gpu_vram_gib:g} − vram_reserve_gib {spec.vram_reserve_gib:g}); {fix}"))
    return out


def _preload_problems(spec: RigSpec, groups: Mapping[str, GroupShape]) -> list[SpecProblem]:
    """Preloaded members that cannot stay loaded together: llama-swap loads ``preload`` in order at start,
    so a second member of one swap group swaps the first out, and a member of an exclusive group unloads
    an earlier preloaded member of any other group that is not persistent."""
    group_of = {m: g for g, (_s, _e, _p, mids) in groups.items() for m in mids}
    out: list[SpecProblem] = []
    loaded: list[tuple[int, str]] = []
    for i, mid in enumerate(spec.llama_swap.preload):
        g = group_of.get(mid)
        if g is None or spec.llama_swap.members.get(mid) is None or spec.llama_swap.members[mid].staged:
            continue  # named by the member checks
        swap, exclusive, _persistent, _mids = groups[g]
        for j, other in loaded:
            h = group_of[other]
            if h == g and swap:
                why = f"swaps out {other} (preload[{j}]), loaded before it in swap group {g!r}"
            elif h != g and exclusive and not groups[h][2]:
                why = f"unloads {other} (preload[{j}], group {h!r}): group {g!r} is exclusive and {h!r} not persistent"
            else:
                continue
            out.append(SpecProblem(key=f"llama_swap.preload[{i}]", value=repr(mid),
                                   allowed=f"{why}; preload members that can stay loaded together (another group, "
                                           "non-exclusive, or the earlier one's group persistent)"))
            break
        loaded.append((i, mid))
    return out


def _check_vram_idle(spec: RigSpec) -> list[SpecProblem]:
    """``vram_idle_mib`` (the most memory.used an idle GPU may read before a new tenant starts) must
    be below the card's memory, else every reading would count as idle."""
    card_mib = spec.gpu_vram_gib * 1024
    if spec.vram_idle_mib < card_mib:
        return []
    return [SpecProblem(key="vram_idle_mib", value=repr(spec.vram_idle_mib),
                        allowed=f"not below the card's {card_mib:g} MiB (gpu_vram_gib {spec.gpu_vram_gib:g} × 1024): "
                                "every reading would count as idle; a headless card reads a few MiB, a CUDA context ~250")]


def _check_dynamic_ports(spec: RigSpec) -> list[SpecProblem]:
    """No claimed port inside the range llama-swap hands out as ``${PORT}`` (``start_port`` + one per
    member that uses it); two owners of one port are :mod:`rigkit.spec.claims`' to name."""
    resolved = members_mod.resolve_members(spec)
    dynamic = sorted(mid for mid, m in resolved.items() if m.cmd and "${PORT}" in m.cmd)
    if not dynamic:
        return []
    lo, hi = spec.llama_swap.start_port, spec.llama_swap.start_port + len(dynamic)
    out: list[SpecProblem] = []
    seen: set[str] = set()
    for claim in claims_mod.spec_claims(spec):
        if claim.kind == "port" and lo <= claim.resource < hi and claim.key not in seen:
            seen.add(claim.key)
            out.append(SpecProblem(key=claim.key, value=repr(claim.resource),
                                   allowed=f"inside llama-swap's ${{PORT}} range {lo}–{hi - 1} (start_port + members using ${{PORT}})"))
    return out


def _check_compat(spec: RigSpec) -> list[SpecProblem]:
    """The versions work together (:mod:`rigkit.spec.compat`, the table with its sources): the driver runs
    the CUDA major, each kernel pinned under DKMS has its headers."""
    out: list[SpecProblem] = []
    if why := compat.cuda_problem(spec.nvidia_driver_version, spec.cuda_version):
        out.append(SpecProblem(key="cuda_version", value=repr(spec.cuda_version), allowed=why))
    for pkg, why in compat.header_problems(spec.driver_flavour, spec.pacman_pins or {}):
        out.append(SpecProblem(key=f"pacman_pins.{pkg}", value=repr((spec.pacman_pins or {})[pkg]), allowed=why))
    return out


def _check_models(spec: RigSpec) -> list[SpecProblem]:
    out = []
    for key, server in (("strata.model", spec.strata), ("gguf_baseline.model", spec.gguf_baseline)):
        if server.model not in spec.models:
            out.append(SpecProblem(key=key, value=repr(server.model),
                                   allowed=f"not a key of models{did_you_mean(server.model, spec.models)}; models: {', '.join(spec.models)}"))
    for name, src in spec.models.items():
        if src.url and not src.sha256:
            out.append(SpecProblem(key=f"models.{name}.sha256", value="None", allowed="a model fetched by url needs its sha256"))
    return out
