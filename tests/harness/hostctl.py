#!/usr/bin/env python3
"""Sandbox hosts for rigkit: fake Arch GPU boxes in two lanes, and the fixtures namespace.

usage: hostctl.py up NAME [--lane nspawn|chroot]   bring a host up (idempotent); prints its inventory data (JSON)
       hostctl.py down NAME                         stop it and remove its root, namespace and veths
       hostctl.py status [NAME]                     JSON status of one host or all
       hostctl.py clean [--prefix P]                remove hosts whose name starts with P (default: all) and
                                                    leftovers of a failed run; the fixtures namespace goes
                                                    when no host is left
       hostctl.py fixtures-up | fixtures-down
       hostctl.py hub-token                          print the token the sandbox hub accepts
       hostctl.py reach NAME                         print the ssh command that reaches an nspawn host

Network (DESIGN.md "Reaching services"; only 10.231.0.0/16, only namespaces created here). The names and
addresses below are the default; RIGKIT_HARNESS_NET=N moves a session to 10.N.0.0/16, "rkfxN" and
"rkNh<n>" (netcfg.py) so that two sessions on one machine never meet:
  fixtures namespace "rkfx": serves the pacman mirror over HTTP on 10.231.255.1:80 (an address on its lo)
    control side  rkfx-c 10.231.0.1/30  <->  rkfx-f 10.231.0.2/30; route 10.231.255.1/32 via 10.231.0.2
  nspawn host with index n (1..250), network namespace "rkh<n>":
    control side  rkh<n>-c 10.231.n.1/30 <-> rkh<n>-h 10.231.n.2/30   (sshd listens on 10.231.n.2:22)
    fixtures side rkh<n>-f 10.231.n.5/30 <-> rkh<n>-x 10.231.n.6/30   (route 10.231.255.1/32 via 10.231.n.5)
  127.0.0.1 inside a host is the host's own (the rig's ports are free in every host).
  The chroot lane shares the CI machine's namespace and reaches the mirror through the control veth.
Nothing listens on a non-loopback address of the CI machine's own namespace.

State: ${RIGKIT_HARNESS_STATE:-/var/lib/rigkit-harness}/hosts/<name>/{root,meta.json,console.log}.
Cache: $RIGKIT_HARNESS_CACHE, default ${RIGKIT_CACHE:-~/.cache/rigkit}/harness (root tarball, mirror,
the harness ssh key).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATE = Path(os.environ.get("RIGKIT_HARNESS_STATE", "/var/lib/rigkit-harness"))
CACHE = Path(os.environ.get("RIGKIT_HARNESS_CACHE")
             or Path(os.environ.get("RIGKIT_CACHE") or Path.home() / ".cache" / "rigkit") / "harness")
# fixed at import: tests/conftest.py points RIGKIT_CACHE at a per-session temp dir later on, and the
# root tarball must still come from the real cache
os.environ["RIGKIT_HARNESS_CACHE"] = str(CACHE)
sys.path.insert(0, str(HERE))
from netcfg import BLOCK, FIX_ADDR, FIX_NS, FIX_URL, HOST_NS, NET, manifest  # noqa: E402,F401

SSH_USER = "rig"
MANIFEST = manifest()
TIMINGS: dict[str, float] = {}


def log(msg: str) -> None:
    print(f"[harness] {msg}", file=sys.stderr, flush=True)


@contextmanager
def timed(step: str):
    t0 = time.monotonic()
    try:
        yield
    finally:
        TIMINGS[step] = round(time.monotonic() - t0, 2)


def sh(*cmd: str, check: bool = True, quiet: bool = False, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("text", True)
    if quiet:
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.DEVNULL)
    return subprocess.run(list(cmd), check=check, **kw)


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip", "-n", ns, *args] if ns else ["ip", *args]
    return sh(*cmd, check=check, capture_output=True)


@contextmanager
def lock():
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def netns_exists(ns: str) -> bool:
    return Path(f"/run/netns/{ns}").exists()


def link_exists(name: str) -> bool:
    return ip("link", "show", name, check=False).returncode == 0


# --- build inputs --------------------------------------------------------------------------------

def ssh_key() -> Path:
    key = CACHE / "id_ed25519"
    if not key.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rigkit-harness", "-f", str(key))
    return key


def rootfs_tarball() -> Path:
    with timed("rootfs tarball"):
        out = sh("bash", str(HERE / "rootfs.sh"), capture_output=True).stdout.strip().splitlines()[-1]
    return Path(out)


def mirror_dir() -> Path:
    with timed("mirror"):
        out = sh(sys.executable, str(HERE / "build_mirror.py"), capture_output=True).stdout.strip()
    return Path(out)


# --- the fixtures namespace ----------------------------------------------------------------------

def fixtures_www() -> Path:
    return STATE / "fixtures-www"


def fixtures_up() -> None:
    """Idempotent, and complete when it returns: the namespace, its control veth, the mirror published,
    the llama-swap release beside it (:func:`release_up`), the HTTP server running, the test hub
    serving its repos and the registry holding the sandbox images (:func:`registry_up`). Call it under
    :func:`lock` (:func:`fixtures_up_locked`): every test and tool that needs a fixture asks for it
    this way, so none depends on another module (or lane) having filled them first."""
    mirror = mirror_dir()
    www = fixtures_www()
    www.mkdir(parents=True, exist_ok=True)
    for part in ("core", "extra", "archive", "mirror.json"):
        link = www / part
        if link.is_symlink() or link.exists():
            if link.is_symlink() and os.readlink(link) == str(mirror / part):
                continue
            link.unlink()
        link.symlink_to(mirror / part)
    if not netns_exists(FIX_NS):
        ip("netns", "add", FIX_NS)
    ip("link", "set", "lo", "up", ns=FIX_NS)
    ip("addr", "replace", f"{FIX_ADDR}/32", "dev", "lo", ns=FIX_NS)
    if not link_exists(f"{FIX_NS}-c"):
        ip("link", "add", f"{FIX_NS}-c", "type", "veth", "peer", "name", f"{FIX_NS}-f", "netns", FIX_NS)
        ip("addr", "add", f"{BLOCK}.0.1/30", "dev", f"{FIX_NS}-c")
        ip("addr", "add", f"{BLOCK}.0.2/30", "dev", f"{FIX_NS}-f", ns=FIX_NS)
        ip("link", "set", f"{FIX_NS}-c", "up")
        ip("link", "set", f"{FIX_NS}-f", "up", ns=FIX_NS)
    ip("route", "replace", f"{FIX_ADDR}/32", "via", f"{BLOCK}.0.2", "dev", f"{FIX_NS}-c")
    release_up()
    pidf = STATE / "fixtures.pid"
    pid = int(pidf.read_text()) if pidf.exists() else None
    if not pid_alive(pid):
        p = subprocess.Popen(["ip", "netns", "exec", FIX_NS, sys.executable, str(HERE / "fixtures_server.py"),
                              str(www), "0.0.0.0", "80", str(STATE / "fixtures.log")],
                             start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=open(STATE / "fixtures.err", "a"))
        pidf.write_text(str(p.pid))
        wait_tcp(FIX_ADDR, 80, 15, what="fixtures HTTP server")
    hub_up()
    registry_up()


def release_up() -> None:
    """The llama-swap release tarball in ``fixtures-www/releases/`` (what ``inventory/sandbox.py``'s
    ``release_url`` names): the real v250 from ``llama_swap_release.py``'s cached build, packed as
    upstream's asset; rewritten only when the cached build it came from changed (``.built-from``).
    Where no Go toolchain or source can build it, a tarball already there is kept (``make
    sandbox-fixtures`` wrote it); without one this raises RuntimeError with the ``BLOCKED:`` reasons."""
    import llama_swap_release as lsr

    out = fixtures_www() / "releases"
    tarball, stamp = out / lsr.ASSET, out / ".built-from"
    try:
        src = lsr.binary_dir()
    except RuntimeError as e:
        if tarball.is_file():
            log(f"llama-swap release: kept {tarball} (no build here: {str(e).splitlines()[0]})")
            return
        raise RuntimeError("\n".join(f"BLOCKED: llama-swap {lsr.VERSION}: {line}" for line in str(e).splitlines())) from None
    built = f"{src}\n{(src / 'llama-swap').stat().st_mtime_ns}\n"
    if tarball.is_file() and stamp.is_file() and stamp.read_text() == built:
        return
    with timed("llama-swap release"):
        lsr.build_tarball(out, src)  # reproducible bytes, replaced atomically
        stamp.write_text(built)


# where a test tells HyperQwen's stand-in engine to fail (answer500, die_after, boot_delay_s;
# stubs/openai_stub.py): $MODELS_DIR/.sandbox-control, bound at /app/models in its container (images.py)
HQ_CONTROL = "/srv/models/hyperqwen/.sandbox-control"
REGISTRY_NAMES = ("ghcr.io",)  # the registries the rig pulls from, answered by the sandbox registry


def fixtures_up_locked() -> None:
    """:func:`fixtures_up` under the harness lock (what ``host_up`` does before a host)."""
    with lock():
        fixtures_up()


def registry_tls() -> Path:
    """A test CA and the registry's certificate for REGISTRY_NAMES and FIX_ADDR (openssl; made once
    per state directory, kept in $STATE/registry/tls)."""
    d = STATE / "registry" / "tls"
    if (d / "server.crt").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj", "/CN=rigkit sandbox test CA",
       "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"), quiet=True)
    sans = ",".join([f"DNS:{n}" for n in REGISTRY_NAMES] + [f"IP:{FIX_ADDR}"])
    sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={REGISTRY_NAMES[0]}",
       "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"), quiet=True)
    (d / "ext.cnf").write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\n")
    sh("openssl", "x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
       "-CAcreateserial", "-days", "3650", "-extfile", str(d / "ext.cnf"), "-out", str(d / "server.crt"), quiet=True)
    return d


def registry_up() -> None:
    """Debian's docker-registry (distribution 2.8.2) in the fixtures namespace on FIX_ADDR:443 (TLS,
    the test CA), storage in $STATE/registry/data; the sandbox images (images.py) pushed to it and
    their digests written to $STATE/fixtures-www/images.json ({repository: "sha256:..."}), which
    inventory/sandbox.py pins."""
    sys.path.insert(0, str(HERE))
    import debs

    tls = registry_tls()
    binary = debs.unpacked("registry") / "docker-registry" / "usr/bin/docker-registry"
    conf = STATE / "registry" / "config.yml"
    conf.write_text("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
                    f"{STATE / 'registry' / 'data'}\n  delete:\n    enabled: false\nhttp:\n  addr: {FIX_ADDR}:443\n"
                    f"  tls:\n    certificate: {tls / 'server.crt'}\n    key: {tls / 'server.key'}\n")
    pidf = STATE / "registry.pid"
    pid = int(pidf.read_text()) if pidf.exists() else None
    if not pid_alive(pid):
        with timed("registry up"):
            p = subprocess.Popen(fixtures_exec(str(binary), "serve", str(conf)), start_new_session=True,
                                 stdin=subprocess.DEVNULL, stdout=open(STATE / "registry.log", "a"), stderr=subprocess.STDOUT)
            pidf.write_text(str(p.pid))
            wait_tcp(FIX_ADDR, 443, 30, what="sandbox registry")
    out = fixtures_www() / "images.json"
    venv_python = HERE.parent.parent / ".venv" / "bin" / "python"
    h = hashlib.sha256()
    for p in (HERE / "images.py", HERE / "debs.py", HERE / "stubs/openai_stub.py", HERE / "stubs/hyperqwen_prepare.py"):
        h.update(p.read_bytes())
    h.update(str(sorted((str(p), p.stat().st_size) for p in HERE.parent.parent.glob(
        ".venv/lib/python3.11/site-packages/xllamacpp/*"))).encode())
    keyf = STATE / "registry" / "images.key"
    if out.exists() and keyf.exists() and keyf.read_text() == h.hexdigest():
        return  # this registry already holds these images
    with timed("images"):
        r = sh(str(venv_python), str(HERE / "images.py"), "push", f"https://{FIX_ADDR}", str(tls / "ca.crt"),
               capture_output=True)
    out.write_text(r.stdout)
    keyf.write_text(h.hexdigest())


HUB_PORT, HUB_CDN_PORT = 8000, 8001
HUB_URL = f"http://{FIX_ADDR}:{HUB_PORT}"


def hub_token() -> str:
    """The token the sandbox hub accepts (a private hub, like a gated repo): made once per machine,
    kept in $STATE/hub.token (0600). `make demo` and the tests pass it as HF_TOKEN."""
    path = STATE / "hub.token"
    if not path.exists():
        # every lane imports a module that reads it: written whole under a name of its own, then linked
        # in place (a link fails when another process got there first, whose token then stands), so no
        # reader ever sees a half-written or empty token
        STATE.mkdir(parents=True, exist_ok=True)
        tmp = STATE / f".hub.token.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, ("hf_sandbox" + os.urandom(16).hex()).encode())
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


def hub_up() -> None:
    """The test hub (tests/hub/server.py) in the fixtures namespace on FIX_ADDR:8000 (its CDN on
    :8001), serving the sandbox's tiny repos privately (token: :func:`hub_token`); it needs the
    project's venv (gguf, numpy)."""
    pidf, keyf = STATE / "hub.pid", STATE / "hub.key"
    pid = int(pidf.read_text()) if pidf.exists() else None
    key = hub_key()
    if pid_alive(pid):
        if keyf.is_file() and keyf.read_text() == key:
            return
        # a hub started from other sources (another checkout, or tests/hub changed since: its repos'
        # commits are other ones, and a lock resolved against this checkout's hub would meet 404s)
        log("hub: started from other sources; restarting it")
        kill_group(pid)
        pidf.unlink(missing_ok=True)
    if not (keyf.is_file() and keyf.read_text() == key):
        # the server writes its repos into an empty --root only: repos written from other sources stay
        shutil.rmtree(STATE / "hub", ignore_errors=True)
    venv_python = HERE.parent.parent / ".venv" / "bin" / "python"
    if not venv_python.exists():
        log("hub: no project venv yet (make venv); the test hub is not started")
        return
    hub_token()
    with timed("hub up"):
        p = subprocess.Popen(["ip", "netns", "exec", FIX_NS, str(venv_python), "-m", "tests.hub.server",
                              "--root", str(STATE / "hub"), "--host", FIX_ADDR, "--port", str(HUB_PORT),
                              "--cdn-port", str(HUB_CDN_PORT), "--token-file", str(STATE / "hub.token")],
                             cwd=str(HERE.parent.parent), start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=open(STATE / "hub.log", "a"), stderr=subprocess.STDOUT)
        pidf.write_text(str(p.pid))
        keyf.write_text(key)
        wait_tcp(FIX_ADDR, HUB_PORT, 60, what="test hub")


