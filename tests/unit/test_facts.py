"""Fact parsing on the real output shapes, and the pure helpers behind the operations."""

from __future__ import annotations

from pathlib import Path

import pytest

from rigkit.operations.facts.dkms import DkmsStatus
from rigkit.operations.facts.files import JsonFile
from rigkit.operations.facts.nvidia import NvidiaSmi
from rigkit.operations.facts.pacman import PacmanVersions
from rigkit.operations.facts.server import KernelState
from rigkit.operations.facts.util import RC_MARK
from rigkit.operations.config import merge_json
from rigkit.operations.pacman import archive_url


def test_nvidia_smi_parses_an_rtx_3090():
    out = ["0, NVIDIA GeForce RTX 3090, GPU-5b1c, 610.57, 24576, 22118, 350.00, 420.00, 420.00, 100.00, 450.00",
           f"{RC_MARK}0"]
    fact = NvidiaSmi().process(out)
    assert fact["state"] == "ok"
    assert fact["gpus"] == [{
        "index": 0, "name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-5b1c", "driver_version": "610.57",
        "memory_total_gib": 24.0, "memory_used_gib": 21.6, "memory_total_mib": 24576.0, "memory_used_mib": 22118.0,
        "power_default_w": 350.0, "power_limit_w": 420.0,
        "power_enforced_w": 420.0, "power_min_w": 100.0, "power_max_w": 450.0}]


def test_nvidia_smi_driver_library_mismatch_is_a_state():
    out = ["Failed to initialize NVML: Driver/library version mismatch", "NVML library version: 610.60", f"{RC_MARK}18"]
    fact = NvidiaSmi().process(out)
    assert fact["state"] == "mismatch"
    assert fact["message"].startswith("Failed to initialize NVML: Driver/library version mismatch")


def test_nvidia_smi_no_gpu_and_missing_binary():
    assert NvidiaSmi().process(["No devices were found", f"{RC_MARK}6"])["state"] == "no-gpu"
    assert NvidiaSmi().process([f"{RC_MARK}127"])["state"] == "missing"


def test_nvidia_smi_not_supported_fields_are_none():
    out = ["0, NVIDIA GeForce RTX 3090, GPU-1, 610.57, 24576, 0, [N/A], 350.00, 350.00, [N/A], [N/A]", f"{RC_MARK}0"]
    gpu = NvidiaSmi().process(out)["gpus"][0]
    assert gpu["power_min_w"] is None and gpu["power_max_w"] is None and gpu["power_default_w"] is None


def test_pacman_versions_keys_by_the_names_asked():
    fact = PacmanVersions()
    fact.command(["nvidia-utils", "cuda", "docker"])
    out = ["nvidia-utils 610.57-1", "error: package 'cuda' was not found", "docker 1:28.5.1-1"]
    assert fact.process(out) == {"nvidia-utils": "610.57-1", "cuda": None, "docker": "1:28.5.1-1"}


def test_json_file_states():
    assert JsonFile().process([f"{RC_MARK}404"]) == {"exists": False, "data": None, "error": None}
    assert JsonFile().process(['{"a": 1}']) == {"exists": True, "data": {"a": 1}, "error": None}
    broken = JsonFile().process(['{"a": '])
    assert broken["exists"] and broken["data"] is None and broken["error"].startswith("not valid JSON")
    assert JsonFile().process(["[1]"])["error"] == "not a JSON object"


def test_kernel_state_and_dkms_status():
    state = KernelState().process(["running=6.12.58-1-lts", "boot_id=9f1c", "nvidia=610.57",
                                   "kernel=6.12.58-1-lts", "kernel=6.17.7-arch1-1"])
    assert state == {"running": "6.12.58-1-lts", "boot_id": "9f1c", "nvidia_module": "610.57",
                     "installed_kernels": ["6.12.58-1-lts", "6.17.7-arch1-1"]}
    assert KernelState().process(["running=6.1", "boot_id=x", "nvidia="])["nvidia_module"] is None
    assert DkmsStatus().process(["nvidia/610.57, 6.12.58-1-lts, x86_64: installed", "junk"]) == [
        {"module": "nvidia", "version": "610.57", "kernel": "6.12.58-1-lts", "arch": "x86_64", "status": "installed"}]


