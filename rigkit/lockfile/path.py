"""Where a host's lock file is: the one function every reader and writer of the lock asks
(``rigkit lock``, ``rigkit models``, ``rigkit check``, the deploy's spec and roles, drift)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def lock_file_path(spec: Any, inventory: str | os.PathLike) -> Path:
    """The lock file of ``spec`` (a :class:`~rigkit.spec.model.RigSpec`) loaded from ``inventory``: the
    spec's ``lockfile`` when set (as given: relative to the working directory, as pyinfra reads the
    inventory), else ``<inventory stem>.lock.json`` beside the inventory (``inventory/sandbox.py`` →
    ``inventory/sandbox.lock.json``), like a package lock. Reads nothing; the file may not exist."""
    given = getattr(spec, "lockfile", None)
    if given:
        return Path(given)
    inv = Path(inventory)
    return inv.with_name(inv.stem + ".lock.json")
