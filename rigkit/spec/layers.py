"""Data layers to the models: pyinfra's layers (``all``, groups, the host, ``--data``) deep-merged over the
models' defaults (:func:`merge_layers`, pyinfra's precedence, so one nested key can be overridden
alone), pyinfra's own keys passed through (:func:`split_pyinfra_keys`), secrets and control
characters refused before any model sees a value (:func:`rigkit.spec.secrets.scan_raw`), and
pydantic's errors turned into :class:`~rigkit.spec.problems.SpecProblem` s with a did-you-mean.
The cross-field checks come after, in :mod:`rigkit.spec.validate`."""

from __future__ import annotations

import copy
import re
import types
import typing
from collections.abc import Mapping, Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from rigkit.spec.model import EMPTY_REFUSED, RENAMED_KEYS, RigSpec
from rigkit.spec.types import Kind, kind_of
from rigkit.spec.problems import SpecError, SpecProblem, did_you_mean, dotted_key, shown
from rigkit.spec.secrets import SECRET_SHOWN, scan_raw, secret_shaped


def validate_layers(layers: Iterable[Mapping[str, Any]], source: str = "spec",
                    labels: list[str] | None = None) -> RigSpec:
    """Validate the models from data layers, **lowest precedence first** (``all`` ... host,
    ``--data``), deep-merged over the model defaults.

    Each layer is first checked alone over the defaults, so a bad value in a lower layer is
    reported (with the layer's label, e.g. ``group_data/all.py``) even when a higher layer
    would replace it. Keys owned by pyinfra pass through (dropped here). Raises
    :class:`SpecError` naming every bad key, its value and what is allowed. The models only:
    :func:`rigkit.spec.validate.spec_from_layers` adds the cross-field checks.
    """
    layers = list(layers)
    base = defaults_dict()
    problems: list[SpecProblem] = []
    merged: dict[str, Any] = {}
    renamed: list[str] = []
    for i, layer in enumerate(layers):
        own, _ = split_pyinfra_keys(layer)
        own, raw_problems = scan_raw(own)
        own, old_names, rename_problems = renamed_keys(own)
        renamed += [k for k in old_names if k not in renamed]
        label = labels[i] if labels and i < len(labels) else f"data layer {i + 1}"
        problems += [p.model_copy(update={"key": f"{p.key} (in {label})"}) for p in raw_problems + rename_problems]
        if own:
            candidate = merge_layers(base, own)
            try:
                RigSpec.model_validate(candidate)
            except ValidationError as exc:
                # a member spread over layers is complete only when merged: "missing" waits for that
                problems += [p.model_copy(update={"key": f"{p.key} (in {label})"})
                             for p in _problems_from_pydantic(exc, candidate)
                             if p.allowed != "required" and not _redacted(p)]
        merged = merge_layers(merged, own)
    if problems:
        raise SpecError(problems, source)
    spec = validate_dict(merged, source=source)
    spec._renamed_keys = tuple(renamed)
    return spec


def renamed_keys(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str], list[SpecProblem]]:
    """``data`` (one layer, top-level keys) with each old name of
    :data:`rigkit.spec.model.RENAMED_KEYS` moved to its new name; the old names it gave; a problem for each
    old name given beside its new one (which of the two is meant is not for rigkit to guess). Pure."""
    out = dict(data)
    found: list[str] = []
    problems: list[SpecProblem] = []
    for old, new in RENAMED_KEYS.items():
        if old not in out:
            continue
        found.append(old)
        value = out.pop(old)
        if new in out:
            problems.append(SpecProblem(key=old, value=shown(value, typed=False),
                                        allowed=f"renamed {new}, which is set too: keep {new} only"))
        else:
            out[new] = value
    return out, found, problems

def validate_dict(data: Mapping[str, Any], source: str = "spec") -> RigSpec:
    """Validate the models of one already-merged overrides dict over the defaults; raises
    :class:`SpecError`. The models only: :func:`rigkit.spec.validate.spec_from_dict` adds the
    cross-field checks."""
    data, problems = scan_raw(dict(data))
    data, renamed, rename_problems = renamed_keys(data)
    problems += rename_problems
    base = defaults_dict()
    merged = merge_layers(base, data)
    try:
        spec = RigSpec.model_validate(merged)
    except ValidationError as exc:
        problems += [p for p in _problems_from_pydantic(exc, merged) if not _redacted(p)]
        raise SpecError(problems, source) from None
    if problems:
        raise SpecError(problems, source)
    spec._renamed_keys = tuple(renamed)
    return spec


