#!/usr/bin/env python3
"""Generate rigkit/spec/llama_server_args.py: llama-server's options, from the xllamacpp wheel's own parser.

The options come from ``llama-server --help`` as the wheel's build of llama.cpp prints it
(``common_params_print_usage``: every option of ``LLAMA_EXAMPLE_SERVER`` and the common ones, each
with its ``common_arg::to_string()``: names, value hints, help, ``(env: …)``). What each takes is
found by asking that same parser (llama_parse_real.py, a fresh process per question):

- ``FLAG`` alone: ``expected value for argument`` means it takes a value; else none (a switch);
- ``FLAG abc``: ``expected value for argument`` again means two values; an error ending ``: stoi``
  means an int (``handler_int``: ``std::stoi`` in common_params_parse_ex); ``: stof`` a float
  (a string handler calling ``std::stof``); another handler error a checked value (enum choices
  are then the hint's ``{a,b}`` / ``[a|b]`` words that it accepts); accepted means a string.

usage: .venv/bin/python tests/harness/gen_llama_server_args.py   (rewrites rigkit/spec/llama_server_args.py)
"""
from __future__ import annotations

import concurrent.futures as cf
import os
import pprint
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REAL = HERE / "llama_parse_real.py"
OUT = HERE.parent.parent / "rigkit" / "spec" / "llama_server_args.py"
EXPECTED = "expected value for argument"
SCRATCH = tempfile.mkdtemp(prefix="llama-args-")
# what() of the std:: conversion that threw -> kind: stoi in the parser itself (handler_int), the
# others inside a string handler; stoul/stoull parse an unsigned value (a leading '-' wraps)
NUMERIC = {"stoi": "int", "stof": "float", "stod": "float", "stoul": "uint", "stoull": "uint"}


def run(args: list[str]) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_") and k != "HF_TOKEN"}
    env["HF_HUB_OFFLINE"] = "1"
    env["RIGKIT_PARSE_JSON"] = "1"  # a command line it parsed prints one JSON line; an exit inside it does not
    try:
        r = subprocess.run([sys.executable, str(REAL), *args], capture_output=True, text=True, env=env,
                           timeout=20, stdin=subprocess.DEVNULL,
                           cwd=tempfile.mkdtemp(dir=SCRATCH))  # a fresh one each: --log-file abc writes ./abc
    except subprocess.TimeoutExpired:
        return 124, "", "timeout"
    return r.returncode, r.stdout, r.stderr


def options_from_help(text: str) -> list[dict]:
    """[{section, names, hint, usage}] in --help order; ``usage`` is the option's to_string()."""
    out: list[dict] = []
    section = ""
    for line in text.splitlines(keepends=True):
        m = re.match(r"----- (.*) params -----", line)
        if m:
            section = m.group(1)
            continue
        if line.startswith("-"):
            head = line[:40].rstrip() if len(line.rstrip("\n")) > 40 and line[37:40] == "   " else line.strip()
            pieces = re.split(r",\s+", head)
            last = pieces[-1].split(" ", 1)
            names = pieces[:-1] + [last[0]]
            hint = last[1] if len(last) > 1 else None
            assert all(n.startswith("-") for n in names), head
            out.append({"section": section, "names": names, "hint": hint, "usage": line})
        elif out and line.strip() != "" or (out and line.startswith(" " * 40)):
            out[-1]["usage"] += line
    return out


def choices_of(hint: str | None, usage: str) -> list[str]:
    """Candidate values: the hint's {a,b} / [a|b] / a,b,c words, else the help's ``allowed values:``
    list or its ``- word:`` lines (each is then asked of the parser)."""
    m = re.fullmatch(r"\{([^{}]+)\}|\[([^\[\]]+)\]|([a-z0-9][a-z0-9_+-]*(?:,[a-z0-9][a-z0-9_+-]*)+)", hint or "")
    if m:
        return [c for c in re.split(r"[,|]", m.group(1) or m.group(2) or m.group(3)) if c]
    flat = re.sub(r"\s+", " ", usage)
    m = re.search(r"allowed values: ([a-z0-9_]+(?:, [a-z0-9_]+)*)", flat)
    if m:
        return m.group(1).split(", ")
    return re.findall(r"^ {40}- ([a-z0-9_+-]+):", usage, re.M)


#: The words llama.cpp's common.cpp reads as on / off / auto (is_truthy, is_falsey, is_autoy), and the empty
#: value (--numa takes "" as distribute), asked of each enum.
BOOLEAN_WORDS = ("on", "off", "auto", "enabled", "disabled", "true", "false", "1", "0", "-1", "")
#: Numbers each numeric option is asked at: its handler's own checks (a range, "removed") answer here.
PROBES = ("-3", "-1", "0", "1", "7", "70000")
#: And each float option besides: what std::stof reads that is no finite number (strtof takes "nan" and "inf";
#: a handler may refuse them: --frequency-penalty "must be finite").
FLOAT_PROBES = PROBES + ("nan", "inf", "-inf")


def nargs_one_number(row: dict) -> bool:
    return row["nargs"] == 1 and row["kind"] in ("int", "float", "uint")


def number_key(kind: str, text: str) -> str:
    """The probe as the handler receives it (std::stoi / stof / stoul of it), written as the table keys it."""
    return str(float(text)) if kind == "float" else str(int(text) % 2**64 if kind == "uint" else int(text))


