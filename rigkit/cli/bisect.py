"""``rigkit bisect``: name the change between two generations that made the rig slower
(:mod:`rigkit.deploy.bisect`); this module parses the arguments and prints."""

from __future__ import annotations

import sys

import click

from rigkit import exitcodes, hints
from rigkit.cli.common import error, exits_when_unreachable, inventory_option, load_or_exit, out
from rigkit.cli.deployout import Console


@click.command()
@inventory_option
@click.option("--host", "host", required=True, metavar="NAME", help="the host")
@click.option("--good", type=click.IntRange(min=1), metavar="GEN", help="a generation that was fast")
@click.option("--bad", type=click.IntRange(min=1), metavar="GEN", help="a later generation that is slower")
@click.option("--workload", type=click.Choice(["chat-greedy", "chat", "quoting"]), default="chat-greedy",
              show_default=True, help="the bench workload each step is judged on")
@click.option("--metric", type=click.Choice(["decode", "ttft"]), default="decode", show_default=True,
              help="the figure judged: decode tok/s by the bench's own verdict, or the time to the first token by "
                   "the bench's speed rule on its rate (rigkit.deploy.bisect.METRICS)")
@click.option("--member", metavar="ID", default=None, help="the member benched [default: the resident]")
@click.option("--max-tokens", type=click.IntRange(min=1, max=32768), default=256, show_default=True, metavar="N",
              help="max_tokens of each request a step benches (the smoke's 256; longer decodes steady a noisy host)")
@click.option("--reboot", is_flag=True, help="also try the suspects that need a reboot (the driver, a kernel)")
@click.option("--no-pairs", is_flag=True, help="name the first bad entry without trying it alone (one deploy less; "
                                              "a slowdown that needs two entries is then named by its second)")
@click.option("--dry", is_flag=True, help="show the suspects, the most steps and their estimated time; touch nothing")
@click.option("--abort", "abort_", is_flag=True, help="put the host back where an interrupted bisect started")
@click.option("--force", is_flag=True, help="deploy the steps despite client connections or declared lock files")
@click.option("--confirm-budget", type=click.FloatRange(min=1), metavar="S", default=None,
              help="seconds each step's confirmation may take [default: the asked members' cold_boot_s + 60]")
@click.option("-v", "--verbose", count=True, help="pyinfra verbosity")
@exits_when_unreachable
def bisect(inventory: str | None, host: str, good: int | None, bad: int | None, workload: str, metric: str,
           member: str | None, max_tokens: int, reboot: bool, no_pairs: bool, dry: bool, abort_: bool, force: bool,
           confirm_budget: float | None, verbose: int) -> None:
    """Name the entry — an image digest, a model commit, a pin, the llama-swap release, a member's argument,
    a spec value — that made the rig slower between generation GOOD and generation BAD of a host: each step
    deploys the good generation with some entries of the bad one (confirmed by inference or put back),
    benches it through llama-swap and judges it against the good one by the bench's rules. It names the
    first bad entry, or the pair that is slow only together, with every step's figures (a mix the spec's validators
    refuse is skipped, not deployed; when every mix between some entries is refused, it names their range); each step is a
    generation marked as a bisect step (`rigkit generations` shows the walk). The host ends at the
    generation it started from, whatever happens; after a killed bisect, `--abort` (or the next deploy)
    puts it back. Entries that need a reboot are skipped unless --reboot. Exit 0 named (or nothing to
    bisect), 1 stopped or refused (said; the host back at its start), 2 bad input, nothing touched."""
    from rigkit.deploy import bisect as walk
    from rigkit.remote import Remote
    from rigkit.spec.inventory import default_inventory

    if abort_ and (good is not None or bad is not None or dry):
        error("--abort takes no --good, --bad or --dry: it puts back what an interrupted bisect left")
        sys.exit(exitcodes.INVALID)
    if not abort_ and (good is None or bad is None):
        error(f"give --good GEN and --bad GEN (`{hints.command('generations', host=host)}` lists them), or --abort")
        sys.exit(exitcodes.INVALID)
    overrides = {k: True for k, on in (("force", force), ("reboot", reboot)) if on}
    (hs,) = load_or_exit(inventory, (host,), overrides)  # --host is required: exactly that host, or exit 2
    if member is not None and member not in hs.spec.llama_swap.members:
        error(f"--member {member!r}: not a member of {hs.name} (members: {', '.join(hs.spec.llama_swap.members)})")
        sys.exit(exitcodes.INVALID)
    console = Console(verbose)
    inv = inventory or default_inventory()
    if abort_:
        sys.exit(walk.abort(hs, inv, console, overrides, verbose, confirm_budget))
    if dry:
        try:
            setup = walk.read_setup(Remote(hs.name, hs.connection), good, bad, reboot)
            benched = walk.benched_member(setup, member)
        except walk.BisectInvalid as exc:
            error(str(exc))
            sys.exit(exitcodes.INVALID)
        except walk.Untestable as exc:
            error(str(exc))
            sys.exit(exitcodes.FAILED)
        for line in walk.dry_lines(hs.name, setup, not no_pairs):
            out.print(line)
        out.print(f"  each step benches {benched}/{workload} through llama-swap ({metric}, {max_tokens} tokens a request)")
        sys.exit(exitcodes.OK)
    sys.exit(walk.run(hs, inv, good, bad, console, member=member, workload=workload, reboot=reboot,
                      pairs=not no_pairs, overrides=overrides, verbose=verbose, budget_s=confirm_budget,
                      metric=metric, max_tokens=max_tokens))
