"""The holds file (DESIGN.md "Staged vs live", "Generations"), one way: its name, the names of its
holds, one parser, one reader and one writer, used on the host (activation, generations) and on the
control side (the deploy, its preflight, drift, ``rigkit wire-in``, ``rigkit generations``).

The file (``holds.json`` in the state folder, ``/var/lib/rigkit/holds.json`` on the rig; the host
reads its path from the host config's ``paths.holds``) is a JSON object ``{name: record}``:

- :data:`LLAMA_SWAP` (``"llama-swap"``): a rollback by hand of llama-swap's live config
  (:func:`rigkit.host.activate.rollback`); the deploy does not re-activate until
  ``rigkit wire-in --release``.
- :data:`GENERATION` (``"generation"``): ``rigkit rollback``'s (:func:`rigkit.host.generations.record`);
  the deploy keeps the host at the held generation until ``rigkit rollback --release``.

A hold is a safety record: a file that cannot be read is an error everywhere (:class:`HoldsError`),
never read as "no hold" — that would let a deploy undo a rollback the operator asked for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rigkit.common.jsonfile import write_atomic

FILE_NAME = "holds.json"
LLAMA_SWAP = "llama-swap"
GENERATION = "generation"


class HoldsError(ValueError):
    """The holds file is not a JSON object of hold records; the message names the file and what to do."""


def _advice(source: str, why: str) -> HoldsError:
    return HoldsError(f"{source}: {why}; it records rollbacks the deploy must respect, so it is not read as "
                      "\"no hold\": fix it, or remove it by hand once no hold should stay")


def parse(text: str | None, source: str) -> dict[str, dict[str, Any]]:
    """The holds in ``text`` (the file's content; None or blank: absent or empty, ``{}``).

    Returns ``{name: record}``. Raises :class:`HoldsError` naming ``source`` when the text is not
    JSON, not an object, or a value is not an object.
    """
    import json

    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _advice(source, f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _advice(source, "not a JSON object")
    if not all(isinstance(v, dict) for v in data.values()):
        raise _advice(source, "not a JSON object of hold records")
    return data


def read_holds(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """The holds recorded in ``path`` (:func:`parse`); ``{}`` when the file is absent or empty.

    The ``llama-swap`` record: ``path`` (the live config), ``since`` (UTC ISO 8601), ``by`` (the
    command), ``restored_from`` (the backup it rolled back to), ``live_sha256`` (sha256 of the config
    now live), ``held_back_sha256`` and ``held_back_copy`` (the config it replaced and where a copy
    lies), ``held_back_members`` (``{"added"|"removed"|"changed": [ids]}``). The ``generation``
    record: ``generation`` (n), ``rolled_back_to``, ``since``, ``by``. Raises :class:`HoldsError`.
    """
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        return {}
    return parse(text, str(p))


def rolled_back(hold: dict[str, Any]) -> str:
    """What a :data:`LLAMA_SWAP` hold's rollback replaced, in words, one way for every reader (drift,
    ``rigkit wire-in --show``): ``"rolled back from a config that added: hyperqwen (against the
    one restored; copy: PATH)"``. ``held_back_members`` compares the config the rollback replaced
    (what was live, e.g. activated with ``--data``) with the backup it restored — never with the
    declared config, which the host does not know — so it is said as what the rollback undid, not as
    what the spec declares and the hold keeps out."""
    members = hold.get("held_back_members") or {}
    parts = [f"{k}: {', '.join(v)}" for k, v in sorted(members.items()) if v]
    what = ("a config that " + "; ".join(parts)) if parts else "a config with no member difference"
    return f"rolled back from {what} (against the one restored; copy: {hold.get('held_back_copy', '?')})"


def write_holds(path: str | os.PathLike, holds: dict[str, dict[str, Any]]) -> None:
    """Write ``holds`` to ``path`` atomically (0644: drift reads them). Raises OSError."""
    write_atomic(path, holds)
