"""``rigkit wire-in``: the llama-swap wire-in as the operator decides it (DESIGN.md job 2, "Staged vs live").

``--show`` prints the unified diff from the host's live config to the declared one (rendered from the
spec: members with ``staged: false``), the members it adds, removes or changes, and any hold;
``--activate`` runs the one activation path on the host, then installs the declared review copy and
host config (without ``--data``); ``--rollback`` activates the newest backup and records a hold that
the deploy respects and drift reports; ``--release`` removes the hold — the changes are
:mod:`rigkit.deploy.wirein`'s; this module parses the arguments and prints. The operator wires a
member in by flipping ``staged`` in group_data (or, for one run, ``--data``); nothing edits the
operator's files.

Exit codes (DESIGN.md): 0 done / no differences; 1 failed (host unreachable, activation failed and
restored, refused by a hold); 2 invalid input (inventory, spec, arguments; no backup to roll back to);
3 ``--show`` found differences to review.
"""

from __future__ import annotations

import difflib
import sys

import click
import yaml

from rigkit import exitcodes, hints, paths
from rigkit.cli.common import err, error, exits_when_unreachable, inventory_option, load_or_exit, parse_data
from rigkit.cli.deployout import Console
from rigkit.common.holds import LLAMA_SWAP, rolled_back
from rigkit.common.swapconfig import member_diff, parse_config


def describe_hold(hold: dict) -> str:
    """One line naming a hold: since, by whom, what it restored and what its rollback replaced
    (:func:`rigkit.common.holds.rolled_back`)."""
    return (f"hold since {hold.get('since')} ({hold.get('by')}): live = {hold.get('restored_from')}; "
            f"{rolled_back(hold)}")


def show(hs, echo=click.echo, data: tuple[str, ...] = ()) -> int:
    """Print the diff live -> declared for one host; returns 0 (same) or 3 (differences)."""
    from rigkit.deploy.wirein import host_holds, live_config
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
    from rigkit.deploy import wirein

    codes = []
    for hs in host_specs:
        try:
            if action == "show":
                codes.append(show(hs, data=data))
            elif action == "activate":
                codes.append(wirein.activate(hs, Console(), declared[hs.name], no_revert))
            elif action == "rollback":
                codes.append(wirein.rollback_live(hs, Console()))
            else:
                codes.append(wirein.release(hs, Console()))
        except wirein.WireInFailed as exc:
            error(str(exc))
            codes.append(exitcodes.FAILED)
        finally:
            err.file.flush()
    sys.exit(exitcodes.combine(*codes))
