"""JSON files on the host, one way: read an object, write atomically (:mod:`rigkit.common.atomic`: temp
file in the same folder, fsync, rename), so a reader never sees half a file. Used for the window journal, holds, the
watchdog's state, model records and the lock's holder record's readers."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from rigkit.common import atomic


def iso_utc(t: float | None = None) -> str:
    """The UTC time the host's records carry, ``2026-12-02T03:04:05Z`` (``t``: seconds since the epoch;
    default now)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if t is None else t))


def read_object(path: str | os.PathLike) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file is absent or empty. Raises ValueError naming
    the file when it is not JSON or not an object."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        return None
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{p}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{p}: not a JSON object")
    return data


def load_named(path: str | os.PathLike, name: str) -> Any:
    """The JSON value in the file an option names (``name``: ``--context``, ``--baseline``). Raises
    ValueError ``"<name> <path>: cannot read (<why>)"`` or ``"<name> <path>: not JSON (<why>)"``; the
    caller checks the value's shape."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise ValueError(f"{name} {path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise ValueError(f"{name} {path}: not JSON ({exc})") from None


def write_atomic(path: str | os.PathLike, data: Any, mode: int = 0o644, indent: int | None = 2,
                 sort_keys: bool = True) -> Path:
    """Write ``data`` as JSON (trailing newline) to ``path`` atomically with ``mode``; creates the
    parent folder. Returns the path. Raises OSError when it cannot be written."""
    return atomic.write_text(path, json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n", mode)
