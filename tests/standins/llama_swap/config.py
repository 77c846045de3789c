"""Config loading for the llama-swap stand-in, held to upstream v250's loader.

Upstream source (mostlygeek/llama-swap): ``internal/config/load.go``
(``LoadConfigFromReader``), ``config.go``, ``model_config.go``, ``macros.go``,
``commands.go``, ``performance.go``. Error strings are copied verbatim from those
files; where upstream's wording could not be confirmed in source, the docstring of
the raising function says so.

Order (as upstream): ``${env.VAR}`` substitution on the raw text, YAML decode with
defaults (unknown keys ignored), clamps and checks, per-model macro expansion and
``${PORT}`` assignment in sorted model-ID order, routing normalisation, preload
clean-up. Python 3.9+ stdlib plus PyYAML (bundled in the zipapp).
"""

from __future__ import annotations

import copy
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import yaml

DEFAULT_GROUP_ID = "(default)"
DEFAULT_UNLOAD_TIMEOUT = 10
MODEL_CONFIG_DEFAULT_TTL = -1
LOG_TO_STDOUT = ("proxy", "upstream", "both", "none")
VALID_MODALITIES = ("text", "audio", "image")

MACRO_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]+$")
MACRO_PATTERN_RE = re.compile(r"\$\{([a-zA-Z0-9_-]+)\}")
ENV_MACRO_RE = re.compile(r"\$\{env\.([a-zA-Z_][a-zA-Z0-9_]*)\}")


class ConfigError(Exception):
    """A hard error from loading: ``str(err)`` is upstream's message verbatim."""


# --------------------------------------------------------------------------- helpers


def go_quote(s: str) -> str:
    """Go's ``%q`` for plain strings (double quotes, backslash escapes)."""
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_DUR_UNITS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DUR_RE = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def parse_go_duration(text: str) -> int:
    """Parse a Go ``time.ParseDuration`` string ("15s", "1h30m") into nanoseconds.

    Raises ValueError with Go's message (``time: invalid duration "x"``).
    """
    s = text.strip()
    orig = s
    if s in ("0", "+0", "-0"):
        return 0
    sign = 1
    if s[:1] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if not s:
        raise ValueError("time: invalid duration " + go_quote(orig))
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _DUR_RE.match(s, pos)
        if not m or m.group(1) in ("", "."):
            if m is None and re.match(r"[0-9.]+$", s[pos:]):
                raise ValueError("time: missing unit in duration " + go_quote(orig))
            raise ValueError("time: invalid duration " + go_quote(orig))
        total += float(m.group(1)) * _DUR_UNITS[m.group(2)]
        pos = m.end()
    return sign * int(round(total))


def format_go_duration(ns: int) -> str:
    """Go's ``time.Duration.String()``: 15s, 2m0s, 1h0m0s, 500ms, 5ns, 1.5s."""
    if ns == 0:
        return "0s"
    neg = ns < 0
    u = abs(ns)

    def frac(v: int, prec: int) -> str:
        whole, rest = divmod(v, 10**prec)
        if rest == 0:
            return str(whole)
        digits = str(rest).rjust(prec, "0").rstrip("0")
        return "%d.%s" % (whole, digits)

    if u < 1_000_000_000:
        if u < 1_000:
            out = "%dns" % u
        elif u < 1_000_000:
            out = frac(u, 3) + "\u00b5s"
        else:
            out = frac(u, 6) + "ms"
    else:
        secs_ns = u % 60_000_000_000
        mins_total = u // 60_000_000_000
        out = frac(secs_ns, 9) + "s"
        if mins_total:
            hours, mins = divmod(mins_total, 60)
            out = "%dm" % mins + out
            if hours:
                out = "%dh" % hours + out
    return ("-" if neg else "") + out


def _yaml_tag(v: Any) -> str:
    if isinstance(v, bool):
        return "!!bool"
    if isinstance(v, int):
        return "!!int"
    if isinstance(v, float):
        return "!!float"
    if isinstance(v, str):
        return "!!str"
    if isinstance(v, list):
        return "!!seq"
    if isinstance(v, dict):
        return "!!map"
    return "!!null"


def _unmarshal_error(v: Any, into: str) -> ConfigError:
    # yaml.v3's wording; the "line N:" prefix upstream prints is not reproduced.
    shown = "" if isinstance(v, (list, dict)) else " `%s`" % v
    return ConfigError("yaml: unmarshal errors:\n  cannot unmarshal %s%s into %s" % (_yaml_tag(v), shown, into))


