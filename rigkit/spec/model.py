"""The declared state of the rig: :class:`RigSpec`, validated once from pyinfra's ``host.data``.

Defaults live here, in the models. ``group_data`` and host data only hold overrides, which
:mod:`rigkit.spec.layers` merges over these defaults and validates against the models (pyinfra's
own keys pass through; every other unknown key is an error with a did-you-mean).

Values only the operator knows (hub repos, Strata's model and arguments, timer names, lock files)
default to ``None``, "unset" — what an index knows (the pins' full versions, image digests, the
llama-swap tarball's sha256) is resolved by ``rigkit lock`` from the series, tags and version declared
here (:mod:`rigkit.lockfile.resolve`):
:func:`unset_operator_values` names them so ``rigkit check`` warns once per value and
``rigkit deploy`` refuses to start.

Units: power in W, VRAM in GiB (``nvidia-smi`` MiB / 1024), times in seconds, context in tokens.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from rigkit import paths
from rigkit.spec.types import (
    DIGEST_RE, EMPTY_REFUSED, URL, BindAddress, Command, Count,
    CudaVersion, DriverVersion, ListenAddress, PackageSeries, EnvItem, EnvName, EnvValue, Folder, Fraction, GiB, Glob, GpuUuid, HostFile,
    HostName, HttpPath, HubRepoId, HubRevision, ImageRef, ImageRepository, LlamaSwapSeconds, LocalFile, MemberId,
    MemberURL, MiB, ModelName, PackageName, PacmanVersion, Port, RelativePath, RegistryURL, ReleaseTag, ReserveGiB, SecretURL,
    Seconds, Sha256, StopSeconds, Temperature, Text, TimerName, Tokens, UnitName, UserName, Watts, Word,
)

# --------------------------------------------------------------------------------------------
# Building blocks



class StrictModel(BaseModel):
    """Base of every spec model: unknown keys forbidden, no silent type coercion
    (``"420"`` is not a power limit), defaults validated too. An empty string given for an
    optional field (``str | None``, every operator value among them) means *unset*: it becomes
    ``None``, so ``rigkit check`` warns and ``rigkit deploy`` refuses instead of deploying a
    placeholder; an empty list or mapping stays a declared "none" (``lock_files: []``). An empty string
    for a field that is not optional (it has a default, or is required) is refused (exit 2):
    :data:`EMPTY_REFUSED`."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)

    @field_validator("*", mode="after")
    @classmethod
    def _empty_string_is_refused(cls, value: Any) -> Any:
        """One rule for empty (issue #28): ``""`` for an optional field is *unset* (the before-validator
        below made it ``None``); for a field that has a default or is required it is refused at once."""
        if value == "":
            raise ValueError(EMPTY_REFUSED)
        return value

    @model_validator(mode="before")
    @classmethod
    def _empty_string_is_unset(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        out = dict(data)
        for name, field in cls.model_fields.items():
            if out.get(name) == "" and type(None) in typing.get_args(field.annotation):
                out[name] = None
        return out


def operator_value(description: str, where: str, **kwargs: Any) -> Any:
    """A field only the operator can supply: defaults to ``None`` (unset) and is reported by
    :func:`unset_operator_values`. ``description`` says what the value is, ``where`` where the operator
    finds it; ``rigkit check`` prints both with the field's warning (:func:`unset_operator_fields`)."""
    return Field(default=None, description=description, json_schema_extra={"operator": True, "where": where},
                 **kwargs)




class ImageSpec(StrictModel):
    """A container image: ``repository`` plus ``ref``, the tag the operator wants (``rigkit lock``
    resolves it to the digest the deploy pulls, :mod:`rigkit.lockfile.resolve`) or a digest
    ``sha256:<64 hex>`` (verified by ``rigkit lock`` to exist). ``registry``: the registry's base URL for
    its v2 API when it is not ``https://<first component of repository>`` (a mirror, the sandbox's);
    ``registry_ca``: a CA bundle (PEM path on the control machine) for that URL."""

    repository: ImageRepository
    ref: ImageRef | None = operator_value(
        "the image's tag (rigkit lock resolves it to a digest) or sha256:<64 hex> digest",
        "the image's registry page (the tag you tested)")
    registry: RegistryURL | None = None
    registry_ca: LocalFile | None = None

    def reference(self) -> str:
        """The pull reference, ``repo@sha256:…`` or ``repo:tag``; a visible placeholder when unset."""
        ref = self.ref or paths.placeholder("image ref")
        if DIGEST_RE.match(ref):
            return f"{self.repository}@{ref}"
        return f"{self.repository}:{ref}"


class PowerRange(StrictModel):
    """The card's allowed power limits in W, as ``nvidia-smi --query-gpu=power.min_limit,
    power.max_limit`` reports them (only when known; never assumed)."""

    min_w: Watts
    max_w: Watts


#: The DFlash guard (the operator's write-up: DFLASH_TOKENS=15 crashed the engine at 20k context): more than
#: SAFE_DFLASH_TOKENS speculative tokens at a max_model_len of UNSAFE_SPEC_CONTEXT or more is refused
#: (rigkit.spec.validate) unless allow_unsafe_spec.
SAFE_DFLASH_TOKENS = 7
UNSAFE_SPEC_CONTEXT = 16384


class HyperQwenSpec(StrictModel):
    """HyperQwen: the vLLM W4A16 build of Qwen3.8-27B (``syv-ai/HyperQwen``) under docker compose.

    The ``.env`` knobs follow ``notes/hyperqwen.md``; the API key is a secret kept apart
    (``/etc/rigkit/secrets/hyperqwen.env``), never a spec value.
    """

    port: Port = 18020
    bind: BindAddress = "127.0.0.1"
    image: ImageSpec = Field(default_factory=lambda: ImageSpec(repository="ghcr.io/syv-ai/hyperqwen", ref="latest"))
    served_model_name: ModelName = "qwen3.8-27b"
    spec: Literal["dflash2", "mtp"] = "dflash2"
    prefix_cache: bool = True
    dflash_tokens: Annotated[Count, Field(le=64)] = 7
    allow_unsafe_spec: bool = False
    warmup: bool = False
    ctx: Literal["fast", "long", "huge"] = "fast"
    max_model_len: Annotated[Tokens, Field(ge=1024)] = 65536
    gpu_memory_utilization: Fraction = 0.92
    max_seqs: Count | None = None
    fast_variant: bool = False  # its source is not locked; prepare runs with NO_DOWNLOAD=1
    dflash2_drafter: bool = True
    extra_env: dict[EnvName, EnvValue] = Field(default_factory=dict)
    models_dir: Folder = paths.HYPERQWEN_MODELS_DIR
    stop_timeout_s: StopSeconds = 30


class LlamaCppSpec(StrictModel):
    """A llama.cpp GGUF server run as ``docker run --rm --init --name …`` of the llama.cpp
    server image, serving ``/srv/models/<model>/<model_file>`` on 127.0.0.1:``port``."""

    port: Port
    image: ImageSpec = Field(default_factory=lambda: ImageSpec(repository="ghcr.io/ggml-org/llama.cpp", ref="server-cuda"))
    model: MemberId = Field(description="key in `models`: the weights served")
    model_file: RelativePath | None = operator_value(
        "the GGUF file served, by name inside /srv/models/<model>/",
        "the file list of the model's hub repo (models.<model>.repo_id), as the model lock lists it")
    ctx_size: Annotated[Tokens, Field(ge=512)] = 16384
    args: list[Text] | None = operator_value(
        "extra llama-server arguments, one list item per word ([] for none)",
        "the llama-server command line the model runs with today (the old unit's ExecStart=)")
    stop_timeout_s: StopSeconds = 10


class StrataSpec(LlamaCppSpec):
    """Strata: the resident coder model (GGUF, ~21.6 GiB VRAM, ``ttl 0``)."""

    port: Port = 18030
    model: MemberId = "strata"


class GgufBaselineSpec(LlamaCppSpec):
    """The GGUF baseline: Qwen3.8-27B as Q4_K_M under llama.cpp (~42 tok/s on the rig)."""

    port: Port = 18040
    model: MemberId = "gguf-baseline"
    args: list[Text] | None = Field(default_factory=lambda: ["--n-gpu-layers", "99", "--flash-attn", "on"])


class ModelSource(StrictModel):
    """Weights to fetch into ``/srv/models/<path>``: a hub repo (``repo_id`` + ``revision``,
    filtered by ``include``/``exclude`` globs), or a ``url`` + ``sha256`` for a file not on the hub.
    The lock (``rigkit models lock``) turns a branch into a commit."""

    repo_id: HubRepoId | None = operator_value(
        "the weights' Hugging Face repo id, owner/name (or url + sha256 for a file not on the hub); "
        "the model lock pins its commit",
        "the model's page on huggingface.co (the owner/name in its address)")
    revision: HubRevision = "main"
    include: list[Glob] = Field(default_factory=list)
    exclude: list[Glob] = Field(default_factory=list)
    url: URL | None = None
    sha256: Sha256 | None = None
    path: RelativePath = Field(description="directory under /srv/models")


def _default_models() -> dict[str, ModelSource]:
    w4a16_files = ["*.safetensors", "*.json", "*.txt", "tokenizer*", "*.jinja", "*.py"]
    return {
        "hyperqwen": ModelSource(
            repo_id="dbirks/Qwen3.8-27B-W4A16-AutoRound",
            include=w4a16_files,
            path="hyperqwen/Qwen3.8-27B-W4A16-AutoRound",
        ),
        "hyperqwen-dflash2": ModelSource(include=w4a16_files, path="hyperqwen/Qwen3.8-27B-DFlash2-W4A16"),
        "gguf-baseline": ModelSource(include=["*Q4_K_M*.gguf"], path="gguf-baseline"),
        "strata": ModelSource(include=["*.gguf"], path="strata"),
    }


class MemberServer(StrictModel):
    """A member of the operator's own served by llama.cpp, declared as rigkit's own GGUF members are
    (issue 61): rigkit derives its ``docker run`` of the rig's llama.cpp server image (``strata.image``,
    locked and pulled with Strata's), ``cmdStop``, ``proxy`` and container (named after the member,
    labelled ``rigkit.member``), and estimates its VRAM from the lock's GGUF header as it does
    Strata's. ``model`` is a key of ``models``; ``model_file`` the GGUF file inside
    ``/srv/models/<model path>/`` (None: the file Strata or the GGUF baseline serves from that model);
    ``port`` on 127.0.0.1; ``ctx_size`` tokens; ``args`` extra llama-server words; ``stop_timeout_s``
    for ``docker stop``."""

    port: Port
    model: MemberId
    model_file: RelativePath | None = None
    ctx_size: Annotated[Tokens, Field(ge=512)] = 16384
    args: list[Text] = Field(default_factory=list)
    stop_timeout_s: StopSeconds = 10


class MemberSpec(StrictModel):
    """A llama-swap member (``models.<id>`` in llama-swap's config, v250).

    With ``service`` set, rigkit derives ``cmd``/``cmd_stop``/``proxy`` from that section of the
    spec; with ``llamacpp`` (:class:`MemberServer`) from that, for a llama.cpp member of the
    operator's own; any other member of the operator's own gives them. ``staged: true`` keeps it out of the live config
    (it is in ``config.staged.yaml`` for review). ``vram_gib`` is GiB while loaded (``None`` for
    HyperQwen: ``gpu_memory_utilization`` x ``gpu_vram_gib``); ``cold_boot_s`` is the measured
    start-to-healthy time in s; ``ttl`` idle seconds before unload, 0 = never.

    ``idle_conn_s`` is how long llama-swap keeps an idle connection to the member for reuse (its
    ``timeouts.idleConn``; upstream's default 90 s, 0 = forever). It must stay below the member
    server's own keep-alive idle timeout (llama.cpp's server, cpp-httplib: 5 s; vLLM's uvicorn: 5 s):
    a POST that llama-swap sends on a connection the member is closing gets ``502`` with an empty
    body, never retried (Go's transport retries only replayable requests; issue #25).

    ``send_loading_state`` is llama-swap's ``sendLoadingState`` for this member (off by default, and then
    not rendered: llama-swap's own default is off, ``internal/config/config.go:174``, a model without it
    taking the global one, ``config/load.go:181-183``): while the member is being loaded for a streamed
    ``/v1/chat/completions``, llama-swap streams its loading progress as ``reasoning_content`` into the
    client's response (``internal/router/loading.go``), which the bench names and keeps out of its
    figures (docs/bench.md).
    """

    service: Literal["strata", "gguf_baseline", "hyperqwen"] | None = None
    llamacpp: MemberServer | None = None
    staged: bool = False
    vram_gib: GiB | None = None
    cold_boot_s: Seconds
    ttl: LlamaSwapSeconds = 0
    unload_timeout_s: Annotated[LlamaSwapSeconds, Field(ge=1)] | None = None
    cmd: Command | None = None
    cmd_stop: Command | None = None
    proxy: MemberURL | None = None
    check_endpoint: HttpPath = "/health"
    idle_conn_s: Annotated[LlamaSwapSeconds, Field(ge=1, le=4)] = 2
    aliases: list[ModelName] = Field(default_factory=list)
    name: Text | None = None
    description: Text | None = None
    use_model_name: ModelName | None = None
    env: list[EnvItem] = Field(default_factory=list)
    send_loading_state: bool = False


class GroupSpec(StrictModel):
    """A llama-swap group: ``swap`` (one member at a time inside), ``exclusive`` (loading a
    member evicts other groups), ``persistent`` (never evicted by other groups)."""

    swap: bool = True
    exclusive: bool = True
    persistent: bool = False
    members: list[MemberId] = Field(min_length=1)


def _default_members() -> dict[str, MemberSpec]:
    return {
        "strata": MemberSpec(service="strata", vram_gib=21.6, cold_boot_s=60, ttl=0,
                             name="Strata", description="resident coder model (GGUF)"),
        "gguf-baseline": MemberSpec(service="gguf_baseline", vram_gib=17.5, cold_boot_s=90, ttl=600,
                                    name="Qwen3.8-27B Q4_K_M", description="llama.cpp GGUF baseline"),
        "hyperqwen": MemberSpec(service="hyperqwen", staged=True, cold_boot_s=180, ttl=900,
                                name="HyperQwen", description="vLLM W4A16 + DFlash2, on demand"),
    }


class LlamaSwapSpec(StrictModel):
    """llama-swap (v250): the pinned release tarball, its unit, and its members and groups."""

    version: ReleaseTag = "v250"
    release_url: URL = "https://github.com/mostlygeek/llama-swap/releases/download/v250/llama-swap_250_linux_amd64.tar.gz"
    release_sha256: Sha256 | None = Field(default=None, description="sha256 of the release tarball (release_url), 64 hex "
                                          "digits: rigkit lock reads it from the release's checksums file; a value given "
                                          "here must agree with it")
    schema_url: URL = "https://raw.githubusercontent.com/mostlygeek/llama-swap/v250/config-schema.json"
    schema_sha256: Sha256 = "85c0101dbc8a4461bd4c751bc98b3441651a83a8ba855d0473ef6c8f4c2c5666"
    port: Port = 8080
    user: UserName = "llama-swap"
    health_check_timeout_s: Annotated[LlamaSwapSeconds, Field(ge=15)] = 300
    # the unit's TimeoutStopSec: llama-swap stops its loaded member (cmdStop, up to the member's
    # unload_timeout_s) before it exits. One figure of its own, never derived from the members, so
    # that the unit is the same whichever members are live or staged (issue 61).
    stop_timeout_s: StopSeconds = 70
    start_port: Port = 5800
    log_level: Literal["debug", "info", "warn", "error"] = "info"
    preload: list[MemberId] = Field(default_factory=lambda: ["strata"])
    groups: dict[MemberId, GroupSpec] = Field(
        default_factory=lambda: {"gpu": GroupSpec(members=["strata", "gguf-baseline", "hyperqwen"])}
    )
    members: dict[MemberId, MemberSpec] = Field(default_factory=_default_members)


class BenchSpec(StrictModel):
    """Smoke-bench presets (``rigkit bench``): prompt sizes in tokens, budgets in tokens,
    ``baseline`` a results summary to compare with."""

    baseline: LocalFile | None = None
    quoting_prompt_tokens: Annotated[Tokens, Field(ge=64)] = 29000
    max_tokens: Annotated[Tokens, Field(ge=16)] = 8192
    reasoning_effort: Word | None = "medium"
    sampled_temperature: Temperature = 0.7
    stall_timeout_s: Seconds = 120.0


#: Spec keys renamed: ``{old name: new name}``. The old name is still read, as the new one, with a warning
#: naming both (:func:`rigkit.spec.layers.renamed_keys`, :func:`rigkit.spec.validate.spec_warnings`).
RENAMED_KEYS = {"models_lock": "lockfile"}


class NodeExporterSpec(StrictModel):
    """node_exporter, part of the rig when ``metrics_textfile_dir`` is set (issue 66): Arch's
    ``prometheus-node-exporter`` package, pinned by ``rigkit lock`` from ``version`` (the newest of the
    series in the archive) like the driver and CUDA, its arguments in ``/etc/conf.d/prometheus-node-exporter``
    (the package's unit reads ``NODE_EXPORTER_ARGS`` from it: ``EnvironmentFile=-/etc/conf.d/prometheus-node-exporter``,
    ``ExecStart=/usr/bin/prometheus-node-exporter $NODE_EXPORTER_ARGS``; Arch's
    ``prometheus-node-exporter.service``, archlinux/svntogit-packages
    ``prometheus-node-exporter/repos/extra-x86_64/``), its unit enabled. node_exporter itself listens on every
    interface by default (``--web.listen-address=:9100``); rigkit's default is loopback, or the address the
    operator names for a Prometheus on another machine."""

    version: PackageSeries = Field(default="1.10", description="the prometheus-node-exporter package's series "
                                   "(1.10 → the newest 1.10.x-<pkgrel> in the archive; rigkit lock resolves it)")
    listen_address: ListenAddress = Field(default="127.0.0.1", description="the IP address node_exporter listens on "
                                          "(its --web.listen-address): loopback, or the rig's address your "
                                          "Prometheus scrapes")
    port: Port = 9100

    @property
    def listen(self) -> str:
        """``--web.listen-address``'s value, ``HOST:PORT`` (an IPv6 address in brackets, as Go's
        ``net.JoinHostPort`` writes it)."""
        host = f"[{self.listen_address}]" if ":" in self.listen_address else self.listen_address
        return f"{host}:{self.port}"


class RigSpec(StrictModel):
    """The whole declared rig for one host. Build a valid one with
    :func:`rigkit.spec.validate.spec_from_layers` (or ``rigkit.spec.inventory``), never from a half-merged
    dict: :meth:`from_layers` and :meth:`from_dict` check the models only (types, ranges, unknown
    keys), not the cross-field rules of :mod:`rigkit.spec.validate`."""

    nvidia_driver_version: DriverVersion = Field(default="610.57", description="the driver: the series the seeds name (610.57) "
                                                                      "or the full version (610.57.04); compared by "
                                                                      "rigkit.common.versions.agrees")
    driver_flavour: Literal["nvidia-open-dkms", "nvidia-open", "nvidia-open-lts"] = "nvidia-open-dkms"
    cuda_version: CudaVersion = Field(default="13.3", description="the cuda toolkit package's series (13.3 → 13.3.x)")
    pacman_pins: dict[PackageName, PacmanVersion] | None = Field(
        default=None, description="exact pacman versions ([epoch:]pkgver-pkgrel) of the driver flavour, nvidia-utils, "
        "opencl-nvidia and cuda, when the operator wants exactly those; unset: rigkit lock resolves each from the "
        "series nvidia_driver_version and cuda_version in the archive (the newest of the series)")
    arch_archive_url: URL = "https://archive.archlinux.org/packages"
    gpu_power_limit_w: Watts = 420
    gpu_power_range_w: PowerRange | None = None
    gpu_vram_gib: GiB = 24.0
    vram_reserve_gib: ReserveGiB = 1.0
    vram_idle_mib: MiB = Field(default=512, description="MiB: the most nvidia-smi memory.used may read, with no "
                                                              "compute app listed, for the GPU to count as idle before "
                                                              "a new tenant starts (a headless card's driver and "
                                                              "persistence daemon hold a few MiB; a CUDA context ~250)")
    vram_release_timeout_s: Seconds = Field(default=60.0, description="s: how long a new tenant's start waits for "
                                                                          "the last one's memory to be released")
    operator_user: UserName | None = operator_value(
        "the operator's login on the rig: put in the docker group",
        "the user you log in to the rig as (usually the inventory's ssh_user, or your own user name)")
    gpu_uuid: GpuUuid | None = Field(default=None, description="the rig's GPU (nvidia-smi --query-gpu=uuid); a container may name it")
    allow_non_loopback: bool = Field(default=False, description="let a member proxy or HyperQwen's bind reach beyond "
                                                                "127.0.0.1 (DESIGN.md: everything listens on loopback)")
    legacy_units: list[UnitName] = Field(default_factory=lambda: ["strata.service"])
    paused_timers: list[TimerName] | None = operator_value(
        "the systemd timers of the recurring jobs (the crons) that call llama-swap on :8080: a window pauses them "
        "while it measures, so no request reloads the resident beside the tenant ([] when none)",
        "systemctl list-timers on the rig")
    operator_units: list[LocalFile] = Field(default_factory=list,
                                      description="the operator's own unit files (paths on the control machine, "
                                                  "relative to the project root), installed as they are; "
                                                  "their timers enabled")
    lock_files: list[HostFile] | None = operator_value(
        "absolute paths of files whose presence means a session of yours holds the GPU: the deploy's disruptive "
        "steps and a window refuse while one exists ([] when none)",
        "your own tooling on the rig (whatever lock file it writes while it uses the GPU)")
    hf_endpoint: SecretURL | None = Field(default=None, description="Hugging Face hub endpoint; None: huggingface.co. "
                                                                    "It carries the HF token: https, or http only to "
                                                                    "loopback or a trusted_http_hosts host")
    trusted_http_hosts: list[HostName] = Field(default_factory=list,
                                               description="hosts a URL that carries a secret (hf_endpoint) may reach "
                                                           "over plain http: a host on a network you trust (the "
                                                           "sandbox's fixtures hub); compared case-insensitively")
    lockfile: LocalFile | None = Field(default=None, description="the lock file (what rigkit lock writes, rigkit/lockfile/); "
                                                                "unset: <inventory>.lock.json beside the inventory")
    reboot: bool = Field(default=False, strict=False)
    force: bool = Field(default=False, strict=False)
    metrics_textfile_dir: Folder | None = Field(
        default=None, description="node_exporter's textfile collector folder (its --collector.textfile.directory): "
        "the agent's timers and the generation commands write the rig's metrics there, one rigkit_<part>.prom file "
        "each (notes/metrics.md); unset: no metrics are written, and no node_exporter installed. Set: the deploy "
        "installs node_exporter (the node_exporter key) reading this folder")
    node_exporter: NodeExporterSpec = Field(default_factory=NodeExporterSpec)
    generations_keep: Annotated[Count, Field(ge=2, le=1000)] = Field(default=10,
                                  description="generations kept on the host (rigkit generations); the current one "
                                              "and the one before it are never pruned")
    hyperqwen: HyperQwenSpec = Field(default_factory=HyperQwenSpec)
    strata: StrataSpec = Field(default_factory=StrataSpec)
    gguf_baseline: GgufBaselineSpec = Field(default_factory=GgufBaselineSpec)
    llama_swap: LlamaSwapSpec = Field(default_factory=LlamaSwapSpec)
    models: dict[MemberId, ModelSource] = Field(default_factory=_default_models)
    #: The old names of :data:`RENAMED_KEYS` the data gave (set by :mod:`rigkit.spec.layers`): what
    #: :func:`rigkit.spec.validate.spec_warnings` warns about. No field: never dumped, hashed or recorded.
    _renamed_keys: tuple[str, ...] = PrivateAttr(default=())
    bench: BenchSpec = Field(default_factory=BenchSpec)


# --------------------------------------------------------------------------------------------
# Operator-supplied values


def unset_operator_values(spec: RigSpec) -> list[str]:
    """Dotted keys of operator-supplied values still unset (``None``; an empty string given for
    one is ``None`` too, :class:`StrictModel`), in declaration order.

    Model sources count as one value each: a hub ``repo_id``, or ``url`` + ``sha256``.
    """
    return [key for key, _description, _where in unset_operator_fields(spec)]


def unset_operator_fields(spec: RigSpec) -> list[tuple[str, str, str]]:
    """``(dotted key, description, where the operator finds it)`` of each unset operator value
    (:func:`unset_operator_values`' order), from the field's own :func:`operator_value`."""
    out: list[tuple[str, str, str]] = []

    def walk(model: BaseModel, prefix: str) -> None:
        for name, field in type(model).model_fields.items():
            value = getattr(model, name)
            key = f"{prefix}{name}"
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            if isinstance(model, ModelSource) and name == "repo_id":
                if value is None and not (model.url and model.sha256):
                    out.append((key, field.description or "", extra.get("where", "")))
                continue
            if extra.get("operator") and value is None:
                out.append((key, field.description or "", extra.get("where", "")))
            elif isinstance(value, BaseModel):
                walk(value, key + ".")
            elif isinstance(value, dict):
                for k, v in value.items():
                    if isinstance(v, BaseModel):
                        walk(v, f"{key}.{k}.")

    walk(spec, "")
    # Values that only matter for what is declared: a staged-out member's needs still count
    # (the wire-in renders it); nothing is filtered.
    return out
