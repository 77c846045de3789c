"""llama-swap v250's config file as a strict model with Go's types, and the rules its loader applies
after decoding (upstream tag v250, commit ``60226b63776e``: ``internal/config/*.go``).

llama-swap decodes its YAML without ``KnownFields`` and its schema has no top-level
``additionalProperties: false``, so a typo (``cmd_stop``, ``readyTimeout``, a group ``preload``)
is silently ignored (``notes/llama-swap.md`` §1.1, issue #1013). :func:`strict_problems` refuses
unknown keys at every level and values ``gopkg.in/yaml.v3`` cannot decode into upstream's Go types;
:mod:`rigkit.spec.llama_swap_rules` adds the loader's own rules (bounds, aliases, routing, groups, peers,
selectors, profiles) and its clamps as warnings; :func:`schema_problems` reads upstream's
``config-schema.json``. All judge a config after :mod:`rigkit.spec.llama_swap_load` has expanded its macros.
"""

from __future__ import annotations

from typing import Any

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


#: The largest number llama-swap holds in its ``int`` fields (Go's int on the rig's amd64, 64-bit): a larger
#: ttl or timeout makes it refuse the whole config; the spec's bounds use it too.
GO_INT_MAX = 2**63 - 1
GO_INT = (-GO_INT_MAX - 1, GO_INT_MAX)


def _shown(value: Any) -> str:
    """``repr(value)`` cut to 60 characters: a message names the value without flooding the terminal."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}… ({len(text) - 60} more characters)"


def _go_int(value: Any) -> Any:
    """A YAML value decoded into a Go ``int`` the way ``gopkg.in/yaml.v3`` decodes it on amd64: an integer
    within int64; a float truncated toward zero (a fractional one is a warning of
    :func:`rigkit.spec.llama_swap_rules.loader_problems`); null as 0; a string or a bool is refused
    (``cannot unmarshal !!str into int``).

    Past int64's ends (held to llama-swap 250's own loader by tests/unit/test_llama_swap_load.py): a
    positive integer or a float above 2**63 is refused (yaml.v3 resolves it as a uint64 or a float,
    neither of which fits ``int``); NaN is refused. yaml.v3 accepts a float with ``resolved <=
    math.MaxInt64`` — float64(MaxInt64) is 2**63 — and converts it with ``int64(resolved)``, which on
    amd64 gives MinInt64 for any value outside int64's range: so an integer below MinInt64 (resolved as a
    float, ParseInt having failed), -inf, and 2**63 itself all decode as -9223372036854775808."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"cannot unmarshal {_shown(value)} into a Go int: a whole number is needed")
    if isinstance(value, float):
        if value != value or value > 2.0**63:
            raise ValueError(f"{_shown(value)} does not fit a Go int (64-bit)")
        return int(value) if GO_INT[0] <= value < 2.0**63 else GO_INT[0]
    if value > GO_INT[1]:
        raise ValueError(f"{_shown(value)} does not fit a Go int (64-bit: {GO_INT[0]}..{GO_INT[1]})")
    return max(value, GO_INT[0])


def _go_str(value: Any) -> Any:
    """A YAML value decoded into a Go ``string``: yaml.v3 takes any scalar's text; a list or a mapping is
    refused."""
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        raise ValueError("cannot unmarshal a list or a mapping into a string")
    return value if isinstance(value, str) else str(value)


def _go_bool(value: Any) -> Any:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(f"cannot unmarshal {_shown(value)} into a Go bool: true or false")
    return value


def _go_list(value: Any) -> Any:
    """A YAML sequence decoded into a Go slice: yaml.v3 leaves a null element out."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError("cannot unmarshal a scalar or a mapping into a list")
    return [v for v in value if v is not None]


def _go_struct_map(value: Any) -> Any:
    """A YAML mapping decoded into a Go ``map[string]Struct``: yaml.v3 keeps a null value as the zero struct."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("cannot unmarshal a scalar or a list into a mapping")
    return {k: {} if v is None else v for k, v in value.items()}


def _go_map(value: Any) -> Any:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("cannot unmarshal a scalar or a list into a mapping")
    return value