def _int(v: Any, default: int) -> int:
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise _unmarshal_error(v, "int")
    return v


def _bool(v: Any, default: bool) -> bool:
    if v is None:
        return default
    if not isinstance(v, bool):
        raise _unmarshal_error(v, "bool")
    return v


def _str(v: Any, default: str = "") -> str:
    if v is None:
        return default
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if not isinstance(v, str):
        raise _unmarshal_error(v, "string")
    return v


def _str_list(v: Any) -> List[str]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _unmarshal_error(v, "[]string")
    return [_str(x) for x in v]


def _map(v: Any, into: str) -> Dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _unmarshal_error(v, into)
    return v


def _macro_str(v: Any) -> str:
    """Go's ``fmt.Sprintf("%v", value)`` for macro values."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        r = repr(v)
        return r[:-2] if r.endswith(".0") else r
    return str(v)


def strip_comments(cmd: str) -> str:
    """Drop lines whose first non-blank char is ``#`` (upstream ``StripComments``)."""
    return "\n".join(l for l in cmd.split("\n") if not l.strip().startswith("#"))


def sanitize_command(cmd: str) -> List[str]:
    """Split ``cmd`` like upstream ``SanitizeCommand``: comment lines and trailing
    backslashes stripped, then POSIX shlex; no shell. Raises ConfigError("empty command")."""
    lines = []
    for line in cmd.split("\n"):
        t = line.strip()
        if t.startswith("#"):
            continue
        if t.endswith("\\"):
            lines.append(t[:-1] + " ")
        else:
            lines.append(line)
    try:
        args = shlex.split("\n".join(lines), comments=False, posix=True)
    except ValueError as e:
        raise ConfigError(str(e))
    if not args:
        raise ConfigError("empty command")
    return args


# --------------------------------------------------------------------------- macros


def substitute_env_macros(text: str) -> str:
    """Replace ``${env.VAR}`` in the raw YAML text (upstream ``substituteEnvMacros``).

    Only references outside YAML comments count (the text is scanned after a
    load/dump round trip). Raises ConfigError ``environment variable 'X' is not set``.
    """
    try:
        scan = yaml.safe_dump(yaml.safe_load(text))
    except yaml.YAMLError:
        scan = text
    result = text
    for m in ENV_MACRO_RE.finditer(scan):
        name = m.group(1)
        if name not in os.environ:
            raise ConfigError("environment variable '%s' is not set" % name)
        value = os.environ[name]
        if any(c in value for c in "\n\r\x00"):
            raise ConfigError(
                "environment variable '%s' contains newlines or null bytes which are not allowed in YAML substitution"
                % name
            )
        value = value.replace("\\", "\\\\").replace('"', '\\"')
        result = result.replace(m.group(0), value)
    return result


def validate_macro(name: str, value: Any) -> None:
    """Upstream ``validateMacro``. ``PID`` is reserved as well (config.example.yaml's
    comment says so; the source read reserves only PORT and MODEL_ID, same wording)."""
    if len(name) >= 64:
        raise ConfigError("macro name '%s' exceeds maximum length of 63 characters" % name)
    if not MACRO_NAME_RE.match(name):
        raise ConfigError("macro name '%s' contains invalid characters, must match pattern ^[a-zA-Z0-9_-]+$" % name)
    slug = "${%s}" % name
    if isinstance(value, str):
        if slug in value:
            raise ConfigError("macro '%s' contains self-reference" % name)
    elif isinstance(value, (bool, int, float)):
        pass
    elif isinstance(value, dict):
        if slug in yaml.safe_dump(value):
            raise ConfigError("macro '%s' contains self-reference" % name)
    else:
        raise ConfigError(
            "macro '%s' has invalid type %s, must be a scalar type (string, int, float, or bool) or a map"
            % (name, "[]interface {}" if isinstance(value, list) else "<nil>")
        )
    if name in ("PORT", "MODEL_ID", "PID"):
        raise ConfigError("macro name '%s' is reserved" % name)


