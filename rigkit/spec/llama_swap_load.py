"""llama-swap v250's config loader, as rigkit judges a config: the steps of upstream's
``LoadConfigSources``/``LoadConfigFromReader`` (``internal/config/merge.go``, ``load.go``,
``macros.go`` at tag v250, commit ``60226b63776e``) that decide whether llama-swap starts.

:func:`judge` is the one entry point (``rigkit check``, ``rigkit render`` and the deploy reach it through
:func:`rigkit.render.checks.check_llama_swap`): the text as llama-swap reads it — ``${env.X}`` from the
environment ``llama-swap.service`` gives it, YAML that refuses a duplicate key (upstream's yaml.v3 does;
PyYAML would keep the last), the macros expanded exactly as upstream expands them (declaration order,
``MODEL_ID``, ``PORT`` from ``startPort``, ``PID`` in ``cmdStop`` only, any other ``${…}`` left over is
refused naming the field) — then the typed model of :mod:`rigkit.spec.llama_swap_schema` and the load rules
of :mod:`rigkit.spec.llama_swap_rules` on the expanded values. Upstream's clamps (``healthCheckTimeout`` below
15 becomes 15) are warnings naming the value llama-swap will use. Whatever the input, :func:`judge`
returns a :class:`Judgement`, it never raises.

The differential test (``tests/unit/test_llama_swap_differential.py``) holds this to upstream's own
loader, built from the vendored source (``tests/harness/llama_swap_oracle/``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import yaml

#: ``macroNameRegex``, ``macroPatternRegex``, ``envMacroRegex`` (macros.go:15-17).
MACRO_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]+$")
MACRO_USE_RE = re.compile(r"\$\{([a-zA-Z0-9_-]+)\}")
ENV_MACRO_RE = re.compile(r"\$\{env\.([a-zA-Z_][a-zA-Z0-9_]*)\}")
#: Macros llama-swap sets itself (macros.go:52-54): a declaration of one is refused.
RESERVED_MACROS = ("PID", "PORT", "MODEL_ID")
DEFAULT_PROXY = "http://localhost:${PORT}"  # MODEL_CONFIG_DEFAULT_PROXY, model_config.go:11
DEFAULT_START_PORT = 5800                   # load.go:42
#: The variables ``llama-swap.service`` gives llama-swap (systemd.exec(5); values:
#: :func:`rigkit.render.files.llama_swap_environment`): the only ``${env.X}`` that can resolve on the rig.
SERVICE_ENV_NAMES = ("PATH", "USER", "LOGNAME", "HOME", "SHELL", "INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID")
#: A member's fields whose leftover macro upstream reports as "unknown macro '${X}' found in <id>.<field>"
#: (macros.go validateMacroUses).
MEMBER_STRING_FIELDS = ("cmd", "cmdStop", "proxy", "checkEndpoint", "filters.stripParams", "name", "description")


class LoadError(ValueError):
    """A config llama-swap refuses to load; ``str()`` says why, in upstream's words where it has them."""


@dataclass
class Judgement:
    """rigkit's verdict on one llama-swap config: ``problems`` (llama-swap would refuse it, or rigkit
    refuses it on purpose: an unknown key), ``warnings`` (accepted, but llama-swap changes a value:
    the value it will use is named), ``data`` the config after env and macro expansion (None when
    it could not be read)."""

    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    data: Any = None

    @property
    def ok(self) -> bool:
        return not self.problems


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """PyYAML's safe loader (libyaml when present) that refuses a key given twice in one mapping, as
    upstream's ``gopkg.in/yaml.v3`` does (``mapping key "x" already defined at line N``)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue
            if key in seen:
                raise LoadError(f"mapping key {key!r} already defined at line {seen[key] + 1} "
                                f"(line {key_node.start_mark.line + 1}): llama-swap refuses a duplicate key")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


# yaml.v3 resolves a plain scalar as a float by YAML 1.2's form (resolve.go, ``yamlStyleFloat``:
# ``^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$``); PyYAML's YAML 1.1 form needs a dot and a signed
# exponent, so ``9.2e18`` or ``1e20`` would be strings here and numbers to llama-swap. The exponent forms 1.1
# misses, added (the rest of the pattern is an int or a 1.1 float already).
_UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+$"), list("-+0123456789."))


def member_macro_problem(value: str, cmd: str, stop: bool = False) -> str | None:
    """What llama-swap 250 would refuse in one string of a member rigkit renders (its cmd, cmdStop, proxy,
    name, description, env item, …), or None: rigkit declares no macros, so the ``${X}`` llama-swap expands
    there are ``${MODEL_ID}``, ``${PORT}`` when ``cmd`` holds it, ``${PID}`` in cmdStop and ``${env.X}`` for
    the variables of :data:`SERVICE_ENV_NAMES`. Upstream v250 has no escape for a literal ``${…}``."""
    allowed = {"MODEL_ID"} | ({"PORT"} if "${PORT}" in cmd else set()) | ({"PID"} if stop else set())
    for name in MACRO_USE_RE.findall(value):
        if name not in allowed:
            return (f"llama-swap 250 refuses the whole config on the macro '${{{name}}}' here (it expands ${{…}} "
                    f"in a member's fields and knows only {', '.join('${%s}' % a for a in sorted(allowed))}"
                    " and ${env.X}; rigkit declares no macros of its own, and v250 has no escape "
                    "for a literal ${…})")
    for name in ENV_MACRO_RE.findall(value):
        if name not in SERVICE_ENV_NAMES:
            return (f"llama-swap 250 refuses the whole config: '${{env.{name}}}' is not set in the environment "
                    f"llama-swap.service gives it ({', '.join(SERVICE_ENV_NAMES)})")
    return None


def load_yaml(text: str) -> Any:
    """``text`` parsed as llama-swap's YAML library would: a duplicate key raises :class:`LoadError`,
    and so does text that is not YAML."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a safe loader
    except LoadError:
        raise
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        raise LoadError(f"not YAML llama-swap can read: {exc}") from None


