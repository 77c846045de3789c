"""Every string the spec holds, tried with shell payloads (issue #28): a walk over :class:`RigSpec`'s
pydantic schema finds each string field, list item and mapping key (members, models, pins, env …),
and for each shell payload (``$(touch /tmp/rigkit-canary-…)``, backticks, ``;``, ``&&``, a newline, a
leading ``-``) the spec either refuses it with a problem naming that field, or renders it literally:
every rendered file still parses to the same structure (no key, variable, directive or line smuggled
in), the payload survives whole where it lands (a YAML/JSON string, a ``.env`` value, one word of a
member command as llama-swap splits it). The commands the deploy runs quote by construction
(test_shell_commands.py); the sandbox deploy carrying every accepted payload at once is
tests/harness/test_safety.py's."""

from __future__ import annotations

import json
import typing
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel

from rigkit.common.envfile import parse_env_text
from rigkit.render.files import render
from rigkit.spec.cmdline import split_command
from rigkit.spec.model import RigSpec
from rigkit.spec.problems import SpecError
from rigkit.spec.validate import spec_from_dict

#: Keys used for a mapping's entries when the walk goes into one (an existing entry where there is one).
EXISTING = {"members": "strata", "models": "strata", "groups": "gpu"}
#: Fields whose string values the walk leaves alone: the operator's unit files are local paths read
#: from disk (a payload there is "no such file", covered by test_untrusted_input.py).
SKIP = {("operator_units",)}


#: What a slot needs beside it to make a valid spec with a harmless value (a url model needs its sha256).
COMPANIONS = {("models", "strata", "url"): {"models": {"strata": {"sha256": "0" * 64}}},
              # a member declared with llamacpp (issue 61) needs its port and model, and no service beside it
              ("llama_swap", "members", "strata", "llamacpp"): {"llama_swap": {"members": {"strata": {
                  "service": None, "llamacpp": {"port": 18050, "model": "strata", "model_file": "x.gguf"}}}}}}


def _companion(path: tuple) -> dict:
    return next((v for k, v in COMPANIONS.items() if path[:len(k)] == k), {})
BENIGN = "benign-value"


def payloads(field: str) -> list[str]:
    canary = f"/tmp/rigkit-canary-{field.replace('.', '-').replace('[', '').replace(']', '')}"
    return [f"$(touch {canary})", f"`touch {canary}`", f"x; touch {canary}", f"x && touch {canary}",
            f"x\ntouch {canary}", "-rf", f"a'b\"c #d: e {canary}"]


def _base(ann: Any) -> Any:
    """An annotation without its ``Annotated`` metadata (the spec's kinds, rigkit.spec.types)."""
    while typing.get_origin(ann) is typing.Annotated:
        ann = typing.get_args(ann)[0]
    return ann


def _unwrap(ann: Any) -> list[Any]:
    """The non-None members of an annotation (``str | None`` → ``[str]``), kinds' metadata off."""
    ann = _base(ann)
    if typing.get_origin(ann) in (typing.Union, __import__("types").UnionType):
        return [_base(a) for a in typing.get_args(ann) if a is not type(None)]
    return [ann]


def string_slots(model: type[BaseModel] = RigSpec, at: tuple = ()) -> list[tuple[tuple, str]]:
    """``(path, kind)`` of every place a string goes in the spec: ``kind`` is ``"value"`` (a str field or
    a list item: the path ends at it), ``"key"`` (a mapping's key: the path ends at the mapping)."""
    out: list[tuple[tuple, str]] = []
    for name, field in model.model_fields.items():
        path = (*at, name)
        if path in SKIP:
            continue
        for ann in _unwrap(field.annotation):
            origin = typing.get_origin(ann)
            if ann is str:
                out.append((path, "value"))
            elif origin is Literal:
                continue
            elif origin is list and _base(typing.get_args(ann)[0]) is str:
                out.append(((*path, 0), "value"))
            elif origin is dict:
                kt, vt = (_base(a) for a in typing.get_args(ann))
                if kt is str:
                    out.append((path, "key"))
                if vt is str:
                    out.append(((*path, "X_PAYLOAD"), "value"))
                elif isinstance(vt, type) and issubclass(vt, BaseModel):
                    out += string_slots(vt, (*path, EXISTING.get(name, "x")))
            elif isinstance(ann, type) and issubclass(ann, BaseModel):
                out += string_slots(ann, path)
    return out


