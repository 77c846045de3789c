"""The sandbox's fake GPU on this machine, for the host side's unit tests: the fake ``nvidia-smi``
(tests/harness/stubs/nvidia-smi) on PATH with its state in ``<tmp>/gpu`` and each ``--power-limit``
it is asked for logged to ``<tmp>/pl.log``, and a host config rendered from the default spec
(declared 420 W) whose paths are in ``<tmp>``; the limit set to 420 W, as the deploy leaves it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

STUB = Path(__file__).resolve().parents[2] / "tests" / "harness" / "stubs" / "nvidia-smi"


def install(tmp_path: Path, monkeypatch) -> tuple[Path, dict]:
    """Set the fake GPU up under ``tmp_path`` (module docstring); ``(its state folder, the host config
    data)``. Root only: the fake sets a limit for root alone, as the real one does."""
    from rigkit.render.files import render_host_config
    from rigkit.spec.validate import spec_from_layers

    gpu_dir, bin_dir = tmp_path / "gpu", tmp_path / "bin"
    gpu_dir.mkdir()
    bin_dir.mkdir()
    (gpu_dir / "module_version").write_text("?\n")  # no driver package here: DRIVER "?" on both sides
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncase \"$*\" in *power-limit*|*-pl*) echo \"$*\" >> {tmp_path / 'pl.log'};; esac\n"
                   f"exec {sys.executable} {STUB} \"$@\"\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("RIGKIT_FAKE_GPU_DIR", str(gpu_dir))
    data = json.loads(render_host_config(spec_from_layers([{"paused_timers": [], "lock_files": []}])))
    data["paths"].update(lock=str(tmp_path / "rig.lock"), window_journal=str(tmp_path / "window.json"),
                         power_state=str(tmp_path / "power.json"))
    subprocess.run(["nvidia-smi", "-pl", "420"], check=True, capture_output=True)  # as the deploy left it
    return gpu_dir, data


def driver_env(tmp_path: Path, driver_file: str, module_version: str) -> dict[str, str]:
    """The environment that runs :data:`STUB` as a host with a driver installed and its module loaded:
    ``driver_file`` is what the nvidia-utils package installs at /usr/share/fake-gpu/driver (JSON:
    driver_version, cuda_version), ``module_version`` the loaded module's version; the state folder is
    ``<tmp_path>/gpu`` (``procs/`` in it) and no board.json overrides the 3090's defaults."""
    gpu_dir = tmp_path / "gpu"
    (gpu_dir / "procs").mkdir(parents=True, exist_ok=True)
    (gpu_dir / "module_version").write_text(module_version + "\n")
    (tmp_path / "driver").write_text(driver_file)
    return {**os.environ, "RIGKIT_FAKE_GPU_DIR": str(gpu_dir), "RIGKIT_FAKE_GPU_DRIVER": str(tmp_path / "driver"),
            "RIGKIT_FAKE_GPU_BOARD": str(tmp_path / "no-board.json")}

