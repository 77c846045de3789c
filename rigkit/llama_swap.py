"""llama-swap v250's config file as a strict model: every key llama-swap knows, nothing else.

llama-swap decodes its YAML without ``KnownFields`` and its schema has no top-level
``additionalProperties: false``, so a typo (``cmd_stop``, ``readyTimeout``, a group ``preload``)
is silently ignored (``notes/llama-swap.md`` §1.1, issue #1013). :func:`strict_problems` refuses
unknown keys at every level; the upstream schema (:mod:`rigkit.checks`) checks the rest. Keys
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


def strict_problems(data: Any) -> list[str]:
    """Problems of a parsed llama-swap config against the strict model, one line each
    (``"models.strata.cmd_stop: unknown key (llama-swap ignores it silently)"``); empty when clean."""
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
    return []