GoInt = Annotated[int, BeforeValidator(_go_int)]
GoStr = Annotated[str, BeforeValidator(_go_str)]
GoBool = Annotated[bool, BeforeValidator(_go_bool)]
GoStrList = Annotated[list[GoStr], BeforeValidator(_go_list)]
GoMap = Annotated[dict[str, Any], BeforeValidator(_go_map)]
StructMap = BeforeValidator(_go_struct_map)


class Group(_Strict):
    """``routing.router.settings.groups.<name>`` (or legacy top-level ``groups``)."""

    swap: GoBool = True
    exclusive: GoBool = True
    persistent: GoBool = False
    members: GoStrList = Field(default_factory=list)


class Timeouts(_Strict):
    """``models.<id>.timeouts`` (seconds, 0 = none): the member's reverse-proxy transport
    (internal/config/model_config.go:59-68, defaults :141-147; used in internal/process/process_command.go:419-433)."""

    connect: GoInt | None = None
    keepalive: GoInt | None = None
    responseHeader: GoInt | None = None
    tlsHandshake: GoInt | None = None
    expectContinue: GoInt | None = None
    idleConn: GoInt | None = None


class Filters(_Strict):
    """``models.<id>.filters`` and ``peers.<id>.filters`` (filters.go:15-30; ``strip_params`` is the legacy
    spelling model_config.go:184-196 still reads)."""

    stripParams: GoStr | None = None
    strip_params: GoStr | None = None
    setParams: GoMap | None = None
    setParamsByID: dict[str, GoMap] | None = None


class Capabilities(_Strict):
    """``models.<id>.capabilities`` (model_config.go:24-31)."""

    in_: GoStrList | None = Field(default=None, alias="in")
    out: GoStrList | None = None
    tools: GoBool | None = None
    reranker: GoBool | None = None
    context: GoInt | None = None


class Compat(_Strict):
    ignoreWebsockets: GoBool | None = None


class Model(_Strict):
    """``models.<id>``: one member (model_config.go:77-121)."""

    macros: GoMap | None = None
    cmd: GoStr
    cmdStop: GoStr | None = None
    name: GoStr | None = None
    description: GoStr | None = None
    env: GoStrList | None = None
    proxy: GoStr | None = None
    aliases: GoStrList | None = None
    checkEndpoint: GoStr | None = None
    ttl: GoInt | None = None
    unloadTimeout: GoInt | None = None
    useModelName: GoStr | None = None
    filters: Filters | None = None
    metadata: GoMap | None = None
    concurrencyLimit: GoInt | None = None
    sendLoadingState: GoBool | None = None
    unlisted: GoBool | None = None
    timeouts: Timeouts | None = None
    compat: Compat | None = None
    capabilities: Capabilities | None = None


class OnStartup(_Strict):
    preload: GoStrList = Field(default_factory=list)


class Hooks(_Strict):
    on_startup: OnStartup | None = None


class Matrix(_Strict):
    """``matrix`` / ``routing.router.settings.matrix`` (matrix.go:13-19): ``sets`` in the matrix language."""

    vars: dict[str, GoStr] | None = None
    evict_costs: dict[str, GoInt] | None = None
    sets: dict[str, GoStr] | None = None


class Fifo(_Strict):
    priority: dict[str, GoInt] | None = None


class SchedulerSettings(_Strict):
    fifo: Fifo | None = None


class Scheduler(_Strict):
    """``routing.scheduler`` (config.go:203-214)."""

    use: GoStr | None = None
    settings: SchedulerSettings | None = None


class Peer(_Strict):
    """``peers.<id>`` (peer.go:10-18)."""

    proxy: GoStr | None = None
    apiKey: GoStr | None = None
    models: GoStrList | None = None
    filters: Filters | None = None
    timeouts: Timeouts | None = None


class SelectorSettings(_Strict):
    spillover: GoInt | None = None


class Selector(_Strict):
    """``selectors.<id>`` (selectors.go:22-31)."""

    strategy: GoStr | None = None
    targets: GoStrList | None = None
    settings: SelectorSettings | None = None
    name: GoStr | None = None
    description: GoStr | None = None
    unlisted: GoBool | None = None
    metadata: GoMap | None = None


class Profile(_Strict):
    """``profiles.<id>`` (config.go:104-110); a list is the removed legacy syntax."""

    description: GoStr | None = None
    pins: dict[str, GoStr | None] | None = None


class Store(_Strict):
    path: GoStr | None = None


