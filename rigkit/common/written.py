"""What rigkit wrote last to each file it writes on the host, one way (issue 61): whoever writes — the
deploy's :func:`rigkit.operations.config.rendered_file`, the wire-in's companions
(:func:`rigkit.deploy.wirein.install_declared_companions`), the agent's activation and rollback
(:mod:`rigkit.host.activate`) — records the sha256 of what it wrote here, so a file whose content is
not its record was changed by someone else ("edited by hand?") and only then is backed up.

The record of ``path`` is the file ``<state dir>/written/<sha1 of path>`` (``/var/lib/rigkit/written/…``
on the rig; the host reads its state folder from the host config), holding the content's sha256 (64 hex
digits) and a newline. Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from pathlib import Path

DIR_NAME = "written"


def marker(path: str, state_dir: str) -> str:
    """The record of ``path`` (absolute): ``<state_dir>/written/<sha1 hex of path>``."""
    return f"{state_dir.rstrip('/')}/{DIR_NAME}/{hashlib.sha1(path.encode()).hexdigest()}"


def parse(text: str | None) -> str | None:
    """The sha256 a record's ``text`` holds; None for no record (None or blank)."""
    first = (text or "").strip().split("\n", 1)[0].strip()
    return first or None


def shell(path: str, sha256: str, state_dir: str) -> str:
    """A POSIX shell command that records ``sha256`` as what rigkit wrote to ``path`` (every value
    quoted): for a write made by a remote script."""
    rec = marker(path, state_dir)
    return (f"mkdir -p {shlex.quote(rec.rsplit('/', 1)[0])} && "
            f"printf '%s\\n' {shlex.quote(sha256)} > {shlex.quote(rec)}")


def record(path: str | os.PathLike, state_dir: str | os.PathLike) -> str | None:
    """Record the current content of ``path`` as rigkit's (host side, after rigkit wrote it, under the
    host lock). Returns its sha256; None when ``path`` does not exist (nothing recorded). Raises OSError."""
    from rigkit.common import atomic

    p = Path(path)
    try:
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None
    rec = Path(marker(str(p), str(state_dir)))
    rec.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(rec, digest + "\n", 0o644)
    return digest


def recorded(path: str | os.PathLike, state_dir: str | os.PathLike) -> str | None:
    """The sha256 rigkit recorded for ``path`` (None: no record). Raises OSError but for a missing record."""
    try:
        return parse(Path(marker(str(path), str(state_dir))).read_text())
    except FileNotFoundError:
        return None
