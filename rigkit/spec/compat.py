"""Which versions work together, as data (issue #45), read by :mod:`rigkit.spec.validate`:

- :data:`CUDA_MAJOR_MIN_DRIVER` — each CUDA major and the lowest driver branch that runs it. Source:
  NVIDIA, *CUDA Toolkit Release Notes* §"CUDA Driver", Table 2 "CUDA Toolkit and Minimum Required
  Driver Version for CUDA Minor Version Compatibility" (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/,
  also *CUDA Compatibility* Table 1): CUDA 13.x ≥ 580, 12.x ≥ 525, 11.x ≥ 450 (Linux). A driver runs
  every major whose minimum it meets (backward compatibility), so its highest CUDA major is
  :func:`highest_cuda_major`.
- :data:`KERNEL_HEADERS` — Arch kernels and the headers package DKMS builds the module against
  (``nvidia-open-dkms`` "needs the headers for every installed kernel", notes/nvidia-arch.md §1; the
  Arch wiki, *NVIDIA* and *DKMS*): a kernel pinned under DKMS needs its headers pinned at the same version.
- :data:`DRIVER_PACKAGES` / :data:`DRIVER_COMPANIONS` — packages of the driver's pkgbase
  (``nvidia-utils``: opencl-nvidia, nvidia-open-dkms; multilib ``lib32-nvidia-utils``,
  ``lib32-opencl-nvidia``; ``nvidia-settings``), which carry the driver version
  (notes/nvidia-arch.md §1, "a module and a library of two drivers: Driver/library version mismatch").

Versions are compared through :mod:`rigkit.common.versions`, the one version function.
"""

from __future__ import annotations

from rigkit.common import versions

#: CUDA major → the lowest driver branch (first version component) that runs it (NVIDIA release notes, Table 2).
CUDA_MAJOR_MIN_DRIVER: dict[int, int] = {13: 580, 12: 525, 11: 450}
#: Arch kernel package → its headers package (DKMS builds against them).
KERNEL_HEADERS: dict[str, str] = {
    "linux": "linux-headers",
    "linux-lts": "linux-lts-headers",
    "linux-zen": "linux-zen-headers",
    "linux-hardened": "linux-hardened-headers",
}
#: Flavours that build the module with DKMS (need headers); the others are prebuilt for one kernel.
DKMS_FLAVOURS = frozenset({"nvidia-open-dkms"})
#: Driver packages always pinned with the flavour, at the flavour's driver version.
DRIVER_PACKAGES = ("nvidia-utils", "opencl-nvidia")
#: Driver packages pinned only when installed (32-bit and tools), at the flavour's driver version when they are.
DRIVER_COMPANIONS = ("lib32-nvidia-utils", "lib32-opencl-nvidia", "nvidia-settings")


def highest_cuda_major(driver: str) -> int | None:
    """The highest CUDA major ``driver`` (``"610.57"``, ``"610.57.04"``) runs, from
    :data:`CUDA_MAJOR_MIN_DRIVER`; None below the table's lowest branch. Raises
    :class:`rigkit.common.versions.VersionError` for a version that is not dotted numbers."""
    branch = versions.components(driver)[0]
    fits = [major for major, lowest in CUDA_MAJOR_MIN_DRIVER.items() if branch >= lowest]
    return max(fits) if fits else None


def cuda_problem(driver: str, cuda: str) -> str | None:
    """Why driver ``driver`` cannot run CUDA series ``cuda`` (``"13.3"``), or None."""
    major = versions.components(cuda)[0]
    top = highest_cuda_major(driver)
    if major not in CUDA_MAJOR_MIN_DRIVER:
        known = ", ".join(f"{m}.x ≥ {d}" for m, d in sorted(CUDA_MAJOR_MIN_DRIVER.items()))
        return f"CUDA {major}.x is not in the compatibility table ({known}; NVIDIA's CUDA release notes, Table 2)"
    if top is None or major > top:
        return (f"driver {driver} runs CUDA up to {top}.x" if top else f"driver {driver} is below every CUDA major") + \
               f"; CUDA {major}.x needs driver ≥ {CUDA_MAJOR_MIN_DRIVER[major]} (NVIDIA's CUDA release notes, Table 2)"
    return None


def header_problems(flavour: str, pins: dict[str, str]) -> list[tuple[str, str]]:
    """``(package, why)`` for each kernel pinned under a DKMS ``flavour`` without its headers at the same
    version (:data:`KERNEL_HEADERS`), and each headers pin whose kernel is pinned at another version."""
    if flavour not in DKMS_FLAVOURS:
        return []
    out = []
    for kernel, headers in KERNEL_HEADERS.items():
        if kernel not in pins:
            continue
        if headers not in pins:
            out.append((kernel, f"pinned without {headers}: DKMS builds the driver module against the headers of "
                                f"each kernel, so pin {headers} at {pins[kernel]} too"))
        elif pins[headers] != pins[kernel]:
            out.append((headers, f"not the pinned {kernel} {pins[kernel]}: DKMS needs the headers of that very kernel"))
    return out