def range_checks(name: str, kind: str, handled: str) -> dict:
    """``refuses``: {number: the handler's message} at :data:`PROBES` (a float at :data:`FLOAT_PROBES`: nan and
    inf too) where the handler refuses a number it read (a range check); ``removed``: its message when it refuses every probe alike (an option
    llama.cpp keeps only to say it was removed)."""
    refuses = {}
    probes = FLOAT_PROBES if kind == "float" else PROBES
    for value in probes:
        err = run([name, value])[2]
        if handled in err:
            refuses[number_key(kind, value)] = err.split(handled, 1)[1].split("\n\nusage:\n", 1)[0]
    if len(refuses) == len(probes) and len(set(refuses.values())) == 1:
        return {"removed": next(iter(refuses.values()))}
    return {"refuses": refuses} if refuses else {}


def probe(opt: dict) -> dict:
    name = opt["names"][0]
    rc, out, err = run([name])
    env = re.search(r"\(env: ([A-Z0-9_]+)\)", opt["usage"])
    row = {"names": opt["names"], "section": opt["section"], "hint": opt["hint"],
           "env": env.group(1) if env else None, "nargs": 0, "kind": "switch", "choices": None,
           "usage": opt["usage"]}
    if EXPECTED not in err:
        last = out.strip().splitlines()[-1] if out.strip() else ""
        row["exits"] = None if last.startswith('{"model"') else rc
        return row
    rc, _, err = run([name, "abc"])
    if EXPECTED in err:
        _, _, err2 = run([name, "abc", "abc"])
        row.update(nargs=2, kind="int" if err2.split("\n", 1)[0].endswith(": stoi") else "string")
        return row
    row["nargs"] = 1
    handled = f'error while handling argument "{name}": '
    if handled not in err:
        row["kind"] = "string"
        if row["nargs"] == 1:  # the empty value: a handler that splits a list may find nothing in it (--host)
            err = run([name, ""])[2]
            if handled in err:
                row["refuses"] = {"": err.split(handled, 1)[1].split("\n\nusage:\n", 1)[0]}
        return row
    why = err.split(handled, 1)[1].split("\n\nusage:\n", 1)[0]  # a what() may end in its own newline
    if why in NUMERIC:
        row["kind"] = NUMERIC[why]
        row["conv"] = why
        if nargs_one_number(row):
            row.update(range_checks(name, row["kind"], handled))
            # a string handler that reads some words itself and std::stoi's the rest (-ngl auto|all|N)
            words = [w for w in dict.fromkeys(re.findall(r"'([a-z]+)'", opt["usage"]))
                     if handled not in run([name, w])[2]]
            if words:
                row["words"] = words
    else:
        candidates = choices_of(opt["hint"], opt["usage"])
        accepted = [c for c in candidates if handled not in run([name, c])[2]]
        ok = accepted and accepted == candidates
        row["kind"] = "enum" if ok else "checked"
        row["choices"] = accepted if ok else None
        row["rejects"] = why.replace("'abc'", "'{value}'").replace(": abc", ": {value}")
        if ok:  # common.cpp's is_truthy / is_falsey / is_autoy words a handler may take besides its hint's
            aliases = [w for w in BOOLEAN_WORDS if w not in accepted and handled not in run([name, w])[2]]
            if aliases:
                row["aliases"] = aliases
    return row


HEADER = '''"""llama-server's options, as llama.cpp's own parser defines them (generated; do not edit).

Source: the llama.cpp compiled into the xllamacpp {version} wheel (pyproject.toml's pin), whose
version scheme names llama.cpp's build b{build}; the wheel records no commit ({version_line!r}).
Its parser is llama.cpp's common/arg.cpp (github.com/ggml-org/llama.cpp, common/arg.cpp:
``common_params_parser_init`` / ``common_params_parse_ex``), read here through the wheel itself:
``llama-server --help`` for every option of LLAMA_EXAMPLE_SERVER and the common ones, then the
parser asked what each one takes. Generated by tests/harness/gen_llama_server_args.py (it runs
tests/harness/llama_parse_real.py).

OPTIONS: one dict per common_arg, in --help order: ``names`` (every spelling, the --no-…
negations included), ``section`` (common / sampling / speculative / example-specific), ``hint``
(value hint(s) as printed), ``env`` (its LLAMA_ARG_… variable or None), ``nargs`` (0, 1 or 2
values), ``kind`` (switch; int: std::stoi; float: std::stof / stod; uint: std::stoul / stoull; enum: ``choices`` checked by its
handler; checked: its handler validates the value in a way not tabled here (``rejects``: its
message for a bad value, ``{{value}}`` where it quotes the value); string), ``usage`` (its to_string(), as printed in its error's usage block),
``conv`` (for int/float/uint: the std:: conversion, whose name is the error's what()), ``exits``
(a switch that ends the process when parsed: its exit code; None otherwise), ``refuses`` (for a
numeric option whose handler checks a range: {{number: its message}} at the numbers it was asked,
-3 -1 0 1 7 70000, a float also nan inf -inf; a number between them is not tabled; for a string, {{"": its
message}} when its handler refuses the empty value), ``words`` (for a numeric option, the
quoted words of its help it accepts besides numbers: -ngl's 'auto' and 'all'), ``aliases`` (for an
enum, the on/off/auto words of common.cpp it accepts besides its choices: -fa 1), ``removed`` (an option kept only to refuse
every value: its message).
"""
'''


def main() -> int:
    rc, help_text, err = run(["--help"])
    assert rc == 0, err
    _, _, version = run(["--version"])
    opts = options_from_help(help_text)
    with cf.ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as pool:
        rows = list(pool.map(probe, opts))
    from importlib.metadata import version as dist_version
    v = dist_version("xllamacpp")
    text = HEADER.format(version=v, build=v.split(".")[2], version_line=version.splitlines()[0] if version else "")
    text += f"\nXLLAMACPP_VERSION = {v!r}\nVERSION_TEXT = {version!r}\n"
    text += "\nOPTIONS = " + pprint.pformat(rows, width=110, sort_dicts=False) + "\n"
    OUT.write_text(text)
    print(f"{OUT}: {len(rows)} options", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
