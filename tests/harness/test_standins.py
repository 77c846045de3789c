"""The stand-ins behave like the real parts, failures included (nvidia-smi, DKMS; the real nvidia-ctk is
in test_engine.py).
Fresh hosts, not the converged copy: each installs the packages it tests itself."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
from netcfg import BLOCK, FIX_URL, manifest  # noqa: E402  (conftest puts tests/harness on sys.path)

MANIFEST = manifest()  # mirror.json, its URLs at this session's fixtures address (RIGKIT_HARNESS_NET)
A = MANIFEST["archive_url"]
pytestmark = pytest.mark.harness
Q = "nvidia-smi --query-gpu={} --format=csv,noheader,nounits"


def archive(name: str, ver: str) -> str:
    return f"{A}/{name[0]}/{name}/{name}-{ver}-x86_64.pkg.tar.zst"


def install_pinned_driver(h) -> None:
    pins = MANIFEST["pins"]
    h.run("pacman -Sy >/dev/null && pacman -S --noconfirm --needed linux-lts linux-lts-headers dkms >/dev/null && "
          "pacman -U --noconfirm --needed " + " ".join(archive(n, pins[n]) for n in ("nvidia-utils", "nvidia-open-dkms",
                                                                                   "opencl-nvidia")) + " >/dev/null")


@pytest.fixture(scope="module")
def gpu_host(chroot_host):
    """The chroot host with the pinned driver installed (module built by DKMS, loaded on first use)."""
    install_pinned_driver(chroot_host)
    chroot_host.run("rm -f /run/fake-gpu/power_limit /run/fake-gpu/force_mismatch /run/fake-gpu/procs/*")
    return chroot_host


def test_dkms_builds_the_module_for_every_kernel_with_headers(gpu_host):
    st = gpu_host.run("dkms status").stdout.splitlines()
    # the full version, as dkms prints a real 610.57's (the package's PACKAGE_VERSION: pkgver 610.57.04)
    assert "nvidia/610.57.04, 6.12.58-1-lts, x86_64: installed" in st
    assert "nvidia/610.57.04, 6.17.7-arch1-1, x86_64: installed" in st
    assert gpu_host.run("/usr/lib/fake-arch/fake-boot --print").stdout.strip() == "6.12.58-1-lts"
    assert gpu_host.run("grep ^version= /usr/lib/modules/6.12.58-1-lts/updates/dkms/nvidia.ko.zst").stdout == "version=610.57.04\n"


def test_nvidia_smi_reports_a_3090(gpu_host):
    r = gpu_host.run(Q.format("name,driver_version,memory.total,memory.used,power.default_limit,"
                              "power.min_limit,power.max_limit,power.limit,enforced.power.limit"))
    assert r.stdout == "NVIDIA GeForce RTX 3090, 610.57.04, 24576, 1, 350.00, 100.00, 450.00, 350.00, 350.00\n"
    assert gpu_host.run("nvidia-smi --query-gpu=memory.total,power.limit --format=csv").stdout == \
        "memory.total [MiB], power.limit [W]\n24576 MiB, 350.00 W\n"
    assert gpu_host.run("nvidia-smi -L").stdout.startswith("GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-")
    v = gpu_host.run("nvidia-smi --version").stdout
    # driver 610's --version (the real 610.57.04 capture): KMD/CUDA UMD version, DRIVER/CUDA version deprecated
    assert "KMD version         : 610.57.04" in v and "CUDA UMD version    : 13.3" in v
    assert 'DRIVER version      : Deprecated, see "KMD version" instead' in v and "NVML version        : 610.57\n" in v
    table = gpu_host.run("nvidia-smi").stdout
    # driver 610 names them "KMD Version" and "CUDA UMD Version" (drift's probe reads both spellings)
    assert "KMD Version: 610.57.04" in table and "CUDA UMD Version: 13.3" in table and "24576MiB" in table


def test_unknown_query_field_fails_with_rc_2(gpu_host):
    r = gpu_host.run(Q.format("name,power.bogus"), check=False)
    assert (r.returncode, r.stdout) == (2, 'Field "power.bogus" is not a valid field to query.\n\n')
    # no real driver lists an energy counter field: the whole query fails as the real tool's does (issue 37)
    r = gpu_host.run("nvidia-smi --query-gpu=total_energy_consumption --format=csv", check=False)
    assert (r.returncode, r.stdout, r.stderr) == (2, 'Field "total_energy_consumption" is not a valid field to query.\n\n',
                                                  "")
    assert gpu_host.run("pacman -Q nvidia-utils").stdout == "nvidia-utils 610.57.04-1\n"  # the full version


def test_power_limit_out_of_range_is_refused_and_left_alone(gpu_host):
    r = gpu_host.run("nvidia-smi -pl 500", check=False)
    assert r.returncode == 2
    assert r.stdout == ("Provided power limit 500.00 W is not a valid power limit which should be between "
                        "100.00 W and 450.00 W for GPU 00000000:01:00.0\nTerminating early due to previous errors.\n")
    assert gpu_host.run(Q.format("power.limit")).stdout == "350.00\n"


def test_power_limit_needs_root_and_persists_until_reboot(gpu_host):
    r = gpu_host.run("su rig -c 'nvidia-smi -pl 300'", check=False)
    assert r.returncode == 4 and "Insufficient Permissions" in r.stdout
    r = gpu_host.run("nvidia-smi -i 0 --power-limit=420")
    assert r.stdout == "Power limit for GPU 00000000:01:00.0 was set to 420.00 W from 350.00 W.\nAll done.\n"
    assert gpu_host.run(Q.format("power.limit,enforced.power.limit")).stdout == "420.00, 420.00\n"
    gpu_host.run("rm -f /run/fake-gpu/power_limit")


def test_memory_used_counts_live_vram_holders(gpu_host):
    gpu_host.run("mkdir -p /run/fake-gpu/procs; (sleep 30 >/dev/null 2>&1 & echo $! > /tmp/holder.pid); "
                 "echo 21600 > /run/fake-gpu/procs/$(cat /tmp/holder.pid).mib; echo 999 > /run/fake-gpu/procs/999999.mib")
    assert gpu_host.run(Q.format("memory.used")).stdout == "21601\n"  # the dead pid 999999 does not count
    gpu_host.run("kill $(cat /tmp/holder.pid); sleep 0.2")
    assert gpu_host.run(Q.format("memory.used")).stdout == "1\n"


MONITOR = ("nvidia-smi --query-gpu=index,name,uuid,temperature.gpu,utilization.gpu,memory.used,memory.total,fan.speed,"
           "power.draw --format=csv,noheader,nounits --loop 1")  # llama-swap v250's GPU monitor, perf/monitor_unix.go:136-179


def test_nvidia_smi_loop_keeps_answering_llama_swaps_gpu_monitor(gpu_host):
    # llama-swap starts this once and reads it line by line for as long as it runs; each line must have the
    # 9 fields its parser wants (perf/gpu_parse.go:15-30), and each interval is a fresh reading of the board
    r = gpu_host.run("mkdir -p /run/fake-gpu/procs; (sleep 2.5; sleep 30 >/dev/null 2>&1 & h=$!; "
                     "echo 21600 > /run/fake-gpu/procs/$h.mib; sleep 2; kill $h) & "
                     f"timeout 6 {MONITOR}; echo rc=$?")
    lines = r.stdout.splitlines()
    assert lines[-1] == "rc=124", r.stdout  # still looping when timeout stopped it
    rows = [ln.split(", ") for ln in lines[:-1]]
    assert 5 <= len(rows) <= 7 and all(len(f) == 9 for f in rows), r.stdout
    assert rows[0] == ["0", "NVIDIA GeForce RTX 3090", "GPU-3c1f9b2e-7a54-4d1e-9c0b-2f6e8a913d57", "34", "0", "1",
                       "24576", "0", "21.50"]
    used = [f[5] for f in rows]
    assert used[:2] == ["1", "1"] and "21601" in used and used[-1] == "1", used  # the holder came and went
    assert gpu_host.run("nvidia-smi --query-gpu=memory.used --format=csv,noheader -l 1 | head -n 2").stdout == \
        "1 MiB\n1 MiB\n"  # a reader that goes away ends it (SIGPIPE), as it ends the real tool
    assert gpu_host.run("timeout 1.5 nvidia-smi -l 1 | grep -c 'NVIDIA-SMI'", check=False).stdout.strip() == "2"


def test_forced_mismatch_fails_like_nvml(gpu_host):
    gpu_host.run("touch /run/fake-gpu/force_mismatch")
    try:
        r = gpu_host.run(Q.format("driver_version"), check=False)
        assert (r.returncode, r.stdout) == (18, "Failed to initialize NVML: Driver/library version mismatch\n"
                                                "NVML library version: 610.57\n")
    finally:
        gpu_host.run("rm -f /run/fake-gpu/force_mismatch")


#: The stand-in NVML's calls through ctypes, as pynvml makes them (its argument and result types), one line out:
#: nvmlInitWithFlags, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetTotalEnergyConsumption (and whether the
#: counter is positive), nvmlShutdown; at the first failing call its code alone.
NVML_CALLS = """python3 - <<'EOF'
import ctypes
so = ctypes.CDLL("libnvidia-ml.so.1")
h, mj = ctypes.c_void_p(), ctypes.c_ulonglong()
codes = [so.nvmlInitWithFlags(0)]
if codes[0] == 0:
    codes += [so.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)), so.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(mj)),
              int(mj.value > 0), so.nvmlShutdown()]
