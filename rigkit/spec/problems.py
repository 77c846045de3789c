"""What is wrong with a spec, in one shape for every check: :class:`SpecProblem` (the key, the value —
never a secret's — and what is allowed), :class:`SpecError` (exit code 2) and :class:`SpecWarning`
(reported, accepted)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict



class SpecProblem(BaseModel):
    """One thing wrong with the spec: the dotted ``key``, the offending ``value`` (repr'd, or
    ``"<unknown key>"``) and ``allowed``, what would be accepted. ``str()`` is the message."""

    model_config = ConfigDict(frozen=True)
    key: str
    value: str
    allowed: str

    def __str__(self) -> str:
        return f"{self.key}: {self.value} — {self.allowed}"


class SpecError(ValueError):
    """The spec is invalid; ``problems`` lists each :class:`SpecProblem` (exit code 2)."""

    def __init__(self, problems: list[SpecProblem], source: str = "spec"):
        self.problems = problems
        self.source = source
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid {source} ({len(problems)} problem(s)):\n{lines}")


class SpecWarning(BaseModel):
    """Something ``rigkit check`` reports but accepts (exit 0): an unset operator value, an
    image pinned by tag instead of digest."""

    model_config = ConfigDict(frozen=True)
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"


#: The most characters of a value a message shows.
SHOWN_CHARS = 300


def shown(value: Any, typed: bool = True) -> str:
    """``value`` as a message shows it: its ``repr`` (and type, when ``typed``), cut to :data:`SHOWN_CHARS`; an integer too
    long to print (Python refuses over 4300 digits) as its number of digits. Never raises."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits (int)"
    try:
        text = repr(value)
    except Exception:  # a repr that fails (a too-long int inside a container, a hostile __repr__)
        text = f"<{type(value).__name__}>"
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS] + f"… ({len(text)} characters)"
    return f"{text} ({type(value).__name__})" if typed else text


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def dotted_key(loc: tuple[Any, ...]) -> str:
    """A location in the spec's data as the key messages name: ``("members", "strata", "env", 0)`` →
    ``members.strata.env[0]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
