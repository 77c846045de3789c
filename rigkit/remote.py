"""The host over SSH, the one way for every control-side command that talks to it directly
(``rigkit deploy``'s lock and confirmation, ``rigkit window``, ``rigkit generations``, ``rigkit
rollback``, ``rigkit wire-in``, ``rigkit bench``, drift's generation reads): pyinfra's connection
settings, ``sudo -n`` only where a command asks to run as root (``as_root``) and the host's
``_sudo`` is set. The one module that builds an ``ssh`` argv or starts ``ssh``
(tests/unit/test_one_piece.py, tests/unit/test_remote.py).

A command run here either ran on the host — its own exit status comes back — or raises: ssh's own
failure (exit 255: no route, connection refused, a host key that does not verify, authentication;
ssh(1) "EXIT STATUS": "ssh exits with the exit status of the remote command or with 255 if an error
occurred") is :class:`HostUnreachable`, no answer within the timeout :class:`RemoteTimeout`, so a
failed connection is never read as "the command found nothing". rigkit's own commands on the host
never exit 255 themselves.

The connection dict holds pyinfra's own data keys (``ssh_hostname``, ``ssh_port``, ``ssh_user``,
``ssh_key``, ``ssh_known_hosts_file``, ``ssh_strict_host_key_checking``, ``ssh_config_file``); they
map onto OpenSSH's client options (ssh(1), ssh_config(5)), with ``BatchMode=yes`` (never prompt).

Services on the rig listen on its 127.0.0.1 (DESIGN.md "Reaching services"): the control side
reaches them through :class:`SSHForward` (``ssh -N -L``, ``ExitOnForwardFailure=yes``)."""

from __future__ import annotations

import shlex
import socket
import subprocess
import time
from typing import Any

from rigkit import paths

#: ssh's own exit status when it failed (ssh(1) "EXIT STATUS").
SSH_FAILED = 255


class RemoteError(RuntimeError):
    """The host could not be asked or read over SSH; the message names the host and says why."""


class HostUnreachable(RemoteError):
    """ssh itself failed (exit 255, or no ``ssh`` here): the command did not run on the host."""


class RemoteTimeout(RemoteError):
    """The command did not finish within its timeout (the link may be up: a dead link ends the
    session within ~15 s through the keep-alives, as :class:`HostUnreachable`)."""


class HostReadError(RemoteError):
    """A file on the host could not be read (sudo or ``cat`` failed): the message names the host,
    the file and what the host said. Never read as "absent"."""


class ForwardError(RemoteError):
    """An SSH local forward could not be opened (ssh exited first, or the port never answered)."""


def ssh_base_args(host_name: str, connection: dict[str, Any]) -> list[str]:
    """The ``ssh`` argv (without a remote command) for ``connection`` (pyinfra data keys).

    ``ssh_hostname`` defaults to ``host_name``. Password authentication is not supported
    (BatchMode); a key or the agent must do.
    """
    args = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    if connection.get("ssh_config_file"):
        args += ["-F", str(connection["ssh_config_file"])]
    if connection.get("ssh_port"):
        args += ["-p", str(connection["ssh_port"])]
    if connection.get("ssh_user"):
        args += ["-l", str(connection["ssh_user"])]
    if connection.get("ssh_key"):
        args += ["-i", str(connection["ssh_key"]), "-o", "IdentitiesOnly=yes"]
    if connection.get("ssh_known_hosts_file"):
        args += ["-o", f"UserKnownHostsFile={connection['ssh_known_hosts_file']}"]
    strict = connection.get("ssh_strict_host_key_checking")
    if strict is not None:
        val = strict if isinstance(strict, str) else ("yes" if strict else "no")
        args += ["-o", f"StrictHostKeyChecking={val}"]
    args.append(str(connection.get("ssh_hostname") or host_name))
    return args


