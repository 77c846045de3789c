"""The wire-in's changes to the rig (DESIGN.md job 2, "Staged vs live"), the control side of
``rigkit wire-in``: :func:`activate` (the declared live config uploaded to the host's staging path and
run through the one activation path there, :mod:`rigkit.host.activate`, under the change context
:func:`rigkit.deploy.transaction.held`; then the declared review copy and host config installed),
:func:`rollback_live` (the newest backup activated, a hold recorded) and :func:`release` (the hold
removed), and what they read of the host (:func:`live_config`, :func:`host_holds`). The shell scripts
they run on the host are built here, each value through :func:`shlex.quote` (DESIGN.md "Commands from
values"); what they say goes to a :class:`rigkit.deploy.run.Output` (nothing here prints).

The host is reached over SSH through :class:`rigkit.remote.Remote` (pyinfra's connection settings,
``sudo -n`` when the inventory says ``_sudo``); a host not reached or not answering in time is
:class:`WireInFailed` (exit 1, the host named). Nothing said holds a secret: the configs hold none,
and the agent never prints the API key.
"""

from __future__ import annotations

import posixpath
import re
import secrets as pysecrets
import shlex
import subprocess
from typing import Any

from rigkit import exitcodes, hints, paths
from rigkit.agentcmd import activate_command
from rigkit.common import written
from rigkit.common.holds import HoldsError
from rigkit.deploy.run import Output
from rigkit.deploy.transaction import ChangeRefused, confirm, held, record_failed
from rigkit.remote import Remote, RemoteError, read_holds
from rigkit.render.files import render, render_llama_swap
from rigkit.render.generations import lock_text, manifest


class WireInFailed(RuntimeError):
    """A wire-in step failed on a host (exit 1): the message names the host and what failed."""

    exit_code = exitcodes.FAILED


