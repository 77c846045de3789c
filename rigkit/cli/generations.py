"""``rigkit generations`` (list and compare what each deploy left on a host) and ``rigkit rollback``
(bring one back, under the host lock, and hold it there) — :mod:`rigkit.render.generations`,
:mod:`rigkit.host.generations`.

A rollback is the deploy itself (``deploy.py`` through pyinfra) applying a recorded generation
instead of the spec: the same pinned ``pacman -U`` path for pins (a driver change reaches the
reboot gate), the same activation path for llama-swap's config (a real completion to the changed
members, then the resident), the same daemon.json merge. The change is
:func:`rigkit.deploy.changes.rollback` (under the host lock for the whole run); this module parses
the arguments and prints.
"""

from __future__ import annotations

import json
import sys

import click

from rigkit import exitcodes, hints
from rigkit.cli.common import error, exits_when_unreachable, inventory_option, load_or_exit, out
from rigkit.cli.deployout import Console
from rigkit.common.holds import GENERATION, HoldsError
from rigkit.remote import HostReadError, Remote, read_holds


def _one_host(inventory: str | None, host: str, overrides: dict | None = None):
    specs = load_or_exit(inventory, (host,), overrides)
    if len(specs) != 1:
        error(f"--host {host!r}: expected one host of the inventory, got {len(specs)}")
        sys.exit(exitcodes.INVALID)
    return specs[0]


def _remote(hs):
    return Remote(hs.name, hs.connection)


def _agent_json(remote, *args: str, timeout: float = 60) -> dict:
    """``rigkit-agent ARGS`` → its JSON stdout (:func:`rigkit.deploy.transaction.agent_json`); exits 1
    naming the host and the agent's error."""

    from rigkit.deploy.transaction import agent_json

    data, why = agent_json(remote, *args, timeout=timeout)
    if data is None:
        what = f"{remote.name}: rigkit-agent {' '.join(args)}: {why}"
        error(what)
        sys.exit(exitcodes.FAILED)
    return data


def _holds(remote) -> dict:
    """The host's holds (:func:`rigkit.remote.read_holds`, the one reader); exits 1 naming the host
    and the file when it cannot be read over SSH (a failed connection: :func:`exits_when_unreachable`)
    or is not a JSON object of hold records (a hold is a safety record: never read as "no hold")."""

    try:
        return read_holds(remote)
    except (HostReadError, HoldsError) as exc:
        msg = str(exc) if isinstance(exc, HostReadError) else f"{remote.name}: {exc}"
        error(msg)
        sys.exit(exitcodes.FAILED)


def list_lines(index: dict, hold: dict | None) -> list[str]:
    """One line per generation, oldest first: ``*`` marks the current one, ``H`` the held one; a
    failed change (never current) says ``(FAILED, put back: why)`` after its reason, or ``(FAILED,
    left as it failed: why)`` when ``--no-revert`` left it; a ``rigkit bisect`` step says ``[bisect step K]``
    (never a ``rollback --to`` target);
    ``n  time  operator  reason: what changed``."""
    from rigkit.deploy.transaction import LEFT

    lines = []
    for g in index.get("generations", []):
        mark = ("*" if g["n"] == index.get("current") else " ") + ("H" if hold and g["n"] == hold.get("generation") else " ")
        step = (g.get("bisect") or {}).get("step")
        lines.append(f"{mark} {g['n']:>3}  {g.get('time')}  {g.get('operator')}  {g.get('reason')}"
                     + (f" [bisect step {step}]" if step else "")
                     + ((f" (FAILED, left as it failed: {g['failed'].removesuffix(LEFT)})" if g["failed"].endswith(LEFT)
                         else f" (FAILED, put back: {g['failed']})") if g.get("failed") else "") + ": "
                     + "; ".join(g.get("changed") or []))
    return lines


