"""The ``rigkit`` command line (click). One sub-command per job; each exits with DESIGN.md's
codes (:mod:`rigkit.exitcodes`): 0 done, 1 failed, 2 invalid input (nothing touched), 3 findings."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from rigkit import __version__, exitcodes

#: Messages go to stderr; data (JSON, manifests) to stdout.
err = Console(stderr=True, highlight=False, soft_wrap=True)


def inventory_option(f):
    """``-i/--inventory PATH`` (default ``$RIGKIT_INVENTORY`` or ``inventory/rig.py``)."""
    return click.option("-i", "--inventory", "inventory", metavar="PATH", default=None,
                        help="pyinfra inventory file [default: $RIGKIT_INVENTORY or inventory/rig.py]")(f)


def host_option(f):
    """``--host NAME`` (repeatable) to narrow the inventory."""
    return click.option("--host", "hosts", metavar="NAME", multiple=True, help="only this host (repeatable)")(f)


def load_or_exit(inventory: str | None, hosts: tuple[str, ...]):
    """Load the inventory's hosts, or print every problem and exit 2 (nothing touched)."""
    from rigkit.inventory import InventoryError, load_hosts
    from rigkit.spec import SpecError

    try:
        return load_hosts(inventory, list(hosts) or None)
    except InventoryError as exc:
        err.print(f"[red]error:[/] {exc}")
    except SpecError as exc:
        err.print(f"[red]error:[/] invalid {exc.source}:")
        for problem in exc.problems:
            err.print(f"  {problem}", markup=False)
    sys.exit(exitcodes.INVALID)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rigkit")
def cli() -> None:
    """Rebuild, check and smoke-bench the single-GPU inference rig."""


@cli.command()
@inventory_option
@host_option
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="staging folder: files at their remote paths plus manifest.json")
def render(inventory: str | None, hosts: tuple[str, ...], out_dir: Path) -> None:
    """Write every rendered file under --out DIR at its remote path, plus a manifest
    (path, mode, owner, sha256). With several hosts, each gets DIR/<host>/."""
    from rigkit.render import render as render_files
    from rigkit.render import write_tree

    host_specs = load_or_exit(inventory, hosts)
    for hs in host_specs:
        target = out_dir if len(host_specs) == 1 else out_dir / hs.name
        files = render_files(hs.spec)
        man = write_tree(files, target)
        err.print(f"{hs.name}: {len(files)} files under {target}, manifest {man}")
    sys.exit(exitcodes.OK)


@cli.command()
@inventory_option
@host_option
@click.option("-v", "--verbose", count=True, help="also list what passed")
def check(inventory: str | None, hosts: tuple[str, ...], verbose: int) -> None:
    """Validate the spec and the rendered files with real validators, without touching a host.

    Exit 0 when valid (warnings included), 1 when a validator fails, 2 for an invalid spec.
    """
    from rigkit.checks import run_checks
    from rigkit.render import render as render_files
    from rigkit.secrets import hf_token_source
    from rigkit.validate import spec_warnings

    host_specs = load_or_exit(inventory, hosts)
    codes = []
    for hs in host_specs:
        err.print(f"[bold]{hs.name}[/]: spec valid")
        for warning in spec_warnings(hs.spec):
            err.print(f"  [yellow]warn[/]  {warning}", markup=True)
        results = run_checks(render_files(hs.spec), hs.spec)
        failed = [r for r in results if r.status == "fail"]
        for r in results:
            if r.status == "pass" and not verbose:
                continue
            colour = {"pass": "green", "skip": "cyan", "fail": "red"}[r.status]
            err.print(f"  [{colour}]{r.status:4}[/]  {r.validator}: {r.path}")
            for line in r.detail.splitlines():
                err.print(f"        {line}", markup=False)
        passed = sum(r.status == "pass" for r in results)
        skipped = sum(r.status == "skip" for r in results)
        err.print(f"  {passed} passed, {len(failed)} failed, {skipped} skipped (validators)")
        codes.append(exitcodes.FAILED if failed else exitcodes.OK)
    source = hf_token_source()
    err.print(f"HF token: {'from ' + source if source else 'none found (set HF_TOKEN or run `hf auth login`)'}; "
              "value not shown, installed only as /etc/rigkit/secrets/hf.env")
    sys.exit(exitcodes.combine(*codes))


def main() -> None:
    """Console-script entry point: run the click group, exit with its code.

    pyinfra's CLI package gevent-patches the process when imported (its loader is what reads
    the inventory and group_data); import it before anything opens a socket, as pyinfra's
    own command does.
    """
    import pyinfra_cli  # noqa: F401

    sys.exit(cli.main(standalone_mode=True))


from rigkit.bench.cli import bench  # noqa: E402

cli.add_command(bench)
