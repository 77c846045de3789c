"""Constraints by construction (issue #45): the schema walk (every string and number field has a kind
from rigkit.spec.types), the table of claims (a generated collision of every kind, refused naming both
owners), compatibility as data, the co-load check against a brute-force oracle, each kind refused on
examples of our own, and no input that crashes or stalls the validation (hypothesis over raw data)."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from rigkit.spec import claims as claims_mod
from rigkit.spec import compat
from rigkit.spec import types as T
from rigkit.spec.model import RigSpec
from rigkit.spec.problems import SpecError
from rigkit.spec.validate import heaviest_co_load, spec_from_dict, spec_from_layers, spec_warnings

from .refusals import problems, refusal_tests

ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------------------------
# The schema walk


def _leaves(ann: Any, kind: T.Kind | None, where: str) -> list[str]:
    """Where a str/int/float sits in ``ann`` without a :class:`Kind` (``kind``: the field's own)."""
    if typing.get_origin(ann) is typing.Annotated:
        base, *meta = typing.get_args(ann)
        return _leaves(base, T.kind_of(meta) or kind, where)
    origin = typing.get_origin(ann)
    if origin in (typing.Union, __import__("types").UnionType):
        return [p for a in typing.get_args(ann) if a is not type(None) for p in _leaves(a, kind, where)]
    if origin is list:
        return _leaves(typing.get_args(ann)[0], None, f"{where}[]")
    if origin is dict:
        k, v = typing.get_args(ann)
        return _leaves(k, None, f"{where}{{key}}") + _leaves(v, None, f"{where}{{value}}")
    if origin is Literal or ann in (bool, type(None)):
        return []
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return _untyped(ann, where + ".")
    if ann in (str, int, float):
        return [] if kind is not None else [where]
    return [f"{where} ({ann!r}: unknown shape)"]


def _untyped(model: type[BaseModel], prefix: str = "") -> list[str]:
    return [p for name, field in model.model_fields.items()
            for p in _leaves(field.annotation, T.kind_of(field.metadata), f"{prefix}{name}")]


def _kinds(model: type[BaseModel] = RigSpec) -> set[T.Kind]:
    found: set[T.Kind] = set()

    def visit(ann: Any) -> None:
        if typing.get_origin(ann) is typing.Annotated:
            found.update(m for m in typing.get_args(ann)[1:] if isinstance(m, T.Kind))
        for a in typing.get_args(ann):
            visit(a)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            for f in ann.model_fields.values():
                found.update(m for m in f.metadata if isinstance(m, T.Kind))
                visit(f.annotation)

    visit(model)
    return found


def test_every_string_and_number_field_has_a_kind():
    assert _untyped(RigSpec) == []


def test_the_walk_would_find_an_untyped_field():
    class Loose(BaseModel):
        typed: T.Port = 1
        bare: int = 1
        names: list[str] = []
        table: dict[str, T.Port] = {}

    assert _untyped(Loose) == ["bare", "names[]", "table{key}"]


def test_the_free_kinds_are_few_and_named_in_the_note():
    free = {k.name for k in _kinds() if k.free}
    assert free == {"text", "command"}
    note = (ROOT / "notes" / "spec-types.md").read_text()
    for name in free:
        assert f"`{name}`" in note


# --------------------------------------------------------------------------------------------
# Each kind refused, naming the field, the value and what is allowed (examples of our own)

_MEMBER = {"cmd": "llama-server --port 18050", "cmd_stop": "pkill -f x", "proxy": "http://127.0.0.1:18050",
           "vram_gib": 1.0, "cold_boot_s": 5}

REFUSED = [
    # (data, key, value shown, words of what is allowed)
    ({"llama_swap": {"port": 70000}}, "llama_swap.port", "70000", "less than or equal to 65535"),
    ({"hyperqwen": {"bind": "10.0.0.5"}}, "hyperqwen.bind", "'10.0.0.5'", "loopback"),
    ({"hyperqwen": {"bind": "localhost:1"}}, "hyperqwen.bind", "'localhost:1'", "not an IP address"),
    ({"llama_swap": {"members": {"x": {**_MEMBER, "proxy": "http://192.168.1.4:18050"}}}},
     "llama_swap.members.x.proxy", "'http://192.168.1.4:18050'", "loopback"),
    ({"models": {"strata": {"repo_id": "a/../b"}}}, "models.strata.repo_id", "'a/../b'", "validate_repo_id"),
    ({"models": {"strata": {"repo_id": "a/b/c"}}}, "models.strata.repo_id", "'a/b/c'", "owner/name"),
    ({"models": {"strata": {"repo_id": "a/b", "revision": "main..x"}}}, "models.strata.revision", "'main..x'",
     "git-check-ref-format"),
    ({"hf_endpoint": "http://hub.lan:8000"}, "hf_endpoint", "'http://hub.lan:8000'", "trusted_http_hosts"),
    ({"hf_endpoint": "ftp://hub.lan"}, "hf_endpoint", "'ftp://hub.lan'", "https:// or http://"),
    ({"gpu_vram_gib": math.inf}, "gpu_vram_gib", "inf", "finite"),
    ({"bench": {"stall_timeout_s": math.nan}}, "bench.stall_timeout_s", "nan", "finite"),
    ({"llama_swap": {"members": {"gguf-baseline": {"ttl": T.GO_DURATION_S_MAX + 1}}}},
     "llama_swap.members.gguf-baseline.ttl", str(T.GO_DURATION_S_MAX + 1), "Go time.Duration"),
    ({"strata": {"args": ["--port", "9000"]}}, "strata.args[0]", "'--port 9000'", "already belongs to strata.port"),
    ({"llama_swap": {"members": {"a": {**_MEMBER}, "b": {**_MEMBER, "cmd": "srv --port=18050",
                                                         "proxy": "http://127.0.0.2:18051"}}}},
     "llama_swap.members.b.cmd", "'18050'", "already belongs to llama_swap.members.a.proxy"),
    ({"models": {"strata": {"path": "gguf-baseline"}}}, "models.strata.path", "'/srv/models/gguf-baseline'",
     "already belongs to models.gguf-baseline.path"),
    ({"hyperqwen": {"stop_timeout_s": 10**12}}, "hyperqwen.stop_timeout_s", str(10**12), "less than or equal to"),
    ({"gpu_power_limit_w": 2**40}, "gpu_power_limit_w", str(2**40), f"less than or equal to {T.NVML_W_MAX}"),
    ({"strata": {"ctx_size": 2**31}}, "strata.ctx_size", str(2**31), f"less than or equal to {T.INT32_MAX}"),
    ({"hyperqwen": {"models_dir": "/"}}, "hyperqwen.models_dir", "'/'", "system folder"),
    ({"hyperqwen": {"models_dir": "/var"}}, "hyperqwen.models_dir", "'/var'", "system folder"),
    ({"hyperqwen": {"models_dir": "/usr/local"}}, "hyperqwen.models_dir", "'/usr/local'", "system folder"),
    ({"hyperqwen": {"models_dir": "/srv/models/"}}, "hyperqwen.models_dir", "'/srv/models/'", "normalised"),
    ({"hyperqwen": {"models_dir": "/srv/../etc"}}, "hyperqwen.models_dir", "'/srv/../etc'", ".."),
    ({"hyperqwen": {"models_dir": "models"}}, "hyperqwen.models_dir", "'models'", "absolute"),
    ({"hyperqwen": {"models_dir": "/opt/rigkit/m"}}, "hyperqwen.models_dir", "'/opt/rigkit/m'", "rigkit"),
    ({"models": {"strata": {"path": "/abs"}}}, "models.strata.path", "'/abs'", "relative"),
    ({"lock_files": ["/run/*.lock"]}, "lock_files[0]", "'/run/*.lock'", "glob"),
    ({"pacman_pins": {"Nvidia-Utils": "1-1"}}, "pacman_pins.Nvidia-Utils", "'Nvidia-Utils'", "Arch package name"),
    ({"legacy_units": ["x" * 250 + ".service"]}, "legacy_units[0]", "'xxx", "255 bytes"),
    ({"paused_timers": ["a.service"]}, "paused_timers[0]", "'a.service'", ".timer"),
    ({"llama_swap": {"user": "Root"}}, "llama_swap.user", "'Root'", "Linux user name"),
    ({"llama_swap": {"members": {"x": {**_MEMBER, "cmd": "docker run --rm --name -bad img"}}}},
     "llama_swap.members.x.cmd", "'-bad'", "container name"),
    ({"cuda_version": "14.0"}, "cuda_version", "'14.0'", "compatibility table"),
    ({"nvidia_driver_version": "520.61", "pacman_pins": None}, "cuda_version", "'13.3'", "driver ≥ 580"),
    ({"pacman_pins": {"nvidia-open-dkms": "610.57.04-1", "nvidia-utils": "610.57.04-1", "opencl-nvidia": "610.57.04-1",
                      "cuda": "13.3.0-1", "linux-lts": "6.12.40-1"}},
     "pacman_pins.linux-lts", "'6.12.40-1'", "linux-lts-headers"),
    ({"pacman_pins": {"nvidia-open-dkms": "610.57.04-1", "nvidia-utils": "610.57.04-1", "opencl-nvidia": "610.57.04-1",
                      "cuda": "13.3.0-1", "lib32-nvidia-utils": "600.1.2-1"}},
     "pacman_pins.lib32-nvidia-utils", "'600.1.2-1'", "disagrees with nvidia_driver_version"),
    ({"llama_swap": {"preload": ["strata", "gguf-baseline"]}}, "llama_swap.preload[1]", "'gguf-baseline'",
     "swaps out strata"),
]


ACCEPTED = [
    {"hyperqwen": {"bind": "127.0.0.2"}},
    {"hyperqwen": {"bind": "::1"}},
    {"llama_swap": {"members": {"x": {**_MEMBER, "proxy": "http://127.0.0.2:18050"}}}},
    {"llama_swap": {"members": {"x": {**_MEMBER, "proxy": "http://[::1]:18050"}}}},
    {"hyperqwen": {"models_dir": "/var/lib/models"}},
    {"hyperqwen": {"models_dir": "/srv/models"}},
    {"hf_endpoint": "http://127.0.0.1:8000"},
    {"hf_endpoint": "http://Hub.LAN:8000", "trusted_http_hosts": ["hub.lan"]},
    {"hf_endpoint": "https://hf-mirror.example.com"},
    {"models": {"strata": {"repo_id": "rigkit-test/Strata-Coder-GGUF", "revision": "0" * 40}}},
]
test_each_kind_is_refused_naming_the_field_the_value_and_what_is_allowed, test_what_each_kind_allows_passes = \
    refusal_tests(REFUSED, ACCEPTED, id_width=20)


def test_a_loopback_host_is_all_of_127_8_and_1():
    assert all(T.loopback_host(h) for h in ("127.0.0.1", "127.255.0.9", "::1", "[::1]", "localhost", "LOCALHOST"))
    assert not any(T.loopback_host(h) for h in ("128.0.0.1", "10.0.0.1", "::2", "localhost.evil", "", None))


# --------------------------------------------------------------------------------------------
# The table of claims: a generated collision of every kind, refused naming both owners


def _collisions(draw_port: int, name: str) -> dict[str, tuple[dict, str, str]]:
    """One colliding spec per kind of claim: ``kind → (data, the second owner's key, the first owner's key)``."""
    member = {**_MEMBER, "cmd": f"srv --port {draw_port}", "proxy": f"http://127.0.0.1:{draw_port}"}
    return {
        "port": ({"llama_swap": {"port": draw_port, "members": {name: member}}},
                 f"llama_swap.members.{name}.proxy", "llama_swap.port"),
        "port in args": ({"strata": {"args": ["--threads", "1", f"--port={draw_port}"]}, "gguf_baseline": {"port": draw_port}},
                         "strata.args[2]", "gguf_baseline.port"),
        "listen option": ({"strata": {"args": ["--port", str(draw_port)]}}, "strata.args[0]", "strata.port"),
        "path": ({"models": {"a": {"repo_id": "o/a", "path": name}, "b": {"repo_id": "o/b", "path": name}}},
                 "models.b.path", "models.a.path"),
        "path of two fields": ({"hyperqwen": {"models_dir": f"/srv/models/{name}"}, "models": {"a": {"repo_id": "o/a", "path": name}}},
                               "models.a.path", "hyperqwen.models_dir"),
        "rigkit path": ({"hyperqwen": {"models_dir": f"/var/lib/rigkit/{name}"}}, "hyperqwen.models_dir", "rigkit (/var/lib/rigkit)"),
        "container": ({"llama_swap": {"members": {name: {**member, "cmd": f"docker run --rm --name strata img --port {draw_port}",
                                                          "cmd_stop": "docker stop strata"}}}},
                      f"llama_swap.members.{name}.cmd", "llama_swap.members.strata"),
        "unit": ({"legacy_units": [f"{name}.service"], "operator_units": [f"inventory/units/{name}.service"]},
                 "operator_units[0]", "legacy_units[0]"),
        "rigkit unit": ({"legacy_units": ["rigkit-keeper.timer"]}, "legacy_units[0]", "rigkit (rigkit-keeper.timer)"),
        "model name": ({"llama_swap": {"members": {name: {**member, "aliases": ["strata"]}}}},
                       f"llama_swap.members.{name}.aliases[0]", "llama_swap.members.strata"),
        "group membership": ({"llama_swap": {"groups": {"gpu": {"members": ["strata", "gguf-baseline", "hyperqwen"]},
                                                         name: {"members": ["strata"]}}}},
                             f"llama_swap.groups.{name}.members[0]", "llama_swap.groups.gpu.members[0]"),
        "service": ({"llama_swap": {"members": {name: {"service": "strata", "vram_gib": 1.0, "cold_boot_s": 5}}}},
                    f"llama_swap.members.{name}.service", "llama_swap.members.strata.service"),
    }


KINDS = list(_collisions(18099, "zz"))


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(port=st.integers(18100, 19999), name=st.from_regex(r"\Aq[a-z0-9]{1,12}\Z"))
def test_a_generated_collision_of_every_kind_names_both_owners(kind, port, name):
    data, second, first = _collisions(port, name)[kind]
    found = [str(p) for p in claims_mod.claim_problems(claims_mod.spec_claims(_spec_models_only(data)))]
    assert any(p.startswith(second + ":") and first in p for p in found), (kind, found)


def _spec_models_only(data: dict) -> RigSpec:
    from rigkit.spec.layers import validate_dict

    return validate_dict(data)


def test_every_kind_of_claim_is_exercised():
    assert {k.split(" ", 1)[-1] if k.startswith("rigkit") else k.removesuffix(" in args").removesuffix(" of two fields")
            for k in KINDS} >= {
        "port", "path", "container", "unit", "model name", "group membership", "service", "listen option"}
    assert set(claims_mod.COMPARED) == {"port", "path", "container", "unit", "model name", "group membership",
                                        "service", "listen option"}


def test_the_default_spec_claims_nothing_twice():
    assert claims_mod.check_claims(RigSpec()) == []


@pytest.mark.parametrize("words, found", [
    (["llama-server", "--port", "1"], [(1, "1")]),
    (["vllm", "serve", "m", "--port=9"], [(3, "9")]),
    (["x", "--port", "1", "--port=2"], [(1, "1"), (3, "2")]),
    (["x", "--portal", "1", "--port"], []),
])
def test_listen_ports_reads_both_forms(words, found):
    assert claims_mod.listen_ports(words) == found


@pytest.mark.parametrize("cmd, found", [
    ("docker run --rm --name a -p 127.0.0.1:18030:8080 img --port 8080", ["18030"]),
    ("docker run --rm --name a --publish=18031:80/tcp -p8081:81 -p 9000 img", ["18031", "8081"]),
    ("docker run --rm --name a -p [::1]:18032:80 img", ["18032"]),
    ("llama-server --port 18033", []),
])
def test_published_ports_read_the_host_side(cmd, found):
    from rigkit.spec.cmdline import split_command

    assert claims_mod.published_ports(split_command(cmd)) == found


def test_a_container_port_is_not_a_host_port_but_its_published_port_is():
    two_containers = {name: {**_MEMBER, "cmd": f"docker run --rm --name {name} -p 127.0.0.1:{port}:8080 img --port 8080",
                             "cmd_stop": f"docker stop {name}", "proxy": f"http://127.0.0.1:{port}"}
                      for name, port in (("c1", 18061), ("c2", 18062))}
    assert problems({"llama_swap": {"members": two_containers}}) == []
    two_containers["c2"]["cmd"] = "docker run --rm --name c2 -p 127.0.0.1:18030:8080 img --port 8080"
    assert any(p.startswith("llama_swap.members.c2.cmd: '18030'") and "strata.port" in p
               for p in problems({"llama_swap": {"members": two_containers}}))


# --------------------------------------------------------------------------------------------
# Compatibility as data


def test_the_compatibility_table_reads_as_nvidias():
    assert compat.highest_cuda_major("610.57") == 13
    assert compat.highest_cuda_major("580.65.06") == 13
    assert compat.highest_cuda_major("575.57.08") == 12
    assert compat.highest_cuda_major("450.80.02") == 11
    assert compat.highest_cuda_major("440.1") is None
    assert compat.cuda_problem("610.57", "13.3") is None
    assert "needs driver ≥ 580" in compat.cuda_problem("570.1", "13.0")
    assert compat.header_problems("nvidia-open", {"linux": "6.1-1"}) == []
    assert compat.header_problems("nvidia-open-dkms", {"linux": "6.1-1", "linux-headers": "6.1-1"}) == []
    assert compat.header_problems("nvidia-open-dkms", {"linux": "6.1-1", "linux-headers": "6.2-1"})[0][0] == "linux-headers"


# --------------------------------------------------------------------------------------------
# The co-load check: linear, and the brute force's answer


def _brute_force(groups: dict, vram: dict) -> float:
    """The heaviest co-load by trying every set of groups in every order (the check before issue #45)."""
    from rigkit.spec.validate import loaded_members

    best = 0.0
    names = list(groups)
    for r in range(1, len(names) + 1):
        for subset in itertools.combinations(names, r):
            if any(all(not groups[g][1] or all(groups[h][2] for h in order[:i]) for i, g in enumerate(order))
                   for order in itertools.permutations(subset)):
                best = max(best, sum(vram[m] for g in subset for m in loaded_members(groups[g], vram)))
    return best


_group = st.tuples(st.booleans(), st.booleans(), st.booleans(),
                   st.lists(st.floats(0, 30, allow_nan=False), min_size=1, max_size=3))


@settings(max_examples=150, deadline=None)
@given(st.lists(_group, min_size=1, max_size=5))
def test_the_co_load_check_agrees_with_the_brute_force(shapes):
    groups, vram = {}, {}
    for i, (swap, exclusive, persistent, sizes) in enumerate(shapes):
        mids = [f"g{i}m{j}" for j in range(len(sizes))]
        vram.update(zip(mids, sizes))
        groups[f"g{i}"] = (swap, exclusive, persistent, mids)
    total, chosen = heaviest_co_load(groups, vram)
    assert math.isclose(total, _brute_force(groups, vram), abs_tol=1e-9)


def test_fifty_groups_check_in_linear_time():
    import time

    members = {f"m{i}": {**_MEMBER, "cmd": f"srv --port {19000 + i}", "proxy": f"http://127.0.0.1:{19000 + i}",
                         "vram_gib": 0.01} for i in range(50)}
    groups = {f"g{i}": {"members": [f"m{i}"], "exclusive": i % 2 == 0, "persistent": i % 3 == 0} for i in range(50)}
    data = {"llama_swap": {"members": members, "groups": {"gpu": {"members": ["strata", "gguf-baseline", "hyperqwen"]},
                                                          **groups}}}
    start = time.process_time()
    spec_from_dict(data)
    assert time.process_time() - start < 5  # was 2^50 orders; the figure (< 2 s) is benchmarks/check_input_size.py's


# --------------------------------------------------------------------------------------------
# No crash, no stall

_FIELDS = ["gpu_vram_gib", "gpu_power_limit_w", "hyperqwen", "llama_swap", "members", "groups", "models", "port",
           "ttl", "bind", "models_dir", "hf_endpoint", "repo_id", "pacman_pins", "legacy_units", "args", "env",
           "extra_env", "strata", "preload", "cmd", "proxy", "vram_gib", "cold_boot_s", "lock_files",
           # issue #59's readers: engine arguments, limits, units
           "cmd_stop", "check_endpoint", "use_model_name", "model_file", "release_url", "start_port", "user",
           "operator_user", "paused_timers", "EXTRA_ARGS", "image", "ref", "url", "gguf_baseline", "version"]
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers().map(lambda i: i * 10**4400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40), st.text(alphabet="/.:-_@$%{}[] \\\n\x00\u202e", max_size=60),
    st.binary(max_size=8), st.sampled_from(["18030", "/", "a/../b", "http://10.1.1.1", "strata", "${PORT}", "x" * 5000]),
)
_keys = st.one_of(st.sampled_from(_FIELDS), st.text(max_size=12), st.integers(-3, 3))
_raw = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner), st.frozensets(st.integers(), max_size=3),
    st.dictionaries(_keys, inner, max_size=5)), max_leaves=30)