class Remote:
    """Commands on host ``name`` over SSH with ``connection`` (pyinfra's data keys)."""

    def __init__(self, name: str, connection: dict[str, Any]) -> None:
        self.name = name
        self.connection = connection

    def argv(self, command: str, as_root: bool) -> list[str]:
        """The ``ssh`` argv running shell ``command`` on the host — under ``sudo -n`` when
        ``as_root`` and the host's ``_sudo`` is set (the login user is not root) — with keep-alives
        (a dead link ends the session within ~15 s)."""
        base = ssh_base_args(self.name, self.connection)
        sudo = "sudo -n " if as_root and self.connection.get("_sudo") else ""
        return base[:-1] + ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"] + base[-1:] + \
            ["--", sudo + command]

    def _unreachable(self, stderr: str) -> HostUnreachable:
        """ssh's failure as :class:`HostUnreachable`: the host, then the end of what ssh said (its
        last line is the reason: ``Connection refused``, ``Host key verification failed.``)."""
        said = " ".join(stderr.split())
        return HostUnreachable(f"{self.name}: cannot reach the host over SSH (ssh exit {SSH_FAILED}): "
                               f"{('…' + said[-300:]) if len(said) > 300 else (said or 'no message')}")

    def run(self, command: str, *, as_root: bool, stdin: str | bytes | None = None, timeout: float = 60,
            text: bool = True) -> subprocess.CompletedProcess:
        """Run shell ``command`` on the host (:meth:`argv`); the finished process, ``returncode`` the
        command's own exit status, ``stdout``/``stderr`` as text (bytes with ``text`` False).

        Raises :class:`HostUnreachable` when ssh fails (exit 255, no ``ssh`` binary) and
        :class:`RemoteTimeout` after ``timeout`` seconds."""
        try:
            proc = subprocess.run(self.argv(command, as_root), input=stdin, capture_output=True, text=text,
                                  timeout=timeout)
        except FileNotFoundError:
            raise HostUnreachable(f"{self.name}: ssh: command not found on the control machine") from None
        except subprocess.TimeoutExpired:
            raise RemoteTimeout(f"{self.name}: {shlex.quote(command)[:200]} did not finish within "
                                f"{timeout:g} s") from None
        if proc.returncode == SSH_FAILED:
            err = proc.stderr if text else proc.stderr.decode(errors="replace")
            raise self._unreachable(err)
        return proc

    def popen(self, command: str, *, as_root: bool, **kwargs: Any) -> subprocess.Popen:
        """Start shell ``command`` on the host (:meth:`argv`) without waiting: a session the caller
        reads (``kwargs`` as :class:`subprocess.Popen`'s). The caller owns it: ssh's exit status
        :data:`SSH_FAILED` is a lost or failed connection (:meth:`lost`). Raises
        :class:`HostUnreachable` when there is no ``ssh`` here."""
        try:
            return subprocess.Popen(self.argv(command, as_root), **kwargs)
        except FileNotFoundError:
            raise HostUnreachable(f"{self.name}: ssh: command not found on the control machine") from None

    def lost(self, returncode: int | None, stderr: str = "") -> HostUnreachable | None:
        """The :class:`HostUnreachable` a :meth:`popen` session that ended with ``returncode`` stands
        for (ssh's own failure), else None (the command's own exit)."""
        return self._unreachable(stderr) if returncode == SSH_FAILED else None

    def agent(self, *args: str, stdin: str | None = None, timeout: float = 60,
              lease: str | None = None) -> subprocess.CompletedProcess:
        """``rigkit-agent ARGS`` on the host as root (:meth:`run`, which raises on a failed
        connection); with ``lease`` it joins the host lock held under that lease
        (``RIGKIT_LOCK_LEASE``, :mod:`rigkit.host.lock`)."""
        from rigkit.common.lock import LEASE_ENV

        env = ["env", f"{LEASE_ENV}={lease}"] if lease else []
        return self.run(" ".join(map(shlex.quote, [*env, paths.AGENT_BIN, *args])), as_root=True, stdin=stdin,
                        timeout=timeout)


def read_holds(remote: Remote) -> dict[str, dict[str, Any]]:
    """The host's holds (``paths.HOLDS_FILE``, :func:`rigkit.common.holds.parse`) over SSH: the one
    control-side reader (``rigkit wire-in``, ``rigkit generations``; tests/unit/test_one_piece.py).

    Returns ``{name: record}`` (``{}`` when the file is absent). Raises :class:`HostUnreachable` /
    :class:`RemoteTimeout` (:meth:`Remote.run`) and :class:`HostReadError` when the command fails on
    the host (exit != 0: sudo refused, the file unreadable: a hold is a safety record, so a failed
    read is never "no hold"), :class:`rigkit.common.holds.HoldsError` when the file is not a JSON
    object of hold records."""
    from rigkit.common import holds

    path = shlex.quote(paths.HOLDS_FILE)
    proc = remote.run(f"sh -c {shlex.quote(f'if [ -e {path} ]; then cat {path}; fi')}", as_root=True)
    if proc.returncode != 0:
        raise HostReadError(f"{remote.name}: cannot read {paths.HOLDS_FILE} (exit {proc.returncode}): "
                            f"{' '.join(proc.stderr.split())[:300]}")
    return holds.parse(proc.stdout, paths.HOLDS_FILE)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SSHForward:
    """``ssh -N -L 127.0.0.1:LOCAL:127.0.0.1:REMOTE`` as a context manager.

    + remote_port: the port on the host's 127.0.0.1 (llama-swap 8080, HyperQwen 18020).
    + local_port: chosen free on the control machine's 127.0.0.1.
    + url: ``http://127.0.0.1:LOCAL`` once entered.

    Entering waits up to ``ready_timeout_s`` seconds for the local port to accept; if ssh
    exits first (auth failure, forward refused) it raises :class:`ForwardError` with ssh's
    stderr. Leaving terminates ssh.
    """

    def __init__(self, host_name: str, connection: dict[str, Any], remote_port: int,
                 ready_timeout_s: float = 20.0) -> None:
        self.host_name = host_name
        self.connection = connection
        self.remote_port = remote_port
        self.ready_timeout_s = ready_timeout_s
        self.local_port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    def argv(self) -> list[str]:
        """The full ssh argv for the forward."""
        base = ssh_base_args(self.host_name, self.connection)
        opts = ["-N", "-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=15",
                "-L", f"127.0.0.1:{self.local_port}:127.0.0.1:{self.remote_port}"]
        return base[:-1] + opts + base[-1:]

    def __enter__(self) -> "SSHForward":
        self.local_port = free_port()
        try:
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         text=True)
        except FileNotFoundError:
            raise ForwardError(f"{self.host_name}: ssh: command not found on the control machine") from None
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = (self.proc.stderr.read() if self.proc.stderr else "").strip()
                raise ForwardError(f"{self.host_name}: SSH forward to 127.0.0.1:"
                                   f"{self.remote_port} failed (ssh exit {self.proc.returncode}): "
                                   f"{err or 'no message'}")
            try:
                with socket.create_connection(("127.0.0.1", self.local_port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.__exit__(None, None, None)
        raise ForwardError(f"{self.host_name}: SSH forward to 127.0.0.1:{self.remote_port} not "
                           f"ready after {self.ready_timeout_s:g} s")

    def __exit__(self, *exc: Any) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc and self.proc.stderr:
            self.proc.stderr.close()
