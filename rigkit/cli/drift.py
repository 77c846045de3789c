"""``rigkit drift``: what on each host differs from the declared state (:mod:`rigkit.drift`).

Output: a table per host (rich; as wide as the terminal, ``$COLUMNS`` or 80 columns for a pipe,
no colour and no prompt when stdout is not a terminal, so it runs from cron; every cell is plain
text — ``[options]`` stays ``[options]``, never read as rich markup), ending with the command that
repairs what it counted (``to repair: rigkit deploy -i INVENTORY --host NAME``), or ``--json``: the run's document (:mod:`rigkit.drift.run`: one record per
finding ``{host, kind, item, declared, actual, severity}`` (severity by kind,
:mod:`rigkit.drift.severity`) — ``diff`` too with ``--diff`` —
then a ``status`` record per host, clean ones included, then the ``run`` record), every secret
masked. The probe alone by default (one SSH round trip per host, every host at once; it sees
what every deploy operation manages, :mod:`rigkit.drift.coverage`); ``--plan`` adds pyinfra's
``--dry`` plan (kind ``plan``). Exit codes (DESIGN.md): 0 no findings, 3 drift found, 1 a host
unreachable or a tool failed, 2 invalid input; with several hosts 2 > 1 > 3 > 0 and every host
is still reported.
"""

from __future__ import annotations

import sys

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rigkit import exitcodes
from rigkit.report import prometheus
from rigkit.report.prometheus import metrics_option
from rigkit.cli.common import host_option, inventory_option, load_or_exit

SEVERITY_STYLE = {"error": "bold red", "drift": "yellow", "warn": "cyan"}


def plain_console() -> Console:
    """The console of the plain output: as wide as the terminal, or ``$COLUMNS``, or 80 columns when
    stdout is a pipe or a file (cron, ``| mail``); colour only on a terminal."""
    import shutil

    width = shutil.get_terminal_size((80, 24)).columns
    console = Console(highlight=False, soft_wrap=False, width=width)
    if not console.is_terminal:
        console = Console(highlight=False, soft_wrap=False, width=width, no_color=True)
    return console


def repair_hint(host: str, findings: list) -> str | None:
    """The command that repairs what drift counted on ``host`` (the deploy; with ``--reboot`` when a
    reboot is pending), or None when nothing counted is a difference the deploy repairs."""
    from rigkit import hints

    if not any(f.severity == "drift" for f in findings):
        return None
    extra = ("--reboot",) if any(f.kind == "reboot" and f.severity == "drift" for f in findings) else ()
    return hints.command("deploy", *extra, host=host)


#: Each column's share of a width too narrow for the table (``actual`` says the most); kind and severity
#: are single words, never folded.
RATIOS = {"kind": None, "item": 3, "declared": 2, "actual": 5, "severity": None}


def findings_table(host: str, verdict: str, findings: list, width: int | None = None) -> Table:
    """The rich table of one host's findings, at most ``width`` columns wide (None: as wide as it
    needs): when it does not fit, the columns share the width by :data:`RATIOS` and their text folds.
    Every cell is a :class:`rich.text.Text`, so text with square brackets (``IgnorePkg in [options]``)
    is shown as it is, never read as markup."""
    table = Table(title=Text(f"{host}: {verdict}"), title_justify="left", show_lines=False, box=box.SIMPLE_HEAD)
    for col, ratio in RATIOS.items():
        table.add_column(col, overflow="fold", ratio=ratio, no_wrap=ratio is None)
    for f in findings:
        table.add_row(*(Text(str(c)) for c in (f.kind, f.item, f.declared, f.actual, f.severity)),
                      style=SEVERITY_STYLE.get(f.severity))
    if width is not None and Console(width=100_000).measure(table).maximum > width:  # its natural width
        table.expand = True
    return table


def tally(findings: list) -> str:
    """A host's findings counted by what they mean (:func:`rigkit.drift.severity.tally`)."""
    from rigkit.drift.severity import tally as by_severity

    return by_severity([f.severity for f in findings])


