"""The host agent: what runs on the rig itself, from ``/opt/rigkit/venv`` (``rigkit-agent``).

Sub-commands (every one reads the host config, :mod:`rigkit.host.config`):

- ``keeper`` — bring the resident back when no member is loaded (:mod:`rigkit.host.keeper`).
- ``watchdog`` — unload a watched member that keeps failing (:mod:`rigkit.host.watchdog`).
- ``power`` — re-apply the declared power limit when the enforced one differs (:mod:`rigkit.host.power`).
- ``activate`` — the activation path of llama-swap's config (:mod:`rigkit.host.activate`).
- ``window`` — tenant windows (:mod:`rigkit.host.window`).
- ``fetch`` / ``record`` / ``status`` — model fetch and verify (:mod:`rigkit.host.fetch`).
- ``lock status`` — the host lock's state as JSON; ``lock run --what WHAT -- CMD ...`` — run CMD
  under the host lock (the deploy's disruptive steps: a docker restart, a reboot), refused with
  exit 1 naming the holder when it is held or a window is open (``--current``: first one JSON line,
  taken with the current generation and the live config's sha256, or refused with why — the deploy's probe
  under the lock, one round trip; ``--probe LOCK_B64 DEEP PREPARED``: that JSON line carries what ``probe``
  prints, as ``probe`` ``{rc, output}``, so the deploy's probe starts the agent once); ``lock hold --what WHAT
  --lease ID``
  — hold it until stdin closes (``rigkit rollback`` over SSH: the lock ends with the session),
  printing ``held`` once taken; commands with ``RIGKIT_LOCK_LEASE=ID`` join it.
- ``generation`` — the generations of this host (:mod:`rigkit.host.generations`).
- ``confirm`` — confirm the host serves as a generation declares (:mod:`rigkit.host.confirm`).
- ``probe [LOCK_B64 DEEP PREPARED]`` — drift's host-side checks in one process: the ``version`` line,
  then, given a lock, the model-files check's JSON line (:func:`rigkit.host.modelcheck.probe`).
- ``metrics bench`` — write the exposition text on stdin (the deploy's smoke) as this host's
  ``rigkit_bench.prom`` in the metrics folder, read and written again by prometheus-client
  (:func:`rigkit.host.promfile.put`); nothing when the host config names no folder.
- ``energy [--serve] [--index N]`` — the GPU's energy readings as JSON lines: the card's counter through
  NVML, else sampled power.draw (:mod:`rigkit.bench.nvml`); reads no host config.
- ``version``.

Exit codes: 0 nothing to do or done, 1 the action failed or was refused, 2 invalid input.
"""

from __future__ import annotations

import argparse
import json
import sys

from rigkit.host.config import ConfigError
from rigkit.host.config import load as load_config


