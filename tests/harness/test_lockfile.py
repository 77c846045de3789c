"""The deploy uses only the lock, and refuses what does not match it (issue 43), on a copy of the converged
host (nspawn lane, real SSH + sudo, the real docker engine and registry, pacman with the sandbox archive):

- a package file whose bytes are not the ones the lock names (the lock entry's sha256 differs from the
  archive's file) is refused before ``pacman -U`` sees it, the message naming the lock entry, both hashes;
- an image whose content at the registry is not the one its digest names (a blob of it rewritten in the
  real registry's storage) is refused by docker's pull by digest, the deploy naming the lock entry;
- a deploy whose spec declares something its lock does not resolve is refused before any host is touched.
"""

from __future__ import annotations

import json
import os
import shutil
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

PROJECT = sandbox_project.cwd()


@pytest.fixture(scope="module")
def host(make_module_host):
    return make_module_host("lf", converged=True)


def deploy(host, *args):
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=host.name, HF_TOKEN=hostctl.hub_token())
    return subprocess.run([RIGKIT, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--full", *args], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=900)


def edited_lock(tag: str, edit) -> list[str]:
    """``--data lockfile=…`` of a copy of the sandbox lock changed by ``edit(lock)``."""
    target = hostctl.STATE / f"sandbox-{tag}.lock.json"
    lock = json.loads(golden.sandbox_lock().read_text())
    edit(lock)
    target.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    return ["--data", f"lockfile={json.dumps(str(target))}"]


def test_a_package_file_that_is_not_the_locked_one_is_refused_naming_the_lock_entry(host):
    lock = json.loads(golden.sandbox_lock().read_text())
    entry = lock["pins"]["nvidia-utils"]
    wrong = "0" * 64

    def tamper(lk):
        lk["pins"]["nvidia-utils"]["sha256"] = wrong

    # the pin moved off (as drift's coverage breaks it), and the file gone from rigkit's cache: the deploy fetches it
    host.run("pacman -Udd --noconfirm http://{}/archive/packages/n/nvidia-utils/nvidia-utils-610.60.02-1-x86_64.pkg.tar.zst "
             ">/dev/null && rm -f /var/cache/rigkit/pkgs/{}".format(hostctl.FIX_ADDR, entry["file"]))
    proc = deploy(host, *edited_lock("tampered-pkg", tamper))
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert (f"lock entry pins.nvidia-utils: {entry['file']} has sha256 {entry['sha256']}, the lock says {wrong}; "
            "refusing to install it") in proc.stderr, proc.stderr[-4000:]
    # confirmed or put back: the host went back to the generation it started from, whose lock names the file
    # the archive has — installed from rigkit's cache, checked against that lock
    assert "reverted to generation" in proc.stderr, proc.stderr[-4000:]
    assert host.run("pacman -Q nvidia-utils").stdout.split() == ["nvidia-utils", entry["version"]]
    assert host.run(f"sha256sum /var/cache/rigkit/pkgs/{entry['file']}").stdout.split()[0] == entry["sha256"]
    again = deploy(host)  # the lock as resolved: nothing left to do
    assert again.returncode == 0, again.stderr[-4000:]


def test_an_image_whose_content_is_not_its_digests_is_refused_naming_the_lock_entry(host):
    lock = json.loads(golden.sandbox_lock().read_text())
    digest = lock["images"]["hyperqwen"]["digest"]
    ref = f"ghcr.io/syv-ai/hyperqwen@{digest}"
    import requests

    manifest = requests.get(f"https://{hostctl.FIX_ADDR}/v2/syv-ai/hyperqwen/manifests/{digest}", timeout=30,
                            headers={"Accept": lock["images"]["hyperqwen"]["media_type"]},
                            verify=str(hostctl.STATE / "registry" / "tls" / "ca.crt")).json()
    config = manifest["config"]["digest"]
    blob = (hostctl.STATE / "registry" / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" /
            config.split(":")[1][:2] / config.split(":")[1] / "data")
    assert blob.is_file(), blob
    saved = blob.with_suffix(".saved")
    shutil.copyfile(blob, saved)
    try:
        data = blob.read_bytes()
        assert b"amd64" in data
        blob.write_bytes(data.replace(b"amd64", b"amd65", 1))  # the same length: only the content is not the digest's
        host.run("docker ps -aq --filter ancestor=" + ref + " | xargs -r docker rm -f >/dev/null; "
                 f"docker rmi -f {ref} >/dev/null")
        proc = deploy(host)
        assert proc.returncode == 1, proc.stderr[-4000:]
        assert f"lock entry images.hyperqwen: docker pull {ref} failed: " in proc.stderr, proc.stderr[-4000:]
    finally:
        shutil.move(saved, blob)
    again = deploy(host)
    assert again.returncode == 0, again.stderr[-4000:]


def test_a_spec_the_lock_does_not_resolve_is_refused_before_any_host(host):
    proc = deploy(host, "--data", 'cuda_version="13.4"')
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert ("pins.cuda: locked for '13.3', the spec declares '13.4' (cuda_version); re-lock with `rigkit lock -i "
            "inventory/sandbox.py`") in proc.stderr
    assert "$ pyinfra" not in proc.stderr
