"""Pins from the Arch Linux Archive: a series (``610.57``) → the newest full version of it there
(``610.57.04-1``), its package file's URL, its ``.sig`` when the archive has one, and its sha256 from the
archive's dated repository database — no package file is downloaded.

Sources and their formats:

- the package listing ``<archive>/packages/<first letter>/<name>/`` (wiki "Arch Linux Archive"): an
  nginx ``autoindex`` page, one ``<a href="FILE">…</a>  DD-Mon-YYYY HH:MM  SIZE`` line per file; files
  ``<name>-<[epoch:]pkgver>-<pkgrel>-<arch>.pkg.tar.zst`` (``.xz`` before 2020) and ``….sig`` beside;
- the dated repositories ``<archive>/repos/YYYY/MM/DD/<repo>/os/x86_64/<repo>.db``: the repository as
  it was that day, a tar archive (gzip) of ``<name>-<ver>/desc`` files written by ``repo-add``
  (pacman's ``scripts/repo-add.sh.in``, ``write_db_entry``) and read by libalpm (``lib/libalpm/be_sync.c``,
  ``sync_db_read``): blocks ``%KEY%`` then value lines, ended by a blank line — ``%FILENAME%``,
  ``%NAME%``, ``%VERSION%``, ``%CSIZE%``, ``%SHA256SUM%``, ``%PGPSIG%`` and others. A file listed on day
  D is in that day's snapshot or, when uploaded after it was taken, in the next days'.

Versions are ordered as pacman orders them: :func:`vercmp` is libalpm's ``alpm_pkg_vercmp``
(``lib/libalpm/version.c``), held to pacman's own ``vercmp`` tool by a test. The series rule is
:func:`rigkit.common.versions.agrees` (``610.57`` covers ``610.57.04-1``, not ``610.60.02-1``).
"""

from __future__ import annotations

import datetime as dt
import functools
import io
import re
import tarfile
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

from rigkit.common import versions
from rigkit.lockfile.errors import ResolveError

#: The repositories a package of the archive may be in, in the order the dated databases are tried.
REPOS = ("extra", "core", "multilib")
#: Days after a file's listing date whose snapshots are searched for it (uploaded after that day's one).
SNAPSHOT_DAYS = 3
_PKGFILE = re.compile(r"^(?P<rest>.+)-(?P<arch>x86_64|any)\.pkg\.tar\.(?:zst|xz|gz)$")
_DATE = re.compile(r"(\d{2}-[A-Z][a-z]{2}-\d{4}) \d{2}:\d{2}")


# --------------------------------------------------------------------------------------------
# pacman's version order


def _alnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


def _rpmvercmp(a: str, b: str) -> int:
    """libalpm's ``rpmvercmp`` (``lib/libalpm/version.c``), line for line: runs of ASCII digits or
    letters compared in turn, separators of different lengths deciding, a numeric run beating an alpha
    one, numbers compared without leading zeros; at the end a remaining alpha part loses to nothing
    (``1.0a`` < ``1.0``) and any other remaining part wins."""
    if a == b:
        return 0
    one = p1 = 0
    two = p2 = 0
    while one < len(a) and two < len(b):
        while one < len(a) and not _alnum(a[one]):
            one += 1
        while two < len(b) and not _alnum(b[two]):
            two += 1
        if not (one < len(a) and two < len(b)):
            break
        if (one - p1) != (two - p2):
            return -1 if (one - p1) < (two - p2) else 1
        p1, p2 = one, two
        isnum = a[p1].isdigit()
        kind = (lambda c: c.isascii() and c.isdigit()) if isnum else (lambda c: c.isascii() and c.isalpha())
        while p1 < len(a) and kind(a[p1]):
            p1 += 1
        while p2 < len(b) and kind(b[p2]):
            p2 += 1
        if two == p2:
            return 1 if isnum else -1
        sa, sb = a[one:p1], b[two:p2]
        if isnum:
            sa, sb = sa.lstrip("0"), sb.lstrip("0")
            if len(sa) != len(sb):
                return 1 if len(sa) > len(sb) else -1
        if sa != sb:
            return -1 if sa < sb else 1
        one, two = p1, p2
    ra, rb = a[one:], b[two:]
    if not ra and not rb:
        return 0
    if (not ra and not (rb[:1].isascii() and rb[:1].isalpha())) or (ra[:1].isascii() and ra[:1].isalpha()):
        return -1
    return 1


