"""Config files: some keys of a JSON file owned by rigkit (:func:`json_keys`, merged with the pure
:func:`rigkit.render.declared_state.merge_json`), and a rendered file (:func:`rendered_file`) — both keep a timestamped backup of
a file they replace that rigkit did not write, and name it in the deploy's output."""

from __future__ import annotations

import hashlib
import json
import time
from io import StringIO
from typing import Any

from pyinfra import host, logger
from pyinfra.api import OperationError, operation
from pyinfra.operations import files

from rigkit import paths
from rigkit.common import written
from rigkit.operations.facts.files import JsonFile
from rigkit.render.declared_state import merge_json  # the one definition (drift compares with it too)
from rigkit.operations.shell import argv, script


@operation()
def json_keys(path: str, keys: dict[str, Any], backup: bool = True):
    """Own some keys of a JSON config file, keeping the rest (e.g. ``/etc/docker/daemon.json``).

    + path: the JSON file (created when missing)
    + keys: the keys rigkit owns, merged with :func:`merge_json`
    + backup: an existing file is copied to :func:`backup_path` (timestamped) before it is replaced,
      and the backup named in the deploy's output

    Compared as JSON, never as text; written with 4-space indentation like ``nvidia-ctk``. A
    file that is not a JSON object is refused, never overwritten.

    **Example:**

    .. code:: python

        from rigkit.operations.config import json_keys
        json_keys(
            name="Merge the nvidia runtime and the cgroup mitigation into daemon.json",
            path="/etc/docker/daemon.json",
            keys={
                "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
                "exec-opts": ["native.cgroupdriver=cgroupfs"],
            },
        )
    """
    current = host.get_fact(JsonFile, path=path)
    if current["error"]:
        raise OperationError(f"{path}: {current['error']}; fix or move it away, rigkit does not overwrite a file it cannot read")
    merged = merge_json(current["data"] or {}, keys)
    if current["exists"] and merged == current["data"]:
        host.noop(f"{path} holds {', '.join(sorted(keys))}")
        return
    if current["exists"] and backup:
        yield from _backup(path, f"rigkit merges {', '.join(sorted(keys))} into it")
    yield from files.put._inner(src=StringIO(json.dumps(merged, indent=4) + "\n"), dest=path,
                                user="root", group="root", mode="644")


def backup_path(path: str, stamp: str | None = None) -> str:
    """``<path>.rigkit-bak-<UTC stamp>`` (``20261201T120000Z``): where a replaced file is kept."""
    return f"{path}.rigkit-bak-{stamp or time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"


def written_marker(path: str) -> str:
    """The file recording the sha256 of what rigkit last wrote to ``path``
    (``/var/lib/rigkit/written/<sha1 of path>``: :func:`rigkit.common.written.marker`, the one format
    every writer of rigkit's records)."""
    return written.marker(path, paths.STATE_DIR)


def _backup(path: str, what: str):
    """Copy ``path`` aside (content, mode, owner) and say where, in the deploy's output."""
    dest = backup_path(path)
    logger.warning(f"{host.print_prefix}{path}: {what}; the replaced file is kept as {dest}")
    yield argv("cp", "-a", path, dest)


def file_states(batch: tuple[str, ...]) -> dict[str, Any]:
    """:class:`~rigkit.operations.facts.files.FileStates` of ``batch`` on the current host, read once per
    stage of the run (pyinfra 3 reads a fact afresh on every call, and evaluates each operation in
    the prepare stage and again in the execute stage). Within a stage the answer holds for a path
    until that path's own :func:`rendered_file` changes it: no other operation of the deploy writes
    a rendered file."""
    from pyinfra import state

    from rigkit.operations.facts.files import FileStates

    cache = host.__dict__.setdefault("_rigkit_file_states", {})
    key = (state.current_stage, batch)
    if key not in cache:
        cache[key] = host.get_fact(FileStates, paths=list(batch))
    return cache[key]


@operation()
def rendered_file(path: str, text: str, user: str = "root", group: str = "root", mode: str = "644",
                  batch: tuple[str, ...] = ()):
    """Install a rendered file; a replaced file whose content rigkit did not write last is kept.

    + path: the remote file; text: its content (from :func:`rigkit.render.files.render`)
    + user/group/mode: ownership and octal mode (``"644"``)
    + batch: every rendered path of the deploy (``path`` among them): their state is read in one
      command (:class:`~rigkit.operations.facts.files.FileStates`, the same fact for each), and a file whose
      content, owner and mode hold is left without asking pyinfra's ``files.put`` (three more commands)

    When ``path`` exists with other content and that content is not what rigkit wrote there last
    (the sha256 in :func:`written_marker`) — an operator's hand edit, or a file from before rigkit —
    it is copied to :func:`backup_path` first and the backup is named in the deploy's output. After
    an upload the marker records the new content. No change when the content, owner and mode hold.

    **Example:**

    .. code:: python

        from rigkit.operations.config import rendered_file
        rendered_file(
            name="Blacklist nouveau",
            path="/etc/modprobe.d/rigkit-nouveau.conf",
            text="blacklist nouveau\\noptions nouveau modeset=0\\n",
            user="root",
            group="root",
            mode="644",
        )
    """
    from pyinfra.facts.files import FileContents, Sha256File

    wanted = hashlib.sha256(text.encode()).hexdigest()
    if path in batch:
        st = file_states(tuple(sorted(batch))).get(path)
        if (st is not None and st["sha256"] == wanted and (st["user"], st["group"]) == (user, group)
                and st["mode"] is not None and int(st["mode"], 8) == int(mode, 8)):
            host.noop(f"{path} is as rendered")
            return
        current = st["sha256"] if st else None
    else:
        current = host.get_fact(Sha256File, path=path)
    if current and current != wanted:
        marker = host.get_fact(FileContents, path=written_marker(path)) or []
        if written.parse("\n".join(marker)) != current:
            yield from _backup(path, "its content was not written by rigkit (edited by hand?)")
    changed = current != wanted
    yield from files.put._inner(src=StringIO(text), dest=path, user=user, group=group, mode=mode,
                                create_remote_dir=True)
    if changed:  # rigkit.common.written's record: the sha256 and a newline
        marker = written_marker(path)
        yield script("mkdir -p {folder} && echo {wanted} > {marker}", folder=marker.rsplit("/", 1)[0], wanted=wanted,
                     marker=marker)