def hub_key() -> str:
    """What the running hub was started from: this checkout's path and the sha256 of the sources its
    repos and their commits are generated from (tests/hub, and tests/bench/tiny_gguf.py for the GGUFs)."""
    h = hashlib.sha256(str(HERE.parent.parent.resolve()).encode())
    for f in [*sorted((HERE.parent / "hub").glob("*.py")), HERE.parent / "bench" / "tiny_gguf.py"]:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def fixtures_down() -> None:
    reg_pid = STATE / "registry.pid"
    if reg_pid.exists():
        kill_group(int(reg_pid.read_text()))
        reg_pid.unlink()
    hub_pid = STATE / "hub.pid"
    if hub_pid.exists():
        kill_group(int(hub_pid.read_text()))
        hub_pid.unlink()
    pidf = STATE / "fixtures.pid"
    if pidf.exists():
        kill_group(int(pidf.read_text()))
        pidf.unlink()
    ip("route", "del", f"{FIX_ADDR}/32", check=False)
    if link_exists(f"{FIX_NS}-c"):
        ip("link", "del", f"{FIX_NS}-c", check=False)
    if netns_exists(FIX_NS):
        ip("netns", "del", FIX_NS, check=False)


def fixtures_exec(*cmd: str) -> list[str]:
    """The argv prefix that runs CMD inside the fixtures namespace (for other fixture servers)."""
    return ["ip", "netns", "exec", FIX_NS, *cmd]