def _run(hs: Any, command: str, stdin: str | None = None, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``command`` (a shell string) on the host as root (``sudo -n`` when the inventory says
    ``_sudo``) through :meth:`rigkit.remote.Remote.run`, the one SSH path: the command's own exit
    status; raises :class:`WireInFailed` when the host is not reached or does not answer within
    ``timeout_s``."""
    try:
        return Remote(hs.name, hs.connection).run(command, as_root=True, stdin=stdin, timeout=timeout_s)
    except RemoteError as exc:
        raise WireInFailed(str(exc)) from None


def live_config(hs: Any) -> str | None:
    """The host's live llama-swap config text (``paths.LLAMA_SWAP_CONFIG``), or None when it has none;
    raises :class:`WireInFailed` when the host cannot be read."""
    path = shlex.quote(paths.LLAMA_SWAP_CONFIG)
    p = _run(hs, f"sh -c 'if [ -e {path} ]; then cat {path}; else echo __RIGKIT_NONE__; fi'")
    if p.returncode != 0:
        raise WireInFailed(f"{hs.name}: cannot read {paths.LLAMA_SWAP_CONFIG} (exit {p.returncode}): "
                           f"{p.stderr.strip()[:300]}")
    return None if p.stdout == "__RIGKIT_NONE__\n" else p.stdout


def host_holds(hs: Any) -> dict[str, Any]:
    """The host's holds (:func:`rigkit.remote.read_holds`, the one reader); raises
    :class:`WireInFailed` when the host cannot be read or the file is not a JSON object of hold
    records."""
    try:
        return read_holds(Remote(hs.name, hs.connection))
    except RemoteError as exc:
        raise WireInFailed(str(exc)) from None
    except HoldsError as exc:
        raise WireInFailed(f"{hs.name}: {exc}") from None


def _activation(hs: Any, args: list[str], out: Output, timeout_s: float = 1800.0, lease_id: str | None = None,
                no_revert: bool = False) -> tuple[int, str]:
    """Run ``rigkit-agent activate ARGS`` on the host through :func:`rigkit.agentcmd.activate_command`
    (joining ``lease_id``; ``--no-revert`` with ``no_revert``), its log to ``out``
    (:meth:`~rigkit.deploy.run.Output.host_log`, the inventory's commands completed in it);
    ``(its exit code (an ssh failure is 1), its log)``."""
    # each run gets a transient unit of its own (rigkit.agentcmd.remote_command): a command right
    # after the previous one never meets a unit systemd has not collected yet
    p = _run(hs, f"sh -c {shlex.quote(activate_command(args, lease_id, no_revert))}", timeout_s=timeout_s)
    out.host_log(hints.complete(p.stdout, host=hs.name),  # the host's log names no inventory
                 hints.complete(p.stderr, host=hs.name) if p.stderr.strip() else "")
    return (p.returncode if p.returncode in (0, 1, 2) else exitcodes.FAILED), p.stdout


def rollback_live(hs: Any, out: Output) -> int:
    """``rigkit wire-in --rollback``: the agent activates the newest backup of the live config and
    records a hold (the activation path takes the host lock on the host); its exit code."""
    return _activation(hs, ["--rollback", "--live", paths.LLAMA_SWAP_CONFIG, "--by", "rigkit wire-in --rollback"],
                       out)[0]


def release(hs: Any, out: Output) -> int:
    """``rigkit wire-in --release``: the agent removes the wire-in's hold (the next deploy activates
    again); its exit code."""
    return _activation(hs, ["--release", "--by", "rigkit wire-in --release"], out)[0]


def install_declared_companions(hs: Any, declared_spec: Any) -> None:
    """Install the files that follow the members' ``staged`` flags besides the live config — the
    review copy (``config.staged.yaml``) and the host config (``/etc/rigkit/host.json``) — rendered
    from ``declared_spec``: the inventory's declared data, without ``--data`` (which changes only what
    this run activates). After an activation they are what the deploy would install, so drift is clean
    without another deploy. Written atomically with their declared mode and owner, only when they
    differ, each recorded as rigkit's write (:mod:`rigkit.common.written`); raises
    :class:`WireInFailed` when the host refuses."""
    files = render(declared_spec)
    for path in (paths.LLAMA_SWAP_STAGED, paths.HOST_CONFIG):
        f = files[path]
        tmp = shlex.quote(f"{path}.rigkit-tmp")
        q = shlex.quote(path)
        # recorded as rigkit's write (rigkit.common.written), as the deploy records its own: the next
        # deploy that changes it keeps no "edited by hand?" backup of what the wire-in wrote
        script = (f"umask 077 && cat > {tmp} && if cmp -s {tmp} {q}; then rm -f {tmp}; else "
                  f"chown {shlex.quote(f.owner)} {tmp} && chmod {f.mode} {tmp} && mv -f {tmp} {q}; fi && umask 022 && "
                  + written.shell(path, f.sha256, paths.STATE_DIR))
        up = _run(hs, f"sh -c {shlex.quote(script)}", stdin=f.text)
        if up.returncode != 0:
            raise WireInFailed(f"{hs.name}: installing the declared {path} failed: {up.stderr.strip()[:300]}")


def activate(hs: Any, out: Output, declared_spec: Any = None, no_revert: bool = False) -> int:
    """``rigkit wire-in --activate``: upload the live config of ``hs.spec`` (declared data plus
    ``--data``) to the host's staging path and activate it there, under the change context for the
    whole run (:func:`rigkit.deploy.transaction.held`); on success install the declared review copy and
    host config (:func:`install_declared_companions`, from ``declared_spec``, default ``hs.spec``). An
    activation that fails is put back by the activation path itself (the previous config, the
    resident asked again; not with ``no_revert``), recorded as a failed generation, and the generation
    the host is at again is confirmed (``rigkit-agent confirm``: services, power limit, the resident;
    not the files, which an earlier wire-in may have left unlike the recorded generation's). Returns
    the activation's exit code (0, 1, 2); raises :class:`WireInFailed` when the lock is refused or a
    step fails on the host, :class:`rigkit.remote.RemoteError` when the host is not reached."""
    lease = pysecrets.token_hex(8)
    try:
        with held([hs], "the wire-in activation", "rigkit wire-in --activate", out, lease) as (ch,):
            rc, log = _activate_declared(hs, declared_spec, lease, no_revert, out)  # joins this run's lock
            failed = re.search(r"^\[[\d:]+\] FAILED: (.*)$", log, re.M)
            if rc != exitcodes.FAILED or not failed or ch.start is None:
                return rc
            why = f"the wire-in activation failed: {failed[1]}"
            attempt = manifest(hs.spec, render(hs.spec), lock_text(hs.spec), "wire-in --activate")
            n = record_failed(ch, attempt, why, lease)
            if n is not None:
                ch.say(f"the failed attempt is generation {n}, recorded as failed")
            if no_revert:
                ch.say(f"{why}; --no-revert: the failed config stays live "
                       f"(`{hints.command('drift', host=hs.name)}` shows it)", error=True)
                return rc
            result = confirm(ch, ch.start, [], None, lease, files=False)
            if result.get("confirmed"):
                ch.say(f"{why}; reverted to generation {ch.start} through the activation path, confirmed: "
                       f"{', '.join(result.get('members') or [])} answered", error=True)
            else:
                ch.say(f"{why}; the activation put the previous config back, but generation {ch.start} does not "
                       f"confirm: {'; '.join(result.get('failed') or [])}", error=True)
            return rc
    except ChangeRefused as exc:
        raise WireInFailed(str(exc)) from None


def _activate_declared(hs: Any, declared_spec: Any, lease_id: str, no_revert: bool, out: Output) -> tuple[int, str]:
    """Upload and activate (:func:`activate`'s first half) under ``lease_id``: ``(exit code, the
    activation's log)``."""
    declared = render_llama_swap(hs.spec, staged=False)
    staging = paths.LLAMA_SWAP_NEXT
    up = _run(hs, "sh -c " + shlex.quote(
        f"install -d -m 0700 {shlex.quote(posixpath.dirname(staging))} && umask 077 && cat > {shlex.quote(staging)}"),
        stdin=declared)
    if up.returncode != 0:
        raise WireInFailed(f"{hs.name}: uploading the declared config to {staging} failed: {up.stderr.strip()[:300]}")
    rc, log = _activation(hs, ["--config", staging, "--live", paths.LLAMA_SWAP_CONFIG, "--by",
                               "rigkit wire-in --activate"], out, lease_id=lease_id, no_revert=no_revert)
    if rc == exitcodes.OK:
        install_declared_companions(hs, declared_spec or hs.spec)
    return rc, log