def _redacted(problem: SpecProblem) -> bool:
    """A problem about a value :func:`scan_raw` already refused as a secret (and replaced)."""
    return SECRET_SHOWN in problem.value or "<secret-shaped key" in problem.key


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


#: The tags pydantic adds to a location for a union branch or a validator ('function-after[_rule()]',
#: 'str', 'list[str]', 'nullable[...]'), which are no part of the data's path.
_PYDANTIC_TAG = re.compile(r"^(?:[a-z][a-z-]*\[.*\]|\[key\]|str|int|float|bool|none)$", re.DOTALL)


def _kind_at(loc: tuple[Any, ...]) -> Kind | None:
    """The :class:`~rigkit.spec.types.Kind` of the value at ``loc`` (a field, a list item, a mapping value),
    or None."""
    ann: Any = RigSpec
    kind = None
    for part in loc:
        while typing.get_origin(ann) is typing.Annotated:
            ann = typing.get_args(ann)[0]
        members = [a for a in typing.get_args(ann) if a is not type(None)] if typing.get_origin(ann) in (
            typing.Union, types.UnionType) else [ann]
        ann = next((a for a in members if a is not type(None)), None)
        while typing.get_origin(ann) is typing.Annotated:
            ann = typing.get_args(ann)[0]
        if isinstance(ann, type) and issubclass(ann, BaseModel) and isinstance(part, str) and part in ann.model_fields:
            field = ann.model_fields[part]
            ann, kind = field.annotation, kind_of(field.metadata)
        elif typing.get_origin(ann) in (list, dict):
            ann = typing.get_args(ann)[-1]
            kind = None
        else:
            return None
        if typing.get_origin(ann) is typing.Annotated:
            kind = kind_of(typing.get_args(ann)[1:]) or kind
        elif typing.get_origin(ann) in (typing.Union, types.UnionType):
            inner = [a for a in typing.get_args(ann) if typing.get_origin(a) is typing.Annotated]
            kind = kind or (kind_of(typing.get_args(inner[0])[1:]) if inner else None)
    return kind


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(p for p in loc if not (isinstance(p, str) and _PYDANTIC_TAG.match(p)))


def _problems_from_pydantic(exc: ValidationError, data: Mapping[str, Any]) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    seen: set[str] = set()
    for err in exc.errors(include_url=False):
        loc = _clean_loc(tuple(err["loc"]))
        key = dotted_key(loc)
        if err["type"] == "extra_forbidden" and loc:
            allowed = _fields_at(loc)
            hint = did_you_mean(str(loc[-1]), allowed)
            owned_hint = ""
            if str(loc[-1]).startswith("_") or str(loc[-1]).startswith(_CONNECTOR_PREFIXES):
                owned_hint = did_you_mean(str(loc[-1]), _owned_cache())
            problem = SpecProblem(key=key, value="unknown key",
                                  allowed=f"not a rigkit or pyinfra key{hint or owned_hint}")
        elif err["type"] == "missing":
            # pydantic's input here is the mapping the key is missing from: name the absence, not that mapping
            # (issue 63: a member without cold_boot_s printed the whole member as the value)
            problem = SpecProblem(key=key, value="missing", allowed=_allowed_text(err))
        else:
            value = err.get("input")
            # a type's own rule (rigkit.spec.types) names the kind: the value alone; pydantic's, with its type
            shown_value = "None" if value is None else shown(value, typed=err["type"] != "value_error")
            if secret_shaped(value) or SECRET_SHOWN in shown_value:  # never echo a secret, whatever the path
                shown_value = SECRET_SHOWN
            allowed = _allowed_text(err)
            kind = _kind_at(loc)
            if kind is not None and kind.most is not None and (err.get("ctx") or {}).get("le") == kind.most:
                allowed += f" ({kind.allowed})"  # the bound's reason: its consumer (rigkit.spec.types)
            problem = SpecProblem(key=key, value=shown_value, allowed=allowed)
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
        "finite_number": "a finite number (not .inf or .nan)",
    }
    if kind in table:
        return table[kind]
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected')}"
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        return err["msg"].replace("Input should be", "must be")
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}"
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return EMPTY_REFUSED
    if kind == "value_error":
        return err["msg"].removeprefix("Value error, ")
    return err["msg"]
