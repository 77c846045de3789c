"""Which members a confirmation asks, as both sides compute it: the members whose definition
differs between two spec snapshots (:func:`touched_members`; the deploy's transaction on the control
side passes them to ``rigkit-agent confirm``, :mod:`rigkit.host.confirm`)."""

from __future__ import annotations

from typing import Any


def touched_members(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """The member ids whose definition differs between two spec snapshots (``llama_swap.members``;
    one missing from either counts), sorted; every member of ``new`` without ``old``."""
    om = ((old or {}).get("llama_swap") or {}).get("members") or {}
    nm = (new.get("llama_swap") or {}).get("members") or {}
    if old is None:
        return sorted(nm)
    return sorted(m for m in set(om) | set(nm) if om.get(m) != nm.get(m))
