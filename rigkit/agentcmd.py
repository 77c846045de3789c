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
from pathlib import Path

from rigkit import paths
from rigkit.common.activate import UNIT
from rigkit.common.lock import LEASE_ENV


#: Set by ``rigkit deploy --no-revert`` (and ``wire-in --activate --no-revert``): the activations it
#: runs leave a failed config live instead of restoring the previous one (``rigkit-agent activate --no-revert``).
NO_REVERT_ENV = "RIGKIT_NO_REVERT"


def lease() -> str | None:
    """The lease this control-side run acts under (``$RIGKIT_LOCK_LEASE``), or None."""
    return os.environ.get(LEASE_ENV) or None


def _env_prefix() -> str:
    return f"env {LEASE_ENV}={shlex.quote(lease())} " if lease() else ""


def remote_command(args: list[str], agent: str, log: str, unit: str = UNIT, lease: str | None = None) -> str:
    """The shell command that runs ``rigkit-agent activate ARGS`` on the host in a transient unit
    ``rigkit-activate-<id>.service`` (``systemd-run --wait``: it keeps running when the SSH session is
    lost), then prints its log and exits with its status. Run as root.

    One activation at a time is the host lock's business (:func:`rigkit.host.activate.main` takes it), not the unit's
    name: each run gets its own unit and its own log (``<log>.<id>``), so a command right after the
    previous one never meets a unit systemd has not collected yet, and a refused run cannot truncate
    the log of the one that holds the lock. The log of the last run is kept as ``log``. With
    ``lease`` the activation joins the lock holder of that lease (``RIGKIT_LOCK_LEASE``)."""
    agent_cmd = shlex.join([agent, "activate", *args])
    env = f"-E {LEASE_ENV}={shlex.quote(lease)} " if lease else ""
    q = shlex.quote(log)
    return (f"mkdir -p {shlex.quote(str(Path(log).parent))} && id=$(date +%s%N)-$$ && "
            f"systemd-run --unit={unit}-$id --collect --wait --quiet --service-type=exec "
            f"-p StandardOutput=truncate:{log}.$id -p StandardError=inherit -E PYTHONUNBUFFERED=1 {env}{agent_cmd}; "
            f"rc=$?; cat {q}.$id 2>/dev/null; mv -f {q}.$id {q} 2>/dev/null; exit $rc")


def activate_command(args: list[str], lease_id: str | None = None, no_revert: bool = False) -> str:
    """``rigkit-agent activate ARGS`` in the transient unit ``rigkit-activate``, its log printed back
    (:func:`remote_command` with the rig's agent and log paths), joining ``lease_id`` (default
    :func:`lease`); ``--no-revert`` added with ``no_revert`` or under ``$RIGKIT_NO_REVERT``. Run as root."""
    if no_revert or os.environ.get(NO_REVERT_ENV):
        args = [*args, "--no-revert"]
    return remote_command(args, agent=paths.AGENT_BIN, log=paths.ACTIVATE_LOG, lease=lease_id or lease())


def locked_command(what: str, argv: list[str]) -> str:
    """``rigkit-agent lock run --what WHAT -- ARGV``: ARGV under the host lock, refused (exit 1, the
    holder named on stderr) while the lock is held or a window is open. Run as root."""
    return _env_prefix() + shlex.join([paths.AGENT_BIN, "lock", "run", "--what", what, "--", *argv])


def bisect_end_command() -> str:
    """``rigkit-agent generation bisect-end`` (under the host lock): the host, deployed back at an interrupted
    bisect's start, made current there and the journal removed (:func:`rigkit.host.generations.bisect_end`)."""
    return f"{_env_prefix()}{shlex.quote(paths.AGENT_BIN)} generation bisect-end"


def record_command(manifest_path: str) -> str:
    """``rigkit-agent generation record < MANIFEST`` (under the host lock), then the manifest removed. Run as root."""
    q = shlex.quote(manifest_path)
    return f"{_env_prefix()}{shlex.quote(paths.AGENT_BIN)} generation record < {q}; rc=$?; rm -f {q}; exit $rc"
