"""The declared state of the rig: :class:`RigSpec`, validated once from pyinfra's ``host.data``.

Defaults live here, in the models. ``group_data`` and host data only hold overrides, and
:func:`merge_layers` deep-merges every layer in pyinfra's precedence order (``--data`` over host
over groups over ``all`` over these defaults), so one nested key can be overridden alone.
Keys owned by pyinfra and its connectors pass through (:func:`split_pyinfra_keys`); every
other unknown key is an error with a did-you-mean.

Values only the operator knows (pins, image digests, hub repos, the llama-swap tarball's
sha256, Strata's model and arguments, timer names, lock files) default to ``None``, "unset":
:func:`unset_operator_values` names them so ``rigkit check`` warns once per value and
``rigkit deploy`` refuses to start.

Units: power in W, VRAM in GiB (``nvidia-smi`` MiB / 1024), times in seconds, context in tokens.
"""

from __future__ import annotations

import copy
import difflib
import re
import shlex
import typing
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from rigkit import paths

# --------------------------------------------------------------------------------------------
# Errors and warnings


class SpecProblem(BaseModel):
    """One thing wrong with the spec: the dotted ``key``, the offending ``value`` (repr'd, or
    ``"<unknown key>"``) and ``allowed``, what would be accepted. ``str()`` is the message."""

    model_config = ConfigDict(frozen=True)
    key: str
    value: str
    allowed: str

    def __str__(self) -> str:
        return f"{self.key}: {self.value} — {self.allowed}"


class SpecError(ValueError):
    """The spec is invalid; ``problems`` lists each :class:`SpecProblem` (exit code 2)."""

    def __init__(self, problems: list[SpecProblem], source: str = "spec"):
        self.problems = problems
        self.source = source
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid {source} ({len(problems)} problem(s)):\n{lines}")


class SpecWarning(BaseModel):
    """Something ``rigkit check`` reports but accepts (exit 0): an unset operator value, an
    image pinned by tag instead of digest."""

    model_config = ConfigDict(frozen=True)
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


# --------------------------------------------------------------------------------------------
# Building blocks


