"""The one rule for NVIDIA driver and CUDA versions: every comparison of a declared version with
what a host reports goes through :func:`agrees` (or :func:`supports` for the driver's CUDA level).

Shapes, and where each comes from:

- declared (the spec): ``nvidia_driver_version`` is the series the seeds name (``"610.57"``) or the
  full version (``"610.57.04"``); ``cuda_version`` the toolkit's series (``"13.3"``).
  :func:`declared` checks the shape.
- reported: the full version, everywhere a real driver names itself: ``nvidia-smi --query-gpu=
  driver_version`` (and ``kmd_version`` from 610), ``nvidia-smi --version`` (``KMD version :
  610.57.04``), the header table, ``-q`` (``Driver Version : 610.57.04 [Deprecated; …]``: the version
  before the note; rigkit reads the query field, not this line), the loaded
  module (``/sys/module/nvidia/version``) and ``dkms status`` (``nvidia/610.57.04, …``): all
  ``610.57.04`` on a 610.57 (``data/gpu-captures/`` beside the checkout, SOURCES.md there).
- pacman versions (PKGBUILD(5), pacman(8)): ``[epoch:]pkgver-pkgrel`` — ``610.57.04-1``,
  ``1:610.57.04-2``, ``13.3.1-1``, a pkgrel may be ``1.1``; the epoch and the pkgrel never change
  which driver or toolkit it is (:func:`release` drops them).
- the driver's CUDA level: ``CUDA Version: 13.1`` (to driver 59x), ``CUDA UMD Version: 13.3``
  (from 610), always major.minor (:func:`rigkit.common.gpu.driver_cuda` reads it).

The rule: versions compare by their dotted numeric components (numbers, so ``04`` is 4), and a
declared version agrees with a reported one when its components are the first components of the
reported one. ``610.57`` agrees with ``610.57.04`` and ``610.57.04-1``; ``610.57.04`` agrees with
``610.57.04`` only; ``610.57`` does not agree with ``610.60.02``, nor ``610.5`` with ``610.57.04``
(components, not characters), nor ``610.57.04`` with ``610.57`` (a driver reporting ``610.57`` is a
driver whose full version is ``610.57``, not ``610.57.04``).
"""

from __future__ import annotations

import re

#: ``[epoch:]`` before a pacman version.
_EPOCH = re.compile(r"^\d+:")
#: ``-pkgrel`` after one (``-1``, ``-1.1``).
_PKGREL = re.compile(r"-\d+(?:\.\d+)?$")
_DOTTED = re.compile(r"^\d+(?:\.\d+)*$")


class VersionError(ValueError):
    """Text that is no version of the shapes above; the message quotes it and says what was expected."""


def release(text: str | None) -> str | None:
    """``text`` without a pacman epoch and pkgrel, as text: ``"1:610.57.04-2"`` → ``"610.57.04"``,
    ``"13.3.1-1"`` → ``"13.3.1"``, ``"610.57.04"`` unchanged (surrounding blanks dropped); None for
    None or blank. Not checked: :func:`components` is."""
    if text is None or not text.strip():
        return None
    return _PKGREL.sub("", _EPOCH.sub("", text.strip()))


def components(text: str) -> tuple[int, ...]:
    """The numeric components of a version of any shape above (:func:`release` first):
    ``"1:610.57.04-1"`` → ``(610, 57, 4)``. Raises :class:`VersionError` for anything else (empty,
    ``"610.57.x"``, ``"610..57"``, ``"[N/A]"``)."""
    rel = release(text) if isinstance(text, str) else None
    if rel is None or not _DOTTED.match(rel):
        raise VersionError(f"{text!r} is not a version: dotted numbers such as 610.57 or 610.57.04, "
                           "optionally as a pacman version [epoch:]pkgver-pkgrel")
    return tuple(int(p) for p in rel.split("."))


def agrees(declared: str, reported: str | None) -> bool:
    """Whether ``reported`` (a full version as a host reports it, or a pacman version) is the
    ``declared`` version (the spec's series or full version): the declared components are the first
    components of the reported ones (the rule above; epoch and pkgrel ignored on both sides).
    Never raises: None or text that is no version (``[N/A]``, an empty module file) does not agree."""
    try:
        want, got = components(declared), components(reported)  # type: ignore[arg-type]
    except VersionError:
        return False
    return got[: len(want)] == want


def same(a: str | None, b: str | None) -> bool:
    """Whether ``a`` and ``b`` name one version (the same components; epoch and pkgrel ignored):
    ``"610.57.04-1"`` and ``"610.57.04-2"`` do, ``"610.57-1"`` and ``"610.57.04-1"`` do not. For
    two full versions, e.g. the driver packages' pins, which must be one driver. Never raises."""
    return a is not None and b is not None and agrees(a, b) and agrees(b, a)


def supports(level: str | None, declared: str) -> bool:
    """Whether the driver's CUDA level ``level`` (``"13.3"``, major.minor as the driver prints it)
    is at least the ``declared`` CUDA (``cuda_version``); compared on as many components as the
    level has (a driver at ``13.3`` supports ``13.3.1``), numerically (``13.10`` > ``13.3``). Never
    raises: None or text that is no version does not."""
    try:
        have, want = components(level), components(declared)  # type: ignore[arg-type]
    except VersionError:
        return False
    return have >= want[: len(have)]


def declared(text: str, most: int) -> str:
    """``text`` itself when it is a version the operator may declare: 2 to ``most`` dotted numbers,
    no epoch, no pkgrel (``"610.57"``, ``"610.57.04"`` with ``most`` 3; ``"13.3"`` with ``most`` 2).
    Raises :class:`VersionError` naming the shapes allowed (the spec's models call it; their error names
    the key and the value)."""
    if not isinstance(text, str) or not _DOTTED.match(text) or not 2 <= text.count(".") + 1 <= most:
        shapes = "the series, e.g. 610.57, or the full version, e.g. 610.57.04" if most >= 3 else "the series, e.g. 13.3"
        raise VersionError(f"not a version to declare: {shapes} (dotted numbers, no pkgrel)")
    return text
