"""rigkit's llama-swap checks agree with llama-swap 250's own loader (issue #38; DESIGN.md "Read through the
owner": a config rigkit renders for llama-swap is judged as llama-swap judges it).

The oracle is upstream's loader itself (``tests/harness/llama_swap_oracle/main.go`` compiled inside the
vendored v250 tree: ``LoadConfigSources`` and the routers ``server.New`` builds), one process for every
config, run with the environment ``llama-swap.service`` gives llama-swap. rigkit's verdict is
:func:`rigkit.spec.llama_swap_load.judge` with upstream's schema — what ``rigkit check`` runs.

- upstream's own test configs (the YAML string literals of ``internal/config/*_test.go``, extracted with
  go/ast by the oracle) and its ``config.example.yaml``: the same verdict, except the rows of
  :data:`EXCEPTIONS` (rigkit stricter on purpose, or a verdict that depends on the machine) and of
  :data:`NOT_JUDGED` (the matrix router's set language, which the spec never renders) — each row a test;
- configs generated from the spec's member fields (commands, env, names, macros, groups in the legacy and
  the ``routing`` form, numbers at their bounds): no disagreement at all;
- specs generated the same way: every spec rigkit accepts renders configs llama-swap loads, and a spec refused
  only for a member's macro renders one llama-swap refuses;
- member proxies: Go's ``net/url`` verdict;
- one field of an upstream config both load changed to each of many values: llama-swap's verdict, or a
  refusal on purpose, or the matrix set language;
- no input makes the checker raise.

Counts and tables: ``notes/llama-swap-loader.md``.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings, strategies as st

from rigkit.render.files import llama_swap_environment
from rigkit.spec.llama_swap_load import judge
from rigkit.spec.validate import spec_from_layers

from .llama_swap_oracle import ROOT, Oracle, oracle_dir

pytestmark = pytest.mark.slow

#: Upstream's schema: the copy the suite points ``rigkit check`` at (tests/conftest.py ``SCHEMA_COPY``).
SCHEMA_COPY = Path(os.environ.get("RIGKIT_SHARED", ROOT.parent / "shared")) / "data" / "llama-swap" / "config-schema.json"
SCHEMA = json.loads(SCHEMA_COPY.read_text()) if SCHEMA_COPY.is_file() else None
ENV = llama_swap_environment(spec_from_layers([]))

#: Where rigkit refuses on purpose what llama-swap loads: config (``file:line`` of the literal in upstream's
#: tree at v250) → (rigkit's problem, fragment; why it matters on the rig).
EXCEPTIONS = {
    "macro_test.go:74": ("defs: unknown key", "an unknown top-level key (here a holder of YAML anchors) is "
                         "ignored by llama-swap without a word: on the rig a misspelt key silently changes nothing"),
    "model_config_anchor_test.go:11": ("defs: unknown key", "the same: an unknown top-level key"),
    "model_config_anchor_test.go:49": ("defs: unknown key", "the same: an unknown top-level key"),
    "performance_test.go:26": ("performance.enable: unknown key", "performance.enable is no key of llama-swap's (it "
                               "has disabled): ignored silently, the monitor stays on whatever it says"),
    "config_test.go:99": ("", "store.path must be a writable directory on the host that runs llama-swap: the "
                          "oracle judges this machine's filesystem, rigkit judges the file (the deploy creates "
                          "the rig's directories)"),
}

#: What rigkit's checker does not judge: the matrix router's set language (``internal/matrix``: a tokenizer
#: and a compiler of its own), which the spec never renders. Upstream refuses these, rigkit passes them;
#: each row a test, so a port of the language turns it into an agreement.
NOT_JUDGED = {
    "selectors_test.go:288": "spillover targets that no one matrix set holds together",
    "selectors_test.go:327": "a matrix set the language's tokenizer refuses",
}


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    o = Oracle(oracle_dir(), ENV, tmp_path_factory.mktemp("oracle"))
    yield o
    o.close()
    print(f"\nllama-swap's loader judged {o.count} configs in one process")


@functools.cache
def upstream_configs() -> dict[str, str]:
    """``file:line`` → text of every config of upstream's tests (first literal of each text) and its example."""
    folder = oracle_dir()
    out: dict[str, str] = {}
    for lit in json.loads((folder / "upstream-configs.json").read_text()):
        if lit["text"] not in out.values():
            out[f"{lit['file']}:{lit['line']}"] = lit["text"]
    out["config.example.yaml"] = (folder / "config.example.yaml").read_text()
    return out


