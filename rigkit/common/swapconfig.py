"""llama-swap's config as the activation reads it, pure (no host touched; both sides
import it): the config parsed (:func:`parse_config`), its resident member, which members changed between
two configs and in which order an activation asks them (:func:`probe_order`), the live config's
backups, and the UTC stamp of backups, holds and failed configs. Source for the keys: llama-swap
v250's ``config.example.yaml`` (``models``, ``hooks.on_startup.preload``)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any


def utc_stamp(now: float | None = None) -> str:
    """``20250102T030405Z``: the UTC stamp of backups, holds and failed configs."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))


def sha256_text(text: str) -> str:
    """Hex sha256 of ``text`` as UTF-8."""
    return hashlib.sha256(text.encode()).hexdigest()


def parse_config(text: str, source: str, yaml: Any) -> dict[str, Any]:
    """A llama-swap config as data; raises ValueError naming ``source`` when it is not YAML, not a
    mapping, or has no ``models`` mapping. ``yaml`` is the PyYAML module (its ``safe_load`` reads,
    its ``YAMLError`` is a text it cannot read), handed in by the caller: this package is standard
    library only, and both sides have the one pinned PyYAML (the agent's wheelhouse, the control
    side's dependencies)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not valid YAML ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise ValueError(f"{source}: not a llama-swap config (no `models` mapping)")
    return data


def resident(config: dict[str, Any]) -> str | None:
    """The resident member: the first ``hooks.on_startup.preload`` id that is a model of ``config``."""
    preload = (((config.get("hooks") or {}).get("on_startup") or {}).get("preload")) or []
    return next((p for p in preload if p in (config.get("models") or {})), None)


def changed_members(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """Ids of ``new``'s members whose definition (``models.<id>``, compared as data) differs from
    ``old``'s or is absent there, in ``new``'s order. ``old`` None (a first activation): all."""
    before = (old or {}).get("models") or {}
    return [mid for mid, m in (new.get("models") or {}).items() if before.get(mid) != m]


def member_diff(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, list[str]]:
    """``{"added": [...], "removed": [...], "changed": [...]}``: member ids of ``new`` vs ``old``."""
    a = (old or {}).get("models") or {}
    b = (new or {}).get("models") or {}
    return {"added": [m for m in b if m not in a], "removed": [m for m in a if m not in b],
            "changed": [m for m in b if m in a and a[m] != b[m]]}


def probe_order(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """The members to send a completion to, in order: each changed member except the resident,
    then the resident last (so it is what stays loaded)."""
    res = resident(new)
    order = [m for m in changed_members(old, new) if m != res]
    return order + ([res] if res else [])


def backups(live: Path) -> list[Path]:
    """``<live>.bak-*`` files, oldest first (the UTC stamps sort as text)."""
    return sorted(live.parent.glob(live.name + ".bak-*"))


def holds_text(sha256: str | None, text: str) -> bool:
    """Whether a file whose ``Sha256File`` fact is ``sha256`` (None: no file) holds ``text``: the one
    way a live config (or unit) on the host is compared with the rendered one (the llama-swap operation,
    :func:`rigkit.operations.llama_swap.activated_config`, and the preflight's :func:`rigkit.deploy.preflight.disruptive_steps`)."""
    return sha256 == sha256_text(text)
