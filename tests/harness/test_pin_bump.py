"""The riskiest change on this rig, a pin bump, confirmed or put back (issue 30): on a copy of the
converged host, a deploy bumps the driver pins to 610.60.02 (the sandbox archive's second driver; the
spec names its series, 610.60) and
reboots for it; the new driver boots but cannot run CUDA containers (the fake toolkit hook refuses
them under a driver listed in ``/etc/fake-gpu/broken_drivers``), so Strata does not come back and the
confirmation fails. The deploy records the attempt as a failed generation and deploys the generation
it started from: ``pacman -U`` of the previous pins, a second reboot, the previous config, and that
generation confirmed: Strata answers through :8080 under 610.57 again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
RIGKIT = str(Path(sys.executable).parent / "rigkit")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden  # noqa: E402
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402
from test_wirein import complete, running  # noqa: E402

PROJECT = sandbox_project.cwd()
AGENT = "/opt/rigkit/venv/bin/rigkit-agent"
BUMP = {"nvidia-open-dkms": "610.60.02-1", "nvidia-utils": "610.60.02-1", "opencl-nvidia": "610.60.02-1"}


@pytest.fixture(scope="module")
def host(make_module_host):
    return make_module_host("pb", converged=True)


def test_a_pin_bump_that_fails_its_confirmation_goes_back_to_the_previous_pins_across_a_second_reboot(host):
    start = json.loads(host.run(f"{AGENT} generation list").stdout)["current"]
    boot0 = host.boot_id()
    host.run("mkdir -p /etc/fake-gpu && echo 610.60.02 > /etc/fake-gpu/broken_drivers")
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=host.name, HF_TOKEN=hostctl.hub_token())
    bump = golden.variant_lock("pin-bump", "--data", f"pacman_pins={json.dumps(BUMP)}",
                               "--data", 'nvidia_driver_version="610.60"')  # the deploy uses only its lock
    proc = subprocess.run([RIGKIT, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--reboot", "--confirm-budget",
                           "90", *bump],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=1500)
    err = proc.stderr
    assert proc.returncode == 1, err[-6000:]
    assert "its confirmation failed: " in err and "nvml error: unknown error" in err, err[-6000:]
    assert f"reverted to generation {start}, confirmed: the host serves as before" in err, err[-6000:]
    assert err.count("the SSH session holding the host lock ended during the change (a reboot, ") == 2, err[-6000:]
    assert host.boot_id() != boot0
    assert host.run("pacman -Q nvidia-utils nvidia-open-dkms").stdout.split() == [
        "nvidia-utils", "610.57.04-1", "nvidia-open-dkms", "610.57.04-1"]
    assert host.run("nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.strip() == "610.57.04"
    index = json.loads(host.run(f"{AGENT} generation list").stdout)
    failed = index["generations"][-1]
    assert index["current"] == start and "pins: nvidia-open-dkms 610.57.04-1 -> 610.60.02-1" in "; ".join(failed["changed"])
    assert failed["failed"].startswith("its confirmation failed: ")
    assert running(host) == {"strata": "ready"} and complete(host, "strata").stdout == "200"