class UIActivity(_Strict):
    session_id: GoStrList | None = None


class UI(_Strict):
    activity: UIActivity | None = None


class Performance(_Strict):
    """``performance`` (performance.go:9-12): ``every`` a Go duration (``5s``), checked by
    :func:`rigkit.spec.llama_swap_rules.loader_problems`."""

    disabled: GoBool | None = None
    every: Any = None


class Upstream(_Strict):
    ignorePaths: GoStrList | None = None


class RouterSettings(_Strict):
    groups: Annotated[dict[str, Group], StructMap] | None = None
    matrix: Matrix | None = None


class Router(_Strict):
    use: GoStr | None = None
    settings: RouterSettings | None = None


class Routing(_Strict):
    router: Router | None = None
    scheduler: Scheduler | None = None


class Config(_Strict):
    """The whole file (v250, config.go:137-190). ``models`` may be absent: llama-swap then loads with
    none (a config of peers alone)."""

    healthCheckTimeout: GoInt | None = None
    logRequests: GoBool | None = None
    globalTTL: GoInt | None = None
    unloadTimeout: GoInt | None = None
    logLevel: GoStr | None = None
    logTimeFormat: GoStr | None = None
    metricsMaxInMemory: GoInt | None = None
    captureBuffer: GoInt | None = None
    store: Store | None = None
    ui: UI | None = None
    performance: Performance | None = None
    startPort: GoInt | None = None
    sendLoadingState: GoBool | None = None
    includeAliasesInList: GoBool | None = None
    macros: GoMap | None = None
    profiles: Annotated[dict[str, Profile], StructMap] | None = None
    selectors: Annotated[dict[str, Selector], StructMap] | None = None
    models: Annotated[dict[str, Model], StructMap] | None = None
    groups: Annotated[dict[str, Group], StructMap] | None = None
    matrix: Matrix | None = None
    hooks: Hooks | None = None
    logToStdout: GoStr | None = None
    apiKeys: GoStrList | None = None
    peers: Annotated[dict[str, Peer], StructMap] | None = None
    upstream: Upstream | None = None
    routing: Routing | None = None


#: The top-level keys llama-swap decodes (config.go's yaml tags).
TOP_LEVEL_KEYS = frozenset(Config.model_fields)


def strict_problems(data: Any) -> list[str]:
    """Problems of a parsed llama-swap config against the strict model, one line each
    (``"models.strata.cmd_stop: unknown key (llama-swap ignores it silently)"``); empty when clean:
    unknown keys (rigkit's own rule: llama-swap ignores them) and values llama-swap's YAML library
    cannot decode into its types (a string for an int, a number beyond 64 bits, a scalar for a list)."""
    try:
        Config.model_validate(data)
    except ValidationError as exc:
        out = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
            if err["type"] == "extra_forbidden":
                out.append(f"{loc}: unknown key (llama-swap ignores it silently)")
            else:
                out.append(f"{loc}: {err['msg'].removeprefix('Value error, ')}")
        return out
    return []


#: How much of one schema message is shown: jsonschema quotes the whole offending value, which may be a
#: 100 kB string (issue #28: a long value must not flood the terminal or the CI log).
MESSAGE_CHARS = 300


def schema_problems(data: Any, schema: dict) -> list[str]:
    """Upstream's ``config-schema.json`` (draft-07) on an expanded config, one line per error, the value
    shortened to 300 characters. Left out: ``healthCheckTimeout``'s ``minimum`` (the loader clamps it:
    :func:`rigkit.spec.llama_swap_rules.loader_problems` warns, naming the value it uses) and
    ``required: models`` (the loader loads a config without models)."""
    import jsonschema

    out = []
    for e in sorted(jsonschema.Draft7Validator(schema).iter_errors(data), key=lambda e: list(map(str, e.path))):
        path = ".".join(map(str, e.path))
        if path == "healthCheckTimeout" and e.validator == "minimum":
            continue
        if not path and e.validator == "required" and e.validator_value == ["models"]:
            continue
        message = e.message if len(e.message) <= MESSAGE_CHARS else \
            f"{e.message[:MESSAGE_CHARS]}… ({len(e.message) - MESSAGE_CHARS} more characters)"
        out.append(f"{path or '(root)'}: {message} (llama-swap's schema)")
    return out