def rigkit_verdict(text: str):
    return judge(text, ENV, SCHEMA)


def test_the_schema_is_the_shared_copy():
    assert SCHEMA is not None, "../shared/data/llama-swap/config-schema.json is missing"


def test_every_upstream_config_gets_the_same_verdict_but_the_listed_rows(oracle, record_property):
    configs = upstream_configs()
    agree, crashes, differ = 0, [], {}
    for where, text in configs.items():
        up = oracle.verdict(text)
        try:
            ours = rigkit_verdict(text)
        except Exception as exc:  # noqa: BLE001 - a crash is counted, then fails the test
            crashes.append(f"{where}: {exc!r}")
            continue
        if up["ok"] == ours.ok:
            agree += 1
        else:
            differ[where] = (up.get("error"), ours.problems)
    counts = {"configs": len(configs), "agree": agree, "exceptions": len(EXCEPTIONS), "not_judged": len(NOT_JUDGED),
              "crashes": len(crashes)}
    record_property("counts", counts)
    print(f"\ndifferential: {counts}")
    assert not crashes
    assert sorted(differ) == sorted({**EXCEPTIONS, **NOT_JUDGED}), differ
    assert agree == len(configs) - len(EXCEPTIONS) - len(NOT_JUDGED)
    assert len(configs) >= 200


@pytest.mark.parametrize("where", sorted(EXCEPTIONS))
def test_an_exception_is_rigkit_refusing_what_llama_swap_loads(oracle, where):
    text = upstream_configs()[where]
    fragment, reason = EXCEPTIONS[where]
    assert reason
    ours = rigkit_verdict(text)
    if where == "config_test.go:99":  # the host's filesystem: llama-swap refuses, rigkit judges the file
        assert oracle.verdict(text)["error"].startswith("store.path: directory /no/such/dir is not writable")
        assert ours.ok
        return
    assert oracle.verdict(text)["ok"], where
    assert any(fragment in p for p in ours.problems), ours.problems


@pytest.mark.parametrize("where", sorted(NOT_JUDGED))
def test_a_block_rigkit_does_not_judge_is_still_refused_by_llama_swap(oracle, where):
    text = upstream_configs()[where]
    assert not oracle.verdict(text)["ok"]
    assert rigkit_verdict(text).ok
    data = yaml.safe_load(text)
    assert "matrix" in data or "matrix" in (((data.get("routing") or {}).get("router") or {}).get("settings") or {}), \
        f"{where} ({NOT_JUDGED[where]}) has no matrix: it must agree"


# ---------------------------------------------------------------------------------------------------
# configs generated from the spec's member fields

MACROS = ["${PORT}", "${MODEL_ID}", "${PID}", "${MODELS}", "${VARIANT}", "${env.HOME}", "${env.USER}",
          "${env.RIGKIT_NOPE}", "${}", "$HOME", "${env.}", "${a.b}"]
NUMBERS = [-2, -1, 0, 1, 5, 14, 15, 300, 1.5, 2**63 - 1, 2**63, -2**63, -2**63 - 1, "5", True, None]
#: What a clean config draws from (half the configs: so that agreement on "loads" is tested as much as on
#: "refuses").
CLEAN_MACROS = ["${MODEL_ID}", "${env.HOME}", "${env.USER}", "$HOME"]
CLEAN_NUMBERS = [0, 1, 15, 300, 2**63 - 1]
IDS = ["strata", "gguf-baseline", "hyperqwen", "m-1"]


def _text(base: str, clean: bool = False):
    return st.builds(lambda macro, where: base if macro is None else (base + " " + macro if where else macro + base),
                     st.none() | st.sampled_from(CLEAN_MACROS if clean else MACROS), st.booleans())


