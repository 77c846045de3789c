"""Scratch folders that live as long as the process that made them, one way: :func:`folder` makes one under
the system's temporary folder (``tempfile.mkdtemp``: mode 0700, a fresh name) and removes it, with what it
holds, when that process exits (``atexit``). Every rigkit folder of the sort (a generation's or a bisect
combination's spec snapshot and lock, drift's copy of a held generation) is made here, so none is left
behind on the operator's control machine (``tests/unit/test_scratch.py`` fails on another
``tempfile.mkdtemp`` in rigkit/); a folder whose life is one block is a ``tempfile.TemporaryDirectory``.

The folders outlive the function that made them on purpose: a spec names its lock file by path and is read
again later in the run (pyinfra's operations, the confirmation, drift's comparison). A process started with
``fork`` inherits the exit handler but never removes its parent's folders: each is removed only by the
process id that made it. A process killed outright (SIGKILL) leaves its folders, as any temporary file.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

#: The folders made by :func:`folder` in this process, with the id of the process that made each.
_MADE: list[tuple[int, Path]] = []


def _remove() -> None:
    """Remove the folders this process made (at its exit)."""
    me = os.getpid()
    for pid, path in _MADE:
        if pid == me:
            shutil.rmtree(path, ignore_errors=True)


def folder(prefix: str) -> Path:
    """A new empty folder ``<temp dir>/<prefix><random>`` (``TMPDIR`` honoured), removed with its contents when
    this process exits. Raises ``OSError`` when it cannot be made."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if not _MADE:
        atexit.register(_remove)
    _MADE.append((os.getpid(), path))
    return path
