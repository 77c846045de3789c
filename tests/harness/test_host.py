"""The sandbox host itself: looks like Arch, its mirror follows the manifest, both lanes reach it.
Fresh hosts, not the converged copy: these test the bare host the deploy starts from."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rigkit.common import versions

HERE = Path(__file__).resolve().parent
from netcfg import BLOCK, FIX_URL, manifest  # noqa: E402  (conftest puts tests/harness on sys.path)

MANIFEST = manifest()  # mirror.json, its URLs at this session's fixtures address (RIGKIT_HARNESS_NET)
PYINFRA = str(Path(sys.executable).with_name("pyinfra"))
pytestmark = pytest.mark.harness


@pytest.fixture(params=["chroot", "nspawn"])
def host(request):
    return request.getfixturevalue(f"{request.param}_host")


def test_host_identifies_as_arch_without_apt(host):
    r = host.run(". /etc/os-release; echo $ID $NAME; command -v apt apt-get dpkg; echo rc=$?")
    assert r.stdout.splitlines()[0] == "arch Arch Linux"
    assert "rc=127" in r.stdout  # no apt/dpkg on PATH, so pyinfra picks pacman


def test_pacman_conf_is_stock_with_ignorepkg_in_options(host):
    conf = host.run("cat /etc/pacman.conf").stdout.splitlines()
    ign = conf.index("#IgnorePkg   =")
    sections = [i for i, line in enumerate(conf) if line.startswith("[")]
    assert conf[sections[0]] == "[options]" and sections[0] < ign < sections[1]
    assert f"Server = {FIX_URL}/$repo/os/$arch" in host.run("cat /etc/pacman.d/mirrorlist").stdout


def test_operator_has_passwordless_sudo_and_python_venv(host):
    assert host.run("sudo -n -u rig sudo -n id -u").stdout.strip() == "0"
    host.run("python3 -m venv /tmp/agent-venv && /tmp/agent-venv/bin/python -c 'import ssl, sqlite3'")


def test_pinned_versions_exist_only_in_the_archive(host):
    """The repos carry newer versions; the pins are reachable by archive URL (pacman -U), as on Arch."""
    host.run("pacman -Sy >/dev/null")
    for name, ver in MANIFEST["pins"].items():
        repo = host.run(f"pacman -Si {name} | sed -n 's/^Version *: //p'").stdout.split()
        assert repo and ver not in repo, (name, repo)
        url = f"{MANIFEST['archive_url']}/{name[0]}/{name}/{name}-{ver}-x86_64.pkg.tar.zst"
        assert host.run(f"curl -fsS -o /dev/null -w '%{{http_code}}' {url}").stdout == "200"
    # the pins carry the driver's full version (610.57.04-1), which agrees with the series the spec names
    assert MANIFEST["pins"]["nvidia-utils"].startswith(MANIFEST["nvidia_driver_version"] + ".")
    assert versions.agrees(MANIFEST["nvidia_driver_version"], MANIFEST["pins"]["nvidia-utils"])
    assert MANIFEST["pins"]["cuda"].startswith(MANIFEST["cuda_version"] + ".")


def test_arch_dependency_graph(chroot_host):
    deps = chroot_host.run("pacman -Sy >/dev/null; for p in cuda opencl-nvidia nvidia-open nvidia-open-dkms "
                           "nvidia-container-toolkit; do echo \"$p: $(pacman -Si $p | sed -n 's/^Depends On *: //p')\"; done").stdout
    assert "cuda: cccl  gcc15  opencl-nvidia  python" in deps
    assert "opencl-nvidia: zlib  nvidia-utils=610.60.02" in deps
    assert "nvidia-open: libglvnd  linux  nvidia-utils=610.60.02" in deps
    assert "nvidia-open-dkms: dkms  nvidia-utils=610.60.02" in deps
    assert "nvidia-container-toolkit: libnvidia-container" in deps


def test_pyinfra_sees_arch_and_its_pacman_packages(host):
    if host.lane == "nspawn":
        target = [host.ssh_hostname, "--ssh-user", host.ssh_user, "--ssh-key", host.ssh_key, "--sudo",
                  "--data", f"ssh_known_hosts_file={host.data['ssh_known_hosts_file']}"]
    else:
        target = [host.pyinfra_target]
    r = subprocess.run([PYINFRA, "-y", *target, "fact", "server.LinuxDistribution", "pacman.PacmanPackages"],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr  # pyinfra prints facts on stderr or stdout depending on version
    assert r.returncode == 0, out
    assert '"name": "Arch Linux"' in out
    assert '"linux": [' in out and '"6.17.7.arch1-1"' in out


def test_testinfra_reaches_host(host):
    t = host.testinfra()
    assert t.system_info.distribution == "arch"
    assert t.package("base").is_installed
    assert t.package("linux").version == "6.17.7.arch1-1"
    assert t.user("rig").exists


def test_nspawn_runs_real_systemd_with_sshd_on_its_veth(nspawn_host):
    r = nspawn_host.ssh("systemctl is-system-running --wait; ss -Hltn 'sport = :22'; cat /proc/1/comm")
    lines = r.stdout.split("\n")
    assert lines[0] in ("running", "degraded"), r.stdout
    assert f"{nspawn_host.ssh_hostname}:22" in r.stdout
    assert "systemd" in r.stdout


def test_nothing_listens_outside_loopback_on_the_ci_machine(nspawn_host):
    out = subprocess.run(["ss", "-Hltnu"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        local = line.split()[4]
        addr = local.rsplit(":", 1)[0].strip("[]")
        assert not addr.startswith(BLOCK + "."), line


def test_two_nspawn_hosts_each_have_their_own_8080(nspawn_host, make_host):
    other = make_host("n2")
    for h, word in ((nspawn_host, "one"), (other, "two")):
        h.ssh(f"mkdir -p /tmp/w-{word} && echo {word} > /tmp/w-{word}/index.html && "
              f"(setsid python3 -m http.server -b 127.0.0.1 -d /tmp/w-{word} 8080 >/dev/null 2>&1 &) ; sleep 0.1")
    for h, word in ((nspawn_host, "one"), (other, "two")):
        r = h.ssh("for i in $(seq 50); do curl -fsS http://127.0.0.1:8080/ && break; sleep 0.1; done")
        assert r.stdout.strip() == word
    for h in (nspawn_host, other):
        h.ssh("pkill -f 'http.server -b 127.0.0.1' || true", check=False)


def test_reboot_restarts_the_container_with_a_new_boot_id(make_host):
    h = make_host("rb")
    before = h.boot_id()
    h.run("touch /run/before-reboot /var/tmp/kept")
    after = h.reboot()
    assert after != before
    assert h.run("test ! -e /run/before-reboot && test -e /var/tmp/kept && systemctl is-system-running --wait",
                 check=False).returncode == 0
