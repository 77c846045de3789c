"""One member's lifecycle, held to upstream ``internal/process/process_command.go``.

States: stopped → starting → ready → stopping → stopped (plus shutdown). ``cmd`` is
split without a shell (``config.sanitize_command``) and run in the foreground in its
own process group with the model's ``env`` appended to llama-swap's environment.

Start: 250 ms after spawn, poll ``proxy``+``checkEndpoint`` about every 1 s until it
answers 200, up to ``healthCheckTimeout`` seconds; the start fails at once with
``upstream command exited prematurely`` when ``cmd`` exits (upstream PR #102, v105);
``checkEndpoint: none`` skips the check. Stop: ``cmdStop`` (``${PID}`` substituted,
run with the model's env) or SIGTERM to the process group; SIGKILL to the group
after the graceful timeout (seconds). TTL: idle seconds since the last *completed*
request, checked every second, never while a request is in flight (issue #25).

Test seam (documented in tests/standins/README.md): ``RIGKIT_STANDIN_HEALTH_POLL_S``
replaces the 1 s poll interval and ``RIGKIT_STANDIN_HEALTH_TIMEOUT_S`` replaces the
effective health-check timeout (after upstream's clamp to ≥ 15 s). Neither exists
upstream; production units never set them.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from typing import List, Optional

from .config import ConfigError, ModelConfig, format_go_duration, sanitize_command
from .log import Logger

STOPPED = "stopped"
STARTING = "starting"
READY = "ready"
STOPPING = "stopping"
SHUTDOWN = "shutdown"


def _seam_float(name: str) -> Optional[float]:
    v = os.environ.get(name)
    if not v:
        return None
    try:
        return float(v)
    except ValueError:
        return None


def health_poll_interval() -> float:
    """Seconds between health polls: 1.0 upstream, or the test seam's value."""
    v = _seam_float("RIGKIT_STANDIN_HEALTH_POLL_S")
    return v if v is not None and v > 0 else 1.0


def effective_health_timeout(configured_s: int) -> float:
    """Seconds a start may take: the (clamped) config value, or the test seam's value."""
    v = _seam_float("RIGKIT_STANDIN_HEALTH_TIMEOUT_S")
    return v if v is not None and v > 0 else float(configured_s)


def _go_start_error(args: List[str], exc: OSError) -> str:
    """Go's ``exec.Cmd.Start`` error text for a command that cannot be started."""
    name = args[0]
    if "/" not in name and shutil.which(name) is None:
        return 'exec: "%s": executable file not found in $PATH' % name
    msg = (exc.strerror or str(exc)).strip()
    msg = msg[:1].lower() + msg[1:]
    path = name if "/" in name else (shutil.which(name) or name)
    return "fork/exec %s: %s" % (path, msg)


def split_proxy(proxy: str):
    """``(host, port, base_path)`` of a member's ``proxy`` URL (http only)."""
    u = urllib.parse.urlsplit(proxy)
    port = u.port or (443 if u.scheme == "https" else 80)
    return u.hostname or "localhost", port, u.path.rstrip("/")


class StartError(Exception):
    """A failed start; ``str(err)`` is upstream's message (e.g. ``upstream command exited prematurely``)."""


