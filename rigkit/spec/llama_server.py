"""llama-server's command line, read as llama.cpp's ``common_params_parse_ex`` reads it: the one reader
of a llama.cpp member's arguments (rigkit's spec checks, the VRAM estimate) and the sandbox image's
``/app/llama_args.py`` (tests/harness/images.py ships this file there, beside the table as
``/app/llama_server_args.py``), over :mod:`rigkit.spec.llama_server_args`, the table of options
generated from the pinned xllamacpp wheel's own parser (tests/harness/gen_llama_server_args.py).

What it does as llama.cpp does (common/arg.cpp ``common_params_parse_ex`` / ``common_params_parse``,
tools/server/server.cpp ``main``: ``if (!common_params_parse(...)) return 1;``; messages checked
against the xllamacpp wheel's own parser by tests/unit/test_llama_server_args.py):

- ``LLAMA_ARG_*`` variables first (an int/float/uint one that is not a number, or a switch's that
  is not a boolean, refuses: ``error while handling environment variable "…": …``);
- ``--`` arguments have ``_`` read as ``-``; an argument not in the table refuses with
  ``error: invalid argument: ARG``;
- a value missing at the end: ``expected value for argument``; a value std::stoi / stof / stod /
  stoul / stoull cannot read: their what() (``stoi`` …); an enum value not among its choices: its
  handler's message; each as ``error while handling argument "ARG": WHY`` + the option's usage;
- every refusal is printed to stderr with a newline and exits 1;
- ``--version`` prints the wheel's version lines and exits 0 where it stands; ``-h``/``--help`` prints
  the usage after the whole line parsed, exit 0; ``--list-devices``, ``--cache-list``,
  ``--completion-bash`` exit 0 without their listing.

Not done here: a ``checked`` option's own validation (devices, ranges, JSON, files, tensor
overrides: the table's ``rejects`` says what llama.cpp refuses) and an int handler's range checks;
such values are accepted. Standard library only (it runs in the sandbox image's Python).
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

try:
    from rigkit.spec import llama_server_args as table
except ImportError:  # the sandbox image: /app/llama_args.py beside /app/llama_server_args.py
    import llama_server_args as table  # type: ignore[no-redef]

OPTIONS = table.OPTIONS
EXPECTED = "expected value for argument"


class Exit(Exception):
    """The process ends here: ``code``, with ``stdout`` / ``stderr`` to print first."""

    def __init__(self, code: int, stderr: str = "", stdout: str = ""):
        super().__init__(stderr)
        self.code, self.stderr, self.stdout = code, stderr, stdout


class _Why(Exception):
    pass


def key_of(opt: dict) -> str:
    """The option's name in parse()'s result: its first positive ``--`` name (else its first)."""
    pos, _ = split_names(opt)
    return next((n for n in pos if n.startswith("--")), pos[0])


def split_names(opt: dict) -> tuple[list[str], list[str]]:
    """(args, args_neg): to_string() prints args then args_neg; the negations start after the last
    positive ``--`` name that precedes the first ``--no-`` one."""
    names = opt["names"]
    if opt["nargs"] or not any(n.startswith("--no-") for n in names):
        return list(names), []
    first_no = next(i for i, n in enumerate(names) if n.startswith("--no-"))
    longs = [i for i in range(first_no) if names[i].startswith("--")]
    if not longs:
        return list(names), []
    return names[:longs[-1] + 1], names[longs[-1] + 1:]


ARGS: dict[str, tuple[dict, bool]] = {}
for _opt in OPTIONS:
    _pos, _neg = split_names(_opt)
    for _n in _pos:
        ARGS[_n] = (_opt, True)
    for _n in _neg:
        ARGS[_n] = (_opt, False)

_WS = "[ \t\n\v\f\r]*"
_INT = re.compile(_WS + r"([+-]?)([0-9]+)")
_DEC = r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_HEX = r"0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?"
_FLOAT = re.compile(_WS + r"([+-]?)(" + _HEX + "|" + _DEC + r"|inf(?:inity)?|nan(?:\([0-9A-Za-z_]*\))?)", re.I)
_LIMITS = {"stoi": (-2**31, 2**31 - 1), "stoul": (0, 2**64 - 1), "stoull": (0, 2**64 - 1)}
_FMAX = {"stof": 3.4028234663852886e38, "stod": 1.7976931348623157e308}
#: The smallest normal float / double: strtof / strtod set ERANGE below it (an underflow), and
#: std::stof / stod throw out_of_range then (FLT_MIN, DBL_MIN).
_FMIN = {"stof": 1.1754943508222875e-38, "stod": 2.2250738585072014e-308}


def convert(conv: str, s: str):
    """std::<conv>(s) as libstdc++ does it: a leading number is read, the rest ignored; no number:
    invalid_argument, too large: out_of_range, both with what() = the function's name."""
    if conv in _LIMITS:
        m = _INT.match(s)
        if not m:
            raise _Why(conv)
        v = int(m.group(1) + m.group(2))
        if conv == "stoi":
            lo, hi = _LIMITS[conv]
            if not lo <= v <= hi:
                raise _Why(conv)
            return v
        if abs(v) > 2**64 - 1:
            raise _Why(conv)
        return v % 2**64  # strtoul: a leading '-' negates in unsigned arithmetic
    m = _FLOAT.match(s)
    if not m:
        raise _Why(conv)
    body = m.group(2)
    if body[:2].lower() == "0x":
        mant, _, exp = body[2:].lower().partition("p")
        ip, _, fp = mant.partition(".")
        v = int(ip or "0", 16) + (int(fp, 16) / 16 ** len(fp) if fp else 0.0)
        try:
            v = math.ldexp(v, int(exp or "0"))
        except OverflowError:
            raise _Why(conv) from None
    else:
        v = float(body.split("(")[0])
    if math.isfinite(v) and abs(v) > _FMAX[conv]:
        raise _Why(conv)
    mantissa = body.split("(")[0].lower()
    mantissa = mantissa[2:].partition("p")[0] if mantissa.startswith("0x") else mantissa.partition("e")[0]
    if abs(v) < _FMIN[conv] and any(c not in "0." for c in mantissa) and "n" not in mantissa:
        raise _Why(conv)  # a nonzero number that underflows
    return -v if m.group(1) == "-" else v


