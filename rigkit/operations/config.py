"""Config files: some keys of a JSON file owned by rigkit (:func:`json_keys`, merged with the pure
:func:`merge_json`), and a rendered file installed with a backup of the one it replaces."""

from __future__ import annotations

import json
import time
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import OperationError, operation
from pyinfra.operations import files

from rigkit.facts import JsonFile


def merge_json(current: Any, wanted: Any) -> Any:
    """``wanted`` merged into ``current``: objects key by key (recursively), lists as a union
    keeping ``current``'s order, anything else replaced. Keys rigkit does not own are kept."""
    if isinstance(current, dict) and isinstance(wanted, dict):
        out = dict(current)
        for key, value in wanted.items():
            out[key] = merge_json(current[key], value) if key in current else value
        return out
    if isinstance(current, list) and isinstance(wanted, list):
        return current + [item for item in wanted if item not in current]
    return wanted


@operation()
def json_keys(path: str, keys: dict[str, Any], backup_suffix: str | None = None):
    """Own some keys of a JSON config file, keeping the rest (e.g. ``/etc/docker/daemon.json``).

    + path: the JSON file (created when missing)
    + keys: the keys rigkit owns, merged with :func:`merge_json`
    + backup_suffix: when set, an existing file is copied to ``path + suffix`` before it is replaced

    Compared as JSON, never as text; written with 4-space indentation like ``nvidia-ctk``. A
    file that is not a JSON object is refused, never overwritten.
    """
    current = host.get_fact(JsonFile, path=path)
    if current["error"]:
        raise OperationError(f"{path}: {current['error']}; fix or move it away, rigkit does not overwrite a file it cannot read")
    merged = merge_json(current["data"] or {}, keys)
    if current["exists"] and merged == current["data"]:
        host.noop(f"{path} holds {', '.join(sorted(keys))}")
        return
    if current["exists"] and backup_suffix:
        yield f"cp -a {path} {path}{backup_suffix}"
    yield from files.put._inner(src=StringIO(json.dumps(merged, indent=4) + "\n"), dest=path,
                                user="root", group="root", mode="644")


@operation()
def config_file(path: str, text: str, user: str = "root", group: str = "root", mode: str = "644",
                backup: bool = True):
    """Install a rendered config file, keeping a copy of the one it replaces.

    + path: the remote file
    + text: its wanted content (from :func:`rigkit.render.render`)
    + backup: copy an existing, different file to ``<path>.bak-<UTC timestamp>`` first

    Nothing already on a host is lost: the backup is taken before the upload, only when the
    content differs.
    """
    from pyinfra.facts.files import Sha1File

    import hashlib

    current = host.get_fact(Sha1File, path=path)
    wanted = hashlib.sha1(text.encode()).hexdigest()
    if backup and current and current != wanted:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        yield f"cp -a {path} {path}.bak-{stamp}"
    yield from files.put._inner(src=StringIO(text), dest=path, user=user, group=group, mode=mode)
