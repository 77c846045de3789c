"""One rule for driver and CUDA versions (issue 37, :mod:`rigkit.common.versions`): the spec names the
series (``610.57``) or the full version (``610.57.04``), a real driver reports the full version
everywhere (``data/gpu-captures/``), the Arch package adds a pkgrel and maybe an epoch. Properties of
the rule over generated versions, then the boot gate, drift and the spec's check with the spec saying
``610.57`` and the host reporting ``610.57.04`` (no reason) or ``610.60.02`` (a reason naming both)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rigkit.drift import compare
from rigkit.common import versions
from rigkit.render.declared_state import pinned_driver, reboot_reasons
from rigkit.spec.validate import spec_from_dict

COMPONENT = st.integers(0, 999)
#: A full driver version as NVIDIA writes it: 2 or 3 components (``550.78``, ``610.57.04``).
FULL = st.lists(COMPONENT, min_size=2, max_size=3)
EPOCH = st.one_of(st.just(""), st.integers(1, 9).map(lambda e: f"{e}:"))
PKGREL = st.one_of(st.just(""), st.integers(1, 20).map(lambda r: f"-{r}"),
                   st.tuples(st.integers(1, 9), st.integers(1, 9)).map(lambda r: f"-{r[0]}.{r[1]}"))


def text(parts: list[int], width: int = 0) -> str:
    """``[610, 57, 4]`` → ``"610.57.04"`` (``width`` pads the components after the first, as NVIDIA's
    ``.04``)."""
    return ".".join([str(parts[0]), *(str(p).zfill(width) for p in parts[1:])])


@given(FULL, st.sampled_from([0, 2]), EPOCH, PKGREL)
def test_agreement_is_reflexive_and_blind_to_epoch_and_pkgrel(parts, width, epoch, pkgrel):
    v = text(parts, width)
    assert versions.agrees(v, v)
    assert versions.agrees(v, f"{epoch}{v}{pkgrel}")
    assert versions.same(v, f"{epoch}{v}{pkgrel}")
    assert versions.release(f"{epoch}{v}{pkgrel}") == v


@given(FULL, st.lists(COMPONENT, min_size=1, max_size=2), EPOCH, PKGREL)
def test_a_series_agrees_with_every_full_version_extending_it(series, more, epoch, pkgrel):
    full = [*series, *more]
    assert versions.agrees(text(series), f"{epoch}{text(full, 2)}{pkgrel}")
    assert not versions.agrees(text(full), text(series))  # the full version is not the series' other drivers
    assert not versions.same(text(series), text(full))


@given(FULL, st.data(), EPOCH, PKGREL)
def test_versions_whose_components_differ_never_agree(parts, data, epoch, pkgrel):
    i = data.draw(st.integers(0, len(parts) - 1))
    other = list(parts)
    other[i] = data.draw(COMPONENT.filter(lambda c: c != parts[i]))
    tail = data.draw(st.lists(COMPONENT, max_size=2))
    assert not versions.agrees(text(parts), f"{epoch}{text([*other, *tail], 2)}{pkgrel}")
    assert not versions.agrees(text(other), f"{epoch}{text([*parts, *tail])}{pkgrel}")


@given(st.lists(COMPONENT, min_size=2, max_size=3), st.lists(COMPONENT, min_size=2, max_size=3))
def test_the_drivers_cuda_level_supports_what_it_reaches(level, declared):
    assert versions.supports(text(level), text(declared)) == (tuple(level) >= tuple(declared)[: len(level)])


@pytest.mark.parametrize(("declared", "reported", "agree"), [
    ("610.57", "610.57.04", True),           # the series the seeds name, the full version the driver reports
    ("610.57", "610.57.04-1", True),         # the Arch package
    ("610.57", "1:610.57.04-2", True),       # with an epoch
    ("610.57.04", "610.57.04", True),
    ("610.57", "610.60.02", False),
    ("610.57.04", "610.57.05", False),
    ("610.5", "610.57.04", False),           # components, not characters
    ("610.57.04", "610.57", False),          # a driver reporting 610.57 is not 610.57.04
    ("13.3", "13.3.1-1", True),              # the cuda package's series
    ("13.3", "13.30.0-1", False),
    ("610.57", None, False), ("610.57", "", False), ("610.57", "[N/A]", False), ("610.57", "610.57.x", False),
])
def test_the_rule_on_the_shapes_the_rig_sees(declared, reported, agree):
    assert versions.agrees(declared, reported) is agree


def test_a_version_that_is_none_raises_naming_it():
    with pytest.raises(versions.VersionError, match=r"^'610\.57\.x' is not a version: dotted numbers"):
        versions.components("610.57.x")
    assert versions.components("1:610.57.04-1") == (610, 57, 4)
    assert versions.supports("13.10", "13.3") and not versions.supports("13.2", "13.3")
    assert versions.supports("13.3", "13.3") and not versions.supports(None, "13.3")


# ---- the boot gate, DKMS, drift: spec 610.57, the host reporting the full version

KERNEL = "6.12.60-1-lts"


def host_at(module: str | None, dkms: str | None = None) -> tuple[dict, list[dict]]:
    kernel = {"running": KERNEL, "boot_id": "b", "nvidia_module": module, "installed_kernels": [KERNEL]}
    built = [{"module": "nvidia", "version": dkms or module, "kernel": KERNEL, "arch": "x86_64", "status": "installed"}]
    return kernel, built if (dkms or module) else []


def test_the_boot_gate_passes_when_the_series_is_declared_and_the_full_version_runs():
    assert reboot_reasons(*host_at("610.57.04"), "610.57", "nvidia-open-dkms") == []
    assert reboot_reasons(*host_at("610.57.04"), "610.57.04", "nvidia-open-dkms") == []


def test_the_boot_gate_names_both_versions_when_another_driver_runs():
    assert reboot_reasons(*host_at("610.60.02"), "610.57", "nvidia-open-dkms") == [
        "loaded nvidia module is 610.60.02, the pinned driver is 610.57",
        f"DKMS has not built nvidia 610.57 for {KERNEL} (dkms status: nvidia 610.60.02)"]
    assert reboot_reasons(*host_at("610.57.04", dkms="610.57.05"), "610.57.04", "nvidia-open-dkms") == [
        f"DKMS has not built nvidia 610.57.04 for {KERNEL} (dkms status: nvidia 610.57.05)"]
    assert reboot_reasons(*host_at(None), "610.57", "nvidia-open") == [
        "loaded nvidia module is none, the pinned driver is 610.57"]


FULL_PINS = {"nvidia-open-dkms": "610.57.04-1", "nvidia-utils": "610.57.04-1", "opencl-nvidia": "610.57.04-1",
             "cuda": "13.3.1-1"}


def test_the_host_is_held_to_the_pins_full_version_within_the_declared_series():
    """A pin bump inside one series (NVIDIA shipped 550.54.14 and 550.54.15) still needs its reboot: the
    gate holds the module to the flavour's pin, not to the series alone."""
    spec = spec_from_dict({"pacman_pins": FULL_PINS})
    assert spec.nvidia_driver_version == "610.57" and pinned_driver(spec) == "610.57.04"
    bumped = {**FULL_PINS, **{p: "610.57.05-1" for p in ("nvidia-open-dkms", "nvidia-utils", "opencl-nvidia")}}
    held = pinned_driver(spec_from_dict({"pacman_pins": bumped}))
    assert reboot_reasons(*host_at("610.57.04", dkms="610.57.05"), held, "nvidia-open-dkms") == [
        "loaded nvidia module is 610.57.04, the pinned driver is 610.57.05"]
    assert pinned_driver(spec_from_dict({"nvidia_driver_version": "610.57.04", "pacman_pins": FULL_PINS})) == "610.57.04"
    assert pinned_driver(spec_from_dict({})) == "610.57"  # no pins yet (rigkit check): the declared version