def _split_evr(evr: str) -> tuple[str, str, str | None]:
    """libalpm's ``parseEVR``: an epoch only when the leading digits end at ``:`` (empty → ``0``), the
    release after the last ``-`` that follows them (None without one)."""
    s = 0
    while s < len(evr) and evr[s].isascii() and evr[s].isdigit():
        s += 1
    se = evr.rfind("-", s)
    if s < len(evr) and evr[s] == ":":
        epoch, version_start = evr[:s] or "0", s + 1
    else:
        epoch, version_start = "0", 0
    if se != -1:
        return epoch, evr[version_start:se], evr[se + 1:]
    return epoch, evr[version_start:], None


def vercmp(a: str, b: str) -> int:
    """-1, 0 or 1 as pacman orders the versions ``a`` and ``b`` (``[epoch:]pkgver[-pkgrel]``):
    libalpm's ``alpm_pkg_vercmp`` — epochs first, then ``pkgver`` and, when both have one, ``pkgrel``,
    each by :func:`_rpmvercmp`. Never raises."""
    if a == b:
        return 0
    ea, va, ra = _split_evr(a)
    eb, vb, rb = _split_evr(b)
    out = _rpmvercmp(ea, eb) or _rpmvercmp(va, vb)
    if out == 0 and ra is not None and rb is not None:
        out = _rpmvercmp(ra, rb)
    return out


def newest(candidates: list[str]) -> str:
    """The newest of pacman versions ``candidates`` (:func:`vercmp`); raises ``ValueError`` when empty."""
    if not candidates:
        raise ValueError("no versions")
    best = candidates[0]
    for v in candidates[1:]:
        if vercmp(v, best) > 0:
            best = v
    return best


# --------------------------------------------------------------------------------------------
# the archive's pages and databases


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str]] = []  # (href, text after the link up to the next one)
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")
            if self._href is not None:
                self.rows.append((self._href, ""))

    def handle_data(self, data: str) -> None:
        if self.rows:
            href, text = self.rows[-1]
            self.rows[-1] = (href, text + data)


def parse_listing(html: str) -> dict[str, dt.date | None]:
    """An autoindex page → ``{file name: its date}`` (the date nginx prints after the link, None when the
    page shows none), hrefs URL-decoded; parent and sub-folder links left out."""
    from urllib.parse import unquote

    parser = _Links()
    parser.feed(html)
    out: dict[str, dt.date | None] = {}
    for href, text in parser.rows:
        name = unquote(href)
        if "/" in name or name in ("", ".", ".."):
            continue
        m = _DATE.search(text)
        out[name] = dt.datetime.strptime(m.group(1), "%d-%b-%Y").date() if m else None
    return out


def package_files(listing: dict[str, Any], package: str) -> dict[str, str]:
    """``{[epoch:]pkgver-pkgrel: file name}`` of ``package``'s x86_64/any package files in a listing
    (``<name>-<ver>-<rel>-<arch>.pkg.tar.*``; another package whose name starts the same is not one)."""
    out: dict[str, str] = {}
    for name in listing:
        m = _PKGFILE.match(name)
        if not m or not m.group("rest").startswith(package + "-"):
            continue
        version = m.group("rest")[len(package) + 1:]
        if version.count("-") == 1 and versions.release(version):
            out.setdefault(version, name)
    return out


def parse_repo_db(data: bytes) -> dict[str, dict[str, list[str]]]:
    """A sync database (``<repo>.db``: tar, any compression ``tarfile`` reads) → ``{%FILENAME%: desc}``,
    each desc ``{KEY: [value lines]}`` as libalpm's ``sync_db_read`` reads the ``desc`` files. Raises
    ``ValueError`` for a file that is no such archive."""
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except tarfile.TarError as exc:
        raise ValueError(f"not a repository database ({exc})") from None
    out: dict[str, dict[str, list[str]]] = {}
    with tar:
        for member in tar:
            if not member.isfile() or not member.name.endswith("/desc"):
                continue
            desc: dict[str, list[str]] = {}
            key = None
            for line in tar.extractfile(member).read().decode("utf-8", "replace").splitlines():
                if line.startswith("%") and line.endswith("%") and len(line) > 2:
                    key = line[1:-1]
                    desc[key] = []
                elif not line:
                    key = None
                elif key is not None:
                    desc[key].append(line)
            if desc.get("FILENAME"):
                out[desc["FILENAME"][0]] = desc
    return out


Get = Callable[[str], "tuple[int, bytes]"]