def value_of(opt: dict, val: str):
    """One value of ``opt`` as its handler reads it: a number converted (:func:`convert`), then held to
    the handler's own checks where the table has them (``removed``: every value; ``refuses``: the
    numbers it was asked at), unless it is one of the option's ``words`` (-ngl auto); an enum value
    among its ``choices`` (or ``aliases``: -fa 1); else the string. Raises ``_Why``
    with llama.cpp's message."""
    kind = opt["kind"]
    if kind in ("int", "float", "uint") and val in opt.get("words", ()):
        return val
    if kind in ("int", "float", "uint"):
        number = convert(opt["conv"] if "conv" in opt else {"int": "stoi", "float": "stof"}[kind], val)
        if "removed" in opt:
            raise _Why(opt["removed"])
        why = opt.get("refuses", {}).get(str(number))
        if why is not None:
            raise _Why(why)
        return number
    if kind == "enum" and val not in opt["choices"] and val not in opt.get("aliases", ()):
        raise _Why(opt["rejects"].replace("{value}", val))
    if kind == "string" and val in opt.get("refuses", {}):  # the empty value, where its handler refuses it
        raise _Why(opt["refuses"][val])
    return val


def _truthy(v: str) -> bool | None:
    return True if v in ("on", "enabled", "true", "1") else False if v in ("off", "disabled", "false", "0") else None


def _env_value(opt: dict, env) -> str | None:
    if not opt.get("env"):
        return None
    if split_names(opt)[1]:
        if opt["env"].replace("LLAMA_ARG_", "LLAMA_ARG_NO_") in env:
            return "0"
    return env.get(opt["env"])


def usage_text() -> str:
    """``-h``'s stdout: every option's usage under its section's header, as common_params_print_usage."""
    out, section = [], None
    for opt in OPTIONS:
        if opt["section"] != section:
            out.append(("\n\n" if section is not None else "") + f"----- {opt['section']} params -----\n\n")
            section = opt["section"]
        out.append(opt["usage"])
    return "".join(out)


@dataclass(frozen=True)
class Given:
    """One option of a command line as the parser met it: ``index`` (its word's place in argv),
    ``written`` (as written), ``key`` (:func:`key_of` its option: one key for every spelling, None for
    a word the table does not know), ``value`` (True/False for a switch, the converted value, a tuple
    for a 2-value option; None when unknown), ``words`` (its value words as written; for an unknown
    word, the words after it up to the next known option)."""

    index: int
    written: str
    key: str | None
    value: object
    words: tuple[str, ...] = ()


def read(argv: list[str], unknown: str = "refuse") -> list[Given]:
    """Each option of ``llama-server argv...`` in order (no environment), raising :class:`Exit` where
    llama-server would end instead of serving (a refusal: exit 1 with its message; ``--version`` and
    the like: exit 0). ``unknown="skip"``: a word the table does not know is listed (``key`` None)
    with the words after it up to the next known option, instead of refusing (its arity is unknown)."""
    given, warnings, usage = _walk(argv, {}, unknown)
    if usage:
        raise Exit(0, "".join(w + "\n" for w in warnings), usage_text())
    if any(g.key == "--completion-bash" for g in given):
        raise Exit(0, "".join(w + "\n" for w in warnings))
    return given


