"""Pinned packages: installed together from the Arch Linux Archive (``pacman -U``), held by
rigkit's pins file ``Include``'d from ``[options]`` of pacman.conf (:func:`pacman_include`).
:func:`archive_url` is pure (unit tested alone)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import OperationError, operation
from pyinfra.facts.files import FileContents

from rigkit.operations.facts.pacman import PacmanSyncDbs, PacmanVersions
from rigkit import paths
from rigkit.common.pacman import options_include
from rigkit.render.declared_state import missing_packages  # the one definition (drift's too)
from rigkit.operations.config import _backup
from pyinfra.api import StringCommand

from rigkit.operations.shell import argv, script


def archive_url(base: str, package: str, version: str, arch: str = "x86_64") -> str:
    """The Arch Linux Archive URL of one package file:
    ``<base>/<first letter>/<name>/<name>-<[epoch:]pkgver-pkgrel>-<arch>.pkg.tar.zst``
    (wiki "Arch Linux Archive"; epochs stay in the file name)."""
    return f"{base.rstrip('/')}/{package[0]}/{package}/{package}-{version}-{arch}.pkg.tar.zst"


#: Where the pins' package files are downloaded and checked before ``pacman -U`` installs them.
PKG_CACHE = "/var/cache/rigkit/pkgs"


def verified_fetch(package: str, entry: dict, cache: str = PKG_CACHE) -> StringCommand:
    """The command that downloads one locked package file (``entry``: the lock's ``pins.<package>``,
    :class:`rigkit.lockfile.document.LockedPin`) into ``cache`` and checks it against the locked sha256 —
    a file already there and matching is not downloaded again; a mismatch removes the file and fails
    naming the lock entry, the file and both hashes. What rigkit adds to pacman: ``pacman -U`` of a
    file or URL checks the package's signature (``LocalFileSigLevel``/``RemoteFileSigLevel``) but no
    checksum, since no sync database is consulted for it (pacman(8), ``-U``; the ``%SHA256SUM%`` of a
    sync database is checked only for ``-S``): the lock's sha256 is the archive's dated database's."""
    return script(
        'f={cache}/{file}; if ! echo "{sha}  $f" | sha256sum -c --quiet --status 2>/dev/null; then '
        'curl -fsSL --retry 2 -o "$f.part" {url} && mv -f "$f.part" "$f"; fi; '
        'got=$(sha256sum "$f" 2>/dev/null | cut -d" " -f1); if [ "$got" != {sha} ]; then rm -f "$f"; '
        'echo "lock entry pins.{pkg}: {file} has sha256 ${{got:-(not downloaded)}}, the lock says {sha}; refusing to '
        'install it" >&2; exit 1; fi',
        cache=cache, file=entry["file"], sha=entry["sha256"], url=entry["url"], pkg=package)


@operation()
def pacman_pins(pins: dict[str, str], archive: str, locked: dict[str, dict] | None = None):
    """Install pinned package versions together from the archive with ``pacman -U``.

    + pins: ``{package: "[epoch:]pkgver-pkgrel"}``
    + archive: base URL laid out like the Arch Linux Archive (``.../packages``)
    + locked: the lock's ``pins`` entries (URL, file, sha256): each pin whose locked version is the one
      asked is downloaded to :data:`PKG_CACHE` and checked against the lock's sha256 first
      (:func:`verified_fetch`), then installed from there; a pin without one is installed from its
      archive URL as pacman fetches it

    Compares ``pacman -Q`` with the pins; when any differs, installs every pin in one
    transaction (coupled packages such as ``nvidia-utils``/``opencl-nvidia``/``cuda`` must move
    together) with ``--needed``. Never ``pacman -S`` a pinned name: with ``IgnorePkg`` it prompts
    and ``--noconfirm`` answers yes. A missing archive file fails with pacman's error naming its URL.

    **Example:**

    .. code:: python

        from rigkit.operations.pacman import pacman_pins
        pacman_pins(
            name="Install the pinned packages from the archive",
            pins={"nvidia-open-dkms": "610.57.04-1", "nvidia-utils": "610.57.04-1", "opencl-nvidia": "610.57.04-1"},
            archive="https://archive.archlinux.org/packages",
        )
    """
    installed = host.get_fact(PacmanVersions, packages=sorted(pins))
    differ = {p: (installed.get(p), v) for p, v in sorted(pins.items()) if installed.get(p) != v}
    if not differ:
        host.noop("pinned packages installed: " + ", ".join(f"{p} {v}" for p, v in sorted(pins.items())))
        return
    if not host.get_fact(PacmanSyncDbs):
        # a host that never synced cannot resolve the pins' dependencies (dkms, libglvnd...); never
        # `-Sy` alone (a partial upgrade, unsupported on Arch): sync and upgrade, the pins held
        yield "pacman -Syu --noconfirm"
    # the pins whose locked file is the version asked: fetched and checked first, installed from the cache
    checked = {p: e for p, e in (locked or {}).items() if p in pins and e.get("version") == pins[p]}
    if checked:
        yield argv("install", "-d", "-m", "0755", PKG_CACHE)
        for p, entry in sorted(checked.items()):
            yield verified_fetch(p, entry)
    yield argv("pacman", "-U", "--noconfirm", "--needed",
               *(f"{PKG_CACHE}/{checked[p]['file']}" if p in checked else archive_url(archive, p, v)
                 for p, v in sorted(pins.items())))


