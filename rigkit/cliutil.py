"""What every ``rigkit`` sub-command shares: the stderr console, the ``-i``/``--host`` options,
loading the inventory (or exiting 2), ``--data KEY=VALUE`` parsing. :mod:`rigkit.cli` and the
``rigkit/*_cli.py`` command groups import it; it imports no command module, so the graph is
one-way (cli → *_cli → cliutil)."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from rigkit import exitcodes

#: Messages go to stderr; data (JSON, manifests) to stdout.
err = Console(stderr=True, highlight=False, soft_wrap=True)


def inventory_option(f):
    """``-i/--inventory PATH`` (default ``$RIGKIT_INVENTORY`` or ``inventory/rig.py``)."""
    return click.option("-i", "--inventory", "inventory", metavar="PATH", default=None,
                        help="pyinfra inventory file [default: $RIGKIT_INVENTORY or inventory/rig.py]")(f)


def host_option(f):
    """``--host NAME`` (repeatable) to narrow the inventory."""
    return click.option("--host", "hosts", metavar="NAME", multiple=True, help="only this host (repeatable)")(f)


def load_or_exit(inventory: str | None, hosts: tuple[str, ...], overrides: dict | None = None):
    """Load the inventory's hosts (``overrides``: ``--data``), or print every problem and exit 2
    (nothing touched)."""
    from rigkit.inventory import InventoryError, load_hosts
    from rigkit.spec import SpecError

    try:
        return load_hosts(inventory, list(hosts) or None, override_data=overrides or None)
    except InventoryError as exc:
        err.print(f"[red]error:[/] {exc}")
    except SpecError as exc:
        err.print(f"[red]error:[/] invalid {exc.source}:")
        for problem in exc.problems:
            err.print(f"  {problem}", markup=False)
    sys.exit(exitcodes.INVALID)


def parse_data(items: tuple[str, ...]) -> dict:
    """``KEY=VALUE`` pairs parsed exactly as ``pyinfra --data`` parses them. Raises
    ``click.BadParameter`` for an item without ``=`` or without a key."""
    from pyinfra_cli.util import parse_cli_arg

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint="--data")
        out[key] = parse_cli_arg(value)
    return out
