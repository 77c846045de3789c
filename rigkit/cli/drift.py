"""``rigkit drift``: what on each host differs from the declared state (:mod:`rigkit.drift`).

Output: on a terminal a table per host (rich, as wide as the terminal, its text folded to fit;
every cell plain text — ``[options]`` stays ``[options]``, never read as rich markup); in a pipe or a
file (cron, ``| mail``, ``| grep``) no colour and one line per finding (:func:`finding_lines`: the
columns aligned, no value folded or split, a line break inside a value written ``\n``). A host that
could not be reached is one line saying so (:func:`verdict`). Each host ends with the command that
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

import shutil
import sys

import click
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from rigkit import exitcodes, hints
from rigkit.cli.common import host_option, inventory_option, load_or_exit
from rigkit.report import prometheus
from rigkit.report.prometheus import metrics_option

SEVERITY_STYLE = {"error": "bold red", "drift": "yellow", "warn": "cyan", "hold": "cyan"}


def plain_console() -> Console:
    """The console of the plain output: as wide as the terminal, or ``$COLUMNS``, or 80 columns when
    stdout is a pipe or a file (cron, ``| mail``); colour only on a terminal, and in a pipe no line is
    wrapped (``soft_wrap``: a line is as long as what it says)."""
    width = shutil.get_terminal_size((80, 24)).columns
    console = Console(highlight=False, soft_wrap=False, width=width, markup=False)
    if not console.is_terminal:
        console = Console(highlight=False, soft_wrap=True, width=width, no_color=True, markup=False)
    return console


def verdict(code: int, findings: list) -> str:
    """What one host's drift amounts to, after ``HOST: ``: ``no drift``; ``drift (2 differences, …)``; for a
    host not reached or not probed (the ``host`` finding of :func:`rigkit.drift.run.check`) what
    happened (``unreachable: Could not connect …; nothing checked``); ``incomplete (1 check failed, …)``
    when a check failed on a host that answered. ``code``: the host's exit code (:mod:`rigkit.exitcodes`)."""
    lost = next((f for f in findings if f.kind == "host"), None)
    if lost is not None:
        return f"{lost.actual}; nothing checked"
    word = {exitcodes.OK: "no drift", exitcodes.FINDINGS: "drift"}.get(code, "incomplete")
    return word + (f" ({tally(findings)})" if findings else "")


#: The columns of a finding, in the order both outputs show them.
COLUMNS = ("kind", "item", "declared", "actual", "severity")


def finding_lines(findings: list) -> list[str]:
    """The findings for a pipe: a header, then exactly one line per finding, in order — each column as
    wide as its widest value (terminal cells, :func:`rich.cells.cell_len`), two spaces between them, no
    trailing space. No value is folded or cut: a line is as long as its values; a line break inside
    a value is written as the two characters ``\\n`` (``\\r`` likewise), so that ``grep`` finds a
    finding on one line and ``wc -l`` counts them."""
    def one_line(value: object) -> str:
        return str(value).replace("\r", "\\r").replace("\n", "\\n")

    rows = [list(COLUMNS)] + [[one_line(getattr(f, c)) for c in COLUMNS] for f in findings]
    widths = [max(cell_len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return ["  ".join(cell + " " * (w - cell_len(cell)) for cell, w in zip(r, widths)).rstrip() for r in rows]


def repair_hint(host: str, findings: list) -> str | None:
    """The command that repairs what drift counted on ``host`` (the deploy; with ``--reboot`` when a
    reboot is pending), or None when nothing counted is a difference the deploy repairs."""
    if not any(f.severity == "drift" for f in findings):
        return None
    extra = ("--reboot",) if any(f.kind == "reboot" and f.severity == "drift" for f in findings) else ()
    return hints.command("deploy", *extra, host=host)


#: Each column's share of a width too narrow for the table (``actual`` says the most); kind and severity
#: are single words, never folded.
RATIOS = {"kind": None, "item": 3, "declared": 2, "actual": 5, "severity": None}


def findings_table(host: str, said: str, findings: list, width: int | None = None) -> Table:
    """The rich table of one host's findings, at most ``width`` columns wide (None: as wide as it
    needs): when it does not fit, the columns share the width by :data:`RATIOS` and their text folds.
    Every cell is a :class:`rich.text.Text`, so text with square brackets (``IgnorePkg in [options]``)
    is shown as it is, never read as markup."""
    table = Table(title=Text(f"{host}: {said}"), title_justify="left", show_lines=False, box=box.SIMPLE_HEAD)
    for col, ratio in RATIOS.items():
        table.add_column(col, overflow="fold", ratio=ratio, no_wrap=ratio is None)
    for f in findings:
        table.add_row(*(Text(str(c)) for c in (f.kind, f.item, f.declared, f.actual, f.severity)),
                      style=SEVERITY_STYLE.get(f.severity))
    if width is not None and Console(width=100_000, markup=False).measure(table).maximum > width:  # its natural width
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
    from rigkit.spec.secrets import hf_token
    from rigkit.spec.inventory import default_inventory

    host_specs = load_or_exit(inventory, hosts)
    inv = inventory or default_inventory()
    states: dict = {}
    findings, codes = check(host_specs, inv, hf_token(), deep=deep, diff=show_diff, plan=with_plan, states=states)
    wrote = exitcodes.OK
    if metrics_file:
        try:
            prometheus.write(metrics_file, prometheus.drift_families(findings, codes))
        except prometheus.SeriesClash as exc:  # nothing written: said, and the run fails (exit 1)
            print(f"rigkit drift: {exc}", file=sys.stderr)
            wrote = exitcodes.FAILED
    if as_json:
        from rigkit.drift.run import document, dumps_document

        sys.stdout.write(dumps_document(document(findings, codes, [hs.name for hs in host_specs], inv,
                                                 states, with_diff=show_diff)))
        for hs in host_specs:  # stdout stays JSON lines; a word per host on stderr
            print(f"{hs.name}: {verdict(codes[hs.name], [f for f in findings if f.host == hs.name])}, "
                  f"exit {codes[hs.name]}", file=sys.stderr)
    else:
        out = plain_console()
        for hs in host_specs:
            mine = [f for f in findings if f.host == hs.name]
            code = codes[hs.name]
            said = verdict(code, mine)
            gen = (states.get(hs.name) or {}).get("generation")
            if gen:
                against = "the spec" if gen["compared_with"] == "spec" else gen["compared_with"]
                since = ("; the spec differs from what it recorded: the next deploy records a new one"
                         if gen.get("spec_is_current") is False else "")
                out.print(Text(f"{hs.name}: generation {gen['current']} ({gen['time']}, {gen['operator']}, "
                               f"{gen['reason']}); compared with {against}{since}"))
            if not mine or any(f.kind == "host" for f in mine):
                out.print(Text(f"{hs.name}: {said}"))
                continue
            if out.is_terminal:
                out.print(findings_table(hs.name, said, mine, width=out.width))
            else:
                for line in [f"{hs.name}: {said}", *finding_lines(mine)]:
                    out.print(Text(line))
            if show_diff:
                for f in mine:
                    if f.diff:
                        out.print(f.diff, highlight=False)
            fix = repair_hint(hs.name, mine)
            if fix:
                out.print(Text(f"{hs.name}: to repair: {fix}"))
    sys.exit(exitcodes.combine(*codes.values(), wrote))