def test_archive_url_keeps_the_epoch_and_layout():
    assert archive_url("https://archive.archlinux.org/packages/", "nvidia-utils", "610.57-1") == (
        "https://archive.archlinux.org/packages/n/nvidia-utils/nvidia-utils-610.57-1-x86_64.pkg.tar.zst")
    assert archive_url("http://m/archive/packages", "docker", "1:28.5.1-1").endswith("/d/docker/docker-1:28.5.1-1-x86_64.pkg.tar.zst")


def test_merge_json_keeps_foreign_keys_and_unions_lists():
    current = {"log-driver": "journald", "exec-opts": ["foo=bar"], "runtimes": {"crun": {"path": "/usr/bin/crun"}}}
    wanted = {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
              "exec-opts": ["native.cgroupdriver=cgroupfs"]}
    merged = merge_json(current, wanted)
    assert merged == {"log-driver": "journald", "exec-opts": ["foo=bar", "native.cgroupdriver=cgroupfs"],
                      "runtimes": {"crun": {"path": "/usr/bin/crun"},
                                   "nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    assert merge_json(merged, wanted) == merged


def test_a_modules_folder_without_its_kernel_image_is_no_installed_kernel(tmp_path):
    """A ghost ``/usr/lib/modules/<version>/`` (a removed kernel's leftovers, DKMS output) holds no
    ``vmlinuz`` and must not count as a kernel that DKMS has to build for."""
    import subprocess

    (tmp_path / "6.12.58-1-lts").mkdir()
    (tmp_path / "6.12.58-1-lts" / "vmlinuz").write_text("image")
    (tmp_path / "6.6.1-ghost" / "updates" / "dkms").mkdir(parents=True)
    cmd = KernelState().command().replace("/usr/lib/modules", str(tmp_path))
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True).stdout.splitlines()
    assert KernelState().process(out)["installed_kernels"] == ["6.12.58-1-lts"]


def test_no_second_ignorepkg_parser():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = []
    for path in sorted((root / "rigkit").rglob("*.py")) + sorted((root / "roles").rglob("*.py")):
        if path == root / "rigkit" / "common" / "pacman.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value == "IgnorePkg":
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not offenders, "read IgnorePkg with rigkit.common.pacman (pacman-conf IgnorePkg):\n" + "\n".join(offenders)


@pytest.mark.parametrize("said, version", [("Python 3.11.2", "3.11"), ("Python 3.13.0rc1", "3.13"),
                                           ("Python 3.9.18", "3.9"), (None, "")])
def test_the_hosts_python_version_is_its_major_and_minor(tmp_path, said, version):
    """PYTHON_VERSION_COMMAND under a POSIX shell with ``python3 -V`` answering as CPython does (no
    ``python3`` at all: nothing printed, a failed command); this machine's own python3 agrees with
    ``sys.version_info``."""
    import subprocess
    import sys

    from rigkit.operations.facts.server import PYTHON_VERSION_COMMAND

    if said is not None:
        (tmp_path / "python3").write_text(f"#!/bin/sh\necho '{said}'\n")
        (tmp_path / "python3").chmod(0o755)
    ran = subprocess.run(["/bin/sh", "-c", PYTHON_VERSION_COMMAND], capture_output=True, text=True,
                         env={"PATH": f"{tmp_path}:/nonexistent"})
    assert ran.stdout.strip() == version and (ran.returncode == 0) == (said is not None)
    here = subprocess.run(["/bin/sh", "-c", PYTHON_VERSION_COMMAND], capture_output=True, text=True,
                          env={"PATH": f"{Path(sys.executable).parent}"})
    assert here.stdout.strip() == "%d.%d" % sys.version_info[:2]