#: What llama.cpp logs (``LOG_WRN``) when one spelling of an option is given again: the last one is used.
REPEATED = ("DEPRECATED: argument '{arg}' specified multiple times, use comma-separated values instead "
            "(only last value will be used)")
#: The one option llama.cpp lets repeat without that warning (common/arg.cpp ``parse_cli_args``).
REPEATABLE = frozenset({"--spec-type"})


def _walk(argv: list[str], env, unknown: str) -> tuple[list[Given], list[str], bool]:
    warnings: list[str] = []
    try:
        return _walk_lines(argv, env, unknown, warnings)
    except Exit as e:  # what llama-server printed before it stopped comes first
        raise Exit(e.code, "".join(w + "\n" for w in warnings) + e.stderr, e.stdout) from None


def _walk_lines(argv: list[str], env, unknown: str, warnings: list[str]) -> tuple[list[Given], list[str], bool]:
    given: list[Given] = []
    seen: set[str] = set()
    usage = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("--"):
            arg = arg.replace("_", "-")
        if arg not in ARGS:
            if unknown != "skip":
                raise Exit(1, f"error: invalid argument: {arg}\n")
            j = i + 1
            while j < len(argv) and (argv[j].replace("_", "-") if argv[j].startswith("--") else argv[j]) not in ARGS:
                j += 1
            given.append(Given(i, argv[i], None, None, tuple(argv[i + 1:j])))
            i = j
            continue
        if arg in seen and arg not in REPEATABLE:
            warnings.append(REPEATED.format(arg=arg))
        seen.add(arg)
        opt, positive = ARGS[arg]
        key = key_of(opt)
        if opt.get("env") and _env_value(opt, env) is not None:
            warnings.append(f"warn: {opt['env']} environment variable is set, but will be overwritten by "
                            f"command line argument {arg}")
        try:
            if opt["nargs"] == 0:
                if opt.get("exits") is not None and key != "--help" and key != "--completion-bash":
                    raise Exit(opt["exits"], table.VERSION_TEXT if key == "--version" else "")
                usage = usage or key == "--help"
                given.append(Given(i, argv[i], key, positive))
                i += 1
                continue
            if i + 1 >= len(argv):
                raise _Why(EXPECTED)
            val = argv[i + 1]
            if opt["nargs"] == 1:
                given.append(Given(i, argv[i], key, value_of(opt, val), (val,)))
                i += 2
                continue
            if i + 2 >= len(argv):
                raise _Why(EXPECTED)
            val2 = argv[i + 2]
            pair = (convert("stoi", val), convert("stoi", val2)) if opt["kind"] == "int" else (val, val2)
            given.append(Given(i, argv[i], key, pair, (val, val2)))
            i += 3
        except _Why as e:
            raise Exit(1, f'error while handling argument "{arg}": {e}\n\nusage:\n{opt["usage"]}\n\n'
                          f"to show complete usage, run with -h\n") from None
    return given, warnings, usage


def parse(argv: list[str], env=None) -> tuple[dict[str, object], list[str]]:
    """({key_of(option): value}, warnings) for ``llama-server argv...``; raises :class:`Exit`
    where llama-server would end instead of serving. A switch's value is True (False for a
    ``--no-…`` spelling), a 2-value option's a tuple; the last of an option given twice wins."""
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    for opt in OPTIONS:
        v = _env_value(opt, env)
        if v is None:
            continue
        try:
            if opt["nargs"] == 0:
                if split_names(opt)[1]:
                    b = _truthy(v)
                    if b is None:
                        raise _Why("invalid boolean value")
                    values[key_of(opt)] = b
                elif _truthy(v):
                    values[key_of(opt)] = True
            elif opt["nargs"] == 1:
                values[key_of(opt)] = value_of(opt, v)
        except _Why as e:
            raise Exit(1, f'error while handling environment variable "{opt["env"]}": {e}\n\n\n') from None
    given, warnings, usage = _walk(argv, env, "refuse")
    for g in given:
        values[g.key] = g.value  # type: ignore[index]
    printed = "".join(w + "\n" for w in warnings)  # what it logged before it printed the usage and ended
    if usage:
        raise Exit(0, printed, usage_text())
    if values.get("--completion-bash"):
        raise Exit(0, printed)
    return values, warnings
