"""``rigkit wire-in``: the llama-swap wire-in as the operator decides it (DESIGN.md job 2, "Staged vs live").

``--show`` prints the unified diff from the host's live config to the declared one (rendered from the
spec: members with ``staged: false``), the members it adds, removes or changes, and any hold;
``--activate`` uploads the declared config to the host's staging path and runs the one activation path
there (:mod:`rigkit.host.activate`, in the transient unit ``rigkit-activate``, so a lost SSH session cannot
leave it half done), then installs the declared review copy and host config (without ``--data``); ``--rollback`` activates the newest backup and records a hold that the deploy
respects and drift reports; ``--release`` removes the hold. The operator wires a member in by flipping
``staged`` in group_data (or, for one run, ``--data``); nothing edits the operator's files.

Reaches the host over SSH through :class:`rigkit.remote.Remote` (pyinfra's connection settings,
``sudo -n`` when the inventory says ``_sudo``). Nothing shown holds a secret: the configs hold none, and the agent
never prints the API key.

Exit codes (DESIGN.md): 0 done / no differences; 1 failed (host unreachable, activation failed and
restored, refused by a hold); 2 invalid input (inventory, spec, arguments; no backup to roll back to);
3 ``--show`` found differences to review.
"""

from __future__ import annotations

import difflib
import shlex
import subprocess
import sys

import click

from rigkit import exitcodes, hints
from rigkit.cli.common import error, exits_when_unreachable, inventory_option