print(*codes)
EOF"""


def test_nvml_is_where_the_real_package_puts_it_and_answers_from_the_fake(gpu_host):
    # /usr/lib/libnvidia-ml.so.<version> with the soname link pynvml loads and the dev link (Arch's create_links)
    assert gpu_host.run("readlink /usr/lib/libnvidia-ml.so.1 /usr/lib/libnvidia-ml.so").stdout == \
        "libnvidia-ml.so.610.57.04\nlibnvidia-ml.so.1\n"
    assert "nvidia-utils /usr/lib/libnvidia-ml.so.610.57.04\n" in gpu_host.run("pacman -Ql nvidia-utils").stdout
    assert gpu_host.run(NVML_CALLS).stdout == "0 0 0 1 0\n"  # found by the loader, by its soname alone
    gpu_host.run("touch /run/fake-gpu/force_mismatch")
    try:
        assert gpu_host.run(NVML_CALLS).stdout == "18\n"  # NVML_ERROR_LIB_RM_VERSION_MISMATCH, as nvidia-smi's exit
    finally:
        gpu_host.run("rm -f /run/fake-gpu/force_mismatch")


def test_upgrade_without_reboot_mismatches_and_reboot_heals(make_host):
    """A driver upgrade leaves the old module loaded (rc 18) until a reboot; the power limit resets."""
    h = make_host("drv")
    install_pinned_driver(h)
    assert h.run(Q.format("driver_version")).stdout == "610.57.04\n"
    h.run("nvidia-smi -pl 420 >/dev/null")
    h.run("pacman -S --noconfirm nvidia-utils nvidia-open-dkms opencl-nvidia >/dev/null")  # the repo's 610.60.02
    r = h.run(Q.format("driver_version"), check=False)
    assert (r.returncode, r.stdout) == (18, "Failed to initialize NVML: Driver/library version mismatch\n"
                                            "NVML library version: 610.60\n")
    assert "nvidia/610.60.02, 6.12.58-1-lts, x86_64: installed" in h.run("dkms status").stdout
    h.reboot()
    assert h.run(Q.format("driver_version,power.limit")).stdout == "610.60.02, 350.00\n"
    assert h.run("cat /run/fake-kernel/release").stdout == "6.12.58-1-lts\n"
