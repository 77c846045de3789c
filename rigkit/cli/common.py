"""What every ``rigkit`` sub-command shares: the stderr console, the ``-i``/``--host`` options,
loading the inventory (or exiting 2), ``--data KEY=VALUE`` parsing. :mod:`rigkit.cli.main` and the
``rigkit/*_cli.py`` command groups import it; it imports no command module, so the graph is
one-way (cli → *_cli → cliutil)."""

from __future__ import annotations

import functools
import sys

import click
from rich.console import Console
from rich.text import Text

from rigkit import exitcodes
from rigkit.remote import RemoteError

#: Warnings and progress go to stderr; results and data (check verdicts, JSON, manifests) to stdout.
#: Neither reads rich markup: a string prints as it is (a message with ``[options]`` or ``[red]`` in it
#: stays so, in a terminal and in a pipe); colour comes only from a style given beside the text
#: (:func:`labelled`, :func:`styled`, :class:`rich.text.Text`), and only on a terminal.
err = Console(stderr=True, highlight=False, soft_wrap=True, markup=False)
out = Console(highlight=False, soft_wrap=True, markup=False)

#: The labels a line may start with and their style on a terminal (a pipe gets the bare word).
LABEL_STYLE = {"error:": "bold red", "refused:": "bold red", "warn": "yellow", "warning:": "yellow",
               "NOT-RUN:": "yellow", "pass": "green", "skip": "cyan", "FAIL": "red", "could not run": "yellow"}


def labelled(label: str, text: str, *, sep: str = " ", indent: str = "", console: Console | None = None) -> None:
    """One line ``{indent}{label}{sep}{text}`` on ``console`` (default :data:`err`): ``label`` (a key of
    :data:`LABEL_STYLE`) in its style on a terminal, ``text`` exactly as given — never read as markup,
    never escaped. Raises ``KeyError`` for a label not in :data:`LABEL_STYLE`."""
    (console or err).print(Text.assemble(indent, (label, LABEL_STYLE[label]), sep, text))


def error(text: str, *, indent: str = "", console: Console | None = None) -> None:
    """``error: {text}`` on stderr (:func:`labelled`): the one way a command says what stopped it."""
    labelled("error:", text, indent=indent, console=console)


def warn(text: str, *, indent: str = "", console: Console | None = None) -> None:
    """``warn  {text}`` on stderr (:func:`labelled`): what a command goes on despite."""
    labelled("warn", text, sep="  ", indent=indent, console=console)


def styled(text: str, style: str, *, console: Console | None = None) -> None:
    """A whole line in one style on a terminal (``"green"``, ``"yellow"``), plain in a pipe; ``text``
    printed exactly as given (default console :data:`err`)."""
    (console or err).print(Text(text, style=style))


def inventory_option(f):
    """``-i/--inventory PATH`` (default ``$RIGKIT_INVENTORY`` or ``inventory/rig.py``); the path given is
    the one every command this command prints names (:func:`rigkit.hints.inventory` reads it)."""
    return click.option("-i", "--inventory", "inventory", metavar="PATH", default=None,
                        help="pyinfra inventory file [default: $RIGKIT_INVENTORY or inventory/rig.py]")(f)


def host_option(f):
    """``--host NAME`` (repeatable) to narrow the inventory."""
    return click.option("--host", "hosts", metavar="NAME", multiple=True, help="only this host (repeatable)")(f)


def load_or_exit(inventory: str | None, hosts: tuple[str, ...], overrides: dict | None = None,
                 resolve_lock: bool = True):
    """Load the inventory's hosts (:func:`rigkit.spec.inventory.load_hosts`; ``overrides``: ``--data``), each
    spec as its lock file resolves it (:func:`rigkit.lockfile.view.locked_hosts`) unless ``resolve_lock`` is
    False, or print every problem and exit 2 (nothing touched)."""
    from rigkit.lockfile.view import locked_hosts
    from rigkit.spec.inventory import InventoryError, load_hosts
    from rigkit.spec.problems import SpecError

    try:
        declared = load_hosts(inventory, list(hosts) or None, override_data=overrides or None)
        return locked_hosts(declared, inventory) if resolve_lock else declared
    except InventoryError as exc:
        error(str(exc))
    except SpecError as exc:
        error(f"invalid {exc.source}:")
        for problem in exc.problems:
            err.print(f"  {problem}")
    sys.exit(exitcodes.INVALID)