@st.composite
def member(draw, clean: bool = False):
    numbers = CLEAN_NUMBERS if clean else NUMBERS
    m = {"cmd": draw(st.sampled_from(["docker run --rm --init --name x img --port ${PORT}",
                                      "docker run --rm --name x img --port 18030", "server\n# a comment ${MODELS}\n--flag"])
                     .flatmap(lambda base: _text(base, clean)))}
    if "${PORT}" not in m["cmd"] and clean:
        m["proxy"] = "http://127.0.0.1:18030"
    if draw(st.booleans()):
        m["cmdStop"] = draw(_text("docker stop --time 10 x", clean))
    proxy = draw(st.sampled_from([None, "http://127.0.0.1:18030", "http://127.0.0.1:${PORT}"]))
    if proxy and not clean:
        m["proxy"] = proxy
    for key in ("name", "description", "useModelName", "checkEndpoint"):
        if draw(st.booleans()):
            m[key] = draw(_text({"checkEndpoint": "/health"}.get(key, "Strata coder"), clean))
    if draw(st.booleans()):
        m["env"] = draw(st.lists(_text("HOME=/var/lib/x", clean), max_size=2))
    if draw(st.booleans()):
        m["aliases"] = draw(st.lists(st.sampled_from(["coder", "chat", "strata"]), max_size=2))
    for key in ("ttl", "unloadTimeout"):
        if draw(st.booleans()):
            m[key] = draw(st.sampled_from(numbers))
    if draw(st.booleans()):
        m["timeouts"] = {"idleConn": draw(st.sampled_from(numbers))}
    if draw(st.booleans()):
        m["metadata"] = {"vram_gib": 21.6, "note": draw(_text("x", clean))}
    return m


@st.composite
def spec_config(draw):
    clean = draw(st.booleans())
    ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=True))
    cfg = {k: draw(st.sampled_from(CLEAN_NUMBERS[1:] if clean else NUMBERS))
           for k in ("healthCheckTimeout", "startPort", "globalTTL") if draw(st.booleans())}
    cfg["logLevel"] = "info"
    cfg["models"] = {mid: draw(member(clean)) for mid in ids}
    if clean:  # an alias is unique across members (a duplicate is a refusal)
        for mid, m in cfg["models"].items():
            m.pop("aliases", None)
    members = draw(st.lists(st.sampled_from(ids if clean else ids + ["ghost", "coder"]), max_size=4,
                            unique=clean))
    groups = {"gpu": {"swap": True, "exclusive": True, "persistent": False, "members": members}}
    if draw(st.booleans()):
        rest = [i for i in ids if i not in members] if clean else ids
        groups["other"] = {"members": draw(st.lists(st.sampled_from(rest), max_size=2, unique=clean)) if rest else []}
    form = draw(st.sampled_from(["none", "routing", "legacy"] if clean else ["none", "routing", "legacy", "both"]))
    if form in ("routing", "both"):
        cfg["routing"] = {"router": {"use": "group", "settings": {"groups": groups}}}
    if form in ("legacy", "both"):
        cfg["groups"] = groups
    if draw(st.booleans()):
        cfg["hooks"] = {"on_startup": {"preload": draw(st.lists(st.sampled_from(ids + ["ghost"]), max_size=2))}}
    return cfg


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(cfg=spec_config())
def test_configs_generated_from_the_spec_get_llama_swaps_verdict(oracle, cfg):
    text = yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True)
    up = oracle.verdict(text)
    ours = rigkit_verdict(text)
    event("llama-swap loads it" if up["ok"] else "llama-swap refuses it")
    assert up["ok"] == ours.ok, (text, up, ours.problems)


#: Numbers at and past int64's ends as YAML writes them: yaml.v3 resolves an integer past int64 as a uint64
#: or a float, and converts a float with int64() (amd64: MinInt64 for anything out of range) — the shapes
#: hypothesis found rigkit judging apart from llama-swap (-9223372036854775809 loads, as MinInt64).
GO_INT_EDGES = ("9223372036854775807", "9223372036854775808", "18446744073709551616", "-9223372036854775808",
                "-9223372036854775809", "-99999999999999999999999", "9.2e18", "9.223372036854775808e18",
                "9.3e18", "-9.3e18", "-1e20", "-.inf", ".inf", ".nan", "1.5", "-0.5")


@pytest.mark.parametrize("number", GO_INT_EDGES)
@pytest.mark.parametrize("field", ["healthCheckTimeout", "ttl"])
def test_numbers_at_int64s_ends_get_llama_swaps_verdict(oracle, field, number):
    text = ((f"healthCheckTimeout: {number}\n" if field == "healthCheckTimeout" else "")
            + "models:\n  a:\n    cmd: llama-server --port ${PORT}\n"
            + (f"    ttl: {number}\n" if field == "ttl" else ""))
    up, ours = oracle.verdict(text), rigkit_verdict(text)
    assert up["ok"] == ours.ok, (up.get("error"), ours.problems)