def lock_main(argv: list[str]) -> int:
    """``rigkit-agent lock status`` | ``rigkit-agent lock run --what WHAT [--lease ID] [--current] -- CMD ...``
    | ``rigkit-agent lock hold --what WHAT --lease ID [--current]``."""
    from rigkit.host import lock as host_lock

    ap = argparse.ArgumentParser(prog="rigkit-agent lock", description="the host lock")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status", help="print the lock's state as JSON")
    run = sub.add_parser("run", help="run a command under the host lock")
    run.add_argument("--what", required=True, help="who holds it, for the record (e.g. 'deploy: restart docker')")
    run.add_argument("--lease", help="the lease id to record (the holder's change, RIGKIT_LOCK_LEASE)")
    run.add_argument("--current", action="store_true",
                     help="print one JSON line first: taken (with what `generation current` prints, read under the "
                          "lock) or refused (why), each with the warnings of taking it; then run the command")
    run.add_argument("--probe", nargs=3, metavar=("LOCK_B64", "DEEP", "PREPARED"),
                     help="with --current: the JSON line carries what `rigkit-agent probe LOCK_B64 DEEP PREPARED` "
                          "prints, run under the lock (`probe`: {rc, output})")
    run.add_argument("command", nargs=argparse.REMAINDER)
    hold = sub.add_parser("hold", help="hold the lock until stdin closes (a lease others can join)")
    hold.add_argument("--what", required=True, help="who holds it, for the record (e.g. 'rollback to generation 1')")
    hold.add_argument("--lease", required=True, help="the lease id commands join with (RIGKIT_LOCK_LEASE)")
    hold.add_argument("--current", action="store_true",
                      help="once held, print one JSON line more: what `generation current` prints (read under the lock)")
    a = ap.parse_args(argv)
    cfg = load_config()
    if a.cmd == "status":
        print(json.dumps(host_lock.state(cfg.path("lock")), sort_keys=True))
        return 0
    if a.cmd == "hold":
        return _hold(cfg, a.what, a.lease, a.current)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("lock run needs a command after --")
    shown = " ".join(cmd)
    shown = shown if len(shown) <= 160 else f"{shown[:160]}… ({len(shown)} characters)"  # the record stays readable
    if a.current:
        return _run_current(cfg, a.what, a.lease, cmd, f"rigkit-agent lock run --current -- {shown}", a.probe)
    with _StopSignals() as stop:  # set before the lock is taken: a stop never leaves its record behind
        lock = _take(cfg, a.what, shown, a.lease)
        if lock is None:
            return 1
        try:
            return stop.run(cmd)
        finally:
            lock.release()


class _StopSignals:
    """SIGTERM and SIGHUP while a ``lock`` command holds the host lock (``systemctl stop`` of the unit it runs
    in, an SSH session that hangs up) only end its wait, never its release: the handlers, set before the lock
    is taken, note the signal, pass it on to ``lock run``'s command (whose end then ends the run through its
    ``finally``: the lock released, its record cleared) and wake ``lock hold``'s wait through
    :func:`signal.set_wakeup_fd` (:attr:`wake_fd`). Python's default death skipped the release and left a
    record of a dead holder (issue 58: a test's ``systemctl stop`` of its holder left one); a handler that
    raised could land inside the release (``systemctl stop`` ends the ``sleep`` feeding ``lock hold``'s
    stdin and signals it at once) and leave it too. A signal between the take and the command is no death
    either: the command is then not started (exit 128 + the signal's number)."""

    def __init__(self) -> None:
        self.stopped: list[int] = []
        self.child = None
        self._old: dict = {}
        self.wake_fd = -1

    def _on_signal(self, signum, _frame) -> None:
        self.stopped.append(signum)
        self._pass_on(signum)

    def _pass_on(self, signum: int) -> None:
        """``signum`` to the command, when it has started and not ended."""
        if self.child is not None and self.child.poll() is None:
            try:
                self.child.send_signal(signum)
            except ProcessLookupError:
                pass

    def __enter__(self) -> "_StopSignals":
        import os
        import signal

        self.wake_fd, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._old_wakeup = signal.set_wakeup_fd(self._wake_w)
        self._old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
        return self

    def __exit__(self, *_exc) -> None:
        import os
        import signal

        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self._old_wakeup)
        os.close(self.wake_fd)
        os.close(self._wake_w)

    def run(self, cmd: list[str]) -> int:
        """``cmd``'s exit status (a wait the handler interrupts goes on: PEP 475); 128 + the signal's number
        when a stop came before it started."""
        import subprocess

        if self.stopped:
            return 128 + self.stopped[0]
        self.child = subprocess.Popen(cmd)
        if self.stopped:  # it came while Popen forked, before the handler could see a child: pass it on now
            self._pass_on(self.stopped[0])
        return self.child.wait()

    def wait_for_eof(self, fd: int) -> None:
        """Return when ``fd`` reaches EOF or a stop signal came (before or during the wait)."""
        import os
        import select

        while not self.stopped:
            ready, _, _ = select.select([fd, self.wake_fd], [], [])
            if fd in ready and not os.read(fd, 4096):
                return
            if self.wake_fd in ready:
                os.read(self.wake_fd, 64)


