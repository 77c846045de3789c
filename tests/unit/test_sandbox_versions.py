"""Full driver versions in the sandbox (issue 37 part 2): the mirror's driver packages
(tests/harness/mirror.json) carry the full version a real 610.57 has (``610.57.04-1``; the bump's second
driver ``610.60.02-1``), and what they install says it as the Arch archive and the kernel would: the
driver file the fake ``nvidia-smi`` reads, the DKMS source's ``PACKAGE_VERSION`` (``dkms status``:
``nvidia/610.57.04, …``) and the prebuilt module's version. The sandbox inventory's pins are the
mirror's, its ``nvidia_driver_version`` the series the seeds name (``610.57``): they agree by
:func:`rigkit.common.versions.agrees`, the spec validates, and the boot gate has no reason to reboot a host
that runs what the packages install. Read here without a sandbox host: the manifest, the packages'
payloads (tests/harness/build_mirror.py) and the fake run on this machine."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rigkit.common import versions
from rigkit.operations.facts.dkms import DkmsStatus
from rigkit.render.declared_state import pinned_driver, reboot_reasons
from rigkit.spec.validate import check_spec, spec_from_dict
from tests.unit import fake_gpu

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "harness"
MANIFEST = json.loads((HARNESS / "mirror.json").read_text())
DRIVER_PACKAGES = ("nvidia-utils", "opencl-nvidia", "nvidia-open-dkms", "nvidia-open")
KERNEL = "6.12.58-1-lts"


def _build_mirror():
    spec = importlib.util.spec_from_file_location("rigkit_build_mirror", HARNESS / "build_mirror.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def package(name: str, version: str) -> dict:
    return next(p for p in MANIFEST["packages"] if p["name"] == name and p["version"] == version)


def sandbox_spec(driver: str | None = None):
    """The spec of the sandbox inventory's pins (inventory/sandbox.py reads the manifest's)."""
    return spec_from_dict({"pacman_pins": MANIFEST["pins"], "cuda_version": MANIFEST["cuda_version"],
                           "nvidia_driver_version": driver or MANIFEST["nvidia_driver_version"]})


def test_the_mirrors_pins_are_full_versions_that_agree_with_the_spec():
    pins, declared = MANIFEST["pins"], MANIFEST["nvidia_driver_version"]
    assert declared == "610.57" and MANIFEST["cuda_version"] == "13.3"  # the seeds' words
    for p in ("nvidia-open-dkms", "nvidia-utils", "opencl-nvidia"):
        assert pins[p] == "610.57.04-1" and versions.agrees(declared, pins[p]), p
    assert versions.agrees(MANIFEST["cuda_version"], pins["cuda"]) and pins["cuda"].startswith("13.3.")
    for driver in (declared, "610.57.04"):  # the series, or the full version: both valid, one driver held
        spec = sandbox_spec(driver)
        assert check_spec(spec) == [] and pinned_driver(spec) == "610.57.04"


@pytest.mark.parametrize("name", DRIVER_PACKAGES)
def test_every_driver_package_is_a_full_version_and_depends_on_its_own_driver(name):
    found = [p for p in MANIFEST["packages"] if p["name"] == name]
    assert sorted(versions.release(p["version"]) for p in found) == ["610.57.04", "610.60.02"]
    for p in found:
        full = versions.release(p["version"])
        assert len(versions.components(full)) == 3
        assert [d for d in p.get("depends", []) if d.startswith("nvidia-utils")] == (
            [] if name == "nvidia-utils" else [f"nvidia-utils={full}"])  # pacman's = matches the pkgver exactly
    bump = next(p for p in found if p["repo"])  # the repo's newer driver: what the pin bump moves to
    assert bump["version"] == "610.60.02-1" and not versions.agrees("610.57", bump["version"])
    assert versions.agrees("610.60", bump["version"])  # the series test_pin_bump declares


def test_what_the_packages_install_says_the_full_version_and_the_boot_gate_agrees(tmp_path):
    mirror = _build_mirror()
    pins = MANIFEST["pins"]
    utils = mirror.payload(package("nvidia-utils", pins["nvidia-utils"]))
    driver = json.loads(utils["usr/share/fake-gpu/driver"][0])
    assert driver == {"driver_version": "610.57.04", "cuda_version": "13.3"}
    dkms_conf = mirror.payload(package("nvidia-open-dkms", pins["nvidia-open-dkms"]))["usr/src/nvidia-610.57.04/dkms.conf"][0]
    module = re.search(r'^PACKAGE_NAME="([^"]+)"', dkms_conf, re.M).group(1)
    built = re.search(r'^PACKAGE_VERSION="([^"]+)"', dkms_conf, re.M).group(1)
    assert (module, built) == ("nvidia", "610.57.04")
    # stubs/dkms prints <module>/<PACKAGE_VERSION> for each kernel it built: read by rigkit's own fact
    dkms = DkmsStatus().process([f"{module}/{built}, {KERNEL}, x86_64: installed"])
    assert dkms == [{"module": "nvidia", "version": "610.57.04", "kernel": KERNEL, "arch": "x86_64",
                     "status": "installed"}]
    prebuilt = mirror.payload(package("nvidia-open", "610.57.04-1"))
    assert "version=610.57.04\n" in next(iter(prebuilt.values()))[0]

    # the fake, with that driver installed and its module loaded, names the same version
    r = subprocess.run([sys.executable, str(fake_gpu.STUB), "--query-gpu=driver_version,kmd_version",
                        "--format=csv,noheader"], capture_output=True, text=True, timeout=60,
                       env=fake_gpu.driver_env(tmp_path, utils["usr/share/fake-gpu/driver"][0], built))
    assert (r.returncode, r.stdout) == (0, "610.57.04, 610.57.04\n"), r.stdout + r.stderr
    # the boot gate: the spec's series, the module and DKMS at the full version: no reason to reboot
    kernel = {"running": KERNEL, "nvidia_module": built, "installed_kernels": [KERNEL]}
    for declared in ("610.57", "610.57.04"):
        assert reboot_reasons(kernel, dkms, pinned_driver(sandbox_spec(declared)), "nvidia-open-dkms") == []