#: A proxy's userinfo as Go's net/url judges it (parseAuthority: validUserinfo, then unescape) — hypothesis
#: found ``//{@`` passing rigkit's check while llama-swap refused it.
USERINFO_SHAPES = ("//{@", "http://us{er@h:1", "http://u:p@h:1", "http://u%zz@h:1", "http://u%41:p@h:1",
                   "http://\u00e9@h:1", "http://a@b@h:1", "http://u p@h:1", "//@h", "http://u:p%2@h")


@pytest.mark.parametrize("proxy", USERINFO_SHAPES)
def test_a_proxys_userinfo_gets_llama_swaps_verdict(oracle, proxy):
    text = f"models:\n  a:\n    cmd: server --port 18030\n    proxy: '{proxy}'\n"
    up, ours = oracle.verdict(text), rigkit_verdict(text)
    assert up["ok"] == ours.ok, (up.get("error"), ours.problems)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.one_of(
    st.text(alphabet=st.sampled_from(list("models:cmd${}PORT-[]\n #&*!|>'\"\\.env0123 \t")), max_size=200),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                 lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(
                     ["models", "cmd", "macros", "routing", "router", "settings", "groups", "members", "ttl", "proxy",
                      "peers", "selectors", "strategy", "targets", "profiles", "pins", "matrix", "vars", "sets",
                      "evict_costs", "upstream", "ignorePaths", "filters", "setParamsByID", "store", "performance",
                      "every", "a", "x"]),
                     c, max_size=3), max_leaves=20).map(lambda d: yaml.safe_dump(d))))
def test_no_input_makes_the_checker_raise(text):
    verdict = judge(text, ENV, SCHEMA)
    assert isinstance(verdict.problems, list) and isinstance(verdict.warnings, list)


# ---------------------------------------------------------------------------------------------------
# specs: what rigkit accepts, llama-swap loads

SPEC_TEXT = st.sampled_from(["", " ${MODEL_ID}", " ${PORT}", " ${PID}", " ${MODELS}", " ${env.HOME}", " ${env.NOPE}",
                             " $HOME", " ${}", " 100%"])
SPEC_NUMBERS = st.sampled_from([0, 1, 15, 600, 2**63 - 1, 2**63])


@st.composite
def member_layer(draw):
    cmd = "llama-server --port ${PORT}" if draw(st.booleans()) else "llama-server --port 18050"
    m = {"cmd": cmd + draw(SPEC_TEXT), "vram_gib": 1, "cold_boot_s": 5, "ttl": draw(SPEC_NUMBERS)}
    if "${PORT}" not in cmd:
        m["proxy"] = "http://127.0.0.1:18050" + draw(SPEC_TEXT).strip()
    if draw(st.booleans()):
        m["cmd_stop"] = "kill" + draw(SPEC_TEXT)
    for key in ("name", "description"):
        if draw(st.booleans()):
            m[key] = "Coder" + draw(SPEC_TEXT)
    if draw(st.booleans()):
        m["env"] = ["HOME=/var/lib/x" + draw(SPEC_TEXT).strip()]
    if draw(st.booleans()):
        m["unload_timeout_s"] = draw(SPEC_NUMBERS)
    if draw(st.booleans()):
        m["send_loading_state"] = draw(st.booleans())  # issue 60: rendered only when on
    return m


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(member=member_layer(), hct=st.sampled_from([270, 600, 2**63 - 1, 2**63]), staged=st.booleans())
def test_every_spec_rigkit_accepts_renders_configs_llama_swap_loads(oracle, member, hct, staged):
    """Both ways: a spec rigkit accepts renders configs llama-swap loads; a spec refused only for a member's
    macro renders (models checked alone) a config llama-swap refuses — the refusal is not stricter than it."""
    from rigkit.render.files import render_llama_swap
    from rigkit.spec.layers import validate_layers
    from rigkit.spec.problems import SpecError

    layer = {"llama_swap": {"health_check_timeout_s": hct, "members": {"coder": {**member, "staged": staged}},
                            "groups": {"gpu": {"members": ["strata", "gguf-baseline", "hyperqwen", "coder"]}}}}
    try:
        spec = spec_from_layers([layer])
    except SpecError as exc:
        assert all(p.key.startswith(("llama_swap.members.coder.", "llama_swap.health_check_timeout_s"))
                   for p in exc.problems), exc.problems
        if exc.problems and all(p.allowed.startswith("llama-swap 250 refuses the whole config") for p in exc.problems):
            event("refused by the spec for a macro")
            assert not oracle.verdict(render_llama_swap(validate_layers([layer]), staged=True))["ok"]
        else:
            event("refused by the spec")
        return
    event("accepted by the spec")
    for text in (render_llama_swap(spec, staged=False), render_llama_swap(spec, staged=True)):
        up = oracle.verdict(text)
        assert up["ok"], (member, up)
        assert rigkit_verdict(text).ok


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(proxy=st.one_of(
    st.text(alphabet=st.sampled_from(list("htps:/[]@%:01289aAfF.-#?{ }|\\^`<>\"'~!$&()*+,;=_")), max_size=30),
    st.builds(lambda host, port, path: f"http://{host}{port}{path}",
              st.sampled_from(["127.0.0.1", "localhost", "[::1]", "[::1", "a b", "h%41", "h%zz", "u@h", "x|y", ""]),
              st.sampled_from(["", ":", ":18030", ":-1", ":x", ":99999999999999999999"]),
              st.sampled_from(["", "/", "/v1", "/%zz", "?q=%zz", "#%zz", "#ok"]))))