def substitute_in_value(value: Any, name: str, macro_value: Any) -> Any:
    """Type-preserving macro substitution (upstream ``substituteMacroInValue``)."""
    slug = "${%s}" % name
    if isinstance(value, str):
        if value == slug:
            return macro_value
        if slug in value:
            if isinstance(macro_value, (dict, list)):
                raise ConfigError(
                    "macro '%s' has a non-scalar value and can only be used as a whole value, not interpolated into a string"
                    % name
                )
            return value.replace(slug, _macro_str(macro_value))
        return value
    if isinstance(value, dict):
        return {k: substitute_in_value(v, name, macro_value) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_in_value(v, name, macro_value) for v in value]
    return value


def validate_nested(value: Any, context: str) -> None:
    """Upstream ``validateNestedForUnknownMacros``."""
    if isinstance(value, str):
        m = MACRO_PATTERN_RE.search(value)
        if m:
            raise ConfigError("%s: unknown macro '${%s}'" % (context, m.group(1)))
        m = ENV_MACRO_RE.search(value)
        if m:
            raise ConfigError("%s: environment variable '%s' not set" % (context, m.group(1)))
    elif isinstance(value, dict):
        for v in value.values():
            validate_nested(v, context)
    elif isinstance(value, list):
        for v in value:
            validate_nested(v, context)


def _macro_list(v: Any) -> List[tuple]:
    if v is None:
        return []
    if not isinstance(v, dict):
        raise ConfigError("macros must be a mapping")
    return [(str(k), val) for k, val in v.items()]


# --------------------------------------------------------------------------- model


@dataclass
class GroupConfig:
    """One routing group: ``swap``/``exclusive`` default true, ``persistent`` false."""

    swap: bool = True
    exclusive: bool = True
    persistent: bool = False
    members: List[str] = field(default_factory=list)


@dataclass
class ModelConfig:
    """One model after loading: macros expanded, ``${PORT}`` assigned, ttl/unloadTimeout
    resolved (seconds). ``cmd``/``cmd_stop`` keep their text; split at start time."""

    cmd: str = ""
    cmd_stop: str = ""
    proxy: str = "http://localhost:${PORT}"
    aliases: List[str] = field(default_factory=list)
    env: List[str] = field(default_factory=list)
    check_endpoint: str = "/health"
    ttl: int = MODEL_CONFIG_DEFAULT_TTL
    unload_timeout: int = 0
    unlisted: bool = False
    use_model_name: str = ""
    name: str = ""
    description: str = ""
    concurrency_limit: int = 0
    strip_params: str = ""
    set_params: Dict[str, Any] = field(default_factory=dict)
    set_params_by_id: Dict[str, Any] = field(default_factory=dict)
    metadata: Dict[str, Any] = field(default_factory=dict)
    send_loading_state: Optional[bool] = None
    health_check_timeout: int = 120
    capabilities: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Config:
    """A loaded config. Times in seconds; ``groups`` includes ``(default)``."""

    health_check_timeout: int = 120
    log_level: str = "info"
    log_time_format: str = ""
    log_to_stdout: str = "proxy"
    start_port: int = 5800
    global_ttl: int = 0
    unload_timeout: int = DEFAULT_UNLOAD_TIMEOUT
    performance_every_ns: int = 5_000_000_000
    send_loading_state: bool = False
    include_aliases_in_list: bool = False
    api_keys: List[str] = field(default_factory=list)
    models: Dict[str, ModelConfig] = field(default_factory=dict)
    aliases: Dict[str, str] = field(default_factory=dict)
    groups: Dict[str, GroupConfig] = field(default_factory=dict)
    router_use: str = "group"
    preload: List[str] = field(default_factory=list)
    fifo_priority: Dict[str, int] = field(default_factory=dict)
    ignore_paths: List[str] = field(default_factory=list)
    peers: Dict[str, Any] = field(default_factory=dict)
    macros: List[tuple] = field(default_factory=list)

    def real_model_name(self, search: str) -> Optional[str]:
        """Model ID for an ID or alias, else None (upstream ``RealModelName``)."""
        if search in self.models:
            return search
        return self.aliases.get(search)


