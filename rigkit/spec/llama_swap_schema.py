"""llama-swap v250's config file as a strict model: every key llama-swap knows, nothing else.

llama-swap decodes its YAML without ``KnownFields`` and its schema has no top-level
``additionalProperties: false``, so a typo (``cmd_stop``, ``readyTimeout``, a group ``preload``)
is silently ignored (``notes/llama-swap.md`` §1.1, issue #1013). :func:`strict_problems` refuses
unknown keys at every level; the upstream schema (:mod:`rigkit.render.checks`) checks the rest. Keys
from upstream's ``config-schema.json`` at v250 (commit ``f94c94ac``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Group(_Strict):
    """``routing.router.settings.groups.<name>`` (or legacy top-level ``groups``)."""

    swap: bool = True
    exclusive: bool = True
    persistent: bool = False
    members: list[str]


class Timeouts(_Strict):
    """``models.<id>.timeouts`` (seconds, 0 = none): the member's reverse-proxy transport
    (internal/config/model_config.go:59-68, defaults :141-147; used in internal/process/process_command.go:419-433)."""

    connect: int | None = None
    keepalive: int | None = None
    responseHeader: int | None = None
    tlsHandshake: int | None = None
    expectContinue: int | None = None
    idleConn: int | None = None


class Model(_Strict):
    """``models.<id>``: one member."""

    macros: dict[str, Any] | None = None
    cmd: str
    cmdStop: str | None = None
    name: str | None = None
    description: str | None = None
    env: list[str] | None = None
    proxy: str | None = None
    aliases: list[str] | None = None
    checkEndpoint: str | None = None
    ttl: int | None = None
    unloadTimeout: int | None = None
    useModelName: str | None = None
    filters: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    concurrencyLimit: int | None = None
    sendLoadingState: bool | None = None
    unlisted: bool | None = None
    timeouts: Timeouts | None = None
    compat: dict[str, Any] | None = None
    capabilities: dict[str, Any] | None = None


class OnStartup(_Strict):
    preload: list[str] = Field(default_factory=list)


class Hooks(_Strict):
    on_startup: OnStartup | None = None


class RouterSettings(_Strict):
    groups: dict[str, Group] | None = None
    matrix: dict[str, Any] | None = None


class Router(_Strict):
    use: str | None = None
    settings: RouterSettings | None = None


class Routing(_Strict):
    router: Router | None = None
    scheduler: dict[str, Any] | None = None


class Config(_Strict):
    """The whole file (v250)."""

    healthCheckTimeout: int | None = None
    globalTTL: int | None = None
    unloadTimeout: int | None = None
    logLevel: str | None = None
    logTimeFormat: str | None = None
    metricsMaxInMemory: int | None = None
    captureBuffer: int | None = None
    store: dict[str, Any] | None = None
    ui: dict[str, Any] | None = None
    performance: dict[str, Any] | None = None
    startPort: int | None = None
    sendLoadingState: bool | None = None
    includeAliasesInList: bool | None = None
    macros: dict[str, Any] | None = None
    profiles: dict[str, Any] | None = None
    selectors: dict[str, Any] | None = None
    models: dict[str, Model]
    groups: dict[str, Group] | None = None
    matrix: dict[str, Any] | None = None
    hooks: Hooks | None = None
    logToStdout: str | None = None
    apiKeys: list[str] | None = None
    peers: dict[str, Any] | None = None
    upstream: dict[str, Any] | None = None
    routing: Routing | None = None


RESERVED_MACROS = ("PID", "PORT", "MODEL_ID")  # internal/config/macros.go:52-54


def strict_problems(data: Any) -> list[str]:
    """Problems of a parsed llama-swap config against the strict model, one line each
    (``"models.strata.cmd_stop: unknown key (llama-swap ignores it silently)"``); empty when clean.
    Besides unknown keys, two of v250's load errors that the schema cannot express: a macro named
    ``PID``/``PORT``/``MODEL_ID`` (reserved, macros.go:52-54) and the legacy top-level ``groups``/``matrix``
    beside ``routing.router`` (load.go:189-198)."""
    out = _load_problems(data) if isinstance(data, dict) else []
    try:
        Config.model_validate(data)
    except ValidationError as exc:
        out = []
        for err in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                out.append(f"{loc}: unknown key (llama-swap ignores it silently)")
            else:
                out.append(f"{loc}: {err['msg']}")
    return out


def _load_problems(data: dict) -> list[str]:
    out = []
    scopes = [("macros", data.get("macros"))] + [
        (f"models.{mid}.macros", m.get("macros")) for mid, m in (data.get("models") or {}).items() if isinstance(m, dict)]
    for where, macros in scopes:
        for name in (macros or {}) if isinstance(macros, dict) else ():
            if name in RESERVED_MACROS:
                out.append(f"{where}.{name}: macro name '{name}' is reserved (llama-swap refuses the config)")
    router = ((data.get("routing") or {}).get("router") or {}) if isinstance(data.get("routing"), dict) else {}
    settings = router.get("settings") or {} if isinstance(router, dict) else {}
    has_routing = bool(router.get("use") or settings.get("matrix") is not None or settings.get("groups"))
    if (data.get("matrix") is not None or data.get("groups")) and has_routing:
        out.append("groups: the legacy top-level 'groups'/'matrix' and 'routing.router' cannot both be used "
                   "(llama-swap refuses the config)")
    return out


def env_macro_problems(data: Any, where: str = "") -> list[str]:
    """``${env.VAR}`` in any value of a config rigkit renders: llama-swap substitutes them at load and
    fails the load when VAR is unset (internal/config/macros.go:452-486), and ``llama-swap.service`` gives
    it no environment of rigkit's, so such a value would only ever fail an activation."""
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in env_macro_problems(v, f"{where}.{k}" if where else str(k))]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in env_macro_problems(v, f"{where}[{i}]")]
    if isinstance(data, str) and "${env." in data:
        return [f"{where}: {data!r} uses an ${{env.…}} macro: llama-swap fails its load when the variable is unset, "
                "and its unit sets none"]
    return []
