"""Files put in place atomically, one way (issue #26): a reader, a crash or a power cut never leaves
half a file. Every rigkit module that replaces a file calls this one (``tests/unit/test_atomic.py``
fails when another calls ``os.replace``, ``os.rename`` or ``fsync``); the control side uses it too.

:func:`write_bytes` / :func:`write_text`: a temporary file in the same folder (``.<name>.<random>.tmp``,
0600 while it is written), the data, ``fsync``, the owner and mode, ``rename`` over the target, then
``fsync`` of the folder so the rename itself survives a power cut. :func:`move` puts an existing file
(a verified download, a config moved aside) in place the same way.
"""

from __future__ import annotations

import os
from pathlib import Path


def _ids(owner: str | tuple[int, int]) -> tuple[int, int]:
    """``(uid, gid)`` of ``owner``: ``"user:group"`` (``"user"`` alone: its group of the same name) or
    ``(uid, gid)``. Raises KeyError for an unknown user or group."""
    if isinstance(owner, tuple):
        return int(owner[0]), int(owner[1])
    import grp
    import pwd

    user, _, group = owner.partition(":")
    return pwd.getpwnam(user).pw_uid, grp.getgrnam(group or user).gr_gid


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes(path: str | os.PathLike, data: bytes, mode: int = 0o644, owner: str | tuple[int, int] | None = None,
                make_parents: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically with ``mode`` and, when given, ``owner`` (``"user:group"``
    or ``(uid, gid)``; None: the writer's). Creates the parent folder unless ``make_parents`` is False.
    Returns the path. Raises OSError (nothing replaced, the temporary file removed), KeyError for an
    unknown owner."""
    import tempfile  # here, not at the top: it costs every agent start (shutil, random: issue 67)

    p = Path(path)
    if make_parents:
        p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            if owner is not None:
                os.fchown(fd, *_ids(owner))
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_folder(p.parent)
    return p


def write_text(path: str | os.PathLike, text: str, mode: int = 0o644, owner: str | tuple[int, int] | None = None,
               make_parents: bool = True) -> Path:
    """:func:`write_bytes` of ``text`` as UTF-8."""
    return write_bytes(path, text.encode(), mode, owner, make_parents)


def move(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Put the existing file ``src`` at ``dest`` (same file system) atomically: its data synced, the
    rename, the folder synced. Returns ``dest``. Raises OSError."""
    s, d = Path(src), Path(dest)
    fd = os.open(s, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(s, d)
    _sync_folder(d.parent)
    return d
