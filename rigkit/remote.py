"""The host agent over SSH, one way for every control-side command that talks to it directly
(``rigkit window``, ``rigkit generations``, ``rigkit rollback``): pyinfra's connection settings
(:func:`rigkit.bench.tunnel.ssh_base_args`), ``sudo -n`` when the host's ``_sudo`` is set."""

from __future__ import annotations

import shlex
import subprocess
from typing import Any

from rigkit import paths


class Remote:
    """Commands on host ``name`` over SSH with ``connection`` (pyinfra's data keys)."""

    def __init__(self, name: str, connection: dict[str, Any]) -> None:
        self.name = name
        self.connection = connection

    def argv(self, command: str) -> list[str]:
        """The ``ssh`` argv running shell ``command`` on the host (as root when ``_sudo``), with
        keep-alives (a dead link ends the session within ~15 s)."""
        from rigkit.bench.tunnel import ssh_base_args

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

    def agent(self, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """``rigkit-agent ARGS`` on the host (:meth:`run`)."""
        return self.run(" ".join([paths.AGENT_BIN, *map(shlex.quote, args)]), stdin=stdin, timeout=timeout)