def validate_or_exit(host_specs, console: Console | None = None, verbose: int = 0, what: str = "",
                     refuse_unrun: bool = True, remember: bool = False) -> tuple[list, int]:
    """Run every validator (:func:`rigkit.render.checks.run_checks`) over each host's rendered files, print
    the verdicts that matter on ``console`` (default stdout; passes only with ``verbose``) and a summary
    per host; exit when they forbid going on: 2 when a validator rejected a file (invalid input,
    nothing touched), 1 when a validator could not run (``what`` names the command that refuses, e.g.
    ``"the deploy"``; with ``refuse_unrun`` false a validator that could not run is reported and
    returned as code 1 instead). Returns ``([(host spec, {remote path: RenderedFile}, [CheckResult])],
    code)`` otherwise.

    ``rigkit check`` prints its results with the same function (:func:`print_verdicts`) and decides
    its exit code itself. ``remember``: passing verdicts kept and reused (``rigkit deploy``,
    :func:`rigkit.render.checks.run_checks`)."""
    from rigkit.render.checks import verdict_code

    done = []
    codes = []
    for hs, files, results in check_hosts(host_specs, remember=remember):
        code = verdict_code(results)
        if code or verbose:
            print_verdicts(hs.name, results, console or out, verbose)
        codes.append(code)
        done.append((hs, files, results))
    code = exitcodes.combine(*codes)
    if code == exitcodes.INVALID:
        error(f"a validator rejected a rendered file (above); "
              f"{what or 'this command'} refuses (exit 2, nothing touched)")
        sys.exit(code)
    if code == exitcodes.FAILED and refuse_unrun:
        error(f"a validator could not run (above); {what or 'this command'} refuses "
              "(exit 1, nothing touched)")
        sys.exit(code)
    return done, code


def check_hosts(host_specs, remember: bool = False):
    """``(host spec, rendered files, verdicts)`` for each host: :func:`rigkit.render.files.render` then
    :func:`rigkit.render.checks.run_checks` (``remember``: its verdict memory), the one path ``check``,
    ``render`` and ``deploy`` share."""
    from rigkit.render.checks import run_checks
    from rigkit.render.files import render

    for hs in host_specs:
        files = render(hs.spec)
        yield hs, files, run_checks(files, hs.spec, remember=remember)


def print_verdicts(name: str, results: list, console: Console, verbose: int = 0) -> None:
    """The verdicts of one host, a line each (``pass`` lines only with ``verbose``, or with their warnings:
    a value llama-swap will change, what its schema flags in a config it loads), a validator that
    could not run as ``could not run`` on a line of its own, then ``N passed, N rejected, N could not
    run, N skipped (validators)``."""
    label = {"pass": "pass", "skip": "skip", "fail": "FAIL", "error": "could not run"}
    for r in results:
        if r.status == "pass" and not verbose and not r.detail:
            continue
        labelled(label[r.status], f"{r.validator}: {r.path}", sep="  ", indent="  ", console=console)
        for line in r.detail.splitlines():
            console.print(f"        {line}")
    count = {s: sum(r.status == s for r in results) for s in label}
    console.print(f"  {count['pass']} passed, {count['fail']} rejected, {count['error']} could not run, "
                  f"{count['skip']} skipped (validators)")


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


def exits_when_unreachable(command):
    """Decorate a command's function: a host it could not reach or read over SSH
    (:class:`rigkit.remote.RemoteError`, raised by :meth:`rigkit.remote.Remote.run`: the message names
    the host and what ssh said) is one error line and exit 1 — never read as "nothing there".
    Cleanup (``finally``: the host lock's release) has run by then."""
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except RemoteError as exc:
            error(str(exc))
            sys.exit(exitcodes.FAILED)

    return wrapper