#: The dumper of :func:`substitute_env`'s scan: libyaml's where PyYAML has it (the pure-Python emitter spent
#: ~1 s of CPU on a 120 kB value, issue #28's line). The scan is only searched for ``${env.NAME}``, never
#: written: libyaml's other choices (it escapes characters outside the BMP; it may pick another quoting style)
#: cannot make or break a macro, whose characters are ASCII — ``tests/unit/test_llama_swap_env_scan.py``
#: holds both dumpers to the same names over generated documents.
_SCAN_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def substitute_env(text: str, environ: Mapping[str, str]) -> str:
    """``${env.X}`` replaced by ``environ[X]`` as ``substituteEnvMacros`` does (macros.go:452-514): the
    names are found in the comment-free text, a value is escaped for double quotes; raises
    :class:`LoadError` for an unset variable or a value holding a newline or NUL."""
    try:
        scan = yaml.dump(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)),
                         Dumper=_SCAN_DUMPER, allow_unicode=True, width=1 << 30)
    except Exception:  # noqa: BLE001 - upstream scans the raw text when the YAML does not parse
        scan = text
    for name in dict.fromkeys(ENV_MACRO_RE.findall(scan)):
        if name not in environ:
            raise LoadError(f"environment variable '{name}' is not set (llama-swap.service gives llama-swap "
                            f"{', '.join(sorted(environ)) or 'no variables'})")
        value = environ[name]
        if any(c in value for c in "\n\r\0"):
            raise LoadError(f"environment variable '{name}' contains newlines or null bytes which are not "
                            "allowed in YAML substitution")
        text = text.replace("${env.%s}" % name, value.replace("\\", "\\\\").replace('"', '\\"'))
    return text


def _sprint(value: Any) -> str:
    """``fmt.Sprintf("%v", value)`` for a YAML scalar."""
    if value is True or value is False:
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, float):
        if value == int(value) and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    return str(value)


def _declared(where: str, macros: Any) -> list[tuple[str, Any]]:
    """A ``macros`` block as upstream's ``MacroList`` reads it (config.go:27-55) and checks each entry
    (``validateMacro``, macros.go:30-57)."""
    if macros is None:
        return []
    if not isinstance(macros, dict):
        raise LoadError(f"{where}: macros must be a mapping")
    out = []
    for name, value in macros.items():
        name = _sprint(name) if not isinstance(name, str) else name
        if len(name) >= 64:
            raise LoadError(f"macro name '{name}' exceeds maximum length of 63 characters")
        if not MACRO_NAME_RE.match(name):
            raise LoadError(f"macro name '{name}' contains invalid characters, must match pattern ^[a-zA-Z0-9_-]+$")
        if isinstance(value, str):
            if "${%s}" % name in value:
                raise LoadError(f"macro '{name}' contains self-reference")
        elif not isinstance(value, (bool, int, float)) or isinstance(value, int) and not -2**63 <= value < 2**64:
            raise LoadError(f"macro '{name}' has invalid type, must be a scalar type (string, int, float, or bool)")
        if name in RESERVED_MACROS:
            raise LoadError(f"macro name '{name}' is reserved")
        out.append((name, value))
    return out


