"""The shell commands the control side runs on the host to reach its agent (``/opt/rigkit/venv/bin/
rigkit-agent``), built in one place: the activation in its transient unit, a command run under
the host lock (DESIGN.md "One host lock"), the generation record. Pure string builders; nothing
here touches a host.

Inside ``rigkit rollback`` (which holds the host lock for its whole run, :mod:`rigkit.host.lock`'s
lease), ``$RIGKIT_LOCK_LEASE`` on the control machine names the lease; each command built here then
carries it, so that it joins the rollback's lock instead of being refused by it.
"""

from __future__ import annotations

import os
import shlex

from rigkit import paths
from rigkit.host.activate import remote_command
from rigkit.host.lock import LEASE_ENV


def lease() -> str | None:
    """The lease this control-side run acts under (``$RIGKIT_LOCK_LEASE``), or None."""
    return os.environ.get(LEASE_ENV) or None


def _env_prefix() -> str:
    return f"env {LEASE_ENV}={shlex.quote(lease())} " if lease() else ""


def activate_command(args: list[str]) -> str:
    """``rigkit-agent activate ARGS`` in the transient unit ``rigkit-activate``, its log printed back
    (:func:`rigkit.host.activate.remote_command` with the rig's agent and log paths). Run as root."""
    return remote_command(args, agent=paths.AGENT_BIN, log=paths.ACTIVATE_LOG, lease=lease())


def locked_command(what: str, argv: list[str]) -> str:
    """``rigkit-agent lock run --what WHAT -- ARGV``: ARGV under the host lock, refused (exit 1, the
    holder named on stderr) while the lock is held or a window is open. Run as root."""
    return _env_prefix() + shlex.join([paths.AGENT_BIN, "lock", "run", "--what", what, "--", *argv])


def record_command(manifest_path: str) -> str:
    """``rigkit-agent generation record < MANIFEST`` (under the host lock), then the manifest removed. Run as root."""
    q = shlex.quote(manifest_path)
    return f"{_env_prefix()}{shlex.quote(paths.AGENT_BIN)} generation record < {q}; rc=$?; rm -f {q}; exit $rc"