def _run(hs, command: str, stdin: str | None = None, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``command`` (a shell string) on the host as root (``sudo -n`` when the inventory says
    ``_sudo``) through :meth:`rigkit.remote.Remote.run`, the one SSH path: the command's own exit
    status; raises _Fail (exit 1, the host named) when the host is not reached or does not answer
    within ``timeout_s``."""
    from rigkit.remote import Remote, RemoteError

    try:
        return Remote(hs.name, hs.connection).run(command, as_root=True, stdin=stdin, timeout=timeout_s)
    except RemoteError as exc:
        raise _Fail(str(exc)) from None


class _Fail(click.ClickException):
    exit_code = exitcodes.FAILED


def live_config(hs) -> str | None:
    """The host's live llama-swap config text, or None when it has none; raises _Fail (exit 1) when
    the host cannot be read."""
    from rigkit import paths

    path = shlex.quote(paths.LLAMA_SWAP_CONFIG)
    p = _run(hs, f"sh -c 'if [ -e {path} ]; then cat {path}; else echo __RIGKIT_NONE__; fi'")
    if p.returncode != 0:
        raise _Fail(f"{hs.name}: cannot read {paths.LLAMA_SWAP_CONFIG} (exit {p.returncode}): {p.stderr.strip()[:300]}")
    return None if p.stdout == "__RIGKIT_NONE__\n" else p.stdout


def host_holds(hs) -> dict:
    """The host's holds (:func:`rigkit.remote.read_holds`, the one reader); raises _Fail (exit 1)
    when the host cannot be read or the file is not a JSON object of hold records."""
    from rigkit.common.holds import HoldsError
    from rigkit.remote import Remote, RemoteError, read_holds

    try:
        return read_holds(Remote(hs.name, hs.connection))
    except RemoteError as exc:
        raise _Fail(str(exc)) from None
    except HoldsError as exc:
        raise _Fail(f"{hs.name}: {exc}") from None


def describe_hold(hold: dict) -> str:
    """One line naming a hold: since, by whom, what it restored and what it holds back."""
    back = hold.get("held_back_members") or {}
    what = "; ".join(f"{k}: {', '.join(v)}" for k, v in back.items() if v) or "no member difference"
    return (f"hold since {hold.get('since')} ({hold.get('by')}): live = {hold.get('restored_from')}; "
            f"held back ({what}), a copy in {hold.get('held_back_copy')}")


def show(hs, echo=click.echo, data: tuple[str, ...] = ()) -> int:
    """Print the diff live -> declared for one host; returns 0 (same) or 3 (differences)."""
    import yaml

    from rigkit import paths
    from rigkit.common.swapconfig import member_diff, parse_config
    from rigkit.common.holds import LLAMA_SWAP
    from rigkit.render.files import render_llama_swap

    declared = render_llama_swap(hs.spec, staged=False)
    live = live_config(hs)
    hold = host_holds(hs).get(LLAMA_SWAP)
    if hold:
        echo(f"{hs.name}: {describe_hold(hold)}")
    if live == declared:
        echo(f"{hs.name}: the live config is the declared one; no differences")
        return exitcodes.OK
    diff = difflib.unified_diff((live or "").splitlines(keepends=True), declared.splitlines(keepends=True),
                                fromfile=f"{hs.name}:{paths.LLAMA_SWAP_CONFIG} (live)" if live is not None else "(no live config)",
                                tofile=f"{paths.LLAMA_SWAP_CONFIG} (declared)")
    sys.stdout.writelines(diff)
    try:
        members = member_diff(parse_config(live, "live", yaml) if live else None,
                              parse_config(declared, "declared", yaml))
    except ValueError:
        members = {}
    summary = "; ".join(f"{k}: {', '.join(v)}" for k, v in members.items() if v) or "no member definition differs"
    again = [w for d in data for w in ("--data", d)]
    echo(f"{hs.name}: members {summary}; `{hints.command('wire-in', '--activate', *again, host=hs.name)}` activates "
         + ("this config (the --data given here included)" if data else "the declared config"))
    return exitcodes.FINDINGS


def _agent(hs, args: list[str], timeout_s: float = 1800.0) -> int:
    """Run ``rigkit-agent activate ARGS`` on the host (:func:`_activation`) and return its exit code."""
    return _activation(hs, args, timeout_s)[0]


def _activation(hs, args: list[str], timeout_s: float = 1800.0, lease_id: str | None = None,
                no_revert: bool = False) -> tuple[int, str]:
    """Run ``rigkit-agent activate ARGS`` on the host through :func:`rigkit.agentcmd.activate_command`
    (joining ``lease_id``; ``--no-revert`` with ``no_revert``), print its log; ``(its exit code (an ssh
    failure is 1), its log)``."""
    from rigkit.agentcmd import activate_command

    # each run gets a transient unit of its own (rigkit.agentcmd.remote_command): a command right
    # after the previous one never meets a unit systemd has not collected yet
    p = _run(hs, f"sh -c {shlex.quote(activate_command(args, lease_id, no_revert))}", timeout_s=timeout_s)
    sys.stdout.write(hints.complete(p.stdout, host=hs.name))  # the host's log names no inventory
    if p.stderr.strip():
        sys.stderr.write(hints.complete(p.stderr, host=hs.name))
    return (p.returncode if p.returncode in (0, 1, 2) else exitcodes.FAILED), p.stdout


def install_declared_companions(hs, declared_spec) -> None:
    """Install the files that follow the members' ``staged`` flags besides the live config — the
    review copy (``config.staged.yaml``) and the host config (``/etc/rigkit/host.json``) — rendered
    from ``declared_spec``: the inventory's declared data, without ``--data`` (which changes only what
    this run activates). After an activation they are what the deploy would install, so drift is clean
    without another deploy. Written atomically with their declared mode and owner, only when they
    differ, each recorded as rigkit's write (:mod:`rigkit.common.written`); raises _Fail (exit 1) when the
    host refuses."""
    from rigkit import paths
    from rigkit.common import written
    from rigkit.render.files import render

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
            raise _Fail(f"{hs.name}: installing the declared {path} failed: {up.stderr.strip()[:300]}")


def activate_host(hs, declared_spec=None, no_revert: bool = False) -> int:
    """Upload the live config of ``hs.spec`` (declared data plus ``--data``) to the host's staging path
    and activate it there, under the host lock for the whole run (:mod:`rigkit.deploy.transaction`); on
    success install the declared review copy and host config (:func:`install_declared_companions`,
    from ``declared_spec``, default ``hs.spec``). An activation that fails is put back by the
    activation path itself (the previous config, the resident asked again; not with ``no_revert``),
    recorded as a failed generation, and the generation the host is at again is confirmed
    (``rigkit-agent confirm``: services, power limit, the resident; not the files, which an earlier
    wire-in may have left unlike the recorded generation's)."""
    import re
    import secrets as pysecrets

    from rigkit.cli.common import err
    from rigkit.cli.deployout import Console
    from rigkit.deploy.transaction import ChangeRefused, begin, confirm, end, record_failed
    from rigkit.deploy.generations import lock_text, manifest
    from rigkit.remote import Remote
    from rigkit.render.files import render

    lease = pysecrets.token_hex(8)
    try:
        ch = begin(hs, Remote(hs.name, hs.connection), "the wire-in activation", lease, "rigkit wire-in --activate",
                   Console())
    except ChangeRefused as exc:
        raise _Fail(str(exc)) from None
    try:
        rc, log = _activate_declared(hs, declared_spec, lease, no_revert)  # the activation joins this run's lock
        failed = re.search(r"^\[[\d:]+\] FAILED: (.*)$", log, re.M)
        if rc != exitcodes.FAILED or not failed or ch.start is None:
            return rc
        why = f"the wire-in activation failed: {failed[1]}"
        n = record_failed(ch, manifest(hs.spec, render(hs.spec), lock_text(hs.spec), "wire-in --activate"), why, lease)
        if n is not None:
            ch.say(f"the failed attempt is generation {n}, recorded as failed")
        if no_revert:
            ch.say(f"{why}; --no-revert: the failed config stays live (`{hints.command('drift', host=hs.name)}` shows it)",
                   error=True)
            return rc
        result = confirm(ch, ch.start, [], None, lease, files=False)
        if result.get("confirmed"):
            ch.say(f"{why}; reverted to generation {ch.start} through the activation path, confirmed: "
                   f"{', '.join(result.get('members') or [])} answered", error=True)
        else:
            ch.say(f"{why}; the activation put the previous config back, but generation {ch.start} does not "
                   f"confirm: {'; '.join(result.get('failed') or [])}", error=True)
        return rc
    finally:
        end(ch)
        err.file.flush()


def _activate_declared(hs, declared_spec, lease_id: str, no_revert: bool) -> tuple[int, str]:
    """Upload and activate (:func:`activate_host`'s first half) under ``lease_id``: ``(exit code, the
    activation's log)``."""
    import posixpath

    from rigkit import paths
    from rigkit.render.files import render_llama_swap

    declared = render_llama_swap(hs.spec, staged=False)
    staging = paths.LLAMA_SWAP_NEXT
    up = _run(hs, "sh -c " + shlex.quote(
        f"install -d -m 0700 {shlex.quote(posixpath.dirname(staging))} && umask 077 && cat > {shlex.quote(staging)}"),
        stdin=declared)
    if up.returncode != 0:
        raise _Fail(f"{hs.name}: uploading the declared config to {staging} failed: {up.stderr.strip()[:300]}")
    rc, log = _activation(hs, ["--config", staging, "--live", paths.LLAMA_SWAP_CONFIG, "--by",
                               "rigkit wire-in --activate"], lease_id=lease_id, no_revert=no_revert)
    if rc == exitcodes.OK:
        install_declared_companions(hs, declared_spec or hs.spec)
    return rc, log


@click.command("wire-in")
@inventory_option
@click.option("--host", "hosts", metavar="NAME", multiple=True, required=True, help="the host (repeatable)")
@click.option("--data", "data", metavar="KEY=VALUE", multiple=True, help="override a spec key for this run, as pyinfra --data")
@click.option("--show", "action", flag_value="show", help="diff the host's live config with the declared one (exit 3 when they differ)")
@click.option("--activate", "action", flag_value="activate", help="activate the declared config through the activation path")
@click.option("--rollback", "action", flag_value="rollback", help="activate the newest backup and record a hold")
@click.option("--release", "action", flag_value="release", help="remove the hold (the next deploy activates again)")
@click.option("--no-revert", is_flag=True, help="with --activate: leave a config that failed live (said)")
@exits_when_unreachable
def wire_in(inventory: str | None, hosts: tuple[str, ...], data: tuple[str, ...], action: str | None,
            no_revert: bool) -> None:
    """Review, activate, roll back or release the llama-swap wire-in on a host."""
    from rigkit.cli.common import load_or_exit, parse_data
    from rigkit.lockfile.view import locked_hosts
    from rigkit.spec.inventory import load_hosts

    if action is None:
        error("say what to do: --show, --activate, --rollback or --release")
        sys.exit(exitcodes.INVALID)
    if no_revert and action != "activate":
        error("--no-revert: only with --activate")
        sys.exit(exitcodes.INVALID)
    host_specs = load_or_exit(inventory, hosts, parse_data(data))  # every problem said, exit 2
    declared = {hs.name: hs.spec for hs in host_specs}
    if data and action == "activate":
        declared = {hs.name: hs.spec for hs in locked_hosts(load_hosts(inventory, list(hosts)), inventory)}
    codes = []
    for hs in host_specs:
        try:
            if action == "show":
                codes.append(show(hs, data=data))
            elif action == "activate":
                codes.append(activate_host(hs, declared[hs.name], no_revert))
            elif action == "rollback":
                from rigkit import paths

                codes.append(_agent(hs, ["--rollback", "--live", paths.LLAMA_SWAP_CONFIG, "--by", "rigkit wire-in --rollback"]))
            else:
                codes.append(_agent(hs, ["--release", "--by", "rigkit wire-in --release"]))
        except _Fail as exc:
            error(exc.message)
            codes.append(exitcodes.FAILED)
    sys.exit(exitcodes.combine(*codes))
