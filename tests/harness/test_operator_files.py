"""The operator's pacman.conf and mkinitcpio files as their own programs read them (issue 42), on a copy
of the converged host.

The operator's files are put in the shapes that broke rigkit before: a main ``mkinitcpio.conf`` with two
live HOOKS lines (the second wins), a drop-in of the operator's setting HOOKS with ``kms``,
``sd-encrypt`` and ``lvm2``, and an ``Include`` in ``[options]`` of ``pacman.conf`` whose file holds
a glob (and words after a ``#``, which pacman reads as package names) — rigkit's own pieces (its
``Include`` line, its pins file, its mkinitcpio drop-in) taken away, as on a box rigkit never saw.
The deploy converges; the effective HOOKS (the sandbox's mkinitcpio: v41's own loading lines) keep
sd-encrypt and lvm2 and lose kms; ``pacman-conf IgnorePkg`` lists the pins and the operator's entries;
the operator's files are byte for byte as they were but for the one ``Include`` line, whose backup the
output names; a second deploy changes nothing and rebuilds nothing; drift is clean. Then a preset that
names its own config holding kms, and an ``Include`` target gone: the deploy refuses before touching
anything, naming the preset, or pacman's own error (drift: one finding). A preset naming its own config
without kms (issue 57: ``ALL_config="/etc/mkinitcpio.conf"`` of install scripts) converges, its images
built from that file alone (``-c``), drift clean; so does an operator drop-in without a final newline.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[2]
RIGKIT = str(Path(sys.executable).parent / "rigkit")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402
from test_deploy import SUMMARY  # noqa: E402
from test_drift import drift  # noqa: E402

PROJECT = sandbox_project.cwd()
BUILDS = "/var/lib/fake-mkinitcpio/builds.jsonl"
OPERATOR_HOLDS = "/etc/pacman.d/operator-holds.conf"
OPERATOR_DROPIN = "/etc/mkinitcpio.conf.d/50-operator.conf"
MAIN = "/etc/mkinitcpio.conf"
SECOND_HOOKS = "HOOKS=(base systemd autodetect microcode modconf kms keyboard sd-vconsole block filesystems fsck)"
OPERATOR_HOOKS = "HOOKS=(base systemd autodetect microcode modconf kms keyboard sd-vconsole block sd-encrypt lvm2 filesystems fsck)"
#: The operator's files before the deploy (shell, run as root on the converged copy).
SETUP = f"""
set -e
rm -f /etc/rigkit/pacman-pins.conf /etc/mkinitcpio.conf.d/zz-rigkit-no-kms.conf
sed -i '\\|^Include = /etc/rigkit/pacman-pins.conf$|d' /etc/pacman.conf
printf '# held by hand\\nIgnorePkg = nvidia* linux  # the driver and kernel\\n' > {OPERATOR_HOLDS}
sed -i '/^\\[options\\]$/a Include = {OPERATOR_HOLDS}' /etc/pacman.conf
printf '%s  # the encrypted root\\n' '{SECOND_HOOKS}' >> {MAIN}
mkdir -p /etc/mkinitcpio.conf.d
printf '# LUKS on LVM\\n%s\\n' '{OPERATOR_HOOKS}' > {OPERATOR_DROPIN}
: > {BUILDS}
"""


@pytest.fixture(scope="module")
def host(make_module_host):
    return make_module_host("of", converged=True)


def deploy(host) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=host.name, HF_TOKEN=hostctl.hub_token())
    return subprocess.run([RIGKIT, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--full"], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=900)


def sha(host, *paths: str) -> dict[str, str]:
    out = host.run("sha256sum " + " ".join(paths)).stdout.split()
    return dict(zip(out[1::2], out[0::2]))


def builds(host) -> list[dict]:
    return [json.loads(ln) for ln in host.run(f"cat {BUILDS}").stdout.splitlines() if ln.strip()]


def test_the_operators_files_kept_as_they_are_pins_held_and_kms_out(host):
    pins = sorted(hostctl.MANIFEST["pins"])
    host.run(SETUP)
    pacman_before = host.run("cat /etc/pacman.conf").stdout
    before = sha(host, MAIN, OPERATOR_DROPIN, OPERATOR_HOLDS)
    # the premise: pacman already holds the driver by the operator's glob; kms is in effect
    assert "nvidia*" in host.run("pacman-conf IgnorePkg").stdout.split()

    first = deploy(host)
    assert first.returncode == 0, first.stderr[-6000:]
    # the effective HOOKS as mkinitcpio loads them (the sandbox's mkinitcpio runs v41's own loading)
    built = builds(host)
    assert len(built) == 1, built
    assert built[0]["dropins"] == ["50-operator.conf", "zz-rigkit-no-kms.conf"]
    assert built[0]["hooks"] == ("base systemd autodetect microcode modconf keyboard sd-vconsole block sd-encrypt lvm2 "
                                 "filesystems fsck").split()
    # pacman reads the pins and every entry of the operator's (the words after '#' too: pacman 6 reads them)
    held = host.run("pacman-conf IgnorePkg").stdout.split()
    assert set(pins) | {"nvidia*", "linux", "#", "the", "driver", "and", "kernel"} == set(held), held
    # the operator's files byte for byte; pacman.conf gains only rigkit's Include line, its backup named
    assert sha(host, MAIN, OPERATOR_DROPIN, OPERATOR_HOLDS) == before
    after = host.run("cat /etc/pacman.conf").stdout.splitlines(keepends=True)
    added = [ln for ln in after if ln not in pacman_before.splitlines(keepends=True)]
    assert added == ["Include = /etc/rigkit/pacman-pins.conf\n"]
    assert [ln for ln in after if ln != added[0]] == pacman_before.splitlines(keepends=True)
    backup = re.search(r"the replaced file is kept as (/etc/pacman\.conf\.rigkit-bak-\d{8}T\d{6}Z)", first.stderr)
    assert backup, first.stderr[-4000:]
    assert host.run(f"cat {backup.group(1)}").stdout == pacman_before

    second = deploy(host)
    assert second.returncode == 0, second.stderr[-6000:]
    summary = SUMMARY.search(second.stderr)
    assert summary and summary["changed"] == "0" and summary["failed"] == "0", second.stderr[-3000:]
    assert len(builds(host)) == 1  # no rebuild: the effective HOOKS did not change
    rc, records, out = drift(host=host.name)
    assert (rc, records) == (0, []), out[-3000:]


def test_a_preset_naming_its_own_config_holding_kms_is_refused_before_anything_is_touched(host):
    host.run("cp -a /etc/mkinitcpio.d/linux.preset /root/linux.preset.orig && "
             "sed -i 's|^#ALL_config=.*|ALL_config=\"/etc/mkinitcpio.conf\"|' /etc/mkinitcpio.d/linux.preset && "
             "mv /etc/mkinitcpio.conf.d/zz-rigkit-no-kms.conf /root/no-kms.conf.orig")
    try:
        before = sha(host, "/etc/pacman.conf", "/etc/rigkit/pacman-pins.conf", MAIN, OPERATOR_DROPIN)
        n = len(builds(host))
        proc = deploy(host)
        assert proc.returncode == 1, proc.stderr[-4000:]
        assert ("refusing to deploy:\n  a mkinitcpio preset names its own config holding kms "
                "(/etc/mkinitcpio.d/linux.preset: ALL_config=/etc/mkinitcpio.conf (HOOKS: ") in proc.stderr, proc.stderr[-4000:]
        assert "remove kms from that config yourself or comment that line out" in proc.stderr
        # nothing touched: no drop-in, no rebuild, the files as they were
        assert host.run("test -e /etc/mkinitcpio.conf.d/zz-rigkit-no-kms.conf", check=False).returncode != 0
        assert len(builds(host)) == n
        assert sha(host, "/etc/pacman.conf", "/etc/rigkit/pacman-pins.conf", MAIN, OPERATOR_DROPIN) == before
    finally:
        host.run("cp -a /root/linux.preset.orig /etc/mkinitcpio.d/linux.preset && "
                 "mv /root/no-kms.conf.orig /etc/mkinitcpio.conf.d/zz-rigkit-no-kms.conf")


def test_a_preset_naming_its_own_config_without_kms_converges_and_drift_is_clean(host):
    """Issue 57, item 2: the named config holds no kms, so no image has it: no refusal, the images are
    built from that file alone (the sandbox's mkinitcpio runs v41's ``-c`` path), drift is clean."""
    main = "HOOKS=(base systemd autodetect microcode modconf keyboard sd-vconsole block filesystems fsck)"
    host.run("cp -a /etc/mkinitcpio.d/linux.preset /root/linux.preset.orig && cp -a /etc/mkinitcpio.conf /root/main.orig && "
             "sed -i 's|^#ALL_config=.*|ALL_config=\"/etc/mkinitcpio.conf\"|' /etc/mkinitcpio.d/linux.preset && "
             f"printf '%s\\n' '{main}' > {MAIN} && mkinitcpio -P >/dev/null && : > {BUILDS}")
    try:
        proc = deploy(host)
        assert proc.returncode == 0, proc.stderr[-6000:]
        assert "names its own config" not in proc.stderr
        rc, records, out = drift(host=host.name)
        assert (rc, records) == (0, []), out[-3000:]
        host.run("mkinitcpio -P >/dev/null")
        built = builds(host)
        assert built and all(b["config"] == MAIN and b["dropins"] == [] and "kms" not in b["hooks"] for b in built), built
    finally:
        host.run("cp -a /root/linux.preset.orig /etc/mkinitcpio.d/linux.preset && cp -a /root/main.orig /etc/mkinitcpio.conf")


def test_an_operator_drop_in_without_a_final_newline_converges(host):
    """Issue 57, item 1: a real drop-in ending without a newline (ctlos's archiso.conf, kept byte for byte
    in the corpus) sorts before rigkit's; mkinitcpio joins them with cat. The deploy converges, the
    sandbox's mkinitcpio (v41's own loading) builds without kms, drift is clean."""
    corpus = json.loads((ROOT / "tests" / "unit" / "data" / "owner_corpus.json").read_text())
    ctlos = next(e for e in corpus["mkinitcpio"] if not e["final_newline"])
    path = f"/etc/mkinitcpio.conf.d/{ctlos['name']}"
    host.run(f"printf %s {base64.b64encode(ctlos['text'].encode()).decode()} | base64 -d > {path}")
    try:
        assert not host.run(f"cat {path}").stdout.endswith("\n")
        proc = deploy(host)
        assert proc.returncode == 0, proc.stderr[-6000:]
        rc, records, out = drift(host=host.name)
        assert (rc, records) == (0, []), out[-3000:]
        host.run(f": > {BUILDS}; mkinitcpio -P >/dev/null")
        built = builds(host)
        assert built and all(ctlos["name"] in b["dropins"] and "kms" not in b["hooks"] for b in built), built
    finally:
        host.run(f"rm -f {path}")


def test_a_missing_include_target_is_refused_naming_pacmans_error(host):
    """pacman-conf exits 1 when an ``Include`` target is missing: the deploy refuses before touching
    anything, naming pacman's own error; drift reports it as a finding (exit 3), not a crash."""
    host.run(f"mv {OPERATOR_HOLDS} /root/operator-holds.conf")
    try:
        before = sha(host, "/etc/pacman.conf", "/etc/rigkit/pacman-pins.conf", MAIN, OPERATOR_DROPIN)
        proc = deploy(host)
        assert proc.returncode == 1, proc.stderr[-4000:]
        assert (f"pacman cannot read its configuration (pacman-conf IgnorePkg: error: config file {OPERATOR_HOLDS} "
                "could not be read: No such file or directory") in proc.stderr, proc.stderr[-4000:]
        assert sha(host, "/etc/pacman.conf", "/etc/rigkit/pacman-pins.conf", MAIN, OPERATOR_DROPIN) == before
        rc, records, out = drift(host=host.name)
        assert rc == 3, out[-3000:]
        assert [(r["kind"], r["item"]) for r in records] == [("pin-held", "/etc/pacman.conf")], records
        assert OPERATOR_HOLDS in records[0]["actual"]
    finally:
        host.run(f"mv /root/operator-holds.conf {OPERATOR_HOLDS}")


