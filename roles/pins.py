"""Pins: the driver, CUDA and kernel packages at their pinned versions, held by IgnorePkg."""

from __future__ import annotations

from pyinfra.api import deploy

from rigkit.operations.pacman import pacman_ignorepkg, pacman_pins
from rigkit.spec import RigSpec


@deploy("Pins")
def pins(spec: RigSpec):
    """``pacman -U`` the pins from ``arch_archive_url`` together, then hold them."""
    assert spec.pacman_pins is not None  # preflight refuses an unset value
    installed = pacman_pins(name="Install the pinned packages from the archive", pins=spec.pacman_pins,
                            archive=spec.arch_archive_url)
    pacman_ignorepkg(name="Hold the pinned packages with IgnorePkg in [options]", packages=list(spec.pacman_pins))
    return installed
