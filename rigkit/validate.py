"""Cross-field checks of a :class:`~rigkit.spec.RigSpec`, run before anything is rendered or
touched, and the way to build a valid spec (:func:`spec_from_layers`, :func:`spec_from_dict`:
the models' validation in :mod:`rigkit.spec`, then :func:`check_spec`). Each problem names the
key, the bad value and what is allowed. The import graph is one-way: :mod:`rigkit.spec` (the
models) ← :mod:`rigkit.members` (pure helpers over the spec) ← this module.

Sources for the rules: ``notes/llama-swap.md`` §1.1 (upstream load errors) and §7 (validator
rules), ``notes/hyperqwen.md`` (the ``.env`` knobs), the operator's write-up (the
``DFLASH_TOKENS=15`` crash at 20k context), DESIGN.md "Versions and units of measure".
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rigkit import members as members_mod
from rigkit.spec import (
    DIGEST_RE,
    MEMBER_ID_RE,
    PACMAN_VERSION_RE,
    SHA256_RE,
    UNIT_NAME_RE,
    ImageSpec,
    RigSpec,
    SpecError,
    SpecProblem,
    SpecWarning,
    did_you_mean,
    unset_operator_values,
)

SAFE_DFLASH_TOKENS = 7
UNSAFE_SPEC_CONTEXT = 16384
#: .env keys rigkit renders from the spec itself; ``extra_env`` may not set them.
OWNED_ENV_KEYS = {
    "SPEC", "PREFIX_CACHE", "DFLASH_TOKENS", "WARMUP", "CTX", "MAX_LEN", "GPU_UTIL", "MAX_SEQS",
    "FAST_VARIANT", "DFLASH2", "PORT", "BIND", "MODELS_DIR", "GPU_COUNT", "NO_DOWNLOAD",
}
SECRET_ENV_KEYS = {"VLLM_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}
_OWN_UNITS = {"llama-swap.service", "hyperqwen.service", "gpu-power-limit.service", "hyperqwen-watchdog.service",
              "hyperqwen-watchdog.timer", "rigkit-keeper.service", "rigkit-keeper.timer"}
SHELL_METACHARS = (";", "&&", "||", "|", ">", "<", "$(", "`")
DRIVER_PACKAGES = ("nvidia-utils", "opencl-nvidia")


def spec_from_layers(layers: Iterable[Mapping[str, Any]], source: str = "spec",
                     labels: list[str] | None = None) -> RigSpec:
    """The valid RigSpec of data layers, **lowest precedence first** (``all`` ... host,
    ``--data``): :meth:`RigSpec.from_layers <rigkit.spec.RigSpec.from_layers>` (each layer's
    models, with its label), then :func:`check_spec` on the merged spec. Raises
    :class:`~rigkit.spec.SpecError` naming every problem (``source`` names the spec)."""
    return _checked(RigSpec.from_layers(layers, source=source, labels=labels), source)


def spec_from_dict(data: Mapping[str, Any], source: str = "spec") -> RigSpec:
    """The valid RigSpec of one already-merged overrides dict over the defaults: the models
    (:meth:`RigSpec.from_dict <rigkit.spec.RigSpec.from_dict>`), then :func:`check_spec`. Raises
    :class:`~rigkit.spec.SpecError`."""
    return _checked(RigSpec.from_dict(data, source=source), source)


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
    problems += _check_pins(spec)
    problems += _check_units(spec)
    problems += _check_images(spec)
    problems += _check_members(spec)
    problems += _check_groups_and_vram(spec)
    problems += _check_ports(spec)
    problems += _check_models(spec)
    return problems


def spec_warnings(spec: RigSpec) -> list[SpecWarning]:
    """What ``rigkit check`` reports but accepts: each unset operator value once, images pinned
    by tag rather than digest."""
    warnings = [
        SpecWarning(key=key, message="unset (operator-supplied); rendered files carry a RIGKIT-UNSET placeholder "
                    "where it is used, and `rigkit deploy` refuses until it is set")
        for key in unset_operator_values(spec)
    ]
    for key, image in _images(spec):
        if image.ref and not DIGEST_RE.match(image.ref):
            warnings.append(SpecWarning(
                key=f"{key}.ref",
                message=f"{image.ref!r} is a tag, not a digest; pin sha256:<64 hex> so the image cannot move"))
    return warnings


# --------------------------------------------------------------------------------------------


def _check_power(spec: RigSpec) -> list[SpecProblem]:
    rng = spec.gpu_power_range_w
    if rng is None:
        return []
    out = []
    if rng.min_w > rng.max_w:
        out.append(SpecProblem(key="gpu_power_range_w", value=f"min_w {rng.min_w} > max_w {rng.max_w}",
                               allowed="min_w must not exceed max_w"))
    elif not rng.min_w <= spec.gpu_power_limit_w <= rng.max_w:
        out.append(SpecProblem(
            key="gpu_power_limit_w", value=repr(spec.gpu_power_limit_w),
            allowed=f"outside the card's power limits {rng.min_w}–{rng.max_w} W (nvidia-smi power.min_limit/max_limit)"))
    return out


def _check_speculative(spec: RigSpec) -> list[SpecProblem]:
    hq = spec.hyperqwen
    if hq.dflash_tokens > SAFE_DFLASH_TOKENS and hq.max_model_len >= UNSAFE_SPEC_CONTEXT and not hq.allow_unsafe_spec:
        return [SpecProblem(
            key="hyperqwen.dflash_tokens", value=repr(hq.dflash_tokens),
            allowed=(f"above {SAFE_DFLASH_TOKENS} with max_model_len {hq.max_model_len} (≥ {UNSAFE_SPEC_CONTEXT}) is refused: "
                     "DFLASH_TOKENS=15 crashed the engine at 20k context (EngineDeadError, marlin_gemm "
                     f"allocation failure) and it kept answering 500; use ≤ {SAFE_DFLASH_TOKENS}, or set "
                     "hyperqwen.allow_unsafe_spec: true"))]
    return []


def _check_hyperqwen_env(spec: RigSpec) -> list[SpecProblem]:
    out = []
    for key in spec.hyperqwen.extra_env:
        if key in SECRET_ENV_KEYS:
            out.append(SpecProblem(key=f"hyperqwen.extra_env.{key}", value="<secret, not shown>",
                                   allowed="secrets never go in the spec: the API key lives in "
                                   "/etc/rigkit/secrets/hyperqwen.env, the HF token comes from HF_TOKEN or the hf token file"))
        elif key in OWNED_ENV_KEYS:
            out.append(SpecProblem(key=f"hyperqwen.extra_env.{key}", value=repr(spec.hyperqwen.extra_env[key]),
                                   allowed="rendered from the spec's own hyperqwen keys; set those instead"))
        elif not key.replace("_", "").isalnum() or not key[:1].isalpha() or key.upper() != key:
            out.append(SpecProblem(key=f"hyperqwen.extra_env.{key}", value=repr(key),
                                   allowed="environment names are UPPER_CASE letters, digits and _"))
    return out


def _pkgver(version: str) -> str | None:
    m = PACMAN_VERSION_RE.match(version)
    return m.group("pkgver") if m else None


def _check_pins(spec: RigSpec) -> list[SpecProblem]:
    pins = spec.pacman_pins
    if pins is None:
        return []
    out = []
    for pkg, ver in pins.items():
        if not isinstance(ver, str) or not PACMAN_VERSION_RE.match(ver):
            out.append(SpecProblem(key=f"pacman_pins.{pkg}", value=repr(ver),
                                   allowed="a full pacman version [epoch:]pkgver-pkgrel, e.g. '610.57-1' (pkgrel cannot be guessed)"))
    required = [spec.driver_flavour, *DRIVER_PACKAGES, "cuda"]
    for pkg in required:
        if pkg not in pins:
            out.append(SpecProblem(key=f"pacman_pins.{pkg}", value="missing",
                                   allowed=f"the pins must cover {', '.join(required)} (installed together with pacman -U)"))
    for pkg in (spec.driver_flavour, *DRIVER_PACKAGES):
        ver = pins.get(pkg)
        pv = _pkgver(ver) if isinstance(ver, str) else None
        if pv is not None and pv != spec.nvidia_driver_version:
            out.append(SpecProblem(key=f"pacman_pins.{pkg}", value=repr(ver),
                                   allowed=f"disagrees with nvidia_driver_version {spec.nvidia_driver_version!r}; "
                                   f"pin {pkg} at {spec.nvidia_driver_version}-<pkgrel>"))
    for pkg in pins:
        if pkg.startswith("nvidia-open") and pkg != spec.driver_flavour or pkg in ("nvidia", "nvidia-dkms"):
            out.append(SpecProblem(key=f"pacman_pins.{pkg}", value=repr(pins[pkg]),
                                   allowed=f"a second driver flavour; driver_flavour is {spec.driver_flavour!r}"))
    cuda = pins.get("cuda")
    cv = _pkgver(cuda) if isinstance(cuda, str) else None
    if cv is not None and not (cv == spec.cuda_version or cv.startswith(spec.cuda_version + ".")):
        out.append(SpecProblem(key="pacman_pins.cuda", value=repr(cuda),
                               allowed=f"not in the cuda_version {spec.cuda_version!r} series ({spec.cuda_version}.x-<pkgrel>)"))
    return out


def _check_units(spec: RigSpec) -> list[SpecProblem]:
    out = []
    for i, unit in enumerate(spec.legacy_units):
        if not UNIT_NAME_RE.match(unit):
            out.append(SpecProblem(key=f"legacy_units[{i}]", value=repr(unit),
                                   allowed="a systemd unit name such as 'strata.service'"))
        elif unit in {"llama-swap.service", "hyperqwen.service", "docker.service"}:
            out.append(SpecProblem(key=f"legacy_units[{i}]", value=repr(unit),
                                   allowed="a unit rigkit manages itself cannot be legacy"))
    for i, timer in enumerate(spec.paused_timers or []):
        if not timer.endswith(".timer") or not UNIT_NAME_RE.match(timer):
            out.append(SpecProblem(key=f"paused_timers[{i}]", value=repr(timer),
                                   allowed="a systemd timer unit name ending in .timer"))
    for i, path in enumerate(spec.operator_units):
        name = path.rsplit("/", 1)[-1]
        if not UNIT_NAME_RE.match(name) or not name.endswith((".service", ".timer")):
            out.append(SpecProblem(key=f"operator_units[{i}]", value=repr(path),
                                   allowed="a .service or .timer unit file"))
        elif not Path(path).is_file():
            out.append(SpecProblem(key=f"operator_units[{i}]", value=repr(path),
                                   allowed=f"no such file (relative to {Path.cwd()})"))
        elif name in _OWN_UNITS:
            out.append(SpecProblem(key=f"operator_units[{i}]", value=repr(path),
                                   allowed="a unit rigkit renders itself"))
    for i, path in enumerate(spec.lock_files or []):
        if not path.startswith("/"):
            out.append(SpecProblem(key=f"lock_files[{i}]", value=repr(path), allowed="an absolute path on the host"))
    return out


def _images(spec: RigSpec) -> list[tuple[str, ImageSpec]]:
    return [("hyperqwen.image", spec.hyperqwen.image), ("strata.image", spec.strata.image),
            ("gguf_baseline.image", spec.gguf_baseline.image)]


def _check_images(spec: RigSpec) -> list[SpecProblem]:
    out = []
    for key, image in _images(spec):
        ref = image.ref
        if ref is None:
            continue
        if ref.startswith("sha256:") and not DIGEST_RE.match(ref):
            out.append(SpecProblem(key=f"{key}.ref", value=repr(ref), allowed="a digest is sha256: followed by 64 lower-case hex digits"))
        elif ref in {"latest", "main", "master", "edge", "nightly"} or ref.startswith("server-cuda") and not any(c.isdigit() for c in ref):
            out.append(SpecProblem(key=f"{key}.ref", value=repr(ref),
                                   allowed="a moving tag is not a pin; use an immutable tag (e.g. sha-1a2b3c4, server-cuda-b6123) or sha256:<digest>"))
        elif ":" in ref and not ref.startswith("sha256:") or "/" in ref or " " in ref:
            out.append(SpecProblem(key=f"{key}.ref", value=repr(ref), allowed="a bare tag or sha256:<digest> (the repository is image.repository)"))
    sha = spec.llama_swap.release_sha256
    if sha is not None and not SHA256_RE.match(sha):
        out.append(SpecProblem(key="llama_swap.release_sha256", value=repr(sha), allowed="64 lower-case hex digits"))
    if not SHA256_RE.match(spec.llama_swap.schema_sha256):
        out.append(SpecProblem(key="llama_swap.schema_sha256", value=repr(spec.llama_swap.schema_sha256),
                               allowed="64 lower-case hex digits"))
    for key, url in (("arch_archive_url", spec.arch_archive_url), ("llama_swap.release_url", spec.llama_swap.release_url),
                     ("llama_swap.schema_url", spec.llama_swap.schema_url)):
        if not url.startswith(("https://", "http://", "file://")):
            out.append(SpecProblem(key=key, value=repr(url), allowed="an https://, http:// or file:// URL"))
    return out


def _check_members(spec: RigSpec) -> list[SpecProblem]:
    out: list[SpecProblem] = []
    ls = spec.llama_swap
    resolved = members_mod.resolve_members(spec)
    for mid, m in resolved.items():
        key = f"llama_swap.members.{mid}"
        s = m.spec
        if not MEMBER_ID_RE.match(mid):
            out.append(SpecProblem(key=key, value=repr(mid), allowed="member ids are letters, digits, '.', '_' and '-'"))
        if not m.cmd:
            out.append(SpecProblem(key=f"{key}.cmd", value="None", allowed="a member without service: needs cmd, the server in the foreground"))
            continue
        argv = members_mod.split_command(m.cmd)
        uses_port = "${PORT}" in m.cmd
        if not uses_port and not s.proxy and s.service is None:
            out.append(SpecProblem(
                key=f"{key}.proxy", value="None",
                allowed="a fixed-port member (its cmd has no ${PORT}) must set proxy, e.g. http://127.0.0.1:<port>; "
                        "llama-swap's default http://localhost:${PORT} would point elsewhere"))
        if m.proxy and "${PORT}" in m.proxy and not uses_port:
            out.append(SpecProblem(key=f"{key}.proxy", value=repr(m.proxy),
                                   allowed="proxy uses ${PORT} but cmd does not (llama-swap refuses this config)"))
        if s.service is None and s.vram_gib is None:
            out.append(SpecProblem(key=f"{key}.vram_gib", value="None", allowed="GiB the member holds while loaded (nvidia-smi MiB / 1024)"))
        if s.service is not None and s.service != "hyperqwen" and s.vram_gib is None:
            out.append(SpecProblem(key=f"{key}.vram_gib", value="None", allowed="GiB the member holds while loaded (nvidia-smi MiB / 1024)"))
        if any(tok in SHELL_METACHARS for tok in argv) and not _wrapped_in_shell(argv):
            out.append(SpecProblem(key=f"{key}.cmd", value=repr(m.cmd),
                                   allowed="llama-swap runs cmd without a shell, so ; && | > stay literal; wrap it in sh -c '...'"))
        if members_mod.is_container_cmd(argv):
            if not m.cmd_stop:
                out.append(SpecProblem(
                    key=f"{key}.cmd_stop", value="None",
                    allowed="a container member needs cmdStop (e.g. docker stop <name>): SIGTERM to the docker "
                            "client does not stop the container, which then keeps the VRAM"))
            detached = [a for a in argv if a in ("-d", "--detach") or a.startswith("--detach=")]
            if detached:
                out.append(SpecProblem(
                    key=f"{key}.cmd", value=repr(m.cmd),
                    allowed=f"runs detached ({detached[0]}); cmd must stay in the foreground and exit when the "
                            "server dies, or llama-swap waits out healthCheckTimeout on a dead member"))
            if "run" in argv and "compose" not in argv and "--name" not in argv and not any(a.startswith("--name=") for a in argv):
                out.append(SpecProblem(key=f"{key}.cmd", value=repr(m.cmd),
                                       allowed="docker run needs --rm and a fixed --name so cmdStop can stop it"))
            if "up" in argv and "compose" in " ".join(argv[:3]) and "--abort-on-container-exit" in argv:
                out.append(SpecProblem(key=f"{key}.cmd", value=repr(m.cmd),
                                       allowed="--abort-on-container-exit also fires when `prepare` exits; start the service alone with --no-deps"))
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
    aliases: dict[str, str] = {}
    for mid, m in ls.members.items():
        for alias in m.aliases:
            if alias in ls.members or alias in aliases:
                out.append(SpecProblem(key=f"llama_swap.members.{mid}.aliases", value=repr(alias),
                                       allowed="aliases are unique across members and model ids (llama-swap refuses duplicates)"))
            aliases[alias] = mid
    return out


def _wrapped_in_shell(argv: list[str]) -> bool:
    return len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in {"sh", "bash"} and argv[1] == "-c"


def _groups_with_default(spec: RigSpec) -> dict[str, tuple[bool, bool, bool, list[str]]]:
    groups = {name: (g.swap, g.exclusive, g.persistent, list(g.members)) for name, g in spec.llama_swap.groups.items()}
    grouped = {m for g in spec.llama_swap.groups.values() for m in g.members}
    ungrouped = [m for m in spec.llama_swap.members if m not in grouped]
    if ungrouped:
        groups["(default)"] = (True, True, False, ungrouped)
    return groups


def _co_resident_sets(groups: dict[str, tuple[bool, bool, bool, list[str]]]) -> Iterable[tuple[str, ...]]:
    """Sets of groups that can be loaded at once: an order exists in which loading each group
    evicts none loaded before it (it is non-exclusive, or every earlier one is persistent)."""
    names = list(groups)
    for r in range(1, min(len(names), 6) + 1):
        for subset in itertools.combinations(names, r):
            for order in itertools.permutations(subset):
                if all(not groups[g][1] or all(groups[h][2] for h in order[:i]) for i, g in enumerate(order)):
                    yield subset
                    break


def _check_groups_and_vram(spec: RigSpec) -> list[SpecProblem]:
    out: list[SpecProblem] = []
    ls = spec.llama_swap
    seen: dict[str, str] = {}
    for gname, g in ls.groups.items():
        for i, mid in enumerate(g.members):
            if mid not in ls.members:
                out.append(SpecProblem(key=f"llama_swap.groups.{gname}.members[{i}]", value=repr(mid),
                                       allowed=f"not a member{did_you_mean(mid, ls.members)}; members: {', '.join(ls.members)}"))
            elif mid in seen:
                out.append(SpecProblem(key=f"llama_swap.groups.{gname}.members[{i}]", value=repr(mid),
                                       allowed=f"already in group {seen[mid]!r}; a member belongs to one group"))
            seen.setdefault(mid, gname)
    if out:
        return out
    usable = spec.gpu_vram_gib - spec.vram_reserve_gib
    resolved = members_mod.resolve_members(spec)
    vram = {mid: (m.vram_gib or 0.0) for mid, m in resolved.items()}
    for mid, v in vram.items():
        if v > usable:
            out.append(SpecProblem(key=f"llama_swap.members.{mid}.vram_gib", value=repr(v),
                                   allowed=f"more than the card holds: {usable:g} GiB usable (gpu_vram_gib {spec.gpu_vram_gib:g} − vram_reserve_gib {spec.vram_reserve_gib:g})"))
    if out:
        return out
    groups = _groups_with_default(spec)

    def loaded(gname: str) -> list[str]:
        swap, _excl, _pers, mids = groups[gname]
        if swap:
            return [max(mids, key=lambda m: vram[m])]
        return list(mids)

    worst: tuple[float, tuple[str, ...]] = (0.0, ())
    for subset in _co_resident_sets(groups):
        mids = tuple(m for g in subset for m in loaded(g))
        total = sum(vram[m] for m in mids)
        if total > worst[0]:
            worst = (total, subset)
    total, subset = worst
    if total > usable + 1e-9:
        mids = [m for g in subset for m in loaded(g)]
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


def _check_ports(spec: RigSpec) -> list[SpecProblem]:
    out: list[SpecProblem] = []
    used: dict[int, str] = {}
    claims = [("llama_swap.port", spec.llama_swap.port), ("hyperqwen.port", spec.hyperqwen.port),
              ("strata.port", spec.strata.port), ("gguf_baseline.port", spec.gguf_baseline.port)]
    resolved = members_mod.resolve_members(spec)
    for mid, m in resolved.items():
        if m.spec.service is None and m.port is not None:
            claims.append((f"llama_swap.members.{mid}.proxy", m.port))
    for key, port in claims:
        if port in used:
            out.append(SpecProblem(key=key, value=repr(port), allowed=f"port already used by {used[port]}; ports must be unique"))
        else:
            used[port] = key
    dynamic = sorted(mid for mid, m in resolved.items() if m.cmd and "${PORT}" in m.cmd)
    lo, hi = spec.llama_swap.start_port, spec.llama_swap.start_port + len(dynamic)
    for key, port in claims:
        if dynamic and lo <= port < hi:
            out.append(SpecProblem(key=key, value=repr(port),
                                   allowed=f"inside llama-swap's ${{PORT}} range {lo}–{hi - 1} (start_port + members using ${{PORT}})"))
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
        if src.sha256 and not SHA256_RE.match(src.sha256):
            out.append(SpecProblem(key=f"models.{name}.sha256", value=repr(src.sha256), allowed="64 lower-case hex digits"))
        if src.path.startswith("/") or ".." in src.path.split("/"):
            out.append(SpecProblem(key=f"models.{name}.path", value=repr(src.path), allowed="a relative directory under /srv/models"))
    return out
