#!/usr/bin/env python3
"""Debian's real Docker engine for the sandbox mirror: the pinned .debs, fetched once and unpacked.

``python tests/harness/debs.py`` prints the directory holding one unpacked tree per package
(``<cache>/debs-<key>/<package>/``, the ``dpkg-deb -x`` of each); ``build_mirror.py`` copies the
engine's files from there into the Arch-shaped ``docker``, ``containerd``, ``runc`` and
``iptables`` packages. Nothing is installed on the control machine: ``apt-get download`` (it checks
each file against the signed Release of the configured Debian mirror) then ``dpkg-deb -x``.

Pins (Debian 12 "bookworm", measured on this machine with ``apt-cache policy``): :data:`DEBS`.
The cache (``$RIGKIT_HARNESS_CACHE``, default ``${RIGKIT_CACHE:-~/.cache/rigkit}/harness``) is keyed
by the pins, so a warm run does no network I/O; a cold one fetches ~70 MB (0.5-5 s here).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# package -> exact Debian version (bookworm + bookworm-security/updates as of 2026-12)
DEBS = {
    "docker.io": "20.10.24+dfsg1-1+deb12u1+b6",
    "containerd": "1.6.20~ds1-1+deb12u3",
    "runc": "1.1.5+ds1-1+deb12u1",
    "tini": "0.19.0-1+b3",
    "iptables": "1.8.9-2",
    "libip4tc2": "1.8.9-2",
    "libip6tc2": "1.8.9-2",
    "libxtables12": "1.8.9-2",
    "libnftnl11": "1.2.4-2",
    "libnetfilter-conntrack3": "1.0.9-3",
    "libnfnetlink0": "1.0.2-2",
    "libmnl0": "1.0.4-3",
    "libdevmapper1.02.1": "2:1.02.185-2",
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
SETS = {"engine": DEBS, "image": IMAGE_DEBS, "metrics": METRICS_DEBS}


def cache_dir() -> Path:
    if os.environ.get("RIGKIT_HARNESS_CACHE"):
        return Path(os.environ["RIGKIT_HARNESS_CACHE"])
    return Path(os.environ.get("RIGKIT_CACHE") or Path.home() / ".cache" / "rigkit") / "harness"


def key(pins: dict) -> str:
    return hashlib.sha256("\n".join(f"{k}={v}" for k, v in sorted(pins.items())).encode()).hexdigest()[:16]


def unpacked(which: str = "engine") -> Path:
    """The directory of unpacked packages of set ``which`` (:data:`SETS`), fetching and unpacking
    them when missing."""
    DEBS = SETS[which]
    out = cache_dir() / f"debs-{key(DEBS)}"
    if (out / ".complete").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="debs-", dir=out.parent))
    try:
        dl = tmp / "dl"
        dl.mkdir()
        os.chmod(dl, 0o777)  # apt drops to _apt for downloads
        want = [f"{p}={v}" for p, v in DEBS.items()]
        r = subprocess.run(["apt-get", "download", "-q", *want], cwd=dl, capture_output=True, text=True)
        if r.returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            r = subprocess.run(["apt-get", "download", "-q", *want], cwd=dl, capture_output=True, text=True)
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