def _build_model(raw: Dict[str, Any], strip: str, filters: Dict[str, Any], slsv: Any) -> ModelConfig:
    mc = ModelConfig()
    mc.cmd = _str(raw.get("cmd"))
    mc.cmd_stop = _str(raw.get("cmdStop"))
    if "proxy" in raw:
        mc.proxy = _str(raw.get("proxy"))
    mc.aliases = _str_list(raw.get("aliases"))
    mc.env = _str_list(raw.get("env"))
    if "checkEndpoint" in raw:
        mc.check_endpoint = _str(raw.get("checkEndpoint"))
    mc.ttl = _int(raw.get("ttl"), MODEL_CONFIG_DEFAULT_TTL)
    mc.unload_timeout = _int(raw.get("unloadTimeout"), 0)
    mc.unlisted = _bool(raw.get("unlisted"), False)
    mc.use_model_name = _str(raw.get("useModelName"))
    mc.name = _str(raw.get("name"))
    mc.description = _str(raw.get("description"))
    mc.concurrency_limit = _int(raw.get("concurrencyLimit"), 0)
    mc.strip_params = strip
    mc.set_params = _map(filters.get("setParams"), "map[string]interface {}")
    mc.set_params_by_id = dict(_map(filters.get("setParamsByID"), "map[string]map[string]interface {}"))
    mc.metadata = copy.deepcopy(_map(raw.get("metadata"), "map[string]interface {}"))
    mc.send_loading_state = None if slsv is None else _bool(slsv, False)
    mc.capabilities = dict(_map(raw.get("capabilities"), "config.ModelCapConfig"))
    return mc


def _decode_groups(raw: Any) -> Dict[str, GroupConfig]:
    out: Dict[str, GroupConfig] = {}
    for gid, g in _map(raw, "map[string]config.GroupConfig").items():
        g = _map(g, "config.GroupConfig")
        out[str(gid)] = GroupConfig(
            swap=_bool(g.get("swap"), True),
            exclusive=_bool(g.get("exclusive"), True),
            persistent=_bool(g.get("persistent"), False),
            members=_str_list(g.get("members")),
        )
    return out


def _resolve_capabilities(mid: str, caps: Dict[str, Any], macros: List[tuple]) -> None:
    """Capabilities macro resolution and validation (upstream ``ModelCapConfig.Validate``;
    the ``model <id>: `` prefix comes from load.go's wrapping)."""
    ctx = caps.get("context")
    if isinstance(ctx, str):
        for name, val in reversed(macros):
            ctx = substitute_in_value(ctx, name, val)
        try:
            ctx = int(ctx)
        except (TypeError, ValueError):
            raise ConfigError("model %s: capabilities.context: cannot parse %s as int" % (mid, go_quote(str(ctx))))
        caps["context"] = ctx
    for key in ("in", "out"):
        for m in _str_list(caps.get(key)):
            if m not in VALID_MODALITIES:
                raise ConfigError(
                    "model %s: capabilities.%s: invalid modality %s, must be one of: text, audio, image"
                    % (mid, key, go_quote(m))
                )
    if isinstance(caps.get("context"), int) and caps["context"] < 0:
        raise ConfigError("model %s: capabilities.context: must be >= 0" % mid)