def _substitute(value: Any, name: str, macro: Any) -> Any:
    """``substituteMacroInValue`` (macros.go:408-445): a string that *is* ``${name}`` takes the macro's
    typed value; elsewhere the text is replaced."""
    slug = "${%s}" % name
    if isinstance(value, str):
        if value == slug:
            return macro
        return value.replace(slug, _sprint(macro)) if slug in value else value
    if isinstance(value, dict):
        return {k: _substitute(v, name, macro) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, name, macro) for v in value]
    return value


def _substitute_all(value: Any, macros: list[tuple[str, Any]]) -> Any:
    for name, macro in reversed(macros):
        value = _substitute(value, name, macro)
    return value


def _strip_comments(cmd: str) -> str:
    """``StripComments`` (commands.go:46-57): lines whose first non-blank character is ``#`` go."""
    return "\n".join(line for line in cmd.split("\n") if not line.strip().startswith("#"))


def _set_params_keys(model: dict, macros: list[tuple[str, Any]]) -> None:
    filters = model.get("filters")
    params = filters.get("setParamsByID") if isinstance(filters, dict) else None
    if not isinstance(params, dict):
        return
    resolved: dict = {}
    for key, value in params.items():
        new = key if isinstance(key, str) else _sprint(key)
        for name, macro in reversed(macros):
            new = new.replace("${%s}" % name, _sprint(macro))
        if new in resolved:
            raise LoadError(f"filters.setParamsByID: keys {key!r} and {new!r} resolve to the same value")
        resolved[new] = value
    filters["setParamsByID"] = resolved


def _start_port(raw: dict) -> int:
    port = raw.get("startPort", DEFAULT_START_PORT)
    if port is None:
        return DEFAULT_START_PORT
    if isinstance(port, bool) or not isinstance(port, (int, float)):
        raise LoadError(f"startPort: {port!r} is not a number (llama-swap cannot unmarshal it into int)")
    port = int(port)
    if port < 1:
        raise LoadError("startPort must be greater than 1")
    return port


def _leftover(value: Any, path: str, model: str | None, fld: str, allow_pid: bool) -> None:
    """``validateMacroUses`` (macros.go:356-405): a ``${X}`` still in a value after expansion."""
    if isinstance(value, str):
        for name in MACRO_USE_RE.findall(value):
            if name == "PID" and allow_pid:
                continue
            if model is not None:
                if fld in MEMBER_STRING_FIELDS:
                    if name in ("PORT", "MODEL_ID"):
                        raise LoadError(f"macro '${{{name}}}' should have been substituted in {model}.{fld}")
                    raise LoadError(f"unknown macro '${{{name}}}' found in {model}.{fld}")
                raise LoadError(f"model {model} {fld}: unknown macro '${{{name}}}'")
            raise LoadError(f"{path}: unknown macro '${{{name}}}'")
        for name in ENV_MACRO_RE.findall(value):
            raise LoadError(f"{path}: environment variable '{name}' not set")
    elif isinstance(value, dict):
        for k, v in value.items():
            _leftover(v, f"{path}.{k}", model, f"{fld}.{k}" if model is not None else fld, allow_pid)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _leftover(v, f"{path}[{i}]", model, fld, allow_pid)