def test_an_operators_systemd_cgroup_driver_as_dockerd_reads_it_in_drift_and_the_deploy(host):
    """Issue 57, item 4, with the real dockerd (Debian's docker.io 20.10, which takes the first of a
    repeated ``native.cgroupdriver`` — moby's ``getCD`` up to docker 28): daemon.json as rigkit's
    earlier list union left it over an operator's systemd driver (systemd, then cgroupfs). docker itself
    says ``systemd`` (``docker info --format '{{.CgroupDriver}}'``): the mitigation is off. Drift, which
    said clean before, reports the operator's entry and docker's answer; the deploy refuses before
    touching anything, naming the entry."""
    host.run("cp -a /etc/docker/daemon.json /root/daemon.json.orig")
    edit = ("import json; p='/etc/docker/daemon.json'; d=json.load(open(p)); "
            "d['exec-opts']=['native.cgroupdriver=systemd']+[o for o in d.get('exec-opts',[]) if o!='native.cgroupdriver=systemd']; "
            "json.dump(d, open(p,'w'), indent=4)")
    try:
        host.run(f"python3 -c \"{edit}\" && systemctl restart docker.service")
        opts = json.loads(host.run("cat /etc/docker/daemon.json").stdout)["exec-opts"]
        assert opts == ["native.cgroupdriver=systemd", "native.cgroupdriver=cgroupfs"], opts
        assert host.run("docker info --format '{{.CgroupDriver}}'").stdout.strip() == "systemd"  # the owner's answer
        rc, records, out = drift(host=host.name)
        assert rc == 3, out[-3000:]
        found = {r["item"]: r["actual"] for r in records if r["kind"] == "daemon.json"}
        assert found["exec-opts"].startswith("/etc/docker/daemon.json: exec-opts sets native.cgroupdriver=systemd"), records
        assert found["docker's cgroup driver (docker info)"].startswith("systemd: the cgroup mitigation is not in effect")
        before = sha(host, "/etc/docker/daemon.json")
        proc = deploy(host)
        assert proc.returncode == 1, proc.stderr[-4000:]
        assert "refusing to deploy:" in proc.stderr and "exec-opts sets native.cgroupdriver=systemd" in proc.stderr
        assert sha(host, "/etc/docker/daemon.json") == before
    finally:
        host.run("cp -a /root/daemon.json.orig /etc/docker/daemon.json && systemctl restart docker.service")
    assert host.run("docker info --format '{{.CgroupDriver}}'").stdout.strip() == "cgroupfs"
