#!/usr/bin/env python3
"""Debian's real Docker engine for the sandbox mirror: the pinned .debs, fetched once and unpacked.

``python tests/harness/debs.py [SET]`` prints the directory holding one unpacked tree per package
(``<cache>/debs-<key>/<package>/``, the ``dpkg-deb -x`` of each); ``build_mirror.py`` copies the
engine's files from there into the Arch-shaped ``docker``, ``containerd``, ``runc`` and
``iptables`` packages. Nothing is installed on the control machine: ``apt-get download`` (it checks
each file against the signed Release of the Debian mirror) then ``dpkg-deb -x``.

Each set comes from one Debian suite (:data:`SUITES`). The engine runs on the fake-Arch host, whose root
is Debian 13 "trixie" (rootfs.sh; issue 58: pacman 7, systemd 257, Docker 26), so it is trixie's and needs
trixie's libc; the control machine's apt lists only bookworm, so trixie's packages are fetched through a
private apt configuration (``<cache>/apt-trixie/``: its own sources list, lists and cache; signed by the
machine's ``debian-archive-keyring``, which holds trixie's keys). The registry runs on the control machine
(the fixtures namespace) and the model images carry their own Debian 12 root: those stay bookworm's, from
the machine's own apt. Pins (``apt-cache policy``): :data:`DEBS` and the other sets. The cache
(``$RIGKIT_HARNESS_CACHE``, default ``${RIGKIT_CACHE:-~/.cache/rigkit}/harness``) is keyed by the pins and
the suite, so a warm run does no network I/O; a cold one fetches ~70 MB.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# package -> exact Debian version: trixie (13.x) as of 2026-12, the fake-Arch host's own release.
# docker.io no longer carries the CLI (trixie's docker-cli does) and ships docker-init -> tini-static.
DEBS = {
    "docker.io": "26.1.5+dfsg1-9+deb13u1+b1",
    "docker-cli": "26.1.5+dfsg1-9+deb13u1+b1",
    "containerd": "1.7.24~ds1-6+deb13u1",
    "runc": "1.1.15+ds1-2+b4",
    "tini": "0.19.0-3+b8",
    "iptables": "1.8.11-2",
    "libip4tc2": "1.8.11-2",
    "libip6tc2": "1.8.11-2",
    "libxtables12": "1.8.11-2",
    "libnftnl11": "1.2.9-1",
    "libnetfilter-conntrack3": "1.1.0-1",
    "libnfnetlink0": "1.0.2-3",
    "libmnl0": "1.0.5-3",
}
# the sandbox registry, run on the control machine (bookworm) in the fixtures namespace
REGISTRY_DEBS = {
    "docker-registry": "2.8.2+ds1-1",
}

# the model images' minimal root (images.py): Python 3.11 and the C/C++ runtime llama.cpp's server needs
IMAGE_DEBS = {
    "libc6": "2.36-9+deb12u14",
    "libgcc-s1": "12.2.0-14+deb12u1",
    "libgomp1": "12.2.0-14+deb12u1",
    "libstdc++6": "12.2.0-14+deb12u1",
    "zlib1g": "1:1.2.13.dfsg-1+deb12u1",
    "libexpat1": "2.5.0-1+deb12u5",
    "libffi8": "3.4.4-1",
    "libbz2-1.0": "1.0.8-5+b1",
    "liblzma5": "5.4.1-1+deb12u2",
    "libcrypt1": "1:4.4.33-2",
    "libssl3": "3.0.22-1~deb12u2",
    "libuuid1": "2.38.1-5+deb12u3",
    "libsqlite3-0": "3.40.1-2+deb12u2",
    "python3.11-minimal": "3.11.2-6+deb12u9",
    "libpython3.11-minimal": "3.11.2-6+deb12u9",
    "libpython3.11-stdlib": "3.11.2-6+deb12u9",
    "media-types": "10.0.0",
}
# issue 47: the real node_exporter the sandbox host runs (its textfile collector reads rigkit's *.prom files)
# and promtool, taken from Debian's ``prometheus`` package and run on the control side only (``promtool check
# metrics`` / ``check rules``), never installed as a service
METRICS_DEBS = {
    "prometheus-node-exporter": "1.5.0-1+b6",
    "prometheus": "2.42.0+ds-5+deb12u1",
}
SETS = {"engine": DEBS, "registry": REGISTRY_DEBS, "image": IMAGE_DEBS, "metrics": METRICS_DEBS}
#: the Debian suite each set comes from; None: the control machine's own apt (bookworm)
SUITES = {"engine": "trixie", "registry": None, "image": None, "metrics": None}
DEBIAN_MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def cache_dir() -> Path:
    if os.environ.get("RIGKIT_HARNESS_CACHE"):
        return Path(os.environ["RIGKIT_HARNESS_CACHE"])
    return Path(os.environ.get("RIGKIT_CACHE") or Path.home() / ".cache" / "rigkit") / "harness"


def key(pins: dict, suite: str | None = None) -> str:
    text = "\n".join(f"{k}={v}" for k, v in sorted(pins.items())) + (f"\nsuite={suite}" if suite else "")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def apt_env(suite: str | None) -> dict:
    """The environment ``apt-get`` runs with for ``suite``: the machine's own (None), or ``APT_CONFIG``
    naming a private configuration for that suite under the cache (made once; its lists fetched with
    ``apt-get update`` when it has none yet)."""
    env = dict(os.environ)
    if suite is None:
        return env
    d = cache_dir() / f"apt-{suite}"
    conf = d / "apt.conf"
    if not conf.is_file():
        for sub in ("lists/partial", "cache/archives/partial", "etc/sources.list.d", "etc/preferences.d"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "etc/sources.list").write_text(f"deb [signed-by={KEYRING}] {DEBIAN_MIRROR} {suite} main\n")
        (d / "status").touch()
        conf.write_text("".join(f'{k} "{v}";\n' for k, v in (
            ("Dir::Etc::SourceList", d / "etc/sources.list"), ("Dir::Etc::SourceParts", d / "etc/sources.list.d"),
            ("Dir::Etc::Preferences", d / "etc/preferences"), ("Dir::Etc::PreferencesParts", d / "etc/preferences.d"),
            ("Dir::State::Lists", d / "lists"), ("Dir::Cache", d / "cache"), ("Dir::State::status", d / "status"),
            ("APT::Architecture", "amd64"))))
    env["APT_CONFIG"] = str(conf)
    if not any((d / "lists").glob("*_Packages*")):
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    return env


def unpacked(which: str = "engine") -> Path:
    """The directory of unpacked packages of set ``which`` (:data:`SETS`), fetching and unpacking
    them when missing."""
    DEBS, suite = SETS[which], SUITES[which]
    out = cache_dir() / f"debs-{key(DEBS, suite)}"
    if (out / ".complete").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="debs-", dir=out.parent))
    try:
        dl = tmp / "dl"
        dl.mkdir()
        os.chmod(dl, 0o777)  # apt drops to _apt for downloads
        want = [f"{p}={v}" for p, v in DEBS.items()]
        env = apt_env(suite)
        r = subprocess.run(["apt-get", "download", "-q", *want], cwd=dl, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
            r = subprocess.run(["apt-get", "download", "-q", *want], cwd=dl, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise SystemExit(f"apt-get download {' '.join(want)} exited {r.returncode}: {r.stderr.strip()}")
        for p in DEBS:
            debs = sorted(dl.glob(f"{p}_*.deb"))
            if len(debs) != 1:
                raise SystemExit(f"apt-get download gave {len(debs)} files for {p}")
            subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(tmp / p)], check=True)
        shutil.rmtree(dl)
        (tmp / ".complete").write_text("".join(f"{k} {v}\n" for k, v in DEBS.items()))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    print(unpacked(sys.argv[1] if len(sys.argv) > 1 else "engine"))
    sys.exit(0)