def wait_tcp(addr: str, port: int, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection((addr, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer on {addr}:{port} within {timeout:.0f} s")


def kill_group(pid: int, timeout: float = 10.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:  # reap it if it is our own child (pytest starts hosts in-process): a zombie keeps the group
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


# --- the root --------------------------------------------------------------------------------------

def mounts_under(root: Path) -> list[str]:
    r = str(root)
    res = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        mp = line.split()[1].replace("\\040", " ")
        if mp == r or mp.startswith(r + "/"):
            res.append(mp)
    return sorted(res, key=len, reverse=True)


def chroot_mounts(root: Path, up: bool) -> None:
    """arch-chroot style API mounts (self-bind so pacman's CheckSpace finds '/', proc, sys, dev, run, tmp)."""
    if up:
        if str(root) not in mounts_under(root):
            sh("mount", "--bind", str(root), str(root))
        for fs, sub, opts in (("proc", "proc", ["-t", "proc"]), ("sys", "sys", ["-t", "sysfs", "-o", "ro"]),
                              ("/dev", "dev", ["--bind"]), ("run", "run", ["-t", "tmpfs", "-o", "mode=755"]),
                              ("tmp", "tmp", ["-t", "tmpfs", "-o", "mode=1777"])):
            if str(root / sub) not in mounts_under(root):
                sh("mount", *opts, fs, str(root / sub))
    else:
        for mp in mounts_under(root):
            sh("umount", "-l", mp, check=False)


def unpack(root: Path) -> None:
    tarball = rootfs_tarball()
    with timed("unpack"):
        root.mkdir(parents=True)
        root.chmod(0o755)
        sh("bash", "-c", f"zstd -dc '{tarball}' | tar -C '{root}' --numeric-owner -xf -")


def copy_root(src: Path, root: Path) -> None:
    """Copy a powered-off host's root (the converged golden copy, :mod:`golden`) to ``root``:
    ``cp -a --reflink=auto`` keeps ownership, modes, xattrs, hard links and nanosecond mtimes
    (the model records compare ``mtime_ns``, host/fetch.py; GNU tar's default would round them),
    and dockerd's overlay2 store is a plain directory tree again (it cannot run on an overlayfs
    upper dir, so an overlay mount is no substitute)."""
    with timed("copy converged root"):
        root.parent.mkdir(parents=True, exist_ok=True)
        if not take_spare(src, root):
            sh("cp", "-a", "--reflink=auto", str(src), str(root))


#: this process's spare copies being made (:func:`copy_spare`): spare folder -> its ``cp`` process
_SPARE_COPIES: dict[Path, subprocess.Popen] = {}


def _spare(src: Path) -> Path:
    """The folder of this lane's (``RIGKIT_HARNESS_PREFIX``) spare copy of root ``src``: ``$STATE/spares/<prefix><hash>``."""
    return STATE / "spares" / (os.environ.get("RIGKIT_HARNESS_PREFIX", "") + hashlib.sha256(str(src).encode()).hexdigest()[:12])


def copy_spare(src: Path) -> None:
    """Start copying root ``src`` (``cp -a``, as :func:`copy_root`) into this lane's spare in the background,
    for its next host copied from ``src`` (:func:`take_spare`): a lane's next module then finds its root
    made while the previous module's tests ran (a copy took 9-19 s on 2 busy cores, each module's lane
    waiting for it). Made in ``<spare>.partial`` and renamed whole when complete."""
    spare = _spare(src)
    part = spare.with_name(spare.name + ".partial")
    drop_spares(spare.name)
    part.mkdir(parents=True)
    _SPARE_COPIES[spare] = subprocess.Popen(
        ["sh", "-c", 'cp -a --reflink=auto "$1" "$2/root" && mv "$2" "$3"', "copy_spare", str(src), str(part), str(spare)],
        start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def take_spare(src: Path, root: Path) -> bool:
    """Move this lane's spare copy of ``src`` (:func:`copy_spare`; waiting for its ``cp`` when it is still
    at work) to ``root``. Returns False when there is none (``root`` untouched)."""
    spare = _spare(src)
    proc = _SPARE_COPIES.pop(spare, None)
    if proc is not None:
        proc.wait()
    if not (spare / "root").is_dir():
        return False
    (spare / "root").rename(root)
    spare.rmdir()
    return True


def drop_spares(prefix: str) -> None:
    """Remove the spares (complete or being made) whose folder name starts with ``prefix``: their ``cp``
    stopped, the folders discarded (:func:`discard`)."""
    for spare, proc in list(_SPARE_COPIES.items()):
        if spare.name.startswith(prefix):
            kill_group(proc.pid)
            del _SPARE_COPIES[spare]
    for d in (STATE / "spares").glob(f"{prefix}*") if (STATE / "spares").is_dir() else []:
        discard(d)


def repersonalize(root: Path, name: str, sshd_addr: str) -> None:
    """What is per host in a copied root: hostname and /etc/hosts, the address sshd listens on,
    fresh SSH host keys and a fresh machine-id (the journal and D-Bus key on it)."""
    with timed("re-personalize"):
        _identity(root, name)
        (root / "etc/ssh/sshd_config.d/rigkit-sandbox.conf").write_text(_sshd_conf(sshd_addr))
        for k in (root / "etc/ssh").glob("ssh_host_*"):
            k.unlink()
        sh("chroot", str(root), "ssh-keygen", "-A", quiet=True)
        (root / "etc/machine-id").write_text(os.urandom(16).hex() + "\n")


def _identity(root: Path, name: str) -> None:
    """Hostname, /etc/hosts (the rig's registries answered by the sandbox registry) and its CA."""
    (root / "etc/hostname").write_text(name + "\n")
    (root / "etc/hosts").write_text(f"127.0.0.1\tlocalhost\n127.0.1.1\t{name}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                                    + "".join(f"{FIX_ADDR}\t{n}\n" for n in REGISTRY_NAMES))
    for n in REGISTRY_NAMES:
        certs = root / "etc/docker/certs.d" / n
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(registry_tls() / "ca.crt", certs / "ca.crt")


def _sshd_conf(sshd_addr: str | None) -> str:
    conf = ["Port 22", "PermitRootLogin prohibit-password", "PasswordAuthentication no", "UseDNS no"]
    conf.append(f"ListenAddress {sshd_addr}" if sshd_addr else "ListenAddress 127.0.0.1")
    return "\n".join(conf) + "\n"


def personalize(root: Path, name: str, sshd_addr: str | None) -> None:
    mirror = mirror_dir()
    with timed("personalize"):
        _identity(root, name)
        (root / "etc/pacman.d/mirrorlist").write_text(
            "## rigkit sandbox: the fixtures namespace's mirror\nServer = " + FIX_URL + "/$repo/os/$arch\n")
        sh("cp", "-a", f"{HERE / 'overlay'}/.", str(root))
        # reboot/poweroff/halt/shutdown dispatch on argv[0]: keep them on the real systemctl, not the shim
        for tool in ("reboot", "poweroff", "halt", "shutdown"):
            for d in ("usr/sbin", "sbin"):
                p = root / d / tool
                if p.is_symlink():
                    p.unlink()
                    p.symlink_to("/usr/bin/systemctl.real")
        pub = ssh_key().with_suffix(".pub").read_text()
        for user, home in (("root", "/root"), (SSH_USER, f"/home/{SSH_USER}")):
            d = root / home.lstrip("/") / ".ssh"
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            (d / "authorized_keys").write_text(pub)
            (d / "authorized_keys").chmod(0o600)
            sh("chroot", str(root), "chown", "-R", f"{user}:", f"{home}/.ssh")
        (root / "etc/ssh/sshd_config.d/rigkit-sandbox.conf").write_text(_sshd_conf(sshd_addr))
        sh("chroot", str(root), "ssh-keygen", "-A", quiet=True)
    with timed("base packages"):
        # a real Arch install is never empty: install the placeholder base set from the mirror, from outside
        conf = root / "tmp/rigkit-pacman.conf"
        conf.write_text("[options]\nArchitecture = auto\nSigLevel = Never\n"
                        f"[core]\nServer = file://{mirror}/$repo/os/$arch\n[extra]\nServer = file://{mirror}/$repo/os/$arch\n")
        sh("pacman", "--root", str(root), "--dbpath", str(root / "var/lib/pacman"), "--config", str(conf),
           "--cachedir", str(root / "var/cache/pacman/pkg"), "--logfile", str(root / "var/log/pacman.log"),
           "--hookdir", str(root / "etc/pacman.d/hooks"), "--noconfirm", "--needed", "-Sy", *MANIFEST["base_set"],
           capture_output=True)
        conf.unlink()
        # the sync DBs just fetched point at file://; the host refreshes them from the fixtures mirror
        shutil.rmtree(root / "var/lib/pacman/sync", ignore_errors=True)
        for p in (root / "var/cache/pacman/pkg").glob("*"):
            p.unlink()


# --- hosts -----------------------------------------------------------------------------------------

def host_dir(name: str) -> Path:
    return STATE / "hosts" / name


def read_meta(name: str) -> dict | None:
    p = host_dir(name) / "meta.json"
    return json.loads(p.read_text()) if p.exists() else None


def alloc_index() -> int:
    used = set()
    for d in (STATE / "hosts").glob("*/meta.json"):
        m = json.loads(d.read_text())
        if m.get("index"):
            used.add(m["index"])
    for n in range(1, 251):
        if n not in used and not netns_exists(f"{HOST_NS}{n}") and not link_exists(f"{HOST_NS}{n}-c"):
            return n
    raise RuntimeError("no free host index (250 hosts?)")


def host_net_up(n: int) -> None:
    ns = f"{HOST_NS}{n}"
    if not netns_exists(ns):
        ip("netns", "add", ns)
    ip("link", "set", "lo", "up", ns=ns)
    if not link_exists(f"{HOST_NS}{n}-c"):
        ip("link", "add", f"{HOST_NS}{n}-c", "type", "veth", "peer", "name", f"{HOST_NS}{n}-h", "netns", ns)
        ip("addr", "add", f"{BLOCK}.{n}.1/30", "dev", f"{HOST_NS}{n}-c")
        ip("addr", "add", f"{BLOCK}.{n}.2/30", "dev", f"{HOST_NS}{n}-h", ns=ns)
        ip("link", "set", f"{HOST_NS}{n}-c", "up")
        ip("link", "set", f"{HOST_NS}{n}-h", "up", ns=ns)
    if ip("link", "show", f"{HOST_NS}{n}-f", ns=FIX_NS, check=False).returncode != 0:
        ip("link", "add", f"{HOST_NS}{n}-f", "netns", FIX_NS, "type", "veth", "peer", "name", f"{HOST_NS}{n}-x", "netns", ns)
        ip("addr", "add", f"{BLOCK}.{n}.5/30", "dev", f"{HOST_NS}{n}-f", ns=FIX_NS)
        ip("addr", "add", f"{BLOCK}.{n}.6/30", "dev", f"{HOST_NS}{n}-x", ns=ns)
        ip("link", "set", f"{HOST_NS}{n}-f", "up", ns=FIX_NS)
        ip("link", "set", f"{HOST_NS}{n}-x", "up", ns=ns)
    ip("route", "replace", f"{FIX_ADDR}/32", "via", f"{BLOCK}.{n}.5", "dev", f"{HOST_NS}{n}-x", ns=ns)
    # nspawn mounts /proc/sys read-only, so dockerd cannot switch IP forwarding on itself (it
    # fails: "Enabling IP forwarding failed: open /proc/sys/net/ipv4/ip_forward: read-only file
    # system"); it only writes the file when it is not already 1, so switch it on from outside
    sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")


def host_net_down(n: int) -> None:
    if netns_exists(f"{HOST_NS}{n}"):
        ip("netns", "del", f"{HOST_NS}{n}", check=False)  # its veth ends go with it, and so do their peers
    for link in (f"{HOST_NS}{n}-c",):
        if link_exists(link):
            ip("link", "del", link, check=False)
    if netns_exists(FIX_NS):
        ip("link", "del", f"{HOST_NS}{n}-f", ns=FIX_NS, check=False)


CGROUP_GROUP = "rigkit-harness"  # each nspawn host's cgroups: <this process's cgroup>/rigkit-harness/<host>


def cgroup_hierarchies() -> list[tuple[Path, Path]]:
    """Each cgroup hierarchy mounted at /sys/fs/cgroup or directly below it, as ``(mount point, this process's cgroup directory in it)``,
    e.g. ``(/sys/fs/cgroup/memory, /sys/fs/cgroup/memory/process_api/c947…)``; a cgroup v2-only machine
    gives one pair. Sources: ``/proc/self/mountinfo`` (fields per proc(5)) and ``/proc/self/cgroup``
    (``ID:CONTROLLERS:PATH``, cgroups(7)). Raises RuntimeError for a hierarchy whose mount does not
    show this process's cgroup (a mount rooted below it)."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        own[ctrls] = path
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, post = line.split(" - ", 1)
        fields, (fstype, _source, options) = pre.split(), post.split()[:3]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        root, mnt = fields[3], Path(fields[4])
        if mnt.parent != Path("/sys/fs/cgroup") and mnt != Path("/sys/fs/cgroup"):
            continue  # not a hierarchy's own mount
        opts = set(options.split(","))
        key = "" if fstype == "cgroup2" else next((k for k in own if k and set(k.split(",")) <= opts), None)
        if key is None or key not in own:
            continue
        path = own[key]
        if not (path + "/").startswith(root.rstrip("/") + "/") or "/../" in path + "/":
            raise RuntimeError(f"cgroup hierarchy {mnt} (root {root}) does not show this process's cgroup {path}")
        out.append((mnt, mnt / path[len(root.rstrip("/")):].lstrip("/")))
    return out


def host_cgroups(name: str) -> list[tuple[Path, Path]]:
    """``(mount point, host's own cgroup directory)`` per hierarchy for nspawn host ``name``."""
    return [(mnt, own / CGROUP_GROUP / name) for mnt, own in cgroup_hierarchies()]


def make_host_cgroups(name: str) -> list[tuple[Path, Path]]:
    """Create host ``name``'s cgroups (:func:`host_cgroups`); a v1 cpuset group gets its parent's cpus
    and mems, without which no task may join it (cgroups(7), cpuset(7))."""
    made = host_cgroups(name)
    for mnt, d in made:
        for level in (d.parent, d):
            level.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                f = level / knob
                if f.exists() and not f.read_text().strip():
                    f.write_text((level.parent / knob).read_text())
    return made


def kill_host_cgroups(name: str, timeout: float = 10.0) -> None:
    """SIGKILL every process in nspawn host ``name``'s cgroups (:func:`host_cgroups`, every level below them):
    its supervisor, systemd-nspawn, the container's systemd and all it started, Docker's containers
    included (their cgroups are below the host's). A SIGTERM to the supervisor made nspawn shut the
    container down in order, which after a module's tests took up to kill_group's 10 s before the
    SIGKILL — for a host whose root is deleted next. Repeats until no process is left (one forked
    meanwhile is killed on the next pass), for at most ``timeout`` s."""
    end = time.monotonic() + timeout
    while True:
        pids = set()
        for _mnt, d in host_cgroups(name):
            for sub, _dirs, files in os.walk(d) if d.is_dir() else []:
                if "cgroup.procs" in files:
                    try:
                        pids.update(int(x) for x in Path(sub, "cgroup.procs").read_text().split())
                    except OSError:
                        pass  # removed meanwhile
        pids.discard(os.getpid())
        if not pids or time.monotonic() > end:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, os.WNOHANG)  # the supervisor is this process's child: reap it
            except (ProcessLookupError, ChildProcessError):
                pass
        time.sleep(0.05)


def remove_host_cgroups(name: str, timeout: float = 10.0) -> None:
    """Remove host ``name``'s cgroups, deepest first, once their last task has gone (a cgroup with
    tasks cannot be removed; a killed container's processes take a moment to exit)."""
    end = time.monotonic() + timeout
    for _mnt, d in host_cgroups(name):
        if not d.is_dir():
            continue
        while True:
            try:
                for sub, _dirs, _files in sorted(os.walk(d), key=lambda w: -w[0].count("/")):
                    os.rmdir(sub)
                break
            except OSError as e:
                if time.monotonic() > end:
                    log(f"cgroup {d} not removed: {e}")
                    break
                time.sleep(0.2)


def cgroup_view_down(name: str) -> None:
    """Remove host ``name``'s cgroups (:func:`make_host_cgroups`; a cgroup view an earlier harness mounted,
    a tmpfs under the host's folder, is unmounted first)."""
    view = host_dir(name) / "cgroup"
    for m in sorted(mounts_under(view), key=len, reverse=True) if view.exists() else []:
        sh("umount", "-l", m, check=False, quiet=True)
    remove_host_cgroups(name)


def docker_args(name: str) -> list[str]:
    """What the real Docker engine (tests/harness/README.md) needs of the container: every capability and
    the syscall groups dockerd, containerd and runc use (keyrings for runc's session keyring, bpf for the
    device cgroup, mount for overlay2, @privileged for the rest; measured for issue 13). Its cgroups are
    its own v2 tree (:func:`nspawn_start`: the supervisor joins ``<this process's cgroup>/rigkit-harness/
    <name>`` and nspawn, told ``SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1``, mounts cgroup2 rooted there), never
    the whole hierarchy: every host's systemd would then make its units at the same paths and two hosts'
    units of one name would share one cgroup. ``name`` is kept for callers' symmetry."""
    return ["--capability=all",
            # landlock: pacman 7 restricts its download process with it (lib/libalpm/sandbox_fs.c); nspawn 252's
            # filter lacks it, and every download then said "error: restricting filesystem access failed
            # because landlock is not supported by the kernel!"
            "--system-call-filter=@keyring bpf @mount @privileged landlock_create_ruleset landlock_add_rule "
            "landlock_restrict_self"]


SUPERVISOR = r"""
# join the host's own cgroups first (hostctl.make_host_cgroups): nspawn makes its payload cgroup and
# the container's cgroup namespace below them, so the container's view matches the hierarchies bound in
for g in $RIGKIT_HOST_CGROUPS; do echo $$ > "$g/cgroup.procs" || exit 1; done
# restart the container when it asks to reboot (systemd-nspawn exits 133), like a machine would
trap 'kill -TERM $child 2>/dev/null; wait $child; exit 0' TERM INT
while :; do
  echo "=== boot $(date +%s.%N)"
  systemd-nspawn "$@" & child=$!
  wait $child; rc=$?
  echo "=== nspawn exited rc=$rc"
  [ "$rc" = 133 ] || exit "$rc"
done
"""


def nspawn_start(name: str, root: Path, n: int) -> int:
    args = ["-q", "-D", str(root), "-b", "--register=no", "--keep-unit", "--console=pipe", "-M", name,
            f"--network-namespace-path=/run/netns/{HOST_NS}{n}", *docker_args(name)]
    # the host's own cgroups, which the supervisor joins: nspawn makes the container's cgroup (and its cgroup
    # namespace) below them. SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1: the container gets a pure v2 tree even on this
    # hybrid machine — the trixie root's systemd 257 refuses v1/hybrid (journald: "Failed to acquire cgroup root
    # path: Protocol driver not attached"; issue 58); with the CI machine's controllers all on v1, that tree has
    # none: processes are tracked, nothing is limited (docker info warns "No memory limit support" and the like).
    # SYSTEMD_NSPAWN_API_VFS_WRITABLE=network: /proc/sys/net writable (the host's own network namespace only):
    # Docker 26 disables IPv6 on each container's eth0 and failed on the read-only mount ("failed to disable
    # IPv6 on container's interface eth0"; Docker 20.10 did not write it)
    cgroups = " ".join(str(own) for _mnt, own in make_host_cgroups(name))
    logf = open(host_dir(name) / "console.log", "a")
    p = subprocess.Popen(["bash", "-c", SUPERVISOR, "supervisor", *args], start_new_session=True,
                         env={**os.environ, "RIGKIT_HOST_CGROUPS": cgroups, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1",
                              "SYSTEMD_NSPAWN_API_VFS_WRITABLE": "network"},
                         stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT)
    return p.pid


def ssh_base(meta: dict) -> list[str]:
    return ["ssh", "-q", "-i", meta["ssh_key"], "-p", str(meta["ssh_port"]), "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={host_dir(meta['name']) / 'known_hosts'}", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=5", f"{meta['ssh_user']}@{meta['ssh_hostname']}"]


def wait_ssh(meta: dict, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    wait_tcp(meta["ssh_hostname"], 22, timeout, what=f"sshd of {meta['name']}")
    while time.monotonic() < end:
        if sh(*ssh_base(meta), "true", check=False, quiet=True).returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"ssh to {meta['name']} did not succeed within {timeout:.0f} s")


def inventory_data(meta: dict) -> dict:
    d = {k: meta[k] for k in ("name", "lane", "root")}
    if meta["lane"] == "nspawn":
        d.update(ssh_hostname=meta["ssh_hostname"], ssh_port=meta["ssh_port"], ssh_user=meta["ssh_user"],
                 ssh_key=meta["ssh_key"], ssh_known_hosts_file=str(host_dir(meta["name"]) / "known_hosts"),
                 ssh_strict_host_key_checking="yes", _sudo=True, pyinfra_target=meta["ssh_hostname"])
    else:
        d.update(pyinfra_target=f"@chroot/{meta['root']}")
    d.update(mirror_url=FIX_URL, archive_url=MANIFEST["archive_url"], pins=MANIFEST["pins"],
             nvidia_driver_version=MANIFEST["nvidia_driver_version"], cuda_version=MANIFEST["cuda_version"])
    return d


def host_up(name: str, lane: str = "nspawn", copy_of: Path | None = None) -> dict:
    """Bring host ``name`` up (idempotent) and return its inventory data. A new host is unpacked
    from the root tarball and personalized, or, with ``copy_of`` (a powered-off host's root; nspawn
    lane only), a copy of that root re-personalized (:func:`copy_root`, :func:`repersonalize`)."""
    if copy_of is not None and lane != "nspawn":
        raise SystemExit("a copied root boots in the nspawn lane only")
    if lane not in ("nspawn", "chroot"):
        raise SystemExit(f"--lane must be nspawn or chroot, not {lane!r}")
    if not name.replace("-", "").isalnum() or len(name) > 40:
        raise SystemExit(f"host name {name!r}: use letters, digits and '-' (at most 40)")
    t0 = time.monotonic()
    with lock():  # what is shared: the fixtures, the host's index (its addresses) and its meta.json
        meta = read_meta(name)
        if meta and meta["lane"] != lane:
            raise SystemExit(f"host {name} exists in the {meta['lane']} lane; `down` it first")
        fixtures_up()
        d = host_dir(name)
        root = d / "root"
        if meta is None:
            if d.exists():
                host_down(name)
            d.mkdir(parents=True)
            n = alloc_index() if lane == "nspawn" else 0
            meta = {"name": name, "lane": lane, "index": n, "root": str(root), "ssh_user": SSH_USER,
                    "ssh_key": str(ssh_key()), "ssh_port": 22,
                    "ssh_hostname": f"{BLOCK}.{n}.2" if lane == "nspawn" else None}
            if copy_of is not None:
                meta["copy_of"] = str(copy_of)
            (d / "meta.json").write_text(json.dumps(meta, indent=1))
    if not root.is_dir():
        # the root is this host's own: made outside the harness lock (a converged copy is ~900 MB, 9-19 s
        # on 2 busy cores, and every lane's host_up and host_down waited for it), in a folder of its own
        # renamed into place whole, so a run killed half-way leaves no root that looks made
        _make_root(d, meta, copy_of)
    if lane == "chroot":
        with timed("chroot mounts"):
            chroot_mounts(root, up=True)
            if not (root / "run/fake-kernel/release").exists():
                sh("chroot", str(root), "/usr/lib/fake-arch/fake-boot", quiet=True)
    else:
        with timed("boot to ssh"):
            with lock():
                n = meta["index"]
                host_net_up(n)
                boot = not pid_alive(meta.get("supervisor_pid"))
                if boot:
                    meta["supervisor_pid"] = nspawn_start(name, root, n)
                    (d / "meta.json").write_text(json.dumps(meta, indent=1))
            if boot:  # outside the lock: the boot is this host's own
                wait_ssh(meta)
    TIMINGS["host up total"] = round(time.monotonic() - t0, 2)
    return inventory_data(meta)


def _make_root(d: Path, meta: dict, copy_of: Path | None) -> None:
    """Make host ``meta["name"]``'s root at ``d/root``: a copy of ``copy_of`` re-personalized, or the root
    tarball unpacked and personalized; for the nspawn lane its SSH host keys pinned in ``d/known_hosts``.
    Built in ``d/root.partial`` (a leftover of a killed run removed first) and renamed into place."""
    part, root = d / "root.partial", d / "root"
    if part.exists():
        sh("rm", "-rf", "--one-file-system", str(part))
    if copy_of is not None:
        copy_root(copy_of, part)
        repersonalize(part, meta["name"], meta["ssh_hostname"])
    else:
        unpack(part)
        personalize(part, meta["name"], meta["ssh_hostname"])
    if meta["lane"] == "nspawn":  # pin the host's own key: addresses are reused by later hosts
        keys = [(part / f"etc/ssh/ssh_host_{t}_key.pub").read_text().split()[:2] for t in ("ed25519", "ecdsa", "rsa")]
        (d / "known_hosts").write_text("".join(f"{meta['ssh_hostname']} {k} {v}\n" for k, v in keys))
    part.rename(root)


def power_off(name: str, timeout: float = 90) -> None:
    """``systemctl poweroff`` inside nspawn host ``name`` and wait for its supervisor to exit (its
    root is then consistent on disk: docker, the journal and every unit stopped cleanly)."""
    meta = read_meta(name)
    if not meta or meta["lane"] != "nspawn":
        raise SystemExit(f"power_off: no nspawn host {name!r}")
    with timed("power off"):
        sh(*ssh_base(meta), "sudo -n systemctl poweroff", check=False, quiet=True)
        end = time.monotonic() + timeout
        while pid_alive(meta.get("supervisor_pid")) and time.monotonic() < end:
            try:  # reap it if it is our child
                os.waitpid(meta["supervisor_pid"], os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.2)
        if pid_alive(meta.get("supervisor_pid")):
            raise RuntimeError(f"{name} did not power off within {timeout:.0f} s")


def host_down(name: str) -> None:
    t0 = time.monotonic()
    try:
        _host_down(name)
    finally:
        TIMINGS[f"down {name}"] = round(time.monotonic() - t0, 2)


def _host_down(name: str) -> None:
    d = host_dir(name)
    meta = read_meta(name) or {}
    if meta.get("supervisor_pid"):
        kill_host_cgroups(name)  # a host on its way out: no orderly shutdown to wait out
        kill_group(meta["supervisor_pid"])
    cgroup_view_down(name)
    if meta.get("index"):
        host_net_down(meta["index"])
    root = d / "root"
    if root.exists():
        chroot_mounts(root, up=False)
    left = mounts_under(d) if d.exists() else []
    if left:
        raise RuntimeError(f"refusing to delete {d}: still mounted: {left}")
    if d.exists():
        discard(d)


def trash_dir() -> Path:
    """``$STATE/trash``: removed hosts' folders on their way out (:func:`discard`)."""
    return STATE / "trash"


def discard(d: Path) -> None:
    """Remove folder ``d`` (a host's, nothing mounted under it) without waiting for it: renamed into
    :func:`trash_dir` at once (the host's name is free again), deleted by a detached ``rm -rf
    --one-file-system``. A converged copy's root took 9-14 s to delete on 2 busy cores, which its lane
    waited out holding the harness lock, so every lane waited. :func:`purge_trash` deletes what is
    left (``clean``)."""
    trash = trash_dir()
    trash.mkdir(parents=True, exist_ok=True)
    gone = trash / f"{d.name}.{os.getpid()}.{time.monotonic_ns()}"
    d.rename(gone)
    subprocess.Popen(["rm", "-rf", "--one-file-system", str(gone)], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def purge_trash() -> None:
    """Delete every folder :func:`discard` left in :func:`trash_dir` (one still being deleted by its own
    ``rm`` included: both ignore what the other removed first), and wait for it."""
    if trash_dir().is_dir():
        sh("rm", "-rf", "--one-file-system", str(trash_dir()), check=False, quiet=True)


def host_status(name: str) -> dict:
    meta = read_meta(name)
    if meta is None:
        return {"name": name, "state": "absent"}
    if meta["lane"] == "chroot":
        up = str(Path(meta["root"]) / "proc") in mounts_under(Path(meta["root"]))
    else:
        up = pid_alive(meta.get("supervisor_pid"))
    return {**inventory_data(meta), "state": "up" if up else "down"}


def all_hosts() -> list[str]:
    return sorted(p.name for p in (STATE / "hosts").glob("*") if p.is_dir())


def clean(prefix: str = "", fixtures: bool = True) -> None:
    """Remove every host whose name starts with ``prefix`` and the leftovers of failed runs; with
    ``fixtures``, also the fixtures namespace once no host is left (a lane of a parallel run passes
    False: another lane may be between two hosts)."""
    with lock():
        for name in all_hosts():
            if name.startswith(prefix):
                host_down(name)
        drop_spares(prefix)
        # leftovers of a failed run: namespaces and links with no host behind them
        live = {read_meta(h).get("index") for h in all_hosts() if read_meta(h)}
        for ns in Path("/run/netns").glob(f"{HOST_NS}*") if Path("/run/netns").exists() else []:
            n = ns.name[len(HOST_NS):]
            if n.isdigit() and int(n) not in live:
                host_net_down(int(n))
        if fixtures and not all_hosts():
            fixtures_down()
    if fixtures:  # the last clean of a run (not a lane's): nothing of its hosts stays on disk
        purge_trash()


def main(argv: list[str]) -> int:
    if os.geteuid() != 0:
        print("hostctl.py needs root (chroot, mounts, network namespaces, systemd-nspawn)", file=sys.stderr)
        return 2
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "up" and rest:
        lane = "nspawn"
        if "--lane" in rest:
            lane = rest[rest.index("--lane") + 1]
        data = host_up(rest[0], lane)
        print(json.dumps(data, indent=1))
        log("timings: " + ", ".join(f"{k} {v:.2f}s" for k, v in TIMINGS.items()))
    elif cmd == "down" and rest:
        with lock():
            host_down(rest[0])
            if not all_hosts():
                fixtures_down()
    elif cmd == "status":
        print(json.dumps(host_status(rest[0]) if rest else [host_status(h) for h in all_hosts()], indent=1))
    elif cmd == "clean":
        clean(rest[rest.index("--prefix") + 1] if "--prefix" in rest else "")
    elif cmd == "fixtures-up":
        with lock():
            fixtures_up()
    elif cmd == "fixtures-down":
        with lock():
            fixtures_down()
    elif cmd == "hub-token":
        print(hub_token())
    elif cmd == "reach":
        meta = read_meta(rest[0]) if rest else None
        if not meta or meta["lane"] != "nspawn":
            raise SystemExit(f"reach: no nspawn host {rest[0] if rest else ''!r}")
        print(f"ssh -i {meta['ssh_key']} -o UserKnownHostsFile={host_dir(meta['name']) / 'known_hosts'} "
              f"{meta['ssh_user']}@{meta['ssh_hostname']}")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