@click.command()
@inventory_option
@click.option("--host", "host", required=True, metavar="NAME", help="the host")
@click.option("--diff", "diff_pair", nargs=2, type=int, metavar="A B", help="what differs from generation A to B")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout (the index, or the diff)")
@exits_when_unreachable
def generations(inventory: str | None, host: str, diff_pair: tuple[int, int] | None, as_json: bool) -> None:
    """List the generations recorded on a host (number, time, operator, what changed), or with
    ``--diff A B`` what differs between two: files as diffs (secrets masked), pins, units,
    llama-swap members, the spec's keys. Exit 0, 1 when the host cannot be read, 2 bad input."""
    from rigkit.drift.masking import mask
    from rigkit.render.generations import diff, diff_text
    from rigkit.spec.secrets import hf_token

    hs = _one_host(inventory, host)
    remote = _remote(hs)
    if diff_pair:
        known = [g["n"] for g in _agent_json(remote, "generation", "list").get("generations", [])]
        unknown = [n for n in diff_pair if n not in known]
        if unknown:
            error(f"--diff {diff_pair[0]} {diff_pair[1]}: {hs.name} has no generation "
                  f"{unknown[0]} (kept: {', '.join(map(str, known)) or 'none'})")
            sys.exit(exitcodes.INVALID)
        a, b = (_agent_json(remote, "generation", "show", str(n), "--files") for n in diff_pair)
        token = hf_token()
        d = diff(a, b, lambda text: mask(text, [token.value] if token else []) or "")
        if as_json:
            sys.stdout.write(json.dumps(d, indent=2, sort_keys=True) + "\n")
        else:
            sys.stdout.write(diff_text(d))
        sys.exit(exitcodes.OK)
    index = _agent_json(remote, "generation", "list")
    hold = _holds(remote).get(GENERATION)
    if as_json:
        sys.stdout.write(json.dumps({**index, "hold": hold}, indent=2, sort_keys=True) + "\n")
        sys.exit(exitcodes.OK)
    if not index.get("generations"):
        out.print(f"{hs.name}: no generation recorded yet (the next deploy that changes something records one)")
        sys.exit(exitcodes.OK)
    out.print(f"{hs.name}: {len(index['generations'])} generation(s); * current"
              + (f", H held (rollback to {hold.get('rolled_back_to')}; `{hints.command('rollback', '--release', host=hs.name)}`)"
                 if hold else ""))
    for line in list_lines(index, hold):
        out.print(line)
    sys.exit(exitcodes.OK)


@click.command()
@inventory_option
@click.option("--host", "host", required=True, metavar="NAME", help="the host")
@click.option("--to", "to", type=int, metavar="N", help="the generation to bring back")
@click.option("--release", is_flag=True, help="remove the hold a rollback left: the next deploy applies the spec")
@click.option("--force", is_flag=True, help="roll back despite client connections or declared lock files")
@click.option("--reboot", is_flag=True, help="reboot when the generation's kernel or driver needs it")
@click.option("--no-smoke", is_flag=True, help="skip the post-rollback smoke bench")
@click.option("--no-revert", is_flag=True, help="leave the host as a failed rollback left it (said)")
@click.option("--confirm-budget", type=click.FloatRange(min=1), metavar="S", default=None,
              help="seconds the confirmation may take [default: the asked members' cold_boot_s + 60]")
@click.option("-v", "--verbose", count=True, help="pyinfra verbosity")
@exits_when_unreachable
def rollback(inventory: str | None, host: str, to: int | None, release: bool, force: bool, reboot: bool,
             no_smoke: bool, no_revert: bool, confirm_budget: float | None, verbose: int) -> None:
    """Bring back generation N on a host under the host lock, then hold it there: files, units, pins
    (pacman -U from the archive), llama-swap's config (through the activation path), daemon.json's
    keys, recorded as a new generation "rollback to N" with a hold; then confirmed by inference
    (rigkit.deploy.transaction) and the smoke, still under the lock (a failing smoke is exit 1, the
    rollback itself stays done). The next deploy keeps the host at it until ``--release``. A rollback
    that fails part-way or does not confirm is recorded as a failed generation and put back to the
    generation it started from (exit 1, "reverted to generation M"; --no-revert leaves it). Refused
    (exit 1, nothing touched) while the lock is held, or when generation N needs a model the host has
    not verified (named); exit 2 for a generation that is not kept or is a failed one."""

    from rigkit.deploy import changes
    from rigkit.spec.inventory import default_inventory

    if release == (to is not None):
        error("give exactly one of --to N and --release")
        sys.exit(exitcodes.INVALID)
    if to is not None and to < 1:
        error(f"--to {to}: a generation number (1 or more; `{hints.command('generations', host=host)}`)")
        sys.exit(exitcodes.INVALID)
    overrides = {k: True for k, on in (("force", force), ("reboot", reboot)) if on}
    hs = _one_host(inventory, host, overrides)
    if release:
        sys.exit(changes.release(hs, Console(verbose)))
    sys.exit(changes.rollback(hs, inventory or default_inventory(), to, overrides, Console(verbose), no_smoke=no_smoke,
                              no_revert=no_revert, confirm_budget=confirm_budget, verbose=verbose))
