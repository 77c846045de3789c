"""Pinned packages: installed together from the Arch Linux Archive (``pacman -U``), held with
``IgnorePkg`` inside ``[options]`` of pacman.conf. :func:`archive_url` and
:func:`ensure_ignorepkg` are pure (unit tested alone)."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import OperationError, operation
from pyinfra.facts.files import FileContents
from pyinfra.operations import files

from rigkit.operations.facts import PacmanSyncDbs, PacmanVersions
from rigkit.host.pacman import ignorepkg_lines
from rigkit.operations.shell import argv


def archive_url(base: str, package: str, version: str, arch: str = "x86_64") -> str:
    """The Arch Linux Archive URL of one package file:
    ``<base>/<first letter>/<name>/<name>-<[epoch:]pkgver-pkgrel>-<arch>.pkg.tar.zst``
    (wiki "Arch Linux Archive"; epochs stay in the file name)."""
    return f"{base.rstrip('/')}/{package[0]}/{package}/{package}-{version}-{arch}.pkg.tar.zst"


@operation()
def pacman_pins(pins: dict[str, str], archive: str):
    """Install pinned package versions together from the archive with ``pacman -U``.

    + pins: ``{package: "[epoch:]pkgver-pkgrel"}``
    + archive: base URL laid out like the Arch Linux Archive (``.../packages``)

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
    yield argv("pacman", "-U", "--noconfirm", "--needed", *(archive_url(archive, p, v) for p, v in sorted(pins.items())))


@operation()
def synced_packages(packages: list[str]):
    """Install what is missing of ``packages`` the Arch way: one ``pacman -Syu --needed --noconfirm
    PKG...`` (sync *and* upgrade; Arch does not support partial upgrades, and a stale sync database
    names files the mirror no longer has), with the pins held by ``IgnorePkg`` (run
    :func:`pacman_ignorepkg` first). Nothing when every package is installed, however old the
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


def missing_packages(installed: dict[str, str | None], packages: list[str]) -> list[str]:
    """The names of ``packages`` the ``PacmanVersions`` fact says are not installed (pure)."""
    return [p for p in packages if not installed.get(p)]


def ensure_ignorepkg(lines: list[str], packages: list[str]) -> list[str]:
    """pacman.conf lines with ``packages`` held by ``IgnorePkg`` inside ``[options]``.

    The first ``IgnorePkg`` line of ``[options]`` (commented ``#IgnorePkg   =`` included) becomes
    ``IgnorePkg = <packages already held + ours>``; without one, the line is added at the end of
    ``[options]``. Packages the operator already holds are kept; other sections untouched.
    Raises ValueError when the file has no ``[options]`` section.
    """
    out = list(lines)
    start, end, entries = ignorepkg_lines(out)
    if start is None:
        raise ValueError("pacman.conf has no [options] section")
    held = [p for _, commented, pkgs in entries if not commented for p in pkgs]
    live = [i for i, commented, _ in entries if not commented]
    first = live[0] if live else (entries[0][0] if entries else None)
    wanted = list(dict.fromkeys(held + list(packages)))
    line = "IgnorePkg = " + " ".join(wanted)
    if first is None:
        insert_at = end
        while insert_at > start + 1 and not out[insert_at - 1].strip():
            insert_at -= 1
        out.insert(insert_at, line)
    else:
        out[first] = line
        # later uncommented IgnorePkg lines in [options] are folded into the first
        out = [ln for i, ln in enumerate(out) if i == first or i not in live]
    return out


@operation()
def pacman_ignorepkg(packages: list[str], path: str = "/etc/pacman.conf"):
    """Hold ``packages`` with ``IgnorePkg`` inside ``[options]`` of pacman.conf.

    + packages: package names, kept alongside any the operator already holds
    + path: pacman.conf

    pyinfra's ``files.line`` would append a missing line after the last repo section, where
    pacman ignores it (``notes/pyinfra.md``); this edits ``[options]`` itself.

    **Example:**

    .. code:: python

        from rigkit.operations.pacman import pacman_ignorepkg
        pacman_ignorepkg(
            name="Hold the pinned packages with IgnorePkg in [options]",
            packages=["nvidia-open-dkms", "nvidia-utils", "opencl-nvidia"],
            path="/etc/pacman.conf",
        )
    """
    lines = host.get_fact(FileContents, path=path)
    if lines is None:
        raise OperationError(f"{path} does not exist; is this an Arch host?")
    try:
        wanted = ensure_ignorepkg(lines, packages)
    except ValueError as exc:
        raise OperationError(f"{path}: {exc}") from None
    if wanted == lines:
        host.noop(f"IgnorePkg holds {' '.join(packages)}")
        return
    yield from files.put._inner(src=StringIO("\n".join(wanted) + "\n"), dest=path, user="root", group="root", mode="644")
