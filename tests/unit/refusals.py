"""The spec's refusal tables, one way: ``REFUSED`` rows ``(data, key, value, words)`` — raw spec data, the
field a problem must name first, the value as it is shown (``repr``), and words of the rule it must say —
and ``ACCEPTED`` raw data, the valid neighbours, which must give no problem at all. Each module with such
tables (test_engine_args, test_limits, test_spec_types) gets its two parametrized tests from
:func:`refusal_tests`."""
from __future__ import annotations

from typing import Any, Callable

import pytest

from rigkit.spec.problems import SpecError
from rigkit.spec.validate import spec_from_dict


def problems(data: dict) -> list[str]:
    """The problems :func:`rigkit.spec.validate.spec_from_dict` raises for raw spec ``data``, as strings
    (``"<field>: <value> — <rule>"``); ``[]`` when it is accepted."""
    try:
        spec_from_dict(data)
    except SpecError as exc:
        return [str(p) for p in exc.problems]
    return []


def refusal_tests(refused: list[tuple[dict, str, str, str]], accepted: list[dict],
                  id_width: int = 24) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Two tests, for a module to bind to its own names: each row of ``refused`` refused with a problem that
    begins ``"<key>: <value>"`` and says ``words``; each of ``accepted`` accepted whole."""

    @pytest.mark.parametrize("data, key, value, words", refused,
                             ids=[f"{r[1]}:{r[3][:id_width]}" for r in refused])
    def refused_naming_the_field_the_value_and_the_rule(data, key, value, words):
        found = problems(data)
        assert any(p.startswith(f"{key}: {value}") and words in p for p in found), found

    @pytest.mark.parametrize("data", accepted, ids=range(len(accepted)))
    def the_valid_neighbours_are_accepted(data):
        assert problems(data) == []

    return refused_naming_the_field_the_value_and_the_rule, the_valid_neighbours_are_accepted
