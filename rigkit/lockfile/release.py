"""The llama-swap release: its tarball's URL → that tarball's sha256.

llama-swap releases are made by GoReleaser (upstream's ``.goreleaser.yaml`` at v250: archives
``{{ .ProjectName }}_{{ .Version }}_{{ .Os }}_{{ .Arch }}.tar.gz``, no ``checksum:`` section), so each
GitHub release carries GoReleaser's default checksums file beside the tarballs:
``{{ .ProjectName }}_{{ .Version }}_checksums.txt`` (goreleaser.com/customization/checksum, "Default"),
``sha256sum`` lines ``<64 hex>  <file name>``. The real URLs for v250:
``https://github.com/mostlygeek/llama-swap/releases/download/v250/llama-swap_250_linux_amd64.tar.gz``
and ``…/v250/llama-swap_250_checksums.txt``. When a server has no checksums file (HTTP 404), the
tarball itself is downloaded and hashed.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from rigkit.lockfile.errors import ResolveError, SourceUnreachable

_TARBALL = re.compile(r"^(?P<project>.+?)_(?P<version>[^_]+)_(?P<os>[a-z0-9]+)_(?P<arch>[a-z0-9]+)\.tar\.gz$")
_LINE = re.compile(r"^([0-9a-f]{64})\s+\*?(\S+)$")


def checksums_url(url: str) -> str | None:
    """GoReleaser's checksums file beside the tarball at ``url`` (None when the name is not
    ``<project>_<version>_<os>_<arch>.tar.gz``)."""
    base, _, name = url.rpartition("/")
    m = _TARBALL.match(name)
    return f"{base}/{m['project']}_{m['version']}_checksums.txt" if m else None


def parse_checksums(text: str) -> dict[str, str]:
    """``sha256sum`` output → ``{file name: sha256}`` (binary-mode ``*`` dropped; other lines ignored)."""
    out = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            out[m[2]] = m[1]
    return out


def resolve(entry: str, version: str, url: str, session: Any) -> dict[str, Any]:
    """The lock entry ``{"version", "url", "sha256", "from"}`` of the release tarball at ``url``;
    ``from`` is the checksums file's URL, or ``url`` itself when it was downloaded and hashed. Raises
    :class:`ResolveError` naming ``entry`` and the URL."""
    import requests

    def get(u: str, **kw: Any) -> Any:
        try:
            return session.get(u, timeout=60, **kw)
        except requests.RequestException as exc:
            raise SourceUnreachable(f"{entry}: {u}: unreachable ({type(exc).__name__})") from None

    name = url.rstrip("/").rpartition("/")[2]
    sums = checksums_url(url)
    if sums:
        resp = get(sums)
        if resp.status_code == 200:
            listed = parse_checksums(resp.text)
            if name not in listed:
                raise ResolveError(f"{entry}: {sums} lists no {name}")
            return {"version": version, "url": url, "sha256": listed[name], "from": sums}
        if resp.status_code != 404:
            raise ResolveError(f"{entry}: {sums}: HTTP {resp.status_code}")
    resp = get(url, stream=True)
    if resp.status_code != 200:
        raise ResolveError(f"{entry}: {url}: HTTP {resp.status_code}")
    h = hashlib.sha256()
    for chunk in resp.iter_content(1 << 20):
        h.update(chunk)
    return {"version": version, "url": url, "sha256": h.hexdigest(), "from": url}
