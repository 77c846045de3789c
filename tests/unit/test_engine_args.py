"""What each member's engine will do, read by its own grammar (rigkit/spec/engine_args.py, issue #59):
each kind refused naming the field, the value, the owner's rule and what is allowed; the valid
neighbours accepted; properties over llama.cpp's table."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.spec import engine_args
from rigkit.spec import llama_server as reader
from rigkit.spec.problems import SpecError
from rigkit.spec.validate import spec_from_dict, spec_warnings

from .refusals import problems, refusal_tests

_M = {"proxy": "http://127.0.0.1:18050", "vram_gib": 1.0, "cold_boot_s": 5}


def member(cmd: str, cmd_stop: str | None = None, **kw) -> dict:
    return {"llama_swap": {"members": {"x": {**_M, "cmd": cmd, "cmd_stop": cmd_stop, **kw}}}}


LLAMA = "ghcr.io/ggml-org/llama.cpp:server-cuda"
REFUSED = [
    # a value set twice: an option a spec field renders, an option repeated, an env name twice
    ({"strata": {"args": ["-c", "9000"]}}, "strata.args[0]", "'-c 9000'", "rendered from strata.ctx_size"),
    ({"strata": {"args": ["--alias", "coder"]}}, "strata.args[0]", "'--alias coder'", "the member id"),
    ({"strata": {"args": ["--host", "0.0.0.0"]}}, "strata.args[0]", "'--host 0.0.0.0'", "published on 127.0.0.1"),
    ({"strata": {"args": ["--jinja", "--jinja"]}}, "strata.args", "'--jinja'", "given twice"),
    ({"strata": {"args": ["-t", "1", "--threads", "2"]}}, "strata.args", "'--threads 2'", "only last value will be used"),
    (member("llama-server --port 18050", env=["A=1", "B=2", "A=3"]), "llama_swap.members.x.env[2]", "'A'",
     "os/exec keeps the last value"),
    # the file served: only the locked model
    ({"strata": {"args": ["-m", "/models/other.gguf"]}}, "strata.args[0]", "'-m /models/other.gguf'", "strata.model_file"),
    ({"gguf_baseline": {"args": ["-hf", "org/repo"]}}, "gguf_baseline.args[0]", "'-hf org/repo'", "other weights"),
    # llama.cpp's parser refuses
    ({"strata": {"args": ["--ctx-size=8192"]}}, "strata.args", "'--ctx-size=8192'", "no --option=value form"),
    ({"strata": {"args": ["-np", "0"]}}, "strata.args", "'-np 0'", "invalid value for n_parallel"),
    ({"strata": {"args": ["-fa", "yes"]}}, "strata.args", "'-fa yes'", "unknown value for --flash-attn"),
    ({"strata": {"args": ["--help"]}}, "strata.args", "'--help'", "would exit 0 instead of serving"),
    ({"strata": {"args": ["--draft", "4"]}}, "strata.args", "'--draft 4'", "has been removed"),
    ({"strata": {"args": ["--no-such-option"], "image": {"repository": "ghcr.io/ggml-org/llama.cpp",
                                                          "ref": "server-cuda-b6000"}}},
     "strata.args", "'--no-such-option'", "invalid argument: --no-such-option"),
    # listen addresses
    (member(f"docker run --rm --name coder -p 18050:8080 {LLAMA} --port 8080", "docker stop coder"),
     "llama_swap.members.x.cmd", "'18050:8080'", "every interface"),
    (member(f"docker run --rm --name coder -P {LLAMA} --port 8080", "docker stop coder"),
     "llama_swap.members.x.cmd", "'-P'", "every interface"),
    (member(f"docker run --rm --name coder -p 0.0.0.0:18050:8080 {LLAMA}", "docker stop coder"),
     "llama_swap.members.x.cmd", "'0.0.0.0:18050:8080'", "publishes on 0.0.0.0"),
    (member("llama-server --host 0.0.0.0 --port 18050"), "llama_swap.members.x.cmd", "'--host 0.0.0.0'",
     "every interface of the host"),
    # what it listens on against the proxy
    (member("llama-server --port 18051"), "llama_swap.members.x.proxy", "'http://127.0.0.1:18050'", "cmd listens on 18051"),
    (member("docker run --rm --name coder -p 127.0.0.1:18051:8080 img --port 8080", "docker stop coder"),
     "llama_swap.members.x.proxy", "'http://127.0.0.1:18050'", "cmd listens on 18051"),
    # the stop command's container
    (member("docker run --rm --name coder img", "docker stop --time 5 coder-old"), "llama_swap.members.x.cmd_stop",
     "'docker stop --time 5 coder-old'", "cmd runs container 'coder'"),
    # a word a shell would expand, without a shell
    (member("llama-server --port 18050 -m ~/m.gguf"), "llama_swap.members.x.cmd", "'~/m.gguf'", "without a shell"),
    # the health path and the served name
    ({"llama_swap": {"members": {"strata": {"check_endpoint": "/healthz"}}}}, "llama_swap.members.strata.check_endpoint",
     "'/healthz'", "llama.cpp serves /api/tags, /health"),
    ({"llama_swap": {"members": {"hyperqwen": {"check_endpoint": "/v1/models"}}}},
     "llama_swap.members.hyperqwen.check_endpoint", "'/v1/models'", "vLLM does not serve it without the API key"),
    ({"llama_swap": {"members": {"hyperqwen": {"use_model_name": "qwen"}}}}, "llama_swap.members.hyperqwen.use_model_name",
     "'qwen'", "answers 404"),
    (member('llama-server --port 18050 -m "$HOME/m.gguf"'), "llama_swap.members.x.cmd", "'\"$HOME/m.gguf\"'",
     "shlex.Posix.Split"),
]


ACCEPTED = [
    {"strata": {"args": ["--threads", "4", "-ngl", "all", "--jinja"]}},  # each option once
    {"strata": {"args": ["--spec-type", "none", "--spec-type", "none"]}},  # llama.cpp's one repeatable option
    member(f"docker run --rm --name coder -p 127.0.0.2:18050:8080 {LLAMA} --host 0.0.0.0 --port 8080",
           "docker stop coder"),  # 0.0.0.0 inside the container, published on loopback
    member(f"docker run --rm --name coder -p [::1]:18050:8080 {LLAMA} --port 8080", "docker stop coder"),
    member("llama-server --host 127.0.0.2 --port 18050"),
    member("llama-server --port ${PORT} --alias ${MODEL_ID}", proxy="http://127.0.0.1:${PORT}"),  # llama-swap's macros
    member("sh -c 'exec llama-server --port 18050 -m ~/m.gguf'"),  # its shell expands ~
    member("llama-server --port 18050 --chat-template '~$x'"),  # quoted: meant literally
    member("docker compose -p hq -f /c.yaml up --no-deps single", "docker compose -p hq -f /c.yaml stop single"),
    member("llama-server --port 18050", env=["A=1", "B=2"]),
    {"llama_swap": {"members": {"strata": {"check_endpoint": "/v1/health"}, "hyperqwen": {"check_endpoint": "/ping"}}}},
    {"llama_swap": {"members": {"hyperqwen": {"use_model_name": "qwen3.8-27b"}}}},
]


test_each_kind_is_refused_naming_the_field_the_value_and_the_rule, test_the_valid_neighbours_are_accepted = \
    refusal_tests(REFUSED, ACCEPTED)


def test_extra_args_is_read_for_what_contradicts_a_field_or_the_guard_and_never_holds_the_api_key():
    spec = spec_from_dict({"hyperqwen": {"extra_env": {"EXTRA_ARGS": '--max_model_len=8192 --enforce-eager '
                                                                      '--speculative-config {"num_speculative_tokens":15}'}}})
    found = [str(w) for w in spec_warnings(spec) if w.key == "hyperqwen.extra_env.EXTRA_ARGS"]
    assert any("--max-model-len is rendered from hyperqwen.max_model_len" in w for w in found), found
    assert any("15 speculative tokens at max_model_len 65536" in w for w in found), found
    assert not any("enforce-eager" in w for w in found)
    refused = problems({"hyperqwen": {"extra_env": {"EXTRA_ARGS": "--api-key sk-live-9f8e7d"}}})
    assert any(p.startswith("hyperqwen.extra_env.EXTRA_ARGS") for p in refused) and "sk-live" not in str(refused)
    assert spec_warnings(spec_from_dict({"hyperqwen": {"extra_env": {"EXTRA_ARGS": "--enforce-eager"}}})) == \
        spec_warnings(spec_from_dict({}))


def test_an_unknown_option_under_a_floating_tag_is_a_warning_naming_the_table_build():
    spec = spec_from_dict({"strata": {"args": ["--brand-new-option", "3"]}})
    found = [str(w) for w in spec_warnings(spec) if "brand-new" in str(w)]
    assert len(found) == 1 and f"build b{engine_args.TABLE_BUILD}" in found[0] and "names no build" in found[0]


@pytest.mark.parametrize("ref, build", [("server-cuda-b6000", 6000), ("server-b11549", 11549), ("server-cuda", None),
                                        ("sha256:" + "0" * 64, None), (None, None)])
def test_the_build_a_tag_names(ref, build):
    assert engine_args.image_build(ref) == build


# --- properties over llama.cpp's table ---

def _plain(opt: dict) -> bool:
    return (opt.get("exits") is None and "removed" not in opt and opt["kind"] not in ("checked",)
            and reader.key_of(opt) not in engine_args.RENDERED and reader.key_of(opt) not in engine_args.MODEL_SOURCES
            and reader.key_of(opt) not in ("--port", "--api-key", "--hf-token", "--api-key-file")
            and not reader.key_of(opt).startswith("--log") and reader.key_of(opt) not in reader.REPEATABLE)


PLAIN = [o for o in reader.OPTIONS if _plain(o)]


def _valid(opt: dict) -> list[str]:
    if opt["kind"] == "enum":
        return [opt["choices"][0]]
    if opt["nargs"] == 2:
        return ["1", "2"]
    if opt["kind"] in ("int", "uint", "float"):
        return ["1"]
    return ["x"] * opt["nargs"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(PLAIN), st.data())
def test_any_option_given_once_passes_and_given_twice_is_refused_naming_it(opt, data):
    name = data.draw(st.sampled_from(opt["names"]))
    once = [name, *_valid(opt)]
    assert not [p for p in problems({"strata": {"args": once}}) if p.startswith("strata.args")], once
    other = data.draw(st.sampled_from(opt["names"]))
    found = problems({"strata": {"args": [*once, other, *_valid(opt)]}})
    assert any(p.startswith("strata.args: ") and f"{reader.key_of(opt)} is given twice" in p for p in found), found


@given(st.text(alphabet="~$abcHOME_/ ", min_size=1, max_size=12))
def test_a_single_quoted_word_is_never_read_as_expanded(word):
    assert engine_args.unexpanded_words("srv '" + word.replace("'", "") + "'") == []


# --- no traceback: the new readers over generated raw values of the fields they read ---

_WORDS = st.one_of(st.sampled_from(sorted(reader.ARGS)), st.sampled_from(
    ["0", "-1", "auto", "x", "=", "--port=1", "~", "$HOME", "'", '"', "\\", "-p", "127.0.0.1:1:2", "[::1]:5:6",
     "docker", "run", "--rm", "--name", "sh", "-c", "${PORT}", "llama-server", LLAMA, "stop", "compose", "-P"]),
    st.text(max_size=10))


@settings(max_examples=150, deadline=None)
@given(args=st.lists(_WORDS, max_size=8), cmd=st.lists(_WORDS, max_size=10), stop=st.lists(_WORDS, max_size=4),
       extra=st.lists(_WORDS, max_size=6), env=st.lists(st.sampled_from(["A=1", "A=2", "B=", "C=x"]), max_size=4),
       ref=st.sampled_from(["server-cuda", "server-cuda-b1", "server-cuda-b99999", "b5"]),
       endpoint=st.sampled_from(["/health", "/x", "none", "/v1/models?x=1"]))
def test_any_engine_arguments_are_accepted_or_refused_with_a_message(args, cmd, stop, extra, env, ref, endpoint):
    data = {"strata": {"args": args, "image": {"repository": "ghcr.io/ggml-org/llama.cpp", "ref": ref}},
            "hyperqwen": {"extra_env": {"EXTRA_ARGS": " ".join(extra)}},
            "llama_swap": {"members": {"x": {**_M, "cmd": " ".join(cmd) or "srv", "cmd_stop": " ".join(stop) or None,
                                             "env": env, "check_endpoint": endpoint}}}}
    try:
        spec = spec_from_dict(data)
    except SpecError as exc:
        assert exc.problems and all(p.key and p.allowed for p in exc.problems)
        return
    spec_warnings(spec)


def test_a_lab_deploys_warning_names_every_host_it_applies_to_once():
    """The operator's report: a 2-host lab deploy with an unknown flag in ``strata.args`` warned naming one
    host though the flag was in both hosts' spec. ``rigkit deploy`` says each distinct warning once,
    naming every host whose spec gives it, in the inventory's order, and no host whose spec does not."""
    from types import SimpleNamespace

    from rigkit.cli.main import spec_warning_lines

    bad = spec_from_dict({"strata": {"args": ["--threads", "1", "--no-such-flag"]}})
    good = spec_from_dict({"strata": {"args": ["--threads", "1"]}})
    hosts = [SimpleNamespace(name=n, spec=s) for n, s in (("lab1", bad), ("lab2", good), ("lab3", bad))]
    lines = [ln for ln in spec_warning_lines(hosts) if "--no-such-flag" in ln]
    assert len(lines) == 1 and lines[0].startswith("lab1, lab3: strata.args: '--no-such-flag'"), lines


@given(st.lists(st.tuples(st.sampled_from(["h1", "h2", "h3", "h4"]), st.sets(st.sampled_from("abc"))),
                max_size=4, unique_by=lambda t: t[0]))
def test_every_warning_line_names_exactly_the_hosts_it_applies_to(monkeypatch_hosts):
    """Property over generated labs (which host warns what): each warning is one line, naming exactly
    the hosts whose spec gives it, in the inventory's order."""
    from types import SimpleNamespace
    from unittest import mock

    from rigkit.cli import main

    hosts = [SimpleNamespace(name=n, spec=sorted(ws)) for n, ws in monkeypatch_hosts]
    with mock.patch("rigkit.spec.validate.spec_warnings", side_effect=lambda spec: [f"k: {w}" for w in spec]):
        lines = main.spec_warning_lines(hosts)
    said = {ln.split(": ", 1)[1]: ln.split(": ", 1)[0].split(", ") for ln in lines}
    want = {f"k: {w}": [h.name for h in hosts if w in h.spec] for w in {w for h in hosts for w in h.spec}}
    assert said == want and len(lines) == len(want)