def dotted(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else ("." if out else "") + str(p)
    return out


def data_for(path: tuple, kind: str, payload: str) -> dict:
    """An overrides dict putting ``payload`` at ``path`` (as a value, or as a new key of the mapping)."""
    data: dict = {}
    node = data
    for i, part in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(nxt, int):
            node[part] = [None]
            break
        node = node.setdefault(part, {})
    from rigkit.spec.layers import merge_layers

    extra = _companion(path)
    last = path[-1]
    if extra:
        data = merge_layers(extra, data)
        node = data
        for part in (path[:-2] if isinstance(last, int) else path[:-1]):
            if isinstance(part, int):
                break
            node = node.setdefault(part, {})
    if isinstance(last, int):
        node[path[-2]] = [payload]
    elif kind == "key":
        node[last] = {payload: _key_value(path)}
    else:
        node[last] = payload
    return data


def _key_value(path: tuple) -> Any:
    """A valid value for a new mapping entry at ``path``."""
    name = path[-1]
    return {"pacman_pins": "610.57-1", "extra_env": "1", "models": {"path": "x"},
            "members": {"cmd": "srv --port ${PORT}", "cold_boot_s": 5, "vram_gib": 1.0},
            "groups": {"members": ["strata"]}}.get(name, "x")


def structure(files: dict) -> dict[str, Any]:
    """Each rendered file's shape without its values: a parsed file's key paths, a ``.env``'s variable
    names, a unit's directive names (in order), anything else its line count."""
    out = {}
    for path, f in files.items():
        text = f.text
        if path.endswith((".yaml", ".yml")):
            out[path] = sorted(_keys(yaml.safe_load(text)))
        elif path.endswith(".json"):
            out[path] = sorted(_keys(json.loads(text)))
        elif path.endswith(".env"):
            out[path] = sorted(parse_env_text(text))
        elif path.endswith((".service", ".timer")):
            out[path] = [ln.split("=", 1)[0] for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
        else:
            out[path] = len(text.splitlines())
    return out


def _keys(data: Any, at: str = "") -> set[str]:
    if isinstance(data, dict):
        out = set()
        for k, v in data.items():
            out |= {f"{at}/{k}"} | _keys(v, f"{at}/{k}")
        return out
    if isinstance(data, list):
        return set().union(*(_keys(v, f"{at}[]") for v in data)) if data else set()
    return set()


def strings_of(files: dict) -> list[str]:
    """Every string a rendered file carries, read back the way its reader reads it."""
    out: list[str] = []
    for path, f in files.items():
        if path.endswith((".yaml", ".yml", ".json")):
            data = yaml.safe_load(f.text) if not path.endswith(".json") else json.loads(f.text)
            out += list(_strings(data))
        elif path.endswith(".env"):
            out += list(parse_env_text(f.text).values())
        else:
            out.append(f.text)
    return out


def _strings(data: Any):
    if isinstance(data, dict):
        for k, v in data.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(data, list):
        for v in data:
            yield from _strings(v)
    elif isinstance(data, str):
        yield data


SLOTS = string_slots()


def test_the_walk_finds_every_kind_of_string_slot():
    names = {dotted(p) for p, _ in SLOTS}
    for expected in ("operator_user", "strata.model_file", "strata.args[0]", "hyperqwen.extra_env.X_PAYLOAD",
                     "llama_swap.members.strata.cmd", "llama_swap.members.strata.env[0]", "models.strata.path",
                     "pacman_pins", "lock_files[0]", "llama_swap.groups.gpu.members[0]", "hyperqwen.image.ref"):
        assert expected in names, sorted(names)
    assert len(SLOTS) >= 55


@pytest.mark.parametrize("path, kind", SLOTS, ids=[f"{dotted(p)}:{k}" for p, k in SLOTS])
def test_a_shell_payload_is_refused_naming_the_field_or_carried_literally(path, kind):
    field = dotted(path)
    parent = dotted(path[:-1]) if isinstance(path[-1], int) or kind == "key" or path[-1] == "X_PAYLOAD" else field
    benign = None
    for payload in payloads(field):
        data = data_for(path, kind, payload)
        try:
            spec = spec_from_dict(data)
        except SpecError as exc:
            keys = [p.key for p in exc.problems]
            assert any(k.startswith(parent) or parent.startswith(k.split(" ")[0].split("[")[0]) and "." in k
                       for k in keys), (field, payload, keys)
            continue
        files = render(spec)
        benign = benign or structure(render(spec_from_dict(data_for(path, kind, BENIGN))))
        assert structure(files) == benign, (field, payload)
        carried = [s for s in strings_of(files) if "rigkit-canary" in s or s == payload]
        whole_command = path[-1] in ("cmd", "cmd_stop")
        for s in carried:
            if "\n" in payload or whole_command:
                continue
            # where the payload lands it is whole: a string as its reader reads it, or one word of a
            # command line as llama-swap splits it (SanitizeCommand: comment lines, continuations, POSIX words)
            assert payload in s or any(payload in word for word in split_command(s)), (field, payload, s[:300])
        config = yaml.safe_load(files["/etc/llama-swap/config.yaml"].text) or {}
        if whole_command and path[2] in config.get("models", {}):
            # an operator's command line is carried as written; llama-swap runs it without a shell
            written = config["models"][path[2]][{"cmd": "cmd", "cmd_stop": "cmdStop"}[path[-1]]]
            assert written.rstrip("\n") == payload, (field, payload, written)  # a block scalar ends in a newline


def _get(spec: Any, path: tuple) -> Any:
    node = spec
    for part in path:
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


@pytest.mark.parametrize("path", [p for p, k in SLOTS if k == "value" and not isinstance(p[-1], int) and p[-1] != "X_PAYLOAD"],
                         ids=lambda p: dotted(p))
def test_one_rule_for_empty(path):
    """``""`` is *unset* (None: ``rigkit check`` warns, the deploy refuses) for an optional field and
    refused at once, naming the field, for every other (issue #28: the README's rule)."""
    field = dotted(path)
    try:
        spec = spec_from_dict(data_for(path, "value", ""))
    except SpecError as exc:
        assert any(p.key == field and "empty" in p.allowed for p in exc.problems) or \
            any(p.key.startswith(field) for p in exc.problems), (field, [str(p) for p in exc.problems])
        return
    annotation = _field_of(path).annotation
    assert type(None) in typing.get_args(annotation), f"{field}: '' accepted for a field that is not optional"
    assert _get(spec, path) is None, field


def _field_of(path: tuple):
    model: Any = RigSpec
    field = None
    for part in path:
        if isinstance(model, type) and issubclass(model, BaseModel) and part in model.model_fields:
            field = model.model_fields[part]
            nxt = [a for a in _unwrap(field.annotation)]
            model = next((a for a in nxt if isinstance(a, type) and issubclass(a, BaseModel)), None)
            if model is None:
                dict_vals = [typing.get_args(a)[1] for a in nxt if typing.get_origin(a) is dict]
                model = next((v for v in dict_vals if isinstance(v, type) and issubclass(v, BaseModel)), None)
        # a mapping key (members.strata): stay on the value model
    return field
