"""``rigkit drift``: what on each host differs from the declared state (:mod:`rigkit.drift`).

Output: a table per host (rich; no colour and no prompt when stdout is not a terminal, so it
runs from cron), or ``--json``: one record per finding ``{host, kind, item, declared, actual,
severity}`` (``diff`` too with ``--diff``), every secret masked. Exit codes (DESIGN.md): 0 no
findings, 3 drift found, 1 a host unreachable or a tool failed, 2 invalid input; with several
hosts 2 > 1 > 3 > 0 and every host is still reported.
"""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.table import Table

from rigkit import exitcodes
from rigkit.cliutil import host_option, inventory_option, load_or_exit

SEVERITY_STYLE = {"error": "bold red", "drift": "yellow", "warn": "cyan"}


@click.command()
@inventory_option
@host_option
@click.option("--json", "as_json", is_flag=True, help="one JSON record per finding on stdout")
@click.option("--deep", is_flag=True, help="hash model files (not only size and mtime)")
@click.option("--diff", "show_diff", is_flag=True, help="show a diff for each changed rendered file (secrets masked)")
@click.option("--no-plan", is_flag=True, hidden=True, help="skip pyinfra's --dry plan (the catch-all)")
def drift(inventory: str | None, hosts: tuple[str, ...], as_json: bool, deep: bool, show_diff: bool,
          no_plan: bool) -> None:
    """Report what differs from the declared state on each host: rendered files, secret files,
    pins, driver/CUDA versions, reboot, power limit, daemon.json, the host agent, units, the
    llama-swap config, model files, and any deploy operation that would still change something.

    Exit 0 nothing found, 3 drift found, 1 a host unreachable or a check failed, 2 invalid input.
    """
    from rigkit.drift import check
    from rigkit.inventory import default_inventory

    host_specs = load_or_exit(inventory, hosts)
    inv = inventory or default_inventory()
    findings, codes = check(host_specs, inv, deep=deep, diff=show_diff, plan=not no_plan)
    if as_json:
        for f in findings:
            sys.stdout.write(json.dumps(f.record(with_diff=show_diff), sort_keys=True) + "\n")
        for hs in host_specs:  # stdout stays JSON lines; a word per host on stderr
            counted = sum(f.host == hs.name and f.severity in ("drift", "error") for f in findings)
            print(f"{hs.name}: {counted} finding(s) counted, exit {codes[hs.name]}", file=sys.stderr)
    else:
        out = Console(highlight=False, soft_wrap=False)
        if not out.is_terminal:  # cron, a pipe: no colour (rich), lines as long as they need
            out = Console(highlight=False, soft_wrap=False, width=200, no_color=True)
        for hs in host_specs:
            mine = [f for f in findings if f.host == hs.name]
            code = codes[hs.name]
            verdict = {exitcodes.OK: "no drift", exitcodes.FINDINGS: "drift", exitcodes.FAILED: "not checked"}[code]
            if not mine:
                out.print(f"[bold]{hs.name}[/]: no drift")
                continue
            table = Table(title=f"{hs.name}: {verdict}", title_justify="left", show_lines=False)
            for col in ("kind", "item", "declared", "actual", "severity"):
                table.add_column(col, overflow="fold")
            for f in mine:
                table.add_row(f.kind, f.item, f.declared, f.actual, f.severity,
                              style=SEVERITY_STYLE.get(f.severity))
            out.print(table)
            if show_diff:
                for f in mine:
                    if f.diff:
                        out.print(f.diff, markup=False, highlight=False)
    sys.exit(exitcodes.combine(*codes.values()))
