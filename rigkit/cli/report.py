"""``rigkit report``: one static HTML page for the inventory (:mod:`rigkit.report.page`).

Exit codes (DESIGN.md): 0 the page was written (whatever drift it shows: the page reports, it
does not judge — ``rigkit drift`` is the cron check), 1 it could not be written, 2 invalid input
(inventory, a drift document that cannot be read). Prints the page's path on stdout.
"""

from __future__ import annotations

import json
import os
import sys

import click

from rigkit import exitcodes
from rigkit.cli.common import host_option, inventory_option, load_or_exit


@click.command()
@inventory_option
@host_option
@click.option("--out", "out_dir", default="out/report", show_default=True, metavar="DIR",
              help="folder for index.html (+ runs/, charts/); open index.html from disk")
@click.option("--results", "results_dir", default="results", show_default=True, metavar="DIR",
              help="where the bench runs are (every summary.json below it naming a host and member)")
@click.option("--drift", "drift_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="read the drift state from a file rigkit drift --json wrote, instead of running drift now")
@click.option("--plan/--no-plan", "with_plan", default=False, show_default=True,
              help="live drift with pyinfra's --dry plan too (~10 s per host; see rigkit drift --help)")
@click.option("--json", "as_json", is_flag=True,
              help="print the fleet comparison as JSON on stdout (the page is written too; its path goes to stderr)")
def report(inventory: str | None, hosts: tuple[str, ...], out_dir: str, results_dir: str,
           drift_file: str | None, with_plan: bool, as_json: bool) -> None:
    """Write one self-contained HTML page for the inventory: per host the drift state (run now,
    every host at once, or --drift FILE), the power limit and driver/CUDA as enforced,
    llama-swap's live members, any hold, the last window; per member the bench history (decode,
    prefill, TTFT) against its baseline and DESIGN.md's reference figures, each point linking
    to its run's files.

    With several hosts, the fleet: each rig's newest smoke per member and workload against the other
    rigs' median and spread, by the bench's noise rules, an outlier named with its figure
    (rigkit.report.fleet); its lines on stderr, the whole as JSON on stdout with --json.

    Exit 0 written, 1 could not write, 2 invalid input.
    """
    from rigkit.spec.inventory import default_inventory
    from rigkit.report.page import drift_from_file, drift_live, write_report
    from rigkit.spec.secrets import hf_token

    host_specs = load_or_exit(inventory, hosts)
    inv = inventory or default_inventory()
    if drift_file:
        try:
            doc = drift_from_file(drift_file)
        except ValueError as exc:
            click.echo(f"rigkit report: {exc}", err=True)
            sys.exit(exitcodes.INVALID)
        source = f"read from {drift_file}"
    else:
        doc = drift_live(host_specs, inv, hf_token(), plan=with_plan)
        source = "run live" + (" (with pyinfra's plan)" if with_plan else "")
    from rigkit.report import fleet
    from rigkit.report.page import find_runs

    comparison = fleet.fleet_comparison(find_runs(results_dir), [hs.name for hs in host_specs])
    try:
        path = write_report(host_specs, inv, out_dir, results_dir, doc, source, fleet=comparison)
    except OSError as exc:
        click.echo(f"rigkit report: cannot write {out_dir}: {exc.strerror or exc}", err=True)
        sys.exit(exitcodes.FAILED)
    if len(host_specs) > 1:
        for line in fleet.lines(comparison):
            click.echo(line, err=True)
    if as_json:
        click.echo(os.path.abspath(path), err=True)
        click.echo(json.dumps({"page": os.path.abspath(path), "fleet": comparison}, indent=2))
    else:
        click.echo(os.path.abspath(path))
