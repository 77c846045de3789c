"""pytest fixtures for the sandbox host (tests/harness/README.md).

Session fixtures: ``nspawn_host`` (a booted fake Arch host reached over SSH with sudo) and
``chroot_host`` (a root with arch-chroot mounts, for ``@chroot``); ``make_host`` builds more hosts
(name, lane) that are removed at the end of the session. Every host this session creates is named
``rkt-*``; leftovers of a failed earlier run are removed first. Harness timings are printed in the
terminal summary.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import golden  # noqa: E402
import hostctl  # noqa: E402

# Parallel sessions use their own prefix; each lane (a pytest-xdist worker, `make test`) adds its
# own to it, and the modules read it back from the environment (their host names, e.g. "<prefix>w1").
BASE_PREFIX = os.environ.get("RIGKIT_HARNESS_BASE_PREFIX") or os.environ.get("RIGKIT_HARNESS_PREFIX", "rkt-")
os.environ["RIGKIT_HARNESS_BASE_PREFIX"] = BASE_PREFIX
_LANE = os.environ.get("PYTEST_XDIST_WORKER", "")
PREFIX = f"{BASE_PREFIX}{_LANE}-" if _LANE else BASE_PREFIX
os.environ["RIGKIT_HARNESS_PREFIX"] = PREFIX
_TIMINGS: list[tuple[str, float]] = []


@dataclass
class HarnessHost:
    """One sandbox host. ``inventory_data`` is what a pyinfra inventory needs for it.

    nspawn lane: ``ssh_hostname`` (10.231.<n>.2; 10.N.<n>.2 under RIGKIT_HARNESS_NET=N), ``ssh_port`` 22, ``ssh_user`` "rig" (NOPASSWD sudo),
    ``ssh_key`` (path), ``ssh_known_hosts_file`` (this host's own keys; addresses are reused),
    ``ssh_strict_host_key_checking`` "yes", ``_sudo`` True; pyinfra target ``ssh_hostname``.
    chroot lane: ``root``; pyinfra target ``@chroot/<root>``.
    """

    name: str
    lane: str
    root: Path
    data: dict = field(repr=False)
    golden: "golden.Golden | None" = field(default=None, repr=False)

    @property
    def ssh_hostname(self) -> str | None:
        return self.data.get("ssh_hostname")

    @property
    def ssh_port(self) -> int:
        return self.data.get("ssh_port", 22)

    @property
    def ssh_user(self) -> str:
        return self.data.get("ssh_user", "root")

    @property
    def ssh_key(self) -> str | None:
        return self.data.get("ssh_key")

    @property
    def pyinfra_target(self) -> str:
        return self.data["pyinfra_target"]

    @property
    def inventory_data(self) -> dict:
        if self.lane == "nspawn":
            return {k: self.data[k] for k in ("ssh_hostname", "ssh_port", "ssh_user", "ssh_key", "ssh_known_hosts_file",
                                              "ssh_strict_host_key_checking", "_sudo")}
        return {}

    @property
    def ssh_config(self) -> Path:
        """An ssh_config for this host (for testinfra and plain ssh), with connection sharing. The control
        socket is ``<host dir>/cm-<user>`` (the folder is this host's own): ``cm-%C`` (40 hex digits, and ssh's
        17-character temporary suffix) overran a Unix socket's 108 bytes under a state folder of 34 characters
        (``unix_listener: … too long for Unix domain socket``, every command exit 255)."""
        p = hostctl.host_dir(self.name) / "ssh_config"
        if not p.exists():
            p.write_text(
                f"Host {self.name} {self.ssh_hostname}\n  HostName {self.ssh_hostname}\n  Port {self.ssh_port}\n"
                f"  User {self.ssh_user}\n  IdentityFile {self.ssh_key}\n  IdentitiesOnly yes\n"
                f"  StrictHostKeyChecking yes\n  UserKnownHostsFile {self.data['ssh_known_hosts_file']}\n"
                "  LogLevel ERROR\n  BatchMode yes\n"
                f"  ConnectTimeout 5\n  ControlMaster auto\n  ControlPath {hostctl.host_dir(self.name)}/cm-%r\n"
                "  ControlPersist 30\n")
        return p

    def ssh(self, cmd: str, check: bool = True, timeout: float = 120, sudo: bool = False) -> subprocess.CompletedProcess:
        """Run CMD (a shell string) on the nspawn host over SSH as ``ssh_user`` (with ``sudo -n`` if asked)."""
        assert self.lane == "nspawn", "ssh() is for the nspawn lane; use run()"
        if sudo:
            cmd = "sudo -n sh -c " + shlex.quote(cmd)
        r = subprocess.run(["ssh", "-F", str(self.ssh_config), self.name, cmd], text=True,
                           capture_output=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"{self.name}: `{cmd}` exited {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}")
        return r

    def run(self, cmd: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run CMD as root in either lane (ssh + sudo, or chroot)."""
        if self.lane == "nspawn":
            return self.ssh(cmd, check=check, timeout=timeout, sudo=True)
        r = subprocess.run(["chroot", str(self.root), "/bin/sh", "-c", cmd], text=True, capture_output=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"{self.name}: `{cmd}` exited {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}")
        return r

    def testinfra(self, sudo: bool = True):
        """A testinfra Host for this host (ssh backend or chroot backend)."""
        import testinfra

        if self.lane == "nspawn":
            return testinfra.get_host(f"ssh://{self.name}", ssh_config=str(self.ssh_config), sudo=sudo)
        return testinfra.get_host(str(self.root), connection="chroot")

    def quiet_automatic_jobs(self, timeout: float = 120) -> None:
        """Stop the watchdog's and the keeper's timers (a test that runs them itself calls this) and wait
        out a run a timer already started. A deploy or a window's restore starts the timers again, so call
        it in each such test, not once per module: a keeper the timer started holds the host lock, and the
        watchdog rightly stands down for it (CI saw that once, in test_lock)."""
        self.run("systemctl stop hyperqwen-watchdog.timer rigkit-keeper.timer")
        at_work = {"active", "activating", "deactivating", "reloading"}  # a oneshot at work is "activating"
        units = "hyperqwen-watchdog.service rigkit-keeper.service"
        end = time.monotonic() + timeout
        while at_work & set(self.run(f"systemctl is-active {units}", check=False).stdout.split()):
            if time.monotonic() > end:
                raise AssertionError(self.run(f"systemctl status {units}", check=False).stdout)
            time.sleep(0.3)

    AGENT = "/opt/rigkit/venv/bin/rigkit-agent"
    #: the transient units tests hold the host lock from (``systemd-run --unit=NAME ... lock hold``)
    TEST_HOLDERS = ("rk-test-hold.service", "rk-coverage-hold.service")

    def lock_state(self) -> dict:
        """The host lock as the agent reads it (``rigkit-agent lock status``): ``{"held", "holder", "stale"}``."""
        return json.loads(self.run(f"{self.AGENT} lock status").stdout)

    def wait_lock_held_by(self, what: str, timeout: float = 120) -> dict:
        """Wait (a bounded poll of the lock's state; the bound guards a hang) until the host lock's holder
        is ``what`` — not merely held: a keeper's or the healer's run holds it for a moment, and a
        ``lock hold`` started meanwhile waits for it. Returns the holder's record."""
        end = time.monotonic() + timeout
        while True:
            st = self.lock_state()
            if st["held"] and (st["holder"] or {}).get("what") == what:
                return st["holder"]
            if time.monotonic() > end:
                raise AssertionError(f"{self.name}: the lock is not held by {what!r} after {timeout:.0f} s: {st}")
            time.sleep(0.2)

    def release_test_lock(self, unit: str) -> None:
        """Stop the test's lock-holding transient ``unit`` (its ``lock hold`` lets go on SIGTERM;
        ``systemctl stop`` returns once the unit's processes are gone), after which the host is as the test
        found it. A record left behind (a holder that died holding it: "free, but … died holding it" for
        every later command) is cleared — under the flock, as the next taker's reclaim would — and
        reported: AssertionError."""
        self.run(f"systemctl stop {shlex.quote(unit)}", check=False)
        stale = self.lock_state()["stale"]
        if stale:
            self.run("flock -n -x /var/lib/rigkit/rig.lock sh -c ': > /var/lib/rigkit/rig.lock'", check=False)
            raise AssertionError(f"{self.name}: {unit} let go of the host lock but left its record: {stale}")

    def leftovers(self) -> list[str]:
        """What a test left on this shared host that the next one would meet (:func:`_leaves_shared_hosts_as_found`):
        a test's lock-holding unit still running (stopped here) and a host-lock record whose holder died
        (cleared here). One SSH round trip when there is none."""
        units = " ".join(self.TEST_HOLDERS)
        out = self.run(f"systemctl is-active {units}; {self.AGENT} lock status", check=False).stdout.split("\n")
        out += [""] * (len(self.TEST_HOLDERS) + 1)  # a host that did not answer (rebooting): nothing read
        states, lock = out[:len(self.TEST_HOLDERS)], out[len(self.TEST_HOLDERS)]
        found = []
        for unit, state in zip(self.TEST_HOLDERS, states):
            if state.strip() in ("active", "activating"):
                found.append(f"{unit} still holding the host lock (stopped now)")
                try:
                    self.release_test_lock(unit)
                except AssertionError as e:
                    found.append(str(e))
        try:
            stale = json.loads(lock).get("stale")
        except ValueError:
            return found  # no agent on this host (a bare one): nothing to read
        if stale:
            self.run("flock -n -x /var/lib/rigkit/rig.lock sh -c ': > /var/lib/rigkit/rig.lock'", check=False)
            found.append(f"a host-lock record whose holder died: {stale} (cleared now)")
        return found

    @contextmanager
    def hand_edit(self, path: str, line: str):
        """Append ``line`` to ``path`` on the host, as an operator's edit by hand, for the ``with`` block;
        afterwards, when the file still holds the edit (what the test found plus ``line``: nothing under test
        replaced it), it is the one the test found again (its bytes, mode, owner and mtime from a copy taken
        first) — even when the test failed. A file something rewrote meanwhile (the deploy under test repairing
        it, to the declared content, which may differ from what the test found) is left as it is: putting the
        found copy back over a repair undid the repair (test_wirein's repair deploy, after a test that left
        another config live, cascaded into three failures)."""
        keep = f"/root/.hand-edit.{os.path.basename(path)}.orig"
        q_path, q_line = shlex.quote(path), shlex.quote(line)
        self.run(f"cp -a {q_path} {keep} && printf '%s\\n' {q_line} >> {q_path}")
        try:
            yield
        finally:
            self.run(f"{{ cat {keep}; printf '%s\\n' {q_line}; }} | cmp -s - {q_path} && cp -a {keep} {q_path}; "
                     f"rm -f {keep}")

    def boot_id(self) -> str:
        return self.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()

    def reboot(self, timeout: float = 60) -> str:
        """Reboot an nspawn host (`systemctl reboot` inside), wait for SSH; returns the new boot id."""
        old = self.boot_id()
        subprocess.run(["ssh", "-F", str(self.ssh_config), "-O", "exit", self.name], capture_output=True)
        self.ssh("sudo -n systemctl reboot", check=False)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                new = self.ssh("cat /proc/sys/kernel/random/boot_id", timeout=10).stdout.strip()
                if new and new != old:
                    return new
            except (AssertionError, subprocess.TimeoutExpired):
                pass
            time.sleep(0.3)
        raise AssertionError(f"{self.name} did not come back with a new boot id within {timeout} s")

    def write(self, path: str, text: str) -> None:
        self.run(f"mkdir -p {shlex.quote(os.path.dirname(path))} && cat > {shlex.quote(path)} <<'__EOF__'\n{text}\n__EOF__")

    def collect_logs(self) -> str:
        """Console log, failed units and the journal tail: attached to failing tests."""
        out = []
        con = hostctl.host_dir(self.name) / "console.log"
        if con.exists():
            out.append("== console.log (tail)\n" + "\n".join(con.read_text(errors="replace").splitlines()[-40:]))
        try:
            out.append("== journal\n" + self.run("journalctl -b --no-pager -n 80 2>&1 || true", check=False).stdout)
        except Exception as e:  # noqa: BLE001
            out.append(f"(no journal: {e})")
        return "\n".join(out)

    def close(self) -> None:
        if self.lane == "nspawn" and self.ssh_config.exists():
            subprocess.run(["ssh", "-F", str(self.ssh_config), "-O", "exit", self.name], capture_output=True)


def _missing_prereqs() -> str | None:
    if os.geteuid() != 0:
        return "the sandbox harness needs root"
    for tool in ("systemd-nspawn", "pacman", "repo-add", "bsdtar", "zstd", "debootstrap", "ssh"):
        if not shutil.which(tool):
            return f"{tool} missing: run `bash tests/harness/setup.sh`"
    return None


def _up(name: str, lane: str, converged: bool = False) -> HarnessHost:
    """Bring up host ``name``: fresh, or (``converged``) a copy of the run's golden converged host
    (golden.py), with ``golden`` set to it (its two deploys' outputs) on the returned host."""
    gold = None
    if converged:
        t0 = time.monotonic()
        gold = golden.ensure(BASE_PREFIX)
        _TIMINGS.append(("golden converged host (built or found)", time.monotonic() - t0))
    hostctl.TIMINGS.clear()
    t0 = time.monotonic()
    data = hostctl.host_up(name, lane, copy_of=gold.root if gold else None)
    _TIMINGS.append((f"{name} up ({lane}{', converged copy' if gold else ''})", time.monotonic() - t0))
    _TIMINGS.extend((f"  {name}: {k}", v) for k, v in hostctl.TIMINGS.items() if k != "host up total")
    h = HarnessHost(name=name, lane=lane, root=Path(data["root"]), data=data, golden=gold)
    if gold:
        t0 = time.monotonic()
        golden.wait_serving(h.run)
        _TIMINGS.append((f"  {name}: serving again", time.monotonic() - t0))
        if _LANE:  # a lane of `make test`: its next converged module's root is copied while this one's tests run
            hostctl.copy_spare(gold.root)
    return h


@pytest.fixture(scope="session")
def harness():
    """The harness for this session: stale rkt-* hosts removed, the fixtures up and filled (the mirror,
    the llama-swap release, the hub, the registry with its images: ``hostctl.fixtures_up_locked``, under
    the harness' file lock, so each lane asks for them itself and none relies on another lane or an
    earlier module having filled them), everything this session made removed again at exit."""
    why = _missing_prereqs()
    if why:
        pytest.skip(why)
    t0 = time.monotonic()
    hostctl.clean(prefix=PREFIX, fixtures=not _LANE)
    _TIMINGS.append(("clean leftovers", time.monotonic() - t0))
    t0 = time.monotonic()
    hostctl.fixtures_up_locked()
    _TIMINGS.append(("fixtures up (built or found)", time.monotonic() - t0))
    hosts: list[HarnessHost] = []
    yield hosts
    for h in hosts:
        h.close()
    t0 = time.monotonic()
    hostctl.TIMINGS.clear()
    hostctl.clean(prefix=PREFIX, fixtures=not _LANE)
    _TIMINGS.append(("teardown", time.monotonic() - t0))
    _TIMINGS.extend((f"  {k}", v) for k, v in hostctl.TIMINGS.items())


@pytest.fixture(scope="session")
def nspawn_host(harness) -> HarnessHost:
    h = _up(PREFIX + "n1", "nspawn")
    harness.append(h)
    return h


@pytest.fixture(scope="session")
def chroot_host(harness) -> HarnessHost:
    h = _up(PREFIX + "c1", "chroot")
    harness.append(h)
    return h


#: the converged copies a module shares between its tests (``make_module_host(..., converged=True)``)
_SHARED: list[HarnessHost] = []


def _host_factory(shared: bool = False):
    """``(make, made)``: ``make(suffix, lane="nspawn", converged=False)`` brings up ``<prefix><suffix>``
    (with ``converged``, a copy of the run's converged host); ``made`` lists them for the teardown
    (:func:`_remove_hosts`). With ``shared`` (a module's hosts) a converged copy is watched after each
    test (:func:`_leaves_shared_hosts_as_found`)."""
    made: list[HarnessHost] = []

    def make(suffix: str, lane: str = "nspawn", converged: bool = False) -> HarnessHost:
        h = _up(PREFIX + suffix, lane, converged)
        made.append(h)
        if shared and converged:
            _SHARED.append(h)
        return h

    return make, made


def _remove_hosts(made: list[HarnessHost]) -> None:
    for h in made:
        if h in _SHARED:
            _SHARED.remove(h)
        h.close()
        with hostctl.lock():
            hostctl.host_down(h.name)


@pytest.fixture
def make_host(harness):
    """Factory: make_host(suffix, lane="nspawn", converged=False) -> a fresh HarnessHost (or a
    converged copy), removed after the test."""
    make, made = _host_factory()
    yield make
    _remove_hosts(made)


@pytest.fixture(scope="module")
def make_module_host(harness):
    """Factory like ``make_host``, for hosts shared by one test module (e.g. deployed once)."""
    make, made = _host_factory(shared=True)
    yield make
    _remove_hosts(made)


@pytest.fixture(autouse=True)
def _leaves_shared_hosts_as_found():
    """After each test, every converged copy its module shares must be as the test found it as far as
    the host lock goes: no test's lock-holding unit still running, no record of a holder that died.
    What a test left is undone here (so the next test starts clean whatever happened) and fails *this*
    test's teardown, naming it — before, the next test failed on a warning it did not expect ("free,
    but drift coverage died holding it"). Each test puts back its own hand edits in a ``finally``."""
    yield
    left = [f"{h.name}: {what}" for h in list(_SHARED) for what in h.leftovers()]
    if left:
        pytest.fail("this test left its shared host otherwise than it found it:\n" + "\n".join(left))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" and rep.failed:
        for name in ("nspawn_host", "chroot_host"):
            h = item.funcargs.get(name) if hasattr(item, "funcargs") else None
            if isinstance(h, HarnessHost):
                try:
                    rep.sections.append((f"{h.name} logs", h.collect_logs()))
                except Exception:  # noqa: BLE001
                    pass


def pytest_terminal_summary(terminalreporter):
    if _TIMINGS:
        terminalreporter.section("sandbox harness timings")
        for k, v in _TIMINGS:
            terminalreporter.write_line(f"{k:<40} {v:7.2f} s")
