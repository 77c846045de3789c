"""The shell commands the control side runs on the host to reach its agent (``/opt/rigkit/venv/bin/
rigkit-agent``), built in one place: the activation in its transient unit, and a command run under
the host lock (DESIGN.md "One host lock"). Pure string builders; nothing here touches a host."""

from __future__ import annotations

import shlex

from rigkit import paths
from rigkit.host.activate import remote_command


def activate_command(args: list[str]) -> str:
    """``rigkit-agent activate ARGS`` in the transient unit ``rigkit-activate``, its log printed back
    (:func:`rigkit.host.activate.remote_command` with the rig's agent and log paths). Run as root."""
    return remote_command(args, agent=paths.AGENT_BIN, log=paths.ACTIVATE_LOG)


def locked_command(what: str, argv: list[str]) -> str:
    """``rigkit-agent lock run --what WHAT -- ARGV``: ARGV under the host lock, refused (exit 1, the
    holder named on stderr) while the lock is held or a window is open. Run as root."""
    return shlex.join([paths.AGENT_BIN, "lock", "run", "--what", what, "--", *argv])
