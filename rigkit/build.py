"""This rigkit's build: what the deploy's generations record as ``rigkit_version`` and what the
deploy's probe path (:mod:`rigkit.deploy.converged`) and the verdict memory of ``rigkit deploy``'s
validators (:func:`rigkit.render.checks.run_checks`) ask. ``__version__`` alone stays ``0.1.0``
across every change of the code; the build changes with any of it."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from rigkit import __version__

#: What of the project decides what the deploy does and how its files are judged: its code, roles
#: and templates (:func:`rigkit_build` hashes them).
BUILD_PARTS = ("deploy.py", "roles", "rigkit", "templates")


@functools.lru_cache(maxsize=1)
def rigkit_build() -> str:
    """``"<__version__>+src.<12 hex>"``, the hex a sha256 over every file of :data:`BUILD_PARTS`
    under the project root (relative path and content, sorted; ``__pycache__`` and ``*.pyc`` left
    out), so any change of the code, the roles or the templates is another build. ~200 files, a few ms."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for part in BUILD_PARTS:
        top = root / part
        found = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else []
        for path in found:
            if "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{__version__}+src.{h.hexdigest()[:12]}"