def _run_current(cfg, what: str, lease: str | None, cmd: list[str], command: str,
                 probe: list[str] | None = None) -> int:
    """``lock run --current``: one JSON line on stdout first — ``{"held": true, "index", "current",
    "record", "warnings"}`` (:func:`rigkit.host.generations.current`, read under the lock; ``error``
    instead when unreadable) or ``{"held": false, "refused": why, "warnings"}`` (exit 1) — then
    ``cmd`` under the lock, its exit status returned. So a deploy takes the lock, reads where the
    host starts and probes its state (``cmd``: drift's probe) in one command, one SSH round trip.
    ``probe`` (``[LOCK_B64, DEEP, PREPARED]``): the held line also carries ``probe``, ``{"rc", "output"}``
    of :func:`_probe` (what ``rigkit-agent probe`` would print and exit with), run under the lock before
    ``cmd``: the agent started once, not once more inside ``cmd`` (issue 67)."""
    from rigkit.host import lock as host_lock
    from rigkit.host import standdown

    warnings: list[str] = []
    with _StopSignals() as stop:
        try:
            lock = standdown.lock_for_change(cfg, what, warnings.append, command=command, lease=lease)
        except (host_lock.LockHeld, standdown.WindowOpen) as exc:
            print(json.dumps({"held": False, "refused": "; ".join([*warnings, str(exc)]), "warnings": warnings},
                             sort_keys=True), flush=True)
            return 1
        try:
            reading = {**_reading(cfg), **({"probe": _probe(probe)} if probe is not None else {})}
            print(json.dumps({"held": True, **reading, "warnings": warnings}, sort_keys=True), flush=True)
            return stop.run(cmd)
        finally:
            lock.release()


def _version() -> str:
    """The agent's version line (``version``, ``probe``): ``rigkit-agent X (Python Y)``."""
    from rigkit import __version__

    return f"rigkit-agent {__version__} (Python {sys.version.split()[0]})"


def _probe(argv: list[str]) -> dict:
    """What ``rigkit-agent probe ARGV`` prints and exits with, in this process: ``{"rc": its exit status,
    "output": the version line, then the model check's JSON line}`` (:func:`rigkit.host.modelcheck.probe`,
    which never raises)."""
    import contextlib
    import io

    from rigkit.host.modelcheck import probe

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        rc = probe(argv)
    return {"rc": rc, "output": f"{_version()}\n{printed.getvalue()}"}


def _reading(cfg) -> dict:
    """Where the host starts, read under the lock its caller holds: :func:`rigkit.host.generations.current`
    (``{"index", "current", "record"}``), or ``{"error": why}`` when the generations are unreadable, and
    ``live_sha256`` (:func:`rigkit.host.generations.live_sha256`: what serves)."""
    from rigkit.host import generations

    live = generations.live_sha256(cfg)
    try:
        return {**generations.current(cfg.path("generations")), "live_sha256": live}
    except (ValueError, OSError) as exc:
        return {"error": str(exc), "live_sha256": live}


def _take(cfg, what: str, command: str, lease: str | None = None):
    """:func:`rigkit.host.standdown.lock_for_change` for ``lock run``/``lock hold``: the lock, or None
    after saying on stderr why it was refused (the holder, or the open window)."""
    from rigkit.host import lock as host_lock
    from rigkit.host import standdown

    try:
        return standdown.lock_for_change(cfg, what, lambda msg: print(f"{what}: {msg}", file=sys.stderr),
                                         command=command, lease=lease)
    except (host_lock.LockHeld, standdown.WindowOpen) as exc:
        print(f"{what}: {exc}", file=sys.stderr)
        return None