def test_member_proxies_get_llama_swaps_verdict(oracle, proxy):
    text = yaml.safe_dump({"models": {"a": {"cmd": "server --port 18030", "proxy": proxy}}})
    up = oracle.verdict(text)
    assert up["ok"] == rigkit_verdict(text).ok, (proxy, up, rigkit_verdict(text).problems)


# ---------------------------------------------------------------------------------------------------
# every field of upstream's configs, one value changed at a time

#: rigkit's refusals on purpose: an unknown key (llama-swap ignores it silently) and a member without a
#: command (llama-swap loads it and fails only when a request starts it). A refused config lists the
#: schema's findings beside the loader's.
DELIBERATE = ("unknown key (llama-swap ignores it silently)", ".cmd: Field required", "(llama-swap's schema)")
VALUES = [None, True, False, 0, 1, -1, 15, 1.5, 0.0, "", "x", "5s", "1m", "http://127.0.0.1:1", [], {}, ["a"],
          {"a": 1}, 2**63, -2, "${PORT}", "${X}", "${MODEL_ID}", "${env.HOME}"]


@pytest.fixture(scope="module")
def loaded_configs(oracle):
    """Upstream's test configs that llama-swap and rigkit both load, parsed."""
    return [yaml.safe_load(t) for t in upstream_configs().values()
            if oracle.verdict(t)["ok"] and rigkit_verdict(t).ok and isinstance(yaml.safe_load(t), dict)]


def _leaves(value, path=()):
    if path:
        yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_one_field_changed_in_a_config_llama_swap_loads_gets_its_verdict(oracle, loaded_configs, data):
    import copy

    cfg = copy.deepcopy(data.draw(st.sampled_from(loaded_configs)))
    path = data.draw(st.sampled_from(list(_leaves(cfg))))
    parent = cfg
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = data.draw(st.sampled_from(VALUES))
    text = yaml.safe_dump(cfg)
    up, ours = oracle.verdict(text), rigkit_verdict(text)
    if up["ok"] == ours.ok:
        event("same verdict: " + ("both load it" if up["ok"] else "both refuse it"))
        return
    if up["ok"]:
        event("rigkit stricter on purpose")
        assert all(p.endswith(DELIBERATE) for p in ours.problems), (path, ours.problems)
    else:
        event("the matrix set language: not judged")
        assert up["error"].startswith("matrix: set "), (path, up, ours.problems)


@pytest.mark.parametrize("on", [False, True])
def test_send_loading_state_is_rendered_only_when_on_and_loads(oracle, on):
    """Issue 60: a member's ``send_loading_state`` (off by default) is llama-swap's per-model
    ``sendLoadingState`` (``internal/config/model_config.go:108``), rendered only when on — a config
    without it is byte for byte what it was — and judged as llama-swap's loader judges it."""
    from rigkit.render.files import render_llama_swap

    layer = {"llama_swap": {"members": {"strata": {"send_loading_state": on}}}} if on else {}
    spec = spec_from_layers([layer])
    for staged in (False, True):
        text = render_llama_swap(spec, staged=staged)
        assert ("sendLoadingState" in text) is on
        assert oracle.verdict(text)["ok"]
        judged = rigkit_verdict(text)
        assert judged.ok and judged.data["models"]["strata"].get("sendLoadingState", False) is on