def load_config_text(text: str) -> Config:
    """Load a config from YAML text exactly as upstream's ``LoadConfigFromReader``.

    Returns a Config. Raises ConfigError with upstream's message for each hard error
    (notes/llama-swap.md §1.1). Silent rewrites: healthCheckTimeout < 15 → 15,
    unloadTimeout 0 → default/global, ttl -1 → globalTTL, unknown preload ids dropped,
    unknown keys ignored (logLevel is kept as written; unknown levels log as info).
    """
    text = substitute_env_macros(text)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError("yaml: %s" % str(e).replace("\n", " "))
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _unmarshal_error(raw, "config.Config")

    cfg = Config()
    cfg.health_check_timeout = _int(raw.get("healthCheckTimeout"), 120)
    cfg.log_level = _str(raw.get("logLevel"), "info")
    cfg.log_time_format = _str(raw.get("logTimeFormat"), "")
    cfg.log_to_stdout = _str(raw.get("logToStdout"), "proxy") if "logToStdout" in raw else "proxy"
    cfg.start_port = _int(raw.get("startPort"), 5800)
    cfg.global_ttl = _int(raw.get("globalTTL"), 0)
    cfg.unload_timeout = _int(raw.get("unloadTimeout"), DEFAULT_UNLOAD_TIMEOUT)
    cfg.send_loading_state = _bool(raw.get("sendLoadingState"), False)
    cfg.include_aliases_in_list = _bool(raw.get("includeAliasesInList"), False)

    models_raw = _map(raw.get("models"), "map[string]config.ModelConfig")
    models: Dict[str, ModelConfig] = {}
    model_macros: Dict[str, List[tuple]] = {}
    for mid, m in models_raw.items():
        m = _map(m, "config.ModelConfig")
        filters = _map(m.get("filters"), "config.ModelFilters")
        strip = _str(filters.get("stripParams"))
        if strip == "":
            strip = _str(filters.get("strip_params"))
        models[str(mid)] = _build_model(m, strip, filters, m.get("sendLoadingState"))
        model_macros[str(mid)] = _macro_list(m.get("macros"))

    if cfg.health_check_timeout < 15:
        cfg.health_check_timeout = 15

    perf = _map(raw.get("performance"), "config.PerformanceConfig")
    every = perf.get("every")
    if every is None:
        cfg.performance_every_ns = 5_000_000_000
    elif isinstance(every, str):
        try:
            cfg.performance_every_ns = parse_go_duration(every)
        except ValueError as e:
            raise ConfigError(str(e))
    else:
        raise _unmarshal_error(every, "time.Duration")
    if cfg.performance_every_ns == 0:
        cfg.performance_every_ns = 5_000_000_000
    if cfg.performance_every_ns < 5_000_000_000:
        raise ConfigError(
            "performance: every must be at least 5s, got %s" % format_go_duration(cfg.performance_every_ns)
        )

    if cfg.start_port < 1:
        raise ConfigError("startPort must be greater than 1")
    if cfg.global_ttl < 0:
        raise ConfigError("globalTTL must be >= 0")
    if cfg.unload_timeout < 0:
        raise ConfigError("unloadTimeout must be >= 0")
    if cfg.unload_timeout == 0:
        cfg.unload_timeout = DEFAULT_UNLOAD_TIMEOUT

    upstream = _map(raw.get("upstream"), "config.UpstreamConfig")
    cfg.ignore_paths = _str_list(upstream.get("ignorePaths")) or [r".*\.(js|json|css|png|gif|jpg|jpeg|ico|txt)$"]

    if cfg.log_to_stdout not in LOG_TO_STDOUT:
        raise ConfigError("logToStdout must be one of: proxy, upstream, both, none")

    # aliases (upstream iterates a Go map; sorted here for a deterministic message)
    for mid in sorted(models):
        for alias in models[mid].aliases:
            if alias in cfg.aliases:
                raise ConfigError("duplicate alias %s found in model: %s" % (alias, mid))
            cfg.aliases[alias] = mid

    cfg.macros = _macro_list(raw.get("macros"))
    for name, value in cfg.macros:
        validate_macro(name, value)

    next_port = cfg.start_port
    for mid in sorted(models):
        mc = models[mid]
        mc.health_check_timeout = cfg.health_check_timeout
        mc.cmd = strip_comments(mc.cmd)
        mc.cmd_stop = strip_comments(mc.cmd_stop)
        if mc.ttl == MODEL_CONFIG_DEFAULT_TTL:
            mc.ttl = cfg.global_ttl
        if mc.ttl < 0:
            raise ConfigError("model %s: invalid TTL value %d" % (mid, mc.ttl))
        if mc.unload_timeout < 0:
            raise ConfigError("model %s: invalid unloadTimeout value %d" % (mid, mc.unload_timeout))
        if mc.unload_timeout == 0:
            mc.unload_timeout = cfg.unload_timeout

        for name, value in model_macros[mid]:
            try:
                validate_macro(name, value)
            except ConfigError as e:
                raise ConfigError("model %s: %s" % (mid, e))

        merged: List[tuple] = [("MODEL_ID", mid)] + list(cfg.macros)
        for name, value in model_macros[mid]:
            for i, (n, _) in enumerate(merged):
                if n == name:
                    merged[i] = (name, value)
                    break
            else:
                merged.append((name, value))

        for name, value in reversed(merged):
            slug = "${%s}" % name
            s = _macro_str(value)
            mc.cmd = mc.cmd.replace(slug, s)
            mc.cmd_stop = mc.cmd_stop.replace(slug, s)
            mc.proxy = mc.proxy.replace(slug, s)
            mc.check_endpoint = mc.check_endpoint.replace(slug, s)
            mc.strip_params = mc.strip_params.replace(slug, s)
            mc.name = mc.name.replace(slug, s)
            mc.description = mc.description.replace(slug, s)
            if mc.set_params_by_id:
                new = {}
                for key, pm in mc.set_params_by_id.items():
                    try:
                        nv = substitute_in_value(pm, name, value)
                    except ConfigError as e:
                        raise ConfigError("model %s filters.setParamsByID: %s" % (mid, e))
                    new[str(key).replace(slug, s)] = nv
                mc.set_params_by_id = new
            if mc.metadata:
                try:
                    mc.metadata = substitute_in_value(mc.metadata, name, value)
                except ConfigError as e:
                    raise ConfigError("model %s metadata: %s" % (mid, e))

        _resolve_capabilities(mid, mc.capabilities, merged)

        cmd_has_port = "${PORT}" in mc.cmd
        proxy_has_port = "${PORT}" in mc.proxy
        if cmd_has_port or proxy_has_port:
            if not cmd_has_port and proxy_has_port:
                raise ConfigError(
                    "model %s: proxy uses ${PORT} but cmd does not - ${PORT} is only available when used in cmd" % mid
                )
            p = str(next_port)
            mc.cmd = mc.cmd.replace("${PORT}", p)
            mc.cmd_stop = mc.cmd_stop.replace("${PORT}", p)
            mc.proxy = mc.proxy.replace("${PORT}", p)
            mc.name = mc.name.replace("${PORT}", p)
            mc.description = mc.description.replace("${PORT}", p)
            if mc.metadata:
                mc.metadata = substitute_in_value(mc.metadata, "PORT", next_port)
            next_port += 1

        fields = [
            ("cmd", mc.cmd),
            ("cmdStop", mc.cmd_stop),
            ("proxy", mc.proxy),
            ("checkEndpoint", mc.check_endpoint),
            ("filters.stripParams", mc.strip_params),
            ("name", mc.name),
            ("description", mc.description),
        ]
        for fname, fval in fields:
            for m in MACRO_PATTERN_RE.finditer(fval):
                macro = m.group(1)
                if macro == "PID" and fname == "cmdStop":
                    continue
                if macro in ("PORT", "MODEL_ID"):
                    raise ConfigError("macro '${%s}' should have been substituted in %s.%s" % (macro, mid, fname))
                raise ConfigError("unknown macro '${%s}' found in %s.%s" % (macro, mid, fname))

        if mc.metadata:
            validate_nested(mc.metadata, "model %s metadata" % mid)
        for key, pm in mc.set_params_by_id.items():
            m = MACRO_PATTERN_RE.search(key)
            if m:
                raise ConfigError("unknown macro '${%s}' found in model %s filters.setParamsByID key" % (m.group(1), mid))
            validate_nested(pm, "model %s filters.setParamsByID[%s]" % (mid, key))
        for key in mc.set_params_by_id:
            if key == mid:
                continue
            if key in models:
                raise ConfigError(
                    "model %s filters.setParamsByID: key '%s' conflicts with an existing model ID" % (mid, key)
                )
            if key in cfg.aliases:
                if cfg.aliases[key] != mid:
                    raise ConfigError(
                        "duplicate alias '%s' in model %s filters.setParamsByID, already used by model %s"
                        % (key, mid, cfg.aliases[key])
                    )
                continue
            cfg.aliases[key] = mid
            mc.aliases.append(key)
        if mc.send_loading_state is None:
            mc.send_loading_state = cfg.send_loading_state
    cfg.models = models

    # routing normalisation
    top_groups = _decode_groups(raw.get("groups"))
    top_matrix = raw.get("matrix")
    routing = _map(raw.get("routing"), "config.RoutingConfig")
    router = _map(routing.get("router"), "config.RouterConfig")
    settings = _map(router.get("settings"), "config.RouterSettings")
    rs_groups = _decode_groups(settings.get("groups"))
    use = _str(router.get("use"))
    has_top = top_matrix is not None or len(top_groups) > 0
    has_routing = use != "" or settings.get("matrix") is not None or len(rs_groups) > 0
    if has_top and has_routing:
        raise ConfigError(
            "config uses both the legacy top-level 'matrix'/'groups' keys and the new 'routing.router' block; "
            "please migrate the top-level keys into 'routing.router' and remove them"
        )
    groups = top_groups
    matrix = top_matrix
    if not has_top:
        if use == "matrix":
            if settings.get("matrix") is None:
                raise ConfigError("routing.router.use is 'matrix' but routing.router.settings.matrix is not set")
            matrix = settings.get("matrix")
        elif use in ("group", ""):
            groups = rs_groups
        else:
            raise ConfigError("routing.router.use: unknown router %s (valid: group, matrix)" % go_quote(use))
    if matrix is not None and len(groups) > 0:
        raise ConfigError("config cannot use both 'groups' and 'matrix'")
    if matrix is not None:
        cfg.router_use = "matrix"
    else:
        cfg.router_use = "group"
        grouped = {m for g in groups.values() for m in g.members}
        default = GroupConfig(swap=True, exclusive=True, members=sorted(m for m in models if m not in grouped))
        groups = dict(groups)
        groups[DEFAULT_GROUP_ID] = default
        usage: Dict[str, str] = {}
        for gid in sorted(groups):
            seen = set()
            for member in groups[gid].members:
                if member in seen:
                    raise ConfigError("duplicate model member %s found in group: %s" % (member, gid))
                seen.add(member)
                if member in usage:
                    raise ConfigError("model member %s is used in multiple groups: %s and %s" % (member, usage[member], gid))
                usage[member] = gid
    cfg.groups = groups

    sched = _map(routing.get("scheduler"), "config.SchedulerConfig")
    sched_use = _str(sched.get("use")) or "fifo"
    if sched_use != "fifo":
        raise ConfigError("routing.scheduler.use: unknown scheduler %s (valid: fifo)" % go_quote(sched_use))
    fifo = _map(_map(sched.get("settings"), "config.SchedulerSettings").get("fifo"), "config.FifoConfig")
    prio = _map(fifo.get("priority"), "map[string]int")
    for mid in sorted(prio):
        if cfg.real_model_name(str(mid)) is None:
            raise ConfigError("routing.scheduler.settings.fifo.priority references unknown model %s" % go_quote(str(mid)))
        cfg.fifo_priority[str(mid)] = _int(prio[mid], 0)

    hooks = _map(_map(raw.get("hooks"), "config.HooksConfig").get("on_startup"), "config.HookOnStartup")
    for pid in _str_list(hooks.get("preload")):
        pid = pid.strip()
        if not pid:
            continue
        real = cfg.real_model_name(pid)
        if real is not None:
            cfg.preload.append(real)

    cfg.api_keys = _str_list(raw.get("apiKeys"))
    for i, key in enumerate(cfg.api_keys):
        if key == "":
            raise ConfigError("empty api key found in apiKeys")
        if " " in key:
            raise ConfigError("apiKeys[%d]: api key cannot contain spaces" % i)

    peers = _map(raw.get("peers"), "config.PeerDictionaryConfig")
    for pname in sorted(peers):
        peer = dict(_map(peers[pname], "config.PeerConfig"))
        api_key = _str(peer.get("apiKey"))
        for name, value in reversed(cfg.macros):
            api_key = api_key.replace("${%s}" % name, _macro_str(value))
        m = MACRO_PATTERN_RE.search(api_key)
        if m:
            raise ConfigError("peers.%s.apiKey: unknown macro '${%s}'" % (pname, m.group(1)))
        peer["apiKey"] = api_key
        cfg.peers[str(pname)] = peer
    return cfg


def load_config(path: str) -> Config:
    """Load the file at ``path`` (upstream ``LoadConfig``). Raises OSError, ConfigError."""
    with open(path, "r", encoding="utf-8") as f:
        return load_config_text(f.read())


def check_router(cfg: Config) -> None:
    """Checks upstream makes when building the server, after loading.

    Raises ConfigError ``creating group router: no model config for "x"`` for a group
    member that is not a model (``internal/router/group.go`` ``NewGroup``, wrapped by
    ``internal/server/server.go``). The matrix router is not part of the stand-in:
    raises ConfigError for ``routing.router.use: matrix`` (stand-in's own wording).
    """
    if cfg.router_use == "matrix":
        raise ConfigError("creating matrix router: the rigkit llama-swap stand-in does not implement the matrix router")
    for gid in sorted(cfg.groups):
        for member in cfg.groups[gid].members:
            if member not in cfg.models:
                raise ConfigError("creating group router: no model config for %s" % go_quote(member))