class DriftCommand(click.Command):
    """``rigkit drift``'s command: its help names the ``plan-only`` operations of
    :mod:`rigkit.drift.coverage` (read when the help is shown, so a run does not import it)."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from rigkit.drift.coverage import plan_only_help

        self.help = (self.help or "").replace("{PLAN_ONLY}", plan_only_help())
        super().format_help_text(ctx, formatter)


@click.command(cls=DriftCommand)
@inventory_option
@host_option
@click.option("--json", "as_json", is_flag=True,
              help="the run as JSON Lines on stdout: findings, a status per host, the run")
@click.option("--deep", is_flag=True, help="hash model files (not only size and mtime)")
@click.option("--diff", "show_diff", is_flag=True, help="show a diff for each changed rendered file (secrets masked)")
@click.option("--plan/--no-plan", "with_plan", default=False, show_default=True,
              help="also run pyinfra's own plan (`pyinfra deploy.py --dry`, several seconds per host): a second "
                   "opinion on every operation, including any the probe cannot see (named above)")
@metrics_option("drift")
def drift(inventory: str | None, hosts: tuple[str, ...], as_json: bool, deep: bool, show_diff: bool,
          with_plan: bool, metrics_file: str | None) -> None:
    """Report what differs from the declared state on each host: rendered files, secret files,
    pins, driver/CUDA versions, reboot, power limit, daemon.json, the host agent, units, the
    llama-swap config, model files — one probe per host (one SSH round trip), every host at once.

    The probe sees what every operation of the deploy manages (notes/drift-coverage.md, the table
    operation -> breakage -> finding). Operations only --plan sees: {PLAN_ONLY}

    Exit 0 nothing found, 3 drift found, 1 a host unreachable or a check failed, 2 invalid input.
    """
    from rigkit.drift import check
    from rigkit.spec.inventory import default_inventory

    host_specs = load_or_exit(inventory, hosts)
    inv = inventory or default_inventory()
    states: dict = {}
    findings, codes = check(host_specs, inv, deep=deep, diff=show_diff, plan=with_plan, states=states)
    if metrics_file:
        prometheus.write(metrics_file, prometheus.drift_families(findings, codes))
    if as_json:
        from rigkit.drift.run import document, dumps_document

        sys.stdout.write(dumps_document(document(findings, codes, [hs.name for hs in host_specs], inv,
                                                 states, with_diff=show_diff)))
        for hs in host_specs:  # stdout stays JSON lines; a word per host on stderr
            print(f"{hs.name}: {tally([f for f in findings if f.host == hs.name])}, exit {codes[hs.name]}",
                  file=sys.stderr)
    else:
        out = plain_console()
        for hs in host_specs:
            mine = [f for f in findings if f.host == hs.name]
            code = codes[hs.name]
            verdict = {exitcodes.OK: "no drift", exitcodes.FINDINGS: "drift", exitcodes.FAILED: "not checked"}[code]
            verdict += f" ({tally(mine)})" if mine else ""
            gen = (states.get(hs.name) or {}).get("generation")
            if gen:
                against = "the spec" if gen["compared_with"] == "spec" else gen["compared_with"]
                since = ("; the spec differs from what it recorded: the next deploy records a new one"
                         if gen.get("spec_is_current") is False else "")
                out.print(Text(f"{hs.name}: generation {gen['current']} ({gen['time']}, {gen['operator']}, "
                               f"{gen['reason']}); compared with {against}{since}"))
            if not mine:
                out.print(Text(f"{hs.name}: no drift"))
                continue
            out.print(findings_table(hs.name, verdict, mine, width=out.width))
            if show_diff:
                for f in mine:
                    if f.diff:
                        out.print(f.diff, highlight=False)
            fix = repair_hint(hs.name, mine)
            if fix:
                out.print(Text(f"{hs.name}: to repair: {fix}"))
    sys.exit(exitcodes.combine(*codes.values()))