def expand_macros(data: dict, known_keys: set[str]) -> dict:
    """``resolveConfigMacros`` (macros.go:62-213): the config with every macro expanded, or
    :class:`LoadError` naming the first macro llama-swap refuses (an unknown one names the member and
    field, e.g. ``unknown macro '${MODELS}' found in strata.cmd``). ``known_keys``: the top-level keys
    llama-swap decodes (only those are checked for leftovers, as upstream does)."""
    globals_ = _declared("macros", data.get("macros"))
    models_in = data.get("models")
    if models_in is not None and not isinstance(models_in, dict):
        raise LoadError(f"models: cannot unmarshal {type(models_in).__name__} into a mapping of model ids")
    local: dict[str, list[tuple[str, Any]]] = {}
    for mid, m in (models_in or {}).items():
        if m is not None and not isinstance(m, dict):
            raise LoadError(f"models.{mid}: cannot unmarshal {type(m).__name__} into a model")
        try:
            local[str(mid)] = _declared(f"models.{mid}.macros", (m or {}).get("macros"))
        except LoadError as exc:
            raise LoadError(f"model {mid}: {exc}") from None
    raw = {k: v for k, v in data.items() if k != "macros"}
    models = {}
    for mid, m in (models_in or {}).items():
        if not isinstance(m, dict):
            models[mid] = m
            continue
        m = {k: v for k, v in m.items() if k != "macros"}
        for f in ("cmd", "cmdStop"):
            if isinstance(m.get(f), str):
                m[f] = _strip_comments(m[f])
        if m.get("proxy") is None:
            m["proxy"] = DEFAULT_PROXY
        models[mid] = m
    for key in list(raw):
        if key != "models":
            raw[key] = _substitute_all(raw[key], globals_)
    next_port = _start_port(raw)
    for mid in sorted(models, key=str):
        m = models[mid]
        if not isinstance(m, dict):
            continue
        macros = [("MODEL_ID", str(mid))] + list(globals_)
        for name, value in local.get(str(mid), []):
            idx = next((i for i, (n, _) in enumerate(macros) if n == name), None)
            if idx is None:
                macros.append((name, value))
            else:
                macros[idx] = (name, value)
        m = _substitute_all(m, macros)
        try:
            _set_params_keys(m, macros)
        except LoadError as exc:
            raise LoadError(f"model {mid} {exc}") from None
        cmd = m.get("cmd") if isinstance(m.get("cmd"), str) else ""
        proxy = m.get("proxy") if isinstance(m.get("proxy"), str) else ""
        if "${PORT}" in cmd or "${PORT}" in proxy:
            if "${PORT}" not in cmd:
                raise LoadError(f"model {mid}: proxy uses ${{PORT}} but cmd does not - ${{PORT}} is only "
                                "available when used in cmd")
            m = _substitute(m, "PORT", next_port)
            _set_params_keys(m, [("PORT", next_port)])
            next_port = (next_port + 1 + 2**63) % 2**64 - 2**63  # a Go int: past 2**63-1 it wraps to -2**63
        filters = m.get("filters")
        params = filters.get("setParamsByID") if isinstance(filters, dict) else None
        for key in params if isinstance(params, dict) else ():
            found = MACRO_USE_RE.findall(key)
            if found:
                raise LoadError(f"unknown macro '${{{found[0]}}}' found in model {mid} filters.setParamsByID key")
        models[mid] = m
    if models_in is not None or "models" in raw:
        raw["models"] = models
    for key, value in raw.items():
        if key not in known_keys:
            continue
        if key != "models":
            _leftover(value, key, None, "", False)
            continue
        for mid, m in (value or {}).items():
            for f, v in (m.items() if isinstance(m, dict) else ()):
                _leftover(v, f"models.{mid}.{f}", str(mid), str(f), f == "cmdStop")
    return raw


def judge(text: str, environ: Mapping[str, str], schema: dict | None = None) -> Judgement:
    """rigkit's verdict on one llama-swap config file ``text``, read with ``environ`` as the process
    environment (what ``llama-swap.service`` gives llama-swap: :func:`rigkit.render.files.llama_swap_environment`).
    ``schema``: upstream's ``config-schema.json`` (draft-07), checked on the expanded config: an editor's aid
    that is stricter than the loader in places (a null, a fraction, ``healthCheckTimeout`` below 15), so
    what it flags in a config the loader accepts is a warning, and a problem beside the loader's. Never
    raises."""
    from rigkit.spec import llama_swap_rules as rules, llama_swap_schema as strict

    out = Judgement()
    try:
        data = load_yaml(substitute_env(text, environ))
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise LoadError("top-level YAML must be a mapping")
        if any(not isinstance(k, str) for k in data):
            raise LoadError("top-level keys must be strings")
        data = expand_macros(data, strict.TOP_LEVEL_KEYS)
    except LoadError as exc:
        out.problems.append(_cut(str(exc)))
        return out
    except RecursionError:
        out.problems.append("the config nests too deeply for llama-swap's YAML library")
        return out
    out.data = data
    try:
        problems, warnings = rules.loader_problems(data)
        out.problems += problems
        out.warnings += warnings
        if schema is not None:
            flagged = strict.schema_problems(data, schema)
            # the loader is the authority: what its schema flags in a config it loads is a warning
            (out.problems if out.problems else out.warnings).extend(
                flagged if out.problems else [f"{f}; llama-swap 250 loads it all the same" for f in flagged])
    except RecursionError:
        out.problems.append("the config nests too deeply for llama-swap's YAML library")
    out.problems = [_cut(p) for p in out.problems]
    out.warnings = [_cut(w) for w in out.warnings]
    return out


#: The longest message shown: a message may quote a value, which may be 100 kB (issue #28).
MESSAGE_CHARS = 500


def _cut(message: str) -> str:
    if len(message) <= MESSAGE_CHARS:
        return message
    return f"{message[:MESSAGE_CHARS]}… ({len(message) - MESSAGE_CHARS} more characters)"