class StrictModel(BaseModel):
    """Base of every spec model: unknown keys forbidden, no silent type coercion
    (``"420"`` is not a power limit), defaults validated too. An empty string given for an
    optional field (``str | None``, every operator value among them) means *unset*: it becomes
    ``None``, so ``rigkit check`` warns and ``rigkit deploy`` refuses instead of deploying a
    placeholder; an empty list or mapping stays a declared "none" (``lock_files: []``)."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True)

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


def operator_value(description: str, **kwargs: Any) -> Any:
    """A field only the operator can supply: defaults to ``None`` (unset) and is reported by
    :func:`unset_operator_values`."""
    return Field(default=None, description=description, json_schema_extra={"operator": True}, **kwargs)


PORT = Field(ge=1, le=65535)
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# pacman version: [epoch:]pkgver-pkgrel; pkgver has no '-' or ':' (PKGBUILD(5)).
PACMAN_VERSION_RE = re.compile(r"^(?:(?P<epoch>\d+):)?(?P<pkgver>[A-Za-z0-9._+~]+)-(?P<pkgrel>\d+(?:\.\d+)?)$")
UNIT_NAME_RE = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.(service|timer|socket|path|target|mount)$")
MEMBER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class ImageSpec(StrictModel):
    """A container image, pinned: ``repository`` plus ``ref``, an immutable tag (e.g.
    ``sha-1a2b3c4``) or a digest ``sha256:<64 hex>``. ``ref`` is operator-supplied."""

    repository: str = Field(min_length=1)
    ref: str | None = operator_value("immutable tag or sha256 digest of the image")

    def reference(self) -> str:
        """The pull reference, ``repo@sha256:…`` or ``repo:tag``; a visible placeholder when unset."""
        ref = self.ref or paths.placeholder("image ref")
        if DIGEST_RE.match(ref):
            return f"{self.repository}@{ref}"
        return f"{self.repository}:{ref}"


class PowerRange(StrictModel):
    """The card's allowed power limits in W, as ``nvidia-smi --query-gpu=power.min_limit,
    power.max_limit`` reports them (only when known; never assumed)."""

    min_w: int = Field(gt=0)
    max_w: int = Field(gt=0)


class HyperQwenSpec(StrictModel):
    """HyperQwen: the vLLM W4A16 build of Qwen3.8-27B (``syv-ai/HyperQwen``) under docker compose.

    The ``.env`` knobs follow ``notes/hyperqwen.md``; the API key is a secret kept apart
    (``/etc/rigkit/secrets/hyperqwen.env``), never a spec value.
    """

    port: int = Field(default=18020, ge=1, le=65535)
    bind: str = "127.0.0.1"
    image: ImageSpec = Field(default_factory=lambda: ImageSpec(repository="ghcr.io/syv-ai/hyperqwen"))
    served_model_name: str = "qwen3.8-27b"
    spec: Literal["dflash2", "mtp"] = "dflash2"
    prefix_cache: bool = True
    dflash_tokens: int = Field(default=7, ge=1, le=64)
    allow_unsafe_spec: bool = False
    warmup: bool = False
    ctx: Literal["fast", "long", "huge"] = "fast"
    max_model_len: int = Field(default=65536, ge=1024)
    gpu_memory_utilization: float = Field(default=0.92, gt=0.0, le=1.0)
    max_seqs: int | None = Field(default=None, ge=1)
    fast_variant: bool = False  # its source is not locked; prepare runs with NO_DOWNLOAD=1
    dflash2_drafter: bool = True
    extra_env: dict[str, str] = Field(default_factory=dict)
    models_dir: str = paths.HYPERQWEN_MODELS_DIR
    stop_timeout_s: int = Field(default=30, ge=1)


class LlamaCppSpec(StrictModel):
    """A llama.cpp GGUF server run as ``docker run --rm --init --name …`` of the llama.cpp
    server image, serving ``/srv/models/<model>/<model_file>`` on 127.0.0.1:``port``."""

    port: int = Field(ge=1, le=65535)
    image: ImageSpec = Field(default_factory=lambda: ImageSpec(repository="ghcr.io/ggml-org/llama.cpp"))
    model: str = Field(description="key in `models`: the weights served")
    model_file: str | None = operator_value("GGUF file name inside /srv/models/<model>/")
    ctx_size: int = Field(default=16384, ge=512)
    args: list[str] | None = operator_value("extra llama-server arguments")
    stop_timeout_s: int = Field(default=10, ge=1)


class StrataSpec(LlamaCppSpec):
    """Strata: the resident coder model (GGUF, ~21.6 GiB VRAM, ``ttl 0``)."""

    port: int = Field(default=18030, ge=1, le=65535)
    model: str = "strata"


class GgufBaselineSpec(LlamaCppSpec):
    """The GGUF baseline: Qwen3.8-27B as Q4_K_M under llama.cpp (~42 tok/s on the rig)."""

    port: int = Field(default=18040, ge=1, le=65535)
    model: str = "gguf-baseline"
    args: list[str] | None = Field(default_factory=lambda: ["--n-gpu-layers", "99", "--flash-attn", "on"])


class ModelSource(StrictModel):
    """Weights to fetch into ``/srv/models/<path>``: a hub repo (``repo_id`` + ``revision``,
    filtered by ``include``/``exclude`` globs), or a ``url`` + ``sha256`` for a file not on the hub.
    The lock (``rigkit models lock``) turns a branch into a commit."""

    repo_id: str | None = operator_value("Hugging Face repo id (or url + sha256)")
    revision: str = "main"
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    url: str | None = None
    sha256: str | None = None
    path: str = Field(min_length=1, description="directory under /srv/models")


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


class MemberSpec(StrictModel):
    """A llama-swap member (``models.<id>`` in llama-swap's config, v250).

    With ``service`` set, rigkit derives ``cmd``/``cmd_stop``/``proxy`` from that section of the
    spec; an operator's own member gives them. ``staged: true`` keeps it out of the live config
    (it is in ``config.staged.yaml`` for review). ``vram_gib`` is GiB while loaded (``None`` for
    HyperQwen: ``gpu_memory_utilization`` x ``gpu_vram_gib``); ``cold_boot_s`` is the measured
    start-to-healthy time in s; ``ttl`` idle seconds before unload, 0 = never.

    ``idle_conn_s`` is how long llama-swap keeps an idle connection to the member for reuse (its
    ``timeouts.idleConn``; upstream's default 90 s, 0 = forever). It must stay below the member
    server's own keep-alive idle timeout (llama.cpp's server, cpp-httplib: 5 s; vLLM's uvicorn: 5 s):
    a POST that llama-swap sends on a connection the member is closing gets ``502`` with an empty
    body, never retried (Go's transport retries only replayable requests; issue #25).
    """

    service: Literal["strata", "gguf_baseline", "hyperqwen"] | None = None
    staged: bool = False
    vram_gib: float | None = Field(default=None, gt=0)
    cold_boot_s: float = Field(gt=0)
    ttl: int = Field(default=0, ge=0)
    unload_timeout_s: int | None = Field(default=None, ge=1)
    cmd: str | None = None
    cmd_stop: str | None = None
    proxy: str | None = None
    check_endpoint: str = "/health"
    idle_conn_s: int = Field(default=2, ge=1, le=4)
    aliases: list[str] = Field(default_factory=list)
    name: str | None = None
    description: str | None = None
    use_model_name: str | None = None
    env: list[str] = Field(default_factory=list)


class GroupSpec(StrictModel):
    """A llama-swap group: ``swap`` (one member at a time inside), ``exclusive`` (loading a
    member evicts other groups), ``persistent`` (never evicted by other groups)."""

    swap: bool = True
    exclusive: bool = True
    persistent: bool = False
    members: list[str] = Field(min_length=1)


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

    version: str = "v250"
    release_url: str = "https://github.com/mostlygeek/llama-swap/releases/download/v250/llama-swap_250_linux_amd64.tar.gz"
    release_sha256: str | None = operator_value("sha256 of the llama-swap release tarball")
    schema_url: str = "https://raw.githubusercontent.com/mostlygeek/llama-swap/v250/config-schema.json"
    schema_sha256: str = "85c0101dbc8a4461bd4c751bc98b3441651a83a8ba855d0473ef6c8f4c2c5666"
    port: int = Field(default=8080, ge=1, le=65535)
    user: str = "llama-swap"
    health_check_timeout_s: int = Field(default=300, ge=15)
    start_port: int = Field(default=5800, ge=1, le=65535)
    log_level: Literal["debug", "info", "warn", "error"] = "info"
    preload: list[str] = Field(default_factory=lambda: ["strata"])
    groups: dict[str, GroupSpec] = Field(
        default_factory=lambda: {"gpu": GroupSpec(members=["strata", "gguf-baseline", "hyperqwen"])}
    )
    members: dict[str, MemberSpec] = Field(default_factory=_default_members)


class BenchSpec(StrictModel):
    """Smoke-bench presets (``rigkit bench``): prompt sizes in tokens, budgets in tokens,
    ``baseline`` a results summary to compare with."""

    baseline: str | None = None
    quoting_prompt_tokens: int = Field(default=29000, ge=64)
    max_tokens: int = Field(default=8192, ge=16)
    reasoning_effort: str | None = "medium"
    sampled_temperature: float = Field(default=0.7, ge=0.0)
    stall_timeout_s: float = Field(default=120.0, gt=0)


class RigSpec(StrictModel):
    """The whole declared rig for one host. Build a valid one with
    :func:`rigkit.validate.spec_from_layers` (or ``rigkit.inventory``), never from a half-merged
    dict: :meth:`from_layers` and :meth:`from_dict` check the models only (types, ranges, unknown
    keys), not the cross-field rules of :mod:`rigkit.validate`."""

    nvidia_driver_version: str = Field(default="610.57", pattern=r"^\d+\.\d+(\.\d+)?$")
    driver_flavour: Literal["nvidia-open-dkms", "nvidia-open", "nvidia-open-lts"] = "nvidia-open-dkms"
    cuda_version: str = Field(default="13.3", pattern=r"^\d+\.\d+$")
    pacman_pins: dict[str, str] | None = operator_value("full pacman versions per pinned package")
    arch_archive_url: str = "https://archive.archlinux.org/packages"
    gpu_power_limit_w: int = Field(default=420, gt=0)
    gpu_power_range_w: PowerRange | None = None
    gpu_vram_gib: float = Field(default=24.0, gt=0)
    vram_reserve_gib: float = Field(default=1.0, ge=0)
    operator_user: str | None = operator_value("the operator's login on the rig")
    legacy_units: list[str] = Field(default_factory=lambda: ["strata.service"])
    paused_timers: list[str] | None = operator_value("timers paused for a window")
    operator_units: list[str] = Field(default_factory=list,
                                      description="the operator's own unit files (paths on the control machine, "
                                                  "relative to the project root), installed as they are; "
                                                  "their timers enabled")
    lock_files: list[str] | None = operator_value("files whose presence means a session holds the GPU")
    hf_endpoint: str | None = Field(default=None, description="Hugging Face hub endpoint; None: huggingface.co")
    models_lock: str | None = Field(default=None, description="the model lock (rigkit models lock), beside the inventory")
    reboot: bool = Field(default=False, strict=False)
    force: bool = Field(default=False, strict=False)
    generations_keep: int = Field(default=10, ge=2, le=1000,
                                  description="generations kept on the host (rigkit generations); the current one "
                                              "and the one before it are never pruned")
    hyperqwen: HyperQwenSpec = Field(default_factory=HyperQwenSpec)
    strata: StrataSpec = Field(default_factory=StrataSpec)
    gguf_baseline: GgufBaselineSpec = Field(default_factory=GgufBaselineSpec)
    llama_swap: LlamaSwapSpec = Field(default_factory=LlamaSwapSpec)
    models: dict[str, ModelSource] = Field(default_factory=_default_models)
    bench: BenchSpec = Field(default_factory=BenchSpec)

    # ----------------------------------------------------------------------------------------
    @classmethod
    def from_layers(cls, layers: Iterable[Mapping[str, Any]], source: str = "spec",
                    labels: list[str] | None = None) -> RigSpec:
        """Validate the models from data layers, **lowest precedence first** (``all`` ... host,
        ``--data``), deep-merged over the model defaults.

        Each layer is first checked alone over the defaults, so a bad value in a lower layer is
        reported (with the layer's label, e.g. ``group_data/all.py``) even when a higher layer
        would replace it. Keys owned by pyinfra pass through (dropped here). Raises
        :class:`SpecError` naming every bad key, its value and what is allowed. The models only:
        :func:`rigkit.validate.spec_from_layers` adds the cross-field checks.
        """
        layers = list(layers)
        base = defaults_dict()
        problems: list[SpecProblem] = []
        merged: dict[str, Any] = {}
        for i, layer in enumerate(layers):
            own, _ = split_pyinfra_keys(layer)
            own, raw_problems = scan_raw(own)
            label = labels[i] if labels and i < len(labels) else f"data layer {i + 1}"
            problems += [p.model_copy(update={"key": f"{p.key} (in {label})"}) for p in raw_problems]
            if own:
                candidate = merge_layers(base, own)
                try:
                    cls.model_validate(candidate)
                except ValidationError as exc:
                    # a member spread over layers is complete only when merged: "missing" waits for that
                    problems += [p.model_copy(update={"key": f"{p.key} (in {label})"})
                                 for p in _problems_from_pydantic(exc, candidate)
                                 if p.allowed != "required" and not _redacted(p)]
            merged = merge_layers(merged, own)
        if problems:
            raise SpecError(problems, source)
        return cls.from_dict(merged, source=source)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "spec") -> RigSpec:
        """Validate the models of one already-merged overrides dict over the defaults; raises
        :class:`SpecError`. The models only: :func:`rigkit.validate.spec_from_dict` adds the
        cross-field checks."""
        data, problems = scan_raw(dict(data))
        base = defaults_dict()
        merged = merge_layers(base, data)
        try:
            spec = cls.model_validate(merged)
        except ValidationError as exc:
            problems += [p for p in _problems_from_pydantic(exc, merged) if not _redacted(p)]
            raise SpecError(problems, source) from None
        if problems:
            raise SpecError(problems, source)
        return spec


def _redacted(problem: SpecProblem) -> bool:
    """A problem about a value :func:`scan_raw` already refused as a secret (and replaced)."""
    return SECRET_SHOWN in problem.value or "<secret-shaped key" in problem.key


# --------------------------------------------------------------------------------------------
# Secrets and control characters: found in the raw data, before any model sees it

#: A Hugging Face user access token (``hf_`` + letters and digits), anywhere in a string or a key.
HF_TOKEN_RE = re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{20,}")
#: A URL carrying a password (``scheme://user:password@host``).
URL_PASSWORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@")
#: A name (key, ``NAME=`` of an env item, ``--flag`` of a command line) that holds a secret.
SECRET_NAME_RE = re.compile(
    r"(?i)(?:^|[^a-z0-9])(?:token|secret|password|passwd|passphrase|credentials?|api[_-]?key|apikey|"
    r"access[_-]?key|private[_-]?key|auth)(?:$|[^a-z0-9])")
#: Names that point at a secret (a file, a path) rather than holding one.
_SECRET_REF_SUFFIXES = ("_file", "-file", "_path", "-path", "_dir", "-dir")
#: Where the secrets live instead (DESIGN.md "Secrets"); the text of every secret problem.
SECRET_ADVICE = ("secrets never go in the spec: the API key lives in /etc/rigkit/secrets/hyperqwen.env, "
                 "the HF token comes from HF_TOKEN or the hf token file")
SECRET_SHOWN = "<secret, not shown>"
#: Keys whose strings may span lines (llama-swap splits commands itself; YAML holds a description).
MULTILINE_KEYS = frozenset({"cmd", "cmd_stop", "description"})


def secret_name(name: str) -> bool:
    """True when ``name`` (a key, an env name, a ``--flag``) is named like a secret:
    ``HF_TOKEN``, ``VLLM_API_KEY``, ``--api-key``, ``password``... but not ``max_tokens`` and not a
    reference to one (``HF_TOKEN_FILE``, ``--api-key-file``)."""
    bare = name.lstrip("-")
    return bool(SECRET_NAME_RE.search(bare)) and not bare.lower().endswith(_SECRET_REF_SUFFIXES)


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _secret_in_words(words: list[str]) -> bool:
    """A secret in a command line or an argument list: ``NAME=value`` / ``--flag=value`` with a
    secret name and a value, or a secret ``--flag`` followed by its value."""
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if eq and value and secret_name(name):
            return True
        if (not eq and word.startswith("-") and secret_name(word) and i + 1 < len(words)
                and not words[i + 1].startswith("-")):
            return True
    return False


def secret_shaped(value: Any) -> bool:
    """True when a string holds a secret: a Hugging Face token, a URL with a password, or a
    secret given as ``NAME=value`` / ``--api-key value`` inside it."""
    if not isinstance(value, str):
        return False
    if HF_TOKEN_RE.search(value) or URL_PASSWORD_RE.search(value):
        return True
    return ("=" in value or " " in value.strip()) and _secret_in_words(_words(value))


_CONTROL_NAMES = {"\n": "line feed", "\r": "carriage return", "\t": "tab", "\x00": "NUL", "\x1b": "escape",
                  "\x7f": "delete"}


def _bad_char(text: str, multiline: bool) -> str | None:
    """The first character no rendered file can hold in this value, as ``U+XXXX (name)``:
    control characters (a newline, tab or NUL outside the multi-line keys), line/paragraph
    separators, lone surrogates, a byte-order mark."""
    for ch in text:
        if multiline and ch in "\n\t":
            continue
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs") or ch == "\ufeff":
            name = _CONTROL_NAMES.get(ch) or unicodedata.name(ch, "control character").lower()
            return f"U+{ord(ch):04X} ({name})"
    return None


def scan_raw(data: Any, loc: tuple[Any, ...] = ()) -> tuple[Any, list[SpecProblem]]:
    """Walk one data layer before any model sees it: returns ``(redacted copy, problems)``.

    Refused (a :class:`SpecProblem` each, the value never shown): a secret-shaped value
    (:func:`secret_shaped`) anywhere, as a value, a list item or a mapping key; any value of a key
    named like a secret (:func:`secret_name`); a secret ``NAME=value`` list item or ``--flag value``
    pair. Refused with the character named: control characters where no rendered file can hold
    them (newline and tab only in :data:`MULTILINE_KEYS`). In the copy each secret is replaced by
    ``"<secret, not shown>"`` (a secret key by ``"<secret-shaped key N>"``), so no later error
    message (pydantic's included) can echo it."""
    problems: list[SpecProblem] = []

    def secret(at: tuple[Any, ...]) -> None:
        problems.append(SpecProblem(key=_fmt_loc(at) or "(root)", value=SECRET_SHOWN, allowed=SECRET_ADVICE))

    def walk(value: Any, at: tuple[Any, ...]) -> Any:
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            for n, (key, item) in enumerate(value.items()):
                if isinstance(key, str) and secret_shaped(key):
                    shown = f"<secret-shaped key {n + 1}>"
                    secret((*at, shown))
                    out[shown] = SECRET_SHOWN
                    continue
                if isinstance(key, str) and secret_name(key) and item not in (None, "", False, [], {}):
                    secret((*at, key))
                    out[key] = SECRET_SHOWN
                    continue
                if isinstance(key, str) and (bad := _bad_char(key, False)):
                    problems.append(SpecProblem(key=_fmt_loc((*at, repr(key))), value="key",
                                                allowed=f"control character {bad} in a key"))
                out[key] = walk(item, (*at, key))
            return out
        if isinstance(value, (list, tuple)):
            if all(isinstance(v, str) for v in value) and _secret_in_words(list(value)):
                secret(at)
                return [SECRET_SHOWN]
            return [walk(v, (*at, i)) for i, v in enumerate(value)]
        if isinstance(value, str):
            if secret_shaped(value):
                secret(at)
                return SECRET_SHOWN
            key = next((p for p in reversed(at) if isinstance(p, str)), "")
            bad = _bad_char(value, key in MULTILINE_KEYS)
            if bad:
                problems.append(SpecProblem(
                    key=_fmt_loc(at), value=repr(value),
                    allowed=f"control character {bad}: no rendered file can hold it here (it would start a new "
                            f"line or be reinterpreted); only {', '.join(sorted(MULTILINE_KEYS))} may span lines"))
        return value

    return walk(data, loc), problems


# --------------------------------------------------------------------------------------------
# Merging


def defaults_dict() -> dict[str, Any]:
    """The model defaults as plain data (the lowest layer of the merge)."""
    return RigSpec().model_dump(mode="python")


def merge_layers(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``overlay`` over ``base``: dicts merge key by key, anything else (lists,
    scalars, ``None``) replaces. Neither input is modified."""
    out = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_layers(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# --------------------------------------------------------------------------------------------
# pyinfra-owned keys


def pyinfra_owned_keys() -> frozenset[str]:
    """Data keys pyinfra and its connectors own (pass through the spec): every global
    operation argument (``_sudo`` ...) and every connector's ``data_meta`` key (``ssh_port`` ...),
    read from pyinfra 3.10 itself, plus the chroot connector's ``chroot_directory``."""
    import importlib
    import pkgutil

    import pyinfra.connectors as connectors
    from pyinfra.api.arguments import all_global_arguments

    keys = {name for name, _type in all_global_arguments() if name.startswith("_")}
    for mod_info in pkgutil.iter_modules(connectors.__path__):
        try:
            mod = importlib.import_module(f"pyinfra.connectors.{mod_info.name}")
        except Exception:  # an optional connector whose dependency is missing
            continue
        for obj in vars(mod).values():
            meta = getattr(obj, "data_meta", None)
            if isinstance(meta, dict):
                keys.update(meta)
    keys.add("chroot_directory")
    return frozenset(keys)


_CONNECTOR_PREFIXES = ("ssh_", "docker_", "chroot_", "local_", "fake_", "winrm_", "podman_")


def split_pyinfra_keys(data: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split one data layer into ``(rigkit keys, pyinfra keys)``.

    A key is pyinfra's when it is in :func:`pyinfra_owned_keys`. Unknown underscore keys and
    unknown connector-prefixed keys stay on the rigkit side, so validation names them.
    """
    owned = _owned_cache()
    ours: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    for key, value in data.items():
        (theirs if key in owned else ours)[key] = value
    return ours, theirs


_OWNED: frozenset[str] | None = None


def _owned_cache() -> frozenset[str]:
    global _OWNED
    if _OWNED is None:
        _OWNED = pyinfra_owned_keys()
    return _OWNED


# --------------------------------------------------------------------------------------------
# Pydantic errors -> SpecProblems


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """Allowed field names at the level that holds ``loc[-1]``."""
    parent = loc[:-1]
    model: Any = RigSpec
    i = 0
    import typing

    while i < len(parent):
        part = parent[i]
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return []
        field = model.model_fields.get(part)
        if field is None:
            return []
        ann = field.annotation
        nxt: Any = None
        skip_key = False
        for cand in [ann, *typing.get_args(ann)]:
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                nxt = cand
                break
            if typing.get_origin(cand) is dict:
                val = typing.get_args(cand)[1]
                if isinstance(val, type) and issubclass(val, BaseModel):
                    nxt, skip_key = val, True
                    break
        model = nxt
        i += 2 if skip_key else 1
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # pydantic adds union branch / function tags ('function-after[...]', 'str', 'int') to locs
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in {"str", "int", "float", "bool", "list[str]", "dict[str,str]", "none"})))


def _problems_from_pydantic(exc: ValidationError, data: Mapping[str, Any]) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    seen: set[str] = set()
    for err in exc.errors(include_url=False):
        loc = _clean_loc(tuple(err["loc"]))
        key = _fmt_loc(loc)
        if err["type"] == "extra_forbidden":
            allowed = _fields_at(loc)
            hint = did_you_mean(str(loc[-1]), allowed)
            owned_hint = ""
            if str(loc[-1]).startswith("_") or str(loc[-1]).startswith(_CONNECTOR_PREFIXES):
                owned_hint = did_you_mean(str(loc[-1]), _owned_cache())
            problem = SpecProblem(key=key, value="unknown key",
                                  allowed=f"not a rigkit or pyinfra key{hint or owned_hint}")
        else:
            value = err.get("input")
            shown = f"{value!r} ({type(value).__name__})" if value is not None else "None"
            if secret_shaped(value) or SECRET_SHOWN in shown:  # never echo a secret, whatever the path
                shown = SECRET_SHOWN
            problem = SpecProblem(key=key, value=shown, allowed=_allowed_text(err))
        if str(problem) not in seen:
            seen.add(str(problem))
            problems.append(problem)
    return problems


def _allowed_text(err: Mapping[str, Any]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    table = {
        "int_type": "expected an integer",
        "float_type": "expected a number",
        "bool_type": "expected true or false",
        "string_type": "expected a string",
        "list_type": "expected a list",
        "dict_type": "expected a mapping",
        "model_type": "expected a mapping",
        "missing": "required",
    }
    if kind in table:
        return table[kind]
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected')}"
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        return err["msg"].replace("Input should be", "must be")
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}"
    return err["msg"]


# --------------------------------------------------------------------------------------------
# Operator-supplied values


def unset_operator_values(spec: RigSpec) -> list[str]:
    """Dotted keys of operator-supplied values still unset (``None``; an empty string given for
    one is ``None`` too, :class:`StrictModel`), in declaration order.

    Model sources count as one value each: a hub ``repo_id``, or ``url`` + ``sha256``.
    """
    out: list[str] = []

    def walk(model: BaseModel, prefix: str) -> None:
        for name, field in type(model).model_fields.items():
            value = getattr(model, name)
            key = f"{prefix}{name}"
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            if isinstance(model, ModelSource) and name == "repo_id":
                if value is None and not (model.url and model.sha256):
                    out.append(key)
                continue
            if extra.get("operator") and value is None:
                out.append(key)
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
