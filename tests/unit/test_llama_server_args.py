"""rigkit reads llama-server's command line as llama-server does (rigkit/spec/llama_server.py over the
generated rigkit/spec/llama_server_args.py; the sandbox image's /app/llama-server runs the same two
files). The slow tests compare it with the xllamacpp wheel's own parser (tests/harness/llama_parse_real.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[1] / "harness"
from rigkit.spec import llama_server as llama_args  # noqa: E402

from rigkit.spec.members import resolve_members  # noqa: E402
from rigkit.spec.validate import spec_from_layers  # noqa: E402

TAIL = "\n\nto show complete usage, run with -h\n"


def refusal(argv: list[str], env: dict | None = None) -> llama_args.Exit:
    with pytest.raises(llama_args.Exit) as e:
        llama_args.parse(argv, env or {})
    return e.value


def usage(name: str) -> str:
    return llama_args.ARGS[name][0]["usage"]


def rendered_server_argvs() -> dict[str, list[str]]:
    """The llama-server arguments rigkit renders for each llama.cpp member (after the image)."""
    spec = spec_from_layers([{"strata": {"model_file": "strata.gguf", "args": ["--threads", "1"]},
                              "gguf_baseline": {"model_file": "q.gguf"}}])
    out = {}
    for mid, m in resolve_members(spec).items():
        if m.spec.service in ("strata", "gguf_baseline"):
            image = next(i for i, a in enumerate(m.argv) if a.startswith("ghcr.io/ggml-org/llama.cpp"))
            out[mid] = m.argv[image + 1:]
    return out


def test_an_unknown_flag_exits_1_naming_it():
    e = refusal(["-m", "/models/a.gguf", "--no-such-flag"])
    assert (e.code, e.stderr, e.stdout) == (1, "error: invalid argument: --no-such-flag\n", "")


def test_an_underscore_in_a_long_flag_reads_as_a_dash():
    assert refusal(["--no_such_flag"]).stderr == "error: invalid argument: --no-such-flag\n"
    assert llama_args.parse(["--ctx_size", "8"], {})[0]["--ctx-size"] == 8


def test_an_int_flag_with_a_non_number_is_stoi():
    e = refusal(["-c", "abc"])
    assert (e.code, e.stderr) == (1, f'error while handling argument "-c": stoi\n\nusage:\n{usage("-c")}{TAIL}')
    assert refusal(["--port", "99999999999"]).stderr.startswith('error while handling argument "--port": stoi\n')
    assert llama_args.parse(["-c", "12abc"], {})[0]["--ctx-size"] == 12  # std::stoi reads a leading number


def test_a_float_flag_with_a_non_number_is_stof():
    assert refusal(["--temp", "warm"]).stderr.startswith('error while handling argument "--temp": stof\n\nusage:\n')
    assert llama_args.parse(["--temp", "0.7"], {})[0]["--temp"] == pytest.approx(0.7)


def test_a_flag_missing_its_value_at_the_end():
    e = refusal(["-m", "/m.gguf", "--port"])
    assert (e.code, e.stderr) == (
        1, f'error while handling argument "--port": expected value for argument\n\nusage:\n{usage("--port")}{TAIL}')


def test_an_enum_value_not_among_its_choices():
    e = refusal(["--flash-attn", "yes"])
    assert e.code == 1 and e.stderr.startswith(
        "error while handling argument \"--flash-attn\": error: unknown value for --flash-attn: 'yes'\n\n\nusage:\n")  # its what() ends in a newline


def test_a_bad_env_number_refuses_and_a_flag_over_an_env_warns():
    e = refusal([], {"LLAMA_ARG_CTX_SIZE": "big"})
    assert (e.code, e.stderr) == (1, 'error while handling environment variable "LLAMA_ARG_CTX_SIZE": stoi\n\n\n')
    values, warnings = llama_args.parse(["-c", "8"], {"LLAMA_ARG_CTX_SIZE": "4"})
    assert values["--ctx-size"] == 8 and warnings == [
        "warn: LLAMA_ARG_CTX_SIZE environment variable is set, but will be overwritten by command line argument -c"]


@pytest.mark.parametrize("member", ["strata", "gguf-baseline"])
def test_the_command_lines_rigkit_renders_parse(member):
    argv = rendered_server_argvs()[member]
    assert "--host" in argv and "--port" in argv and "--model" in argv
    values, _ = llama_args.parse(argv, {})
    assert values["--model"].startswith("/models/") and values["--host"] == "0.0.0.0"
    assert isinstance(values["--port"], int) and values["--ctx-size"] == 16384 and values["--alias"] == member


def test_switches_and_their_negations():
    values, _ = llama_args.parse(["--jinja", "-kvu", "--no-kv-unified", "-nocb"], {})
    assert (values["--jinja"], values["--kv-unified"], values["--cont-batching"]) == (True, False, False)


def valid(opt: dict) -> list[str]:
    one = {"int": "7" if "7" not in opt.get("refuses", {}) else "1", "float": "0.5", "uint": "1", "string": "x",
           "checked": "x"}
    if opt["kind"] == "enum":
        return [opt["choices"][0]]
    if opt["nargs"] == 2:
        return ["1", "2"]
    return [one[opt["kind"]]] if opt["nargs"] else []


def test_every_option_in_the_table_parses_with_a_valid_value_under_every_name():
    assert len(llama_args.OPTIONS) > 200
    for opt in llama_args.OPTIONS:
        for name in opt["names"]:
            argv = [name, *valid(opt)]
            if opt.get("exits") is not None or "removed" in opt:
                assert refusal(argv).code == opt.get("exits", 1), argv
                continue
            values, _ = llama_args.parse(argv, {})
            assert llama_args.key_of(opt) in values, argv


def test_names_are_unique_and_the_server_flags_are_there():
    names = [n for o in llama_args.OPTIONS for n in o["names"]]
    assert len(names) == len(set(names))
    for n in ("-m", "--host", "--port", "-a", "-c", "-t", "-np", "-fa", "--jinja", "--n-gpu-layers", "--no-mmap"
              if "--no-mmap" in names else "--mlock" if "--mlock" in names else "-ngl"):
        assert n in llama_args.ARGS, n


# --- against the wheel's own parser (one process per command line) ---

def real(argv: list[str]) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    r = subprocess.run([sys.executable, str(HARNESS / "llama_parse_real.py"), *argv], capture_output=True, text=True,
                       env=env, timeout=60)
    return r.returncode, r.stderr


def fake(argv: list[str]) -> tuple[int, str]:
    try:
        _, warnings = llama_args.parse(argv, {})
    except llama_args.Exit as e:
        return e.code, e.stderr
    return 0, "".join(w + "\n" for w in warnings)


def _cases() -> list[list[str]]:
    cases = [["--no-such-flag"], ["-m", "/m.gguf", "--no_such_flag"], ["-c", "abc"], ["-m", "/m.gguf", "-c"],
             ["--port"], ["--temp", "warm"], ["--seed", "x"], ["-ngl"], ["--control-vector-layer-range", "1"],
             ["--control-vector-layer-range", "1", "x"], *rendered_server_argvs().values()]
    for opt in llama_args.OPTIONS:
        if opt["kind"] == "enum":
            cases.append([opt["names"][-1], "zz"])
            cases.append([opt["names"][0], opt["choices"][-1]])
    ints = [o for o in llama_args.OPTIONS if o["kind"] in ("int", "float", "uint") and o["nargs"] == 1]
    cases += [[o["names"][0], "abc"] for o in ints[::6]]
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("argv", _cases(), ids=lambda a: " ".join(a)[:60])
def test_messages_and_exit_codes_are_the_wheels_own(argv):
    rc, err = real(argv)
    if rc == 0:  # -ngl on this CPU-only build: "warning: no usable GPU found, ..." (a rig has one)
        err = "".join(line for line in err.splitlines(keepends=True) if not line.startswith("warning: "))
    assert fake(argv) == (rc, err)


@pytest.mark.slow
def test_help_is_the_wheels_own():
    r = subprocess.run([sys.executable, str(HARNESS / "llama_parse_real.py"), "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and refusal(["--help"]).stdout == r.stdout


@pytest.mark.slow
def test_the_image_script_refuses_an_unknown_flag_before_loading_anything(tmp_path):
    r = subprocess.run([sys.executable, str(HARNESS / "stubs" / "llama_server.py"), "-m", str(tmp_path / "none.gguf"),
                        "--no-such-flag"], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr, r.stdout) == (1, "error: invalid argument: --no-such-flag\n", "")
    r = subprocess.run([sys.executable, str(HARNESS / "stubs" / "llama_server.py"), "-m", str(tmp_path / "none.gguf")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.splitlines()[-1] == "main: exiting due to model loading error"
