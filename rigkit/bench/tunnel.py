"""Reach the rig's 127.0.0.1 services over SSH, with the connection settings pyinfra uses
(the ``ssh`` argv is :func:`rigkit.remote.ssh_base_args`'s, the one place that builds one).

DESIGN.md "Reaching services": everything on the rig listens on 127.0.0.1; control-side HTTP
goes through an SSH local forward. The connection dict holds pyinfra's own data keys
(``ssh_hostname``, ``ssh_port``, ``ssh_user``, ``ssh_key``, ``ssh_known_hosts_file``,
``ssh_strict_host_key_checking``, ``ssh_config_file``); they map onto OpenSSH's client
options (ssh(1), ssh_config(5)). ``BatchMode=yes`` (never prompt) and, for forwards,
``ExitOnForwardFailure=yes`` (fail instead of running without the forward).
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import time
from typing import Any

from rigkit.remote import Remote, ssh_base_args


class TunnelError(RuntimeError):
    """The SSH command or forward failed; the message names the host and ssh's own error."""


def run_ssh(host_name: str, connection: dict[str, Any], command: str,
            timeout_s: float = 30.0, as_root: bool = False) -> tuple[int, str, str]:
    """Run ``command`` on the host (:meth:`rigkit.remote.Remote.argv`; ``as_root``: under ``sudo -n``
    when the inventory says ``_sudo``); return ``(exit status, stdout, stderr)`` as text.
    A timeout or a missing ``ssh`` binary raises :class:`TunnelError`."""
    argv = Remote(host_name, connection if as_root else {**connection, "_sudo": False}).argv(command)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise TunnelError("ssh: command not found on the control machine") from None
    except subprocess.TimeoutExpired:
        raise TunnelError(f"{host_name}: ssh {shlex.quote(command)} timed out after "
                          f"{timeout_s:g} s") from None
    return p.returncode, p.stdout, p.stderr


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
    exits first (auth failure, forward refused) it raises :class:`TunnelError` with ssh's
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
            raise TunnelError("ssh: command not found on the control machine") from None
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = (self.proc.stderr.read() if self.proc.stderr else "").strip()
                raise TunnelError(f"{self.host_name}: SSH forward to 127.0.0.1:"
                                  f"{self.remote_port} failed (ssh exit {self.proc.returncode}): "
                                  f"{err or 'no message'}")
            try:
                with socket.create_connection(("127.0.0.1", self.local_port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.__exit__(None, None, None)
        raise TunnelError(f"{self.host_name}: SSH forward to 127.0.0.1:{self.remote_port} not "
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
