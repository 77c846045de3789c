"""Packages and pins: the pins held first (rigkit's IgnorePkg file, Include'd from pacman.conf), then
what the rig needs installed with one ``pacman -Syu --needed`` (never ``-Sy`` alone: Arch does not
support partial upgrades), then the driver, CUDA and kernel packages at their pinned versions from the
archive."""

from __future__ import annotations

from pyinfra.api import deploy

from rigkit import paths
from rigkit.operations.pacman import pacman_include, pacman_pins, synced_packages
from rigkit.render.declared_state import REPO_PACKAGES
from rigkit.render.files import RenderedFile
from rigkit.spec.model import RigSpec
from roles import put_rendered


@deploy("Pins")
def pins(spec: RigSpec, rendered: dict[str, RenderedFile]):
    """Hold the pins (rigkit's ``IgnorePkg`` file, ``Include``'d from ``[options]``), install what is
    missing with ``pacman -Syu --needed``, then ``pacman -U`` the pins from ``arch_archive_url`` together."""
    assert spec.pacman_pins is not None  # preflight refuses an unset value
    put_rendered(rendered, paths.PINS_CONF, name="Hold the pinned packages: rigkit's pins file")
    pacman_include(name="Hold the pinned packages: Include rigkit's pins file from [options]")
    synced_packages(name="Install docker, compose, buildx and the NVIDIA container toolkit (pacman -Syu --needed)",
                    packages=list(REPO_PACKAGES))
    return pacman_pins(name="Install the pinned packages from the archive",
                       pins=spec.pacman_pins, archive=spec.arch_archive_url, locked=locked_pins(spec))


def locked_pins(spec: RigSpec) -> dict[str, dict]:
    """The lock's ``pins`` entries for ``spec`` (at :func:`rigkit.lockfile.path.lock_file_path`); empty when the
    lock has none (a generation's spec from before the lock: its pins come from the archive's URLs)."""
    from rigkit import hints
    from rigkit.lockfile.document import load_lock
    from rigkit.lockfile.path import lock_file_path

    try:
        return load_lock(lock_file_path(spec, hints.inventory())).get("pins") or {}
    except (OSError, ValueError):
        return {}
