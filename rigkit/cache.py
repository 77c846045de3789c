"""The control machine's download cache: pinned external artefacts, fetched by URL and kept by
sha256 (DESIGN.md "Operator-supplied values": a cache folder that an option or ``RIGKIT_CACHE`` overrides)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

import requests

from rigkit.common import atomic


class ArtefactUnavailable(RuntimeError):
    """An artefact could not be fetched, or its sha256 is not the pinned one."""


def cache_dir(option: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: ``option``, else ``$RIGKIT_CACHE``, else ``~/.cache/rigkit``."""
    return Path(option or os.environ.get("RIGKIT_CACHE") or Path.home() / ".cache" / "rigkit")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_pinned(url: str, sha256: str, name: str, cache: Path | None = None, timeout_s: float = 30.0) -> Path:
    """Return the cached file ``<cache>/<sha256>/<name>``, fetching ``url`` first when absent.

    ``url`` is ``https://``/``http://`` (requests) or ``file://``. The content must hash to
    ``sha256`` (hex) or nothing is cached. Raises :class:`ArtefactUnavailable` naming the URL and, on a
    mismatch, both hashes.
    """
    target = cache_dir(cache) / "artefacts" / sha256 / name
    if target.is_file() and sha256_file(target) == sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    parts = urlsplit(url)
    try:
        if parts.scheme == "file":
            data = Path(url2pathname(parts.path)).read_bytes()
        elif parts.scheme in ("http", "https"):
            resp = requests.get(url, timeout=timeout_s)
            resp.raise_for_status()
            data = resp.content
        else:
            raise ArtefactUnavailable(f"{url}: unsupported URL scheme {parts.scheme!r} (https, http or file)")
    except (OSError, requests.RequestException) as exc:
        raise ArtefactUnavailable(f"could not fetch {url}: {exc}") from exc
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise ArtefactUnavailable(f"{url}: sha256 {actual} does not match the pinned {sha256}")
    return atomic.write_bytes(target, data)
