"""The host over SSH, one way for every control-side command that talks to it directly
(``rigkit window``, ``rigkit generations``, ``rigkit rollback``, ``rigkit wire-in``, drift's
generation reads; the bench's forward and its reads start from :func:`ssh_base_args`): pyinfra's
connection settings, ``sudo -n`` when the host's ``_sudo`` is set. The one module that builds an
``ssh`` argv (tests/unit/test_remote.py).

The connection dict holds pyinfra's own data keys (``ssh_hostname``, ``ssh_port``, ``ssh_user``,
``ssh_key``, ``ssh_known_hosts_file``, ``ssh_strict_host_key_checking``, ``ssh_config_file``); they
map onto OpenSSH's client options (ssh(1), ssh_config(5)), with ``BatchMode=yes`` (never prompt)."""

from __future__ import annotations

import shlex
import subprocess
from typing import Any

from rigkit import paths


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

    def argv(self, command: str) -> list[str]:
        """The ``ssh`` argv running shell ``command`` on the host (as root when ``_sudo``), with
        keep-alives (a dead link ends the session within ~15 s)."""
        base = ssh_base_args(self.name, self.connection)
        sudo = "sudo -n " if self.connection.get("_sudo") else ""
        return base[:-1] + ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"] + base[-1:] + \
            ["--", sudo + command]

    def run(self, command: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``command``; a timeout is exit 255 with ssh-like stderr (never raises)."""
        try:
            return subprocess.run(self.argv(command), input=stdin, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(command, 255, "", f"ssh: timed out after {timeout:g} s")

    def agent(self, *args: str, stdin: str | None = None, timeout: float = 60,
              lease: str | None = None) -> subprocess.CompletedProcess:
        """``rigkit-agent ARGS`` on the host (:meth:`run`); with ``lease`` it joins the host lock held
        under that lease (``RIGKIT_LOCK_LEASE``, :mod:`rigkit.host.lock`)."""
        from rigkit.common.lock import LEASE_ENV

        env = ["env", f"{LEASE_ENV}={lease}"] if lease else []
        return self.run(" ".join(map(shlex.quote, [*env, paths.AGENT_BIN, *args])), stdin=stdin, timeout=timeout)


class HostReadError(RuntimeError):
    """A file on the host could not be read over SSH (the connection, sudo or ``cat`` failed): the
    message names the host, the file and what ssh said. Never read as "absent"."""


def read_holds(remote: Remote) -> dict[str, dict[str, Any]]:
    """The host's holds (``paths.HOLDS_FILE``, :func:`rigkit.common.holds.parse`) over SSH: the one
    control-side reader (``rigkit wire-in``, ``rigkit generations``; tests/unit/test_one_piece.py).

    Returns ``{name: record}`` (``{}`` when the file is absent). Raises :class:`HostReadError` when
    the command fails (exit != 0: no connection, sudo refused, the file unreadable: a hold is a safety
    record, so a failed read is never "no hold") and :class:`rigkit.common.holds.HoldsError` when the
    file is not a JSON object of hold records."""
    from rigkit.common import holds

    path = shlex.quote(paths.HOLDS_FILE)
    proc = remote.run(f"sh -c {shlex.quote(f'if [ -e {path} ]; then cat {path}; fi')}")
    if proc.returncode != 0:
        raise HostReadError(f"{remote.name}: cannot read {paths.HOLDS_FILE} (ssh exit {proc.returncode}): "
                            f"{' '.join(proc.stderr.split())[:300]}")
    return holds.parse(proc.stdout, paths.HOLDS_FILE)