@operation()
def synced_packages(packages: list[str]):
    """Install what is missing of ``packages`` the Arch way: one ``pacman -Syu --needed --noconfirm
    PKG...`` (sync *and* upgrade; Arch does not support partial upgrades, and a stale sync database
    names files the mirror no longer has), with the pins held by ``IgnorePkg`` (run
    :func:`pacman_include` first). Nothing when every package is installed, however old the
    databases: a converged host runs nothing. An upgraded kernel or driver is the reboot gate's
    business (``roles/boot.py``).

    **Example:**

    .. code:: python

        from rigkit.operations.pacman import synced_packages
        synced_packages(
            name="Install docker, compose, buildx and the NVIDIA container toolkit",
            packages=["docker", "docker-compose", "docker-buildx", "nvidia-container-toolkit"],
        )
    """
    installed = host.get_fact(PacmanVersions, packages=sorted(packages))
    missing = missing_packages(installed, packages)
    if not missing:
        host.noop("installed: " + ", ".join(packages))
        return
    yield argv("pacman", "-Syu", "--noconfirm", "--needed", *missing)


@operation()
def pacman_include(include: str = paths.PINS_CONF, path: str = paths.PACMAN_CONF,
                   replaces: str = paths.LEGACY_PINS_CONF):
    """``Include = <include>`` once in ``[options]`` of pacman.conf: the one line rigkit adds to the
    operator's file, right after the first ``[options]`` header (``sed -i``: every other byte stays), the
    file backed up first and the backup named in the deploy's output. Where rigkit's earlier line
    ``Include = <replaces>`` stands in ``[options]``, that line becomes the new one (same place) and the
    file ``replaces`` is removed.

    + include: rigkit's pins file (:func:`rigkit.common.pacman.pins_conf`), installed before this runs
    + path: pacman.conf
    + replaces: where rigkit kept its pins file before (:data:`rigkit.paths.LEGACY_PINS_CONF`)

    The operator's ``IgnorePkg`` lines (globs, several lines, their own ``Include`` files) are left as
    they are: pacman adds every ``IgnorePkg`` it reads to one list, so the pins are held whatever the
    operator holds (read back with ``pacman-conf IgnorePkg``: the ``PacmanIgnorePkg`` fact, drift's too).
    Raises ``OperationError`` when pacman.conf is missing or has no ``[options]`` section.

    **Example:**

    .. code:: python

        from rigkit.operations.pacman import pacman_include
        pacman_include(
            name="Hold the pinned packages: Include rigkit's pins file from [options]",
            include="/etc/rigkit/pacman-pins.conf",
            path="/etc/pacman.conf",
            replaces="/etc/pacman.d/rigkit-pins.conf",
        )
    """
    lines = host.get_fact(FileContents, path=path)
    if lines is None:
        raise OperationError(f"{path} does not exist; is this an Arch host?")
    start, present = options_include(lines, include)
    if start is None:
        raise OperationError(f"{path} has no [options] section; pacman reads IgnorePkg only there")
    if present:
        host.noop(f"{path} includes {include} in [options]")
        return
    _, earlier = options_include(lines, replaces)
    if earlier:
        yield from _backup(path, f"rigkit's Include line in [options] becomes Include = {include}")
        yield argv(*replace_include_argv(replaces, include, path))
        yield argv("rm", "-f", replaces)
        return
    yield from _backup(path, f"rigkit adds one line to [options]: Include = {include}")
    yield argv(*include_argv(include, path))


def replace_include_argv(old: str, new: str, path: str) -> list[str]:
    """The command turning rigkit's line ``Include = <old>`` (as rigkit wrote it, whole line) into
    ``Include = <new>`` in pacman.conf ``path``, every other byte left as it is (GNU ``sed -i``)."""
    def bre(text: str) -> str:  # a basic regular expression matching ``text`` literally
        return "".join("\\" + c if c in "\\.*[]^$|" else c for c in text)
    replacement = "".join("\\" + c if c in "\\&|" else c for c in new)
    return ["sed", "-i", "-e", f"s|^Include = {bre(old)}$|Include = {replacement}|", path]


def include_argv(include: str, path: str) -> list[str]:
    """The command adding ``Include = <include>`` right after the first ``[options]`` header of
    pacman.conf ``path`` (the header :func:`rigkit.common.pacman.options_include` finds: the line
    stripped is ``[options]``), every other byte left as it is (GNU ``sed -i``, ``a`` command)."""
    header = r"^[[:space:]]*\[options\][[:space:]]*$"
    return ["sed", "-i", "-e", f"0,/{header}/{{/{header}/a Include = {include}", "-e", "}", path]