class Process:
    """One model's process. Thread-safe; all waits are bounded by the given timeouts (s)."""

    def __init__(self, model_id: str, mc: ModelConfig, proxylog: Logger, upstreamlog: Logger) -> None:
        self.id = model_id
        self.config = mc
        self.log = proxylog
        self.upstreamlog = upstreamlog
        self._cond = threading.Condition()
        self._state = STOPPED
        self._proc: Optional[subprocess.Popen] = None
        self._exited: Optional[threading.Event] = None
        self._abort = threading.Event()
        self._gen = 0
        self._last_err: Optional[str] = None
        self.inflight = 0
        self.last_use = 0.0

    # ------------------------------------------------------------------ state
    @property
    def state(self) -> str:
        return self._state

    def _set_state(self, s: str) -> None:
        old = self._state
        self._state = s
        if old != s:
            self.log.debug("<%s> swapState() State transitioned from %s to %s" % (self.id, old, s))
        self._cond.notify_all()

    @property
    def pid(self) -> Optional[int]:
        p = self._proc
        return p.pid if p is not None else None

    # ------------------------------------------------------------------ start
    def ensure_ready(self, timeout_s: float) -> None:
        """Bring the process to ready, starting it if stopped; joins a start in progress.

        Raises StartError with upstream's message on failure.
        """
        with self._cond:
            while True:
                if self._state == READY:
                    return
                if self._state == SHUTDOWN:
                    raise StartError("[%s] shutdown" % self.id)
                if self._state == STARTING:
                    gen = self._gen
                    while self._state == STARTING and self._gen == gen:
                        self._cond.wait()
                    if self._state == READY:
                        return
                    if self._gen == gen and self._last_err:
                        raise StartError(self._last_err)
                    continue
                if self._state == STOPPING:
                    self._cond.wait()
                    continue
                break
            self._gen += 1
            self._abort.clear()
            self._set_state(STARTING)
        err = self._do_start(timeout_s)
        with self._cond:
            if err is None:
                self.last_use = time.monotonic()
                self._last_err = None
                self._set_state(READY)
                gen = self._gen
            else:
                self._last_err = err
                self._proc = None
                self._set_state(STOPPED)
        if err is not None:
            raise StartError(err)
        threading.Thread(target=self._watch_exit, args=(gen,), daemon=True).start()
        if self.config.ttl > 0:
            threading.Thread(target=self._ttl_loop, args=(gen,), daemon=True).start()

    def _do_start(self, timeout_s: float) -> Optional[str]:
        mc = self.config
        if mc.proxy == "":
            return "upstream proxy missing"
        try:
            args = sanitize_command(mc.cmd)
        except ConfigError as e:
            return "unable to get sanitized command: %s" % e
        env = dict(os.environ)
        for item in mc.env:
            k, _, v = item.partition("=")
            env[k] = v
        self.log.debug(
            "<%s> Executing start command: %s, env: %s" % (self.id, " ".join(args), ", ".join(mc.env))
        )
        try:
            proc = subprocess.Popen(
                args,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                **_new_group_kwargs(),
            )
        except OSError as e:
            return "failed to start command '%s': %s" % (" ".join(args), _go_start_error(args, e))
        exited = threading.Event()
        self._proc = proc
        self._exited = exited
        threading.Thread(target=self._pump_output, args=(proc,), daemon=True).start()
        threading.Thread(target=self._reap, args=(proc, exited), daemon=True).start()

        if self._abort.is_set():
            self._kill(proc, exited, 5.0)
            return "aborted"
        if mc.check_endpoint.strip() == "none":
            return None
        if self._abort.wait(0.25):
            self._kill(proc, exited, 5.0)
            return "aborted"
        deadline = time.monotonic() + timeout_s
        poll = health_poll_interval()
        while True:
            if self._abort.is_set():
                self._kill(proc, exited, 5.0)
                return "aborted"
            if exited.is_set():
                return "upstream command exited prematurely"
            if time.monotonic() > deadline:
                self._kill(proc, exited, 5.0)
                return "health check timed out after %s" % format_go_duration(int(timeout_s * 1e9))
            if self._health_ok():
                self.log.info("<%s> Health check passed on %s%s" % (self.id, mc.proxy, mc.check_endpoint))
                return None
            end = time.monotonic() + poll
            while time.monotonic() < end:
                if exited.wait(min(0.05, poll)):
                    return "upstream command exited prematurely"
                if self._abort.is_set():
                    break

    def _health_ok(self) -> bool:
        host, port, base = split_proxy(self.config.proxy)
        conn = http.client.HTTPConnection(host, port, timeout=5)
        try:
            conn.request("GET", base + self.config.check_endpoint)
            resp = conn.getresponse()
            resp.read()
            return resp.status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            conn.close()

    def _pump_output(self, proc: subprocess.Popen) -> None:
        out = proc.stdout
        if out is None:
            return
        try:
            for line in iter(out.readline, b""):
                self.upstreamlog.raw(line.decode("utf-8", "replace"))
        except (OSError, ValueError):
            pass

    def _reap(self, proc: subprocess.Popen, exited: threading.Event) -> None:
        code = proc.wait()
        self.log.debug("<%s> process exited: code=%d" % (self.id, code))
        exited.set()

    def _watch_exit(self, gen: int) -> None:
        exited = self._exited
        if exited is None:
            return
        exited.wait()
        with self._cond:
            if self._gen == gen and self._state == READY:
                self._proc = None
                self._set_state(STOPPED)
                self.log.warn("<%s> upstream process exited unexpectedly" % self.id)

    def _ttl_loop(self, gen: int) -> None:
        ttl = self.config.ttl
        while True:
            time.sleep(1.0)
            with self._cond:
                if self._gen != gen or self._state != READY:
                    return
                if self.inflight:
                    continue
                idle = time.monotonic() - self.last_use
            if idle > ttl:
                self.log.info("<%s> Unloading model, TTL of %ds reached" % (self.id, ttl))
                self.stop(float(self.config.unload_timeout))
                return

    # ------------------------------------------------------------------ stop
    def stop(self, timeout_s: float) -> None:
        """Stop the process: cmdStop or SIGTERM to the group, SIGKILL after ``timeout_s``.

        Aborts a start in progress. Idempotent. Returns once the process has exited.
        """
        with self._cond:
            if self._state == STARTING:
                self._abort.set()
                while self._state == STARTING:
                    self._cond.wait()
            while self._state == STOPPING:
                self._cond.wait()
            if self._state != READY:
                return
            proc, exited = self._proc, self._exited
            self._set_state(STOPPING)
        if proc is not None and exited is not None:
            self._kill(proc, exited, timeout_s)
        with self._cond:
            self._proc = None
            if self._state == STOPPING:
                self._set_state(STOPPED)

    def shutdown(self, timeout_s: float) -> None:
        """Stop, then mark the process shut down (no further starts)."""
        self.stop(timeout_s)
        with self._cond:
            self._set_state(SHUTDOWN)

    def _kill(self, proc: subprocess.Popen, exited: threading.Event, timeout_s: float) -> None:
        threading.Thread(target=self._send_stop_signal, args=(proc,), daemon=True).start()
        if exited.wait(timeout_s):
            return
        self.log.debug("<%s> graceful stop timed out after %ss, sending SIGKILL" % (self.id, timeout_s))
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        exited.wait()

    def _send_stop_signal(self, proc: subprocess.Popen) -> None:
        mc = self.config
        if mc.cmd_stop.strip():
            try:
                stop_args = sanitize_command(mc.cmd_stop.replace("${PID}", str(proc.pid)))
            except ConfigError as e:
                self.upstreamlog.raw(
                    "<%s> sendStopSignal() failed to sanitize CmdStop %r: %s, falling back to terminateProcessTree\n"
                    % (self.id, mc.cmd_stop, e)
                )
            else:
                env = dict(os.environ)
                for item in mc.env:
                    k, _, v = item.partition("=")
                    env[k] = v
                try:
                    r = subprocess.run(
                        stop_args,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        **_new_group_kwargs(),
                    )
                    if r.stdout:
                        self.upstreamlog.raw(r.stdout.decode("utf-8", "replace"))
                    if r.returncode != 0:
                        self.log.warn("[%s] stop signal failed: exit status %d" % (self.id, r.returncode))
                except OSError as e:
                    self.log.warn("[%s] stop signal failed: %s" % (self.id, _go_start_error(stop_args, e)))
                return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass

    # ------------------------------------------------------------------ requests
    def begin_request(self) -> bool:
        """Count a request in flight; False when the process is not ready."""
        with self._cond:
            if self._state != READY:
                return False
            self.inflight += 1
            return True

    def end_request(self) -> None:
        """A request completed: the TTL idle window restarts now."""
        with self._cond:
            self.inflight -= 1
            self.last_use = time.monotonic()


def _new_group_kwargs() -> dict:
    if sys.version_info >= (3, 11):
        return {"process_group": 0}
    return {"preexec_fn": os.setpgrp}