def _with_cycle(data: Any, where: int) -> Any:
    """``data`` with a container made to contain itself (at the ``where``-th mapping or list found)."""
    found = []

    def visit(v: Any) -> None:
        if isinstance(v, (dict, list)):
            found.append(v)
            for item in (v.values() if isinstance(v, dict) else v):
                visit(item)

    visit(data)
    if found:
        target = found[where % len(found)]
        if isinstance(target, dict):
            target["self"] = target
        else:
            target.append(target)
    return data


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer=st.dictionaries(_keys, _raw, max_size=6), cycle=st.one_of(st.none(), st.integers(0, 20)))
def test_any_raw_inventory_data_is_accepted_or_refused_with_a_message(layer, cycle):
    if cycle is not None:
        layer = _with_cycle(layer, cycle)
    try:
        spec = spec_from_layers([layer], labels=["fuzz"])
    except SpecError as exc:
        assert exc.problems and all(p.key is not None and p.allowed for p in exc.problems)
        assert len(str(exc)) < 200_000
        return
    spec_warnings(spec)


def test_deep_nesting_is_refused_not_a_recursion_error():
    deep: Any = "x"
    for _ in range(5000):
        deep = {"a": deep}
    with pytest.raises(SpecError, match="nested deeper than"):
        spec_from_layers([{"llama_swap": deep}])


def test_rigkit_check_on_a_self_containing_inventory_exits_2_without_a_traceback(tmp_path):
    inv = tmp_path / "loop.py"
    inv.write_text("d = {'ttl': 1}\nd['members'] = d\nhosts = [('box', {'llama_swap': d, 'gpu_vram_gib': float('inf'), "
                   "'strata': {'ctx_size': 10**5000}})]\n")
    p = subprocess.run([sys.executable, "-m", "rigkit", "check", "-i", str(inv)], cwd=ROOT, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 2, out
    assert "Traceback" not in out
    assert "contains itself" in out and "gpu_vram_gib" in out and "strata.ctx_size" in out
