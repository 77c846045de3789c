"""What a change did to llama-swap's members, as both sides compute it (issue 61): which members it
added to the live config, removed from it, changed in it, or changed only among the staged ones
(:func:`member_changes`); the live members a confirmation asks (:func:`touched_members`; the deploy's
transaction on the control side passes them to ``rigkit-agent confirm``, :mod:`rigkit.host.confirm`);
and the one wording of it (:func:`describe`) that the generation record and the confirm print; and the members
a generation keeps running (:func:`residents`), read the same way."""

from __future__ import annotations

from typing import Any

#: The kinds of member change, in the order they are said.
KINDS = ("added", "removed", "changed", "staged")


def _members(snapshot: dict[str, Any] | None) -> dict[str, Any]:
    return ((snapshot or {}).get("llama_swap") or {}).get("members") or {}


def _live(members: dict[str, Any], mid: str) -> bool:
    return mid in members and not (members[mid] or {}).get("staged")


def residents(snapshot: dict[str, Any] | None) -> list[str]:
    """The members a generation keeps running: its spec snapshot's ``llama_swap.preload`` that are live, in that
    order (what a bench through llama-swap can measure without swapping the resident out: ``rigkit bisect``)."""
    members = _members(snapshot)
    return [m for m in ((snapshot or {}).get("llama_swap") or {}).get("preload") or [] if _live(members, m)]


def member_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, list[str]]:
    """How the members differ between two spec snapshots (``llama_swap.members`` of each; ``old`` None:
    every member of ``new`` is new), each id in exactly one list, each list sorted:

    - ``added``: live in ``new``, not live in ``old`` (declared anew, or activated from staged);
    - ``removed``: live in ``old``, not live in ``new`` (dropped, or staged again);
    - ``changed``: live in both, its definition differs;
    - ``staged``: live in neither and its definition differs (declared, changed or dropped while staged:
      only the review copy ``config.staged.yaml`` sees it).

    Members whose definition is the same in both are in none."""
    om, nm = _members(old), _members(new)
    out: dict[str, list[str]] = {k: [] for k in KINDS}
    for mid in sorted(set(om) | set(nm)):
        if old is not None and mid in om and mid in nm and om[mid] == nm[mid]:
            continue
        was, now = old is not None and _live(om, mid), _live(nm, mid)
        kind = ("changed" if was and now else "added" if now else "removed" if was else "staged")
        out[kind].append(mid)
    return out


def touched_members(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """The live members of ``new`` a change touched — ``added`` and ``changed`` of
    :func:`member_changes`, sorted: what a confirmation asks beside the resident. A removed or staged
    member is never asked (it is not in the live config)."""
    ch = member_changes(old, new)
    return sorted(ch["added"] + ch["changed"])


def describe(changes: dict[str, list[str]]) -> str:
    """``"added hyperqwen; removed strata-8k"``: :func:`member_changes` in words, kinds in
    :data:`KINDS` order, empty kinds left out; ``""`` for no change."""
    return "; ".join(f"{k} {', '.join(changes[k])}" for k in KINDS if changes.get(k))