def repos_url(archive_url: str) -> str:
    """The dated repositories' root beside the packages' one: ``…/packages`` → ``…/repos``."""
    base = archive_url.rstrip("/")
    return (base[: -len("/packages")] if base.endswith("/packages") else base) + "/repos"


class Archive:
    """The Arch Linux Archive at ``archive_url`` (``https://archive.archlinux.org/packages``), read
    through ``get(url) -> (HTTP status, body)``; dated databases are read once per run."""

    def __init__(self, archive_url: str, get: Get):
        self.url = archive_url.rstrip("/")
        self.repos = repos_url(archive_url)
        self._get = get
        self._dbs: dict[str, dict[str, dict[str, list[str]]] | None] = {}

    def listing(self, entry: str, package: str) -> tuple[str, dict[str, dt.date | None]]:
        """The package's folder URL and its files (:func:`parse_listing`); raises :class:`ResolveError`."""
        url = f"{self.url}/{package[0]}/{package}/"
        status, body = self._get(url)
        if status == 404:
            raise ResolveError(f"{entry}: the archive has no package {package!r} ({url}: HTTP 404)")
        if status != 200:
            raise ResolveError(f"{entry}: {url}: HTTP {status}")
        return url, parse_listing(body.decode("utf-8", "replace"))

    def _db(self, day: dt.date, repo: str) -> dict[str, dict[str, list[str]]] | None:
        url = f"{self.repos}/{day:%Y/%m/%d}/{repo}/os/x86_64/{repo}.db"
        if url not in self._dbs:
            status, body = self._get(url)
            try:
                self._dbs[url] = parse_repo_db(body) if status == 200 else None
            except ValueError as exc:
                raise ResolveError(f"{url}: {exc}") from None
        return self._dbs[url]

    def find_in_db(self, filename: str, day: dt.date | None) -> tuple[str, dict[str, list[str]]] | None:
        """``(database path under the archive, desc)`` of the dated database that lists ``filename``
        (``%FILENAME%``), searched from ``day`` over :data:`SNAPSHOT_DAYS` more days; None if none does."""
        if day is None:
            return None
        for offset in range(SNAPSHOT_DAYS + 1):
            d = day + dt.timedelta(days=offset)
            for repo in REPOS:
                db = self._db(d, repo)
                if db and filename in db:
                    return f"repos/{d:%Y/%m/%d}/{repo}/os/x86_64/{repo}.db", db[filename]
        return None

    def resolve(self, entry: str, package: str, want: str, series_key: str) -> dict[str, Any]:
        """One pin: ``want`` is a series (``610.57``, ``13.3``: the newest full version in it), a version
        without pkgrel (``610.57.04``: its newest pkgrel) or an exact pacman version (``610.57.04-1``,
        verified to exist). Returns the lock entry ``{"want", "version", "file", "url", "sha256",
        "csize", "sig_url", "repo_db", "available"}`` (``available``: every version of the series there,
        oldest first). Raises :class:`ResolveError` naming ``entry``, the series and the key that
        declares it (``series_key``) when the archive lacks it, or when no dated database lists the file."""
        url, listing = self.listing(entry, package)
        files = package_files(listing, package)
        exact = "-" in want
        matching = [v for v in files if (v == want if exact else versions.agrees(want, v))]
        if not matching:
            have = sorted(files, key=_order_key)
            shown = ", ".join(have[-6:]) or "none"
            what = f"version {want}" if exact else f"series {want}"
            raise ResolveError(f"{entry}: the archive has no {package} in the {what} (declared by {series_key}; {url} "
                               f"lists {shown}); declare a series or version it has")
        matching.sort(key=_order_key)
        version = matching[-1]
        filename = files[version]
        found = self.find_in_db(filename, listing.get(filename))
        if found is None:
            raise ResolveError(f"{entry}: {filename} is in {url} but in no dated repository database of "
                               f"{self.repos}/ from {listing.get(filename)} on ({', '.join(REPOS)}): its sha256 "
                               "cannot be read")
        db_path, desc = found
        sha = (desc.get("SHA256SUM") or [""])[0]
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ResolveError(f"{entry}: {db_path} gives {filename} no %SHA256SUM%")
        return {"want": want, "version": version, "file": filename, "url": url + filename, "sha256": sha,
                "csize": int((desc.get("CSIZE") or ["0"])[0]),
                "sig_url": url + filename + ".sig" if filename + ".sig" in listing else None,
                "repo_db": db_path, "available": matching}


_order_key = functools.cmp_to_key(vercmp)
