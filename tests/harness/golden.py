"""One converged sandbox host per test run, copied for every module that needs a converged host.

A first deploy onto a fresh host takes 60-75 s on 2 cores; before this, ten modules each paid it
to reach the same state. :func:`ensure` builds that state once: a fresh nspawn host
(``<prefix>golden``), ``rigkit deploy -i inventory/sandbox.py --reboot --no-smoke``, the same deploy
again (0 changed, or the build fails), then ``systemctl poweroff`` and its root moved to
``$STATE/golden/<key>/root``. Both deploys' outputs are kept beside it (``deploys.json``) for the
tests that assert on a first deploy: test_deploy.py is the proof of the deploy from nothing, on a copy
of this host (the fresh host starts with a legacy unit and a foreign daemon.json key,
:data:`BEFORE_FIRST_DEPLOY`, and the first deploy runs with ``-vv``). Each module then gets a copy (``hostctl.host_up(...,
copy_of=root)``: ``cp -a``, keeping nanosecond mtimes, xattrs and ownership; re-personalized:
hostname, sshd's address, SSH host keys and known_hosts, machine-id), its images already in the
engine and its models already verified, booted like a machine that was switched off.

The key is a sha256 over what the converged state depends on: the control side and the host
side (``rigkit/``, ``roles/``, ``templates/``, ``deploy.py``, ``inventory/``, ``pyproject.toml``),
the tests' declared data, the harness' host builder, stubs and overlay, and the fixtures it
deploys (the mirror, the images' digests, the llama-swap tarball). A run whose key has a golden
copy reuses it; any other builds it (once: lanes wait on ``$STATE/golden.lock``); copies unused for a
day are removed (a lane or another checkout may still be copying a younger one). A test run on a
fresh machine therefore builds it exactly once.

usage: python tests/harness/golden.py [--rebuild]   (root; prints the root and the build's timings)
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402

GOLDEN = hostctl.STATE / "golden"
INPUTS = ("rigkit", "roles", "templates", "deploy.py", "inventory", "pyproject.toml",
          "tests/harness/declared", "tests/harness/stubs", "tests/harness/overlay", "tests/harness/files",
          "tests/harness/hostctl.py", "tests/harness/netcfg.py", "tests/harness/images.py",
          "tests/harness/build_mirror.py", "tests/harness/debs.py", "tests/harness/rootfs.sh",
          "tests/harness/mirror.json", "tests/harness/golden.py", "tests/harness/sandbox_project.py")
SUMMARY = re.compile(r"^(?P<host>\S+): (?P<total>\d+) operations: (?P<changed>\d+) changed, (?P<unchanged>\d+) unchanged, "
                     r"(?P<failed>\d+) failed$", re.M)


@dataclass
class Golden:
    """The converged copy: ``root`` (a powered-off host's root, never booted itself again),
    ``first``/``second`` (``{"returncode", "stdout", "stderr", "seconds"}`` of the two deploys that
    made it), ``name`` (the host name it was deployed as), ``key``."""

    root: Path
    first: dict
    second: dict
    name: str
    key: str

    def deploys(self) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
        """The first and second deploy as ``CompletedProcess`` (returncode, stdout, stderr), for the
        tests that assert on what a first deploy and its converged re-run printed."""
        return tuple(subprocess.CompletedProcess(["rigkit", "deploy"], d["returncode"], d["stdout"], d["stderr"])
                     for d in (self.first, self.second))


def wait_serving(run, timeout: float = 180) -> None:
    """Wait until a booted copy is back where its deploy left it: systemd finished starting, and
    llama-swap (the sandbox's declared :8080) has its resident, Strata, ready — as after the deploy.
    ``run(cmd, check=False)`` runs a shell command as root on the host. Raises AssertionError, with
    what was last seen, after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    run("systemctl is-system-running --wait", check=False, timeout=timeout)
    seen = ""
    while time.monotonic() < end:
        r = run("curl -fsS -m 5 127.0.0.1:8080/running", check=False, timeout=30)
        seen = r.stdout.strip() or r.stderr.strip()
        try:
            if [(m["model"], m["state"]) for m in json.loads(r.stdout)["running"]] == [("strata", "ready")]:
                return
        except (ValueError, KeyError, TypeError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"the converged copy did not serve Strata again within {timeout:.0f} s: {seen[-500:]}")


def key() -> str:
    """sha256 (16 hex digits) of the golden copy's inputs (module docstring)."""
    h = hashlib.sha256()
    for rel in INPUTS:
        p = ROOT / rel
        files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
        for f in files:
            if "__pycache__" in f.parts or f.suffix == ".pyc":
                continue
            h.update(f.relative_to(ROOT).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    www = hostctl.fixtures_www()
    for fixture in ("images.json", "releases/llama-swap_250_linux_amd64.tar.gz"):
        f = www / fixture
        h.update(fixture.encode() + b"\0" + (hashlib.sha256(f.read_bytes()).digest() if f.is_file() else b"-"))
    h.update(hostctl.mirror_dir().name.encode() + hostctl.rootfs_tarball().name.encode())
    lock = hostctl.STATE / "sandbox.lock.json"  # what the deploy fetches (sandbox_lock)
    h.update(b"lock\0" + (lock.read_bytes() if lock.is_file() else b"-"))
    return h.hexdigest()[:16]


#: What the first deploy finds on the fresh host besides the bare system, as an operator's box would have
#: it (test_deploy.py asserts what the deploy did with each): a legacy ``strata.service`` run by hand
#: (stopped, disabled and backed up by the deploy) and a ``daemon.json`` with a key of the operator's
#: own (kept by the merge; the replaced file backed up and named in the output).
BEFORE_FIRST_DEPLOY = (
    "mkdir -p /etc/docker && echo '{\"log-driver\": \"journald\"}' > /etc/docker/daemon.json && "
    "printf '[Unit]\\nDescription=legacy Strata\\n[Service]\\nExecStart=/bin/sleep infinity\\n"
    "[Install]\\nWantedBy=multi-user.target\\n' > /etc/systemd/system/strata.service && "
    "systemctl daemon-reload && systemctl enable --now strata.service")


def sandbox_lock() -> Path:
    """``rigkit lock -i inventory/sandbox.py``: the sandbox's pins, image digests and llama-swap tarball
    resolved from this run's fixtures (the archive's listings and dated databases, the registry, the
    release server) into ``$STATE/sandbox.lock.json`` — seeded with the committed model lock
    (``inventory/sandbox.lock.json``) so its models are not asked of the hub again, afresh whenever the
    fixtures it was resolved from changed (the mirror's key, the images, the tarball). A second run
    changes nothing. Its preconditions are its own: the fixtures are brought up first
    (:func:`hostctl.fixtures_up_locked`: the registry holds the images before ``rigkit lock`` asks it for
    their digests), and the lock is made under ``$STATE/sandbox.lock.flock``, so lanes calling it at once
    (a fresh host's test beside the golden build) wait for one another and all read a whole file.
    Raises RuntimeError with rigkit's output when it fails."""
    hostctl.fixtures_up_locked()
    with open(hostctl.STATE / "sandbox.lock.flock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        return _sandbox_lock()


def _sandbox_lock() -> Path:
    target = hostctl.STATE / "sandbox.lock.json"
    # the fixtures it was resolved from: another mirror build (its packages are other bytes), other images or
    # another tarball re-seed it — a lock resolved from fixtures that are gone would refuse every package;
    # so does another committed model lock (the hub's repos changed: their commits are other ones)
    www = hostctl.fixtures_www()
    sources = json.dumps([hostctl.mirror_dir().name, *(hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "-"
                          for f in (www / "images.json", www / "releases" / "llama-swap_250_linux_amd64.tar.gz",
                                    ROOT / "inventory" / "sandbox.lock.json"))])
    marker = target.with_suffix(".sources")
    if not target.is_file() or not marker.is_file() or marker.read_text() != sources:
        seed = target.with_name(target.name + ".seed")
        shutil.copyfile(ROOT / "inventory" / "sandbox.lock.json", seed)
        seed.replace(target)  # whole: a reader outside the flock (a deploy's lockfile) sees old or new
        marker.write_text(sources)
    # this process made this very file from these very sources already (a lane asks once per module: ~4 s
    # each on 2 busy cores for a run that changes nothing); a file another process wrote since is locked again
    made = (sources, target.stat().st_mtime_ns, target.stat().st_size)
    if _LOCKED.get(target) == made:
        return target
    rigkit = str(Path(sys.executable).parent / "rigkit")
    proc = subprocess.run([rigkit, "lock", "-i", "inventory/sandbox.py"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_TOKEN": hostctl.hub_token()})
    if proc.returncode != 0:
        raise RuntimeError(f"rigkit lock -i inventory/sandbox.py exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    _LOCKED[target] = (sources, target.stat().st_mtime_ns, target.stat().st_size)
    return target


#: what :func:`_sandbox_lock` made in this process: lock file -> (its sources, mtime_ns, size) after ``rigkit lock``
_LOCKED: dict[Path, tuple[str, int, int]] = {}


def variant_lock(tag: str, *data: str) -> list[str]:
    """Lock a variant of the sandbox's spec (``data``: ``--data KEY=VALUE`` arguments, e.g. other pins)
    into ``$STATE/sandbox-<tag>.lock.json``, a copy of :func:`sandbox_lock`'s lock re-locked with ``rigkit
    lock`` — the deploy uses only a lock that resolves what it is told. Returns ``data`` plus the
    ``--data lockfile=…`` the deploy (and every command of that variant) needs."""
    target = hostctl.STATE / f"sandbox-{tag}.lock.json"
    shutil.copyfile(sandbox_lock(), target)
    args = [*data, "--data", f"lockfile={json.dumps(str(target))}"]
    rigkit = str(Path(sys.executable).parent / "rigkit")
    proc = subprocess.run([rigkit, "lock", "-i", "inventory/sandbox.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_TOKEN": hostctl.hub_token()})
    if proc.returncode != 0:
        raise RuntimeError(f"rigkit lock of the variant {tag} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return args


def _deploy(name: str, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=name, HF_TOKEN=hostctl.hub_token())
    schema = Path(os.environ.get("RIGKIT_SHARED", ROOT.parent / "shared")) / "data/llama-swap/config-schema.json"
    if not env.get("RIGKIT_LLAMA_SWAP_SCHEMA_URL") and schema.is_file():  # as tests/conftest.py does
        env["RIGKIT_LLAMA_SWAP_SCHEMA_URL"] = schema.as_uri()
    rigkit = str(Path(sys.executable).parent / "rigkit")
    t0 = time.monotonic()
    proc = subprocess.run([rigkit, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--full", *args],
                          cwd=sandbox_project.cwd(), env=env, capture_output=True, text=True, timeout=900)
    return {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
            "seconds": round(time.monotonic() - t0, 1)}


def _load(d: Path) -> Golden:
    rec = json.loads((d / "deploys.json").read_text())
    return Golden(root=d / "root", first=rec["first"], second=rec["second"], name=rec["name"], key=d.name)


def build(k: str, prefix: str) -> Golden:
    """Deploy a fresh host twice, power it off and keep its root under ``$STATE/golden/<k>/``.
    Raises RuntimeError (with the deploy's output tail) when either deploy fails or the second
    one changes anything."""
    name = prefix + "golden"
    with hostctl.lock():
        hostctl.host_down(name)
    hostctl.host_up(name)
    try:
        meta = hostctl.read_meta(name)
        hostctl.sh(*hostctl.ssh_base(meta), "sudo -n sh -c " + shlex.quote(BEFORE_FIRST_DEPLOY), quiet=True)
        first = _deploy(name, "--reboot", "-vv")  # -vv: test_deploy.py checks the token is in no output
        if first["returncode"] != 0:
            raise RuntimeError(f"golden host: the first deploy exited {first['returncode']}:\n{first['stderr'][-4000:]}")
        second = _deploy(name)
        m = SUMMARY.search(second["stderr"])
        if second["returncode"] != 0 or not m or m["changed"] != "0":
            raise RuntimeError(f"golden host: the second deploy is not converged:\n{second['stderr'][-4000:]}")
        hostctl.power_off(name)
        d = GOLDEN / k
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        (hostctl.host_dir(name) / "root").rename(d / "root")
        (d / "deploys.json").write_text(json.dumps({"name": name, "first": first, "second": second}, indent=1))
    finally:
        with hostctl.lock():
            hostctl.host_down(name)
    for old in GOLDEN.iterdir():  # another run (a lane of this one, another checkout) may copy an older one
        if old.is_dir() and old.name != k and time.time() - old.stat().st_mtime > 86400:
            shutil.rmtree(old, ignore_errors=True)
    return _load(GOLDEN / k)


def ensure(prefix: str | None = None, rebuild: bool = False) -> Golden:
    """The golden copy for the current :func:`key`, built if missing (or ``rebuild``). Safe to call
    from several processes at once: one builds, the others wait for it."""
    prefix = prefix if prefix is not None else os.environ.get("RIGKIT_HARNESS_PREFIX", "rkt-")
    GOLDEN.mkdir(parents=True, exist_ok=True)
    with open(hostctl.STATE / "golden.lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        sandbox_lock()  # the deploy uses only the lock (and the fixtures are up once it is made)
        k = key()
        d = GOLDEN / k
        if not rebuild and (d / "deploys.json").is_file() and (d / "root").is_dir():
            os.utime(d)  # in use (older copies go after a day unused)
            return _load(d)
        return build(k, prefix)


if __name__ == "__main__":
    t0 = time.monotonic()
    g = ensure(rebuild="--rebuild" in sys.argv[1:])
    print(f"golden {g.key}: {g.root} (first deploy {g.first['seconds']} s, second {g.second['seconds']} s; "
          f"{time.monotonic() - t0:.1f} s here)")