def _hold(cfg, what: str, lease: str, current: bool = False) -> int:
    """Hold the host lock with ``lease`` until stdin reaches EOF (or SIGTERM/SIGHUP); 1 when refused.
    Prints ``held`` once the lock is taken; with ``current`` then one JSON line, the generations'
    index, current generation and its record (:func:`rigkit.host.generations.current`; ``{"error":
    why}`` when unreadable), so a deploy takes the lock and reads where it starts in one SSH session.

    A stop signal only ends the wait, never the release (:class:`_StopSignals`)."""
    with _StopSignals() as stop:
        lock = _take(cfg, what, f"rigkit-agent lock hold --what {what!r}", lease)
        if lock is None:
            return 1
        try:
            print("held", flush=True)
            if current:
                print(json.dumps(_reading(cfg), sort_keys=True), flush=True)
            stop.wait_for_eof(sys.stdin.fileno())
            return 0
        finally:
            lock.release()


def _publish(cfg, *parts: str) -> None:
    """Write this host's metrics ``parts`` (:func:`rigkit.host.promfile.publish`; nothing when the host
    config names no textfile folder; ``cfg`` None: read it now). Never raises: metrics do not change a
    job's exit code."""
    try:
        from rigkit.host import promfile

        promfile.publish(cfg if cfg is not None else load_config(), *parts)
    except Exception as exc:  # noqa: BLE001 - an unexpected reader failure is said, never fatal
        print(f"metrics: not written: {type(exc).__name__}: {exc}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    """``rigkit-agent {keeper,watchdog,power,activate,window,fetch,record,status,lock,generation,confirm,probe,energy,metrics,version} ...``."""
    argv = sys.argv[1:] if argv is None else argv
    job = argv[0] if argv else ""
    if job in ("version", "probe"):
        print(_version(), flush=True)
        if job == "probe" and len(argv) > 1:
            from rigkit.host.modelcheck import probe

            sys.exit(probe(argv[1:]))
        sys.exit(0)
    if job == "energy":
        from rigkit.bench.nvml import main as energy_main

        sys.exit(energy_main(argv[1:]))
    if job == "metrics":
        from rigkit.host.promfile import put_main

        sys.exit(put_main(argv[1:]))
    if job in ("fetch", "record", "status"):
        from rigkit.host.fetch import main as fetch_main

        sys.exit(fetch_main(argv))
    if job not in ("keeper", "watchdog", "power", "activate", "window", "lock", "generation", "confirm"):
        print("usage: rigkit-agent {keeper,watchdog,power,activate,window,fetch,record,status,lock,generation,confirm,probe,energy,metrics,version} ...",
              file=sys.stderr)
        sys.exit(2)
    try:
        if job == "activate":
            from rigkit.host.activate import main as activate_main

            sys.exit(activate_main(argv[1:]))
        if job == "window":
            from rigkit.host.window import main as window_main

            sys.exit(window_main(argv[1:]))
        if job == "lock":
            sys.exit(lock_main(argv[1:]))
        if job == "generation":
            from rigkit.host.generations import main as generation_main

            rc = generation_main(argv[1:])
            if argv[1:2] and argv[1] in ("record", "fail", "hold", "release"):
                _publish(None, "state")
            sys.exit(rc)
        if job == "confirm":
            from rigkit.host.confirm import main as confirm_main

            sys.exit(confirm_main(argv[1:]))
        cfg = load_config()
        try:
            if job == "keeper":
                from rigkit.host.keeper import keeper

                sys.exit(keeper(cfg))
            if job == "power":
                from rigkit.host import power

                sys.exit(power.main(cfg, argv[1:]))
            from rigkit.host import watchdog

            sys.exit(watchdog.main(cfg, argv[1:]))
        finally:  # each timer job writes the rig's state, the healer its own figures too (rigkit.host.promfile)
            _publish(cfg, *(("power", "state") if job == "power" else ("state",)))
    except ConfigError as exc:
        print(f"{job}: {exc}", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:  # requests errors, an unreadable state file: say what, exit 1
        if job in ("keeper", "watchdog", "power"):
            print(f"{job}: {type(exc).__name__}: {exc}", file=sys.stderr)
            sys.exit(1)
        raise


if __name__ == "__main__":
    main()
