"""Secrets — found, named, never shown (DESIGN.md "Secrets"): where they come from, and the scanner
that refuses one in the spec's raw data (:func:`scan_raw`, with control characters) before any model
sees it.

The HF token comes from ``HF_TOKEN`` or the file hf itself uses on the control machine, and
lands only in ``/etc/rigkit/secrets/hf.env`` on the host. Messages name a secret's key and its
source, never its value.
"""

from __future__ import annotations

import os
import re
import shlex
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rigkit.spec.problems import SpecProblem, dotted_key


def hf_token_file(env: Mapping[str, str] | None = None) -> Path:
    """The token file huggingface-hub reads: ``$HF_TOKEN_PATH``, else ``$HF_HOME/token``, else
    ``$XDG_CACHE_HOME/huggingface/token``, else ``~/.cache/huggingface/token``
    (huggingface_hub ``constants.HF_TOKEN_PATH``)."""
    env = os.environ if env is None else env
    if env.get("HF_TOKEN_PATH"):
        return Path(env["HF_TOKEN_PATH"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "token"
    cache = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "huggingface" / "token"


@dataclass(frozen=True)
class HfToken:
    """The HF token as one command read it (:func:`hf_token`), handed down from there.

    ``value``: the token itself — never printed, logged or put in a file other than
    ``/etc/rigkit/secrets/hf.env`` (its ``repr`` leaves it out; an operation gets it wrapped in
    pyinfra's ``HiddenValue``); ``source``: where it came from, as words for messages
    (``"environment variable HF_TOKEN"`` or ``"file /root/.cache/huggingface/token"``)."""

    value: str = field(repr=False)
    source: str

    def __str__(self) -> str:
        return f"the HF token from {self.source}"


def hf_token(env: Mapping[str, str] | None = None) -> HfToken | None:
    """The HF token on the control machine, read once by each command (DESIGN.md "Secrets"):
    ``$HF_TOKEN`` (stripped, when not blank), else the file :func:`hf_token_file` names (stripped,
    when not empty), else None. ``env`` defaults to ``os.environ``. An unreadable file counts as
    none (its path is not the value, so nothing secret is lost by saying so elsewhere). The one
    reader: every command calls it once and hands the :class:`HfToken` down."""
    env = os.environ if env is None else env
    if env.get("HF_TOKEN", "").strip():
        return HfToken(env["HF_TOKEN"].strip(), "environment variable HF_TOKEN")
    path = hf_token_file(env)
    try:
        value = path.read_text().strip() if path.is_file() else ""
    except (OSError, UnicodeDecodeError):
        return None
    return HfToken(value, f"file {path}") if value else None



#: A Hugging Face user access token (``hf_`` + letters and digits), anywhere in a string or a key: the
#: one shape, for refusing a token in the spec and masking one in drift's output. The Hub issues
#: ``hf_`` + 34 letters (the secret scanners' rule: gitleaks ``hugging-face-access-token`` and
#: detect-secrets ``HuggingFaceDetector``, ``hf_[a-zA-Z]{34}``; huggingface_hub itself checks no
#: shape); 20 or more letters and digits keeps every issued token with room for a longer one, and
#: stays clear of short words such as ``hf_home``.
HF_TOKEN_RE = re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{20,}")
#: A URL carrying a password (``scheme://user:password@host``). The match starts at ``://`` (the scheme's
#: last character looked behind), so a long value is scanned once: a pattern that starts with the
#: scheme's ``[A-Za-z0-9+.-]*`` rescans every run of letters from each of its characters, quadratic in
#: the value (a 135 kB value took ~60 s to check).
URL_PASSWORD_RE = re.compile(r"(?<=[A-Za-z0-9+.-])://[^/\s:@]+:[^/\s@]+@")
#: The kernel's limit on one argument or environment string (``MAX_ARG_STRLEN``, 32 pages of 4 KiB:
#: execve(2)); a longer value could not reach a command line or a container's environment at all.
MAX_VALUE_BYTES = 131072
#: Values that switch something rather than hold a secret: under a secret-named key
#: (``HF_HUB_DISABLE_IMPLICIT_TOKEN=1``, ``dflash_token: 5``) they are accepted.
_SWITCH_VALUE_RE = re.compile(r"(?i)^(?:[+-]?[0-9]+(?:\.[0-9]+)?|true|false|yes|no|on|off|none|null|auto)$")
#: A name (key, ``NAME=`` of an env item, ``--flag`` of a command line) that holds a secret.
SECRET_NAME_RE = re.compile(
    r"(?i)(?:^|[^a-z0-9])(?:token|secret|password|passwd|passphrase|credentials?|api[_-]?key|apikey|"
    r"access[_-]?key|private[_-]?key|auth)(?:$|[^a-z0-9])")
#: Names that point at a secret (a file, a path) rather than holding one.
_SECRET_REF_SUFFIXES = ("_file", "-file", "_path", "-path", "_dir", "-dir")
#: Where the secrets live instead (DESIGN.md "Secrets"); the text of every secret problem.
SECRET_ADVICE = ("secrets never go in the spec: the API key lives in /etc/rigkit/secrets/hyperqwen.env, "
                 "the HF token comes from HF_TOKEN or the hf token file")
SECRET_SHOWN = "<secret, not shown>"
#: Keys whose strings may span lines (llama-swap splits commands itself; YAML holds a description).
MULTILINE_KEYS = frozenset({"cmd", "cmd_stop", "description"})


def secret_name(name: str) -> bool:
    """True when ``name`` (a key, an env name, a ``--flag``) is named like a secret:
    ``HF_TOKEN``, ``VLLM_API_KEY``, ``--api-key``, ``password``... but not ``max_tokens`` and not a
    reference to one (``HF_TOKEN_FILE``, ``--api-key-file``)."""
    bare = name.lstrip("-")
    return bool(SECRET_NAME_RE.search(bare)) and not bare.lower().endswith(_SECRET_REF_SUFFIXES)


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def secret_value(value: Any) -> bool:
    """Whether ``value``, found under a secret-named key (:func:`secret_name`), is a secret by its
    shape: a string other than a switch (a number, ``true``/``false``/``yes``/``no``/``on``/``off``/
    ``auto``/``none``/``null``). A number, a boolean or an empty value never is: ``dflash_token: 5``
    and ``HF_HUB_DISABLE_IMPLICIT_TOKEN=1`` are settings; ``api_key: abc`` is refused."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return False
    if isinstance(value, str):
        return bool(value.strip()) and not _SWITCH_VALUE_RE.match(value.strip())
    return bool(value)  # a list or mapping under a secret name: what it holds is secret


def _secret_in_words(words: list[str]) -> bool:
    """A secret in a command line or an argument list: ``NAME=value`` / ``--flag=value`` with a
    secret name and a secret-shaped value (:func:`secret_value`), or a secret ``--flag`` followed by
    one."""
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if eq and value and secret_name(name) and secret_value(value):
            return True
        if (not eq and word.startswith("-") and secret_name(word) and i + 1 < len(words)
                and not words[i + 1].startswith("-") and secret_value(words[i + 1])):
            return True
    return False


def secret_shaped(value: Any) -> bool:
    """True when a string holds a secret: a Hugging Face token, a URL with a password, or a
    secret given as ``NAME=value`` / ``--api-key value`` inside it."""
    if not isinstance(value, str):
        return False
    if HF_TOKEN_RE.search(value) or URL_PASSWORD_RE.search(value):
        return True
    # the words are split only when a secret name is in the text at all: shlex reads ~100k words/s, and
    # a long value without one (a 120 kB description) needs no split
    return ("=" in value or " " in value.strip()) and bool(SECRET_NAME_RE.search(value)) and _secret_in_words(_words(value))


_CONTROL_NAMES = {"\n": "line feed", "\r": "carriage return", "\t": "tab", "\x00": "NUL", "\x1b": "escape",
                  "\x7f": "delete"}


#: Every character :func:`_bad_char` may refuse: Unicode's Cc (C0 and C1 controls), Zl, Zp, Cs and the BOM.
_SUSPECT_CHAR_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff]")


def _bad_char(text: str, multiline: bool) -> str | None:
    """The first character no rendered file can hold in this value, as ``U+XXXX (name)``:
    control characters (a newline, tab or NUL outside the multi-line keys), line/paragraph
    separators, lone surrogates, a byte-order mark."""
    if not _SUSPECT_CHAR_RE.search(text):  # one C-speed pass; the loop below only names the character
        return None
    for ch in text:
        if multiline and ch in "\n\t":
            continue
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs") or ch == "\ufeff":
            name = _CONTROL_NAMES.get(ch) or unicodedata.name(ch, "control character").lower()
            return f"U+{ord(ch):04X} ({name})"
    return None


#: How deep raw data may nest: the spec itself is 5 levels deep (llama_swap.members.<id>.env[i]).
MAX_DEPTH = 32


def scan_raw(data: Any, loc: tuple[Any, ...] = ()) -> tuple[Any, list[SpecProblem]]:
    """Walk one data layer before any model sees it: returns ``(redacted copy, problems)``.

    Refused (a :class:`SpecProblem` each, the value never shown): a secret-shaped value
    (:func:`secret_shaped`) anywhere, as a value, a list item or a mapping key; a secret-shaped value
    (:func:`secret_value`: not a number, a boolean or a switch word) of a key named like a secret
    (:func:`secret_name`); a secret ``NAME=value`` list item or ``--flag value`` pair; a string over
    :data:`MAX_VALUE_BYTES`. Every check is linear in the value's length. Refused with the character named: control characters where no rendered file can hold
    them (newline and tab only in :data:`MULTILINE_KEYS`). Refused and cut off: a mapping or list that
    contains itself (a cycle, which every later walk would follow for ever), and nesting deeper than
    :data:`MAX_DEPTH`. In the copy each secret is replaced by
    ``"<secret, not shown>"`` (a secret key by ``"<secret-shaped key N>"``), so no later error
    message (pydantic's included) can echo it."""
    problems: list[SpecProblem] = []
    open_containers: set[int] = set()  # ids of the mappings and lists being walked (a cycle comes back to one)

    def secret(at: tuple[Any, ...]) -> None:
        problems.append(SpecProblem(key=dotted_key(at) or "(root)", value=SECRET_SHOWN, allowed=SECRET_ADVICE))

    def walk(value: Any, at: tuple[Any, ...]) -> Any:
        if isinstance(value, (Mapping, list, tuple)):
            if id(value) in open_containers:
                problems.append(SpecProblem(key=dotted_key(at) or "(root)", value=f"a {type(value).__name__} that contains itself",
                                            allowed="data: mappings, lists, strings, numbers and booleans, "
                                                    "no value inside itself"))
                return None
            if len(at) - len(loc) >= MAX_DEPTH:
                problems.append(SpecProblem(key=dotted_key(at[:len(loc) + 3]) + " …", value=f"nested deeper than {MAX_DEPTH}",
                                            allowed=f"at most {MAX_DEPTH} levels of mappings and lists (the spec has 5)"))
                return None
            open_containers.add(id(value))
            try:
                return walk_container(value, at)
            finally:
                open_containers.discard(id(value))
        return walk_scalar(value, at)

    def walk_container(value: Any, at: tuple[Any, ...]) -> Any:
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            for n, (key, item) in enumerate(value.items()):
                if isinstance(key, str) and secret_shaped(key):
                    shown = f"<secret-shaped key {n + 1}>"
                    secret((*at, shown))
                    out[shown] = SECRET_SHOWN
                    continue
                if isinstance(key, str) and secret_name(key) and secret_value(item):
                    secret((*at, key))
                    out[key] = SECRET_SHOWN
                    continue
                if isinstance(key, str) and (bad := _bad_char(key, False)):
                    problems.append(SpecProblem(key=dotted_key((*at, repr(key))), value="key",
                                                allowed=f"control character {bad} in a key"))
                out[key] = walk(item, (*at, key))
            return out
        if isinstance(value, (list, tuple)):
            if all(isinstance(v, str) for v in value) and _secret_in_words(list(value)):
                secret(at)
                return [SECRET_SHOWN]
            return [walk(v, (*at, i)) for i, v in enumerate(value)]

    def walk_scalar(value: Any, at: tuple[Any, ...]) -> Any:
        if isinstance(value, str):
            if len(value.encode("utf-8", "surrogatepass")) > MAX_VALUE_BYTES:
                problems.append(SpecProblem(
                    key=dotted_key(at), value=f"{len(value.encode('utf-8', 'surrogatepass'))} bytes",
                    allowed=f"at most {MAX_VALUE_BYTES} bytes (the kernel's limit on one argument or environment "
                            "string, MAX_ARG_STRLEN): no command could carry it"))
                return value[:64]
            if secret_shaped(value):
                secret(at)
                return SECRET_SHOWN
            key = next((p for p in reversed(at) if isinstance(p, str)), "")
            bad = _bad_char(value, key in MULTILINE_KEYS)
            if bad:
                problems.append(SpecProblem(
                    key=dotted_key(at), value=repr(value),
                    allowed=f"control character {bad}: no rendered file can hold it here (it would start a new "
                            f"line or be reinterpreted); only {', '.join(sorted(MULTILINE_KEYS))} may span lines"))
        return value

    return walk(data, loc), problems