def smi(driver: str) -> dict:
    return {"state": "ok", "message": "", "gpus": [{"index": 0, "driver_version": driver}]}


@pytest.mark.parametrize("declared", ["610.57", "610.57.04"])
def test_drift_finds_no_driver_drift_when_the_series_or_the_full_version_is_declared(declared):
    spec = spec_from_dict({"nvidia_driver_version": declared, "pacman_pins": FULL_PINS})
    kernel, dkms = host_at("610.57.04")
    driver = pinned_driver(spec)
    assert compare.compare_driver("h1", driver, "nvidia-open-dkms", FULL_PINS, kernel, smi("610.57.04")) == []
    assert compare.compare_reboot("h1", reboot_reasons(kernel, dkms, driver, "nvidia-open-dkms")) == []
    assert compare.compare_cuda("h1", spec.cuda_version, FULL_PINS, "13.3", True) == []


def test_drift_names_both_versions_when_another_driver_is_installed_and_runs():
    installed = {**FULL_PINS, "nvidia-utils": "610.60.02-1", "nvidia-open-dkms": "1:610.60.02-1"}
    kernel, dkms = host_at("610.60.02")
    found = compare.compare_driver("h1", "610.57", "nvidia-open-dkms", installed, kernel, smi("610.60.02"))
    assert [(f.item, f.declared, f.actual) for f in found] == [
        ("pacman -Q nvidia-utils", "610.57", "610.60.02"), ("pacman -Q nvidia-open-dkms", "610.57", "610.60.02"),
        ("loaded module", "610.57", "610.60.02"), ("nvidia-smi GPU 0", "610.57", "610.60.02")]
    reboot = compare.compare_reboot("h1", reboot_reasons(kernel, dkms, "610.57", "nvidia-open-dkms"))
    assert "loaded nvidia module is 610.60.02, the pinned driver is 610.57" in reboot[0].actual


def test_the_spec_accepts_the_series_with_the_archives_full_versions_pinned():
    assert spec_from_dict({"pacman_pins": FULL_PINS}).pacman_pins == FULL_PINS
    assert spec_from_dict({"nvidia_driver_version": "610.57.04", "pacman_pins": FULL_PINS}).nvidia_driver_version == "610.57.04"
    assert spec_from_dict({"pacman_pins": {**FULL_PINS, "nvidia-utils": "610.57.04-2"}})  # another pkgrel: one driver
