"""The ``rigkit`` command line (click). One sub-command per job; each exits with DESIGN.md's
codes (:mod:`rigkit.exitcodes`): 0 done, 1 failed, 2 invalid input (nothing touched), 3 findings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from rich.text import Text

from rigkit import __version__, exitcodes, hints
from rigkit.cli.common import (check_hosts, err, error, exits_when_unreachable, host_option, inventory_option,
                               load_or_exit, out, parse_data, print_verdicts, validate_or_exit, warn)
from rigkit.cli.deployout import Console, print_plan


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rigkit")
def cli() -> None:
    """Rebuild, check and smoke-bench the single-GPU inference rig."""


@cli.command()
@inventory_option
@host_option
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="staging folder: files at their remote paths plus manifest.json")
@click.option("--data", "data", metavar="KEY=VALUE", multiple=True, help="override a spec key, as pyinfra --data")
def render(inventory: str | None, hosts: tuple[str, ...], out_dir: Path, data: tuple[str, ...]) -> None:
    """Write every rendered file under --out DIR at its remote path, plus a manifest
    (path, mode, owner, sha256). With several hosts, each gets DIR/<host>/. Beside them, for the
    operator's monitoring (not deployed): prometheus/rigkit.yml (the scrape config),
    prometheus/rigkit.rules.yml (the alerts) and grafana/rigkit.json (the dashboard to import).

    The validators of ``rigkit check`` run first: a file one rejects is exit 2 and nothing is
    written; a validator that could not run (e.g. the schema offline) is named, the files are
    written, and the exit is 1 (they are unverified)."""
    from rigkit.render.files import write_tree
    from rigkit.report.scrape import operator_files

    host_specs = load_or_exit(inventory, hosts, parse_data(data))
    checked, code = validate_or_exit(host_specs, what="render", refuse_unrun=False)
    for hs, files, _ in checked:
        target = out_dir if len(host_specs) == 1 else out_dir / hs.name
        man = write_tree(files, target)
        out.print(f"{hs.name}: {len(files)} files under {target}, manifest {man}"
                  + (" (unverified: a validator could not run)" if code else ""))
        for rel, text in operator_files(hs.spec, hs.name).items():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).write_text(text)
        out.print(f"{hs.name}: monitoring under {target}: prometheus/rigkit.yml, prometheus/rigkit.rules.yml, "
                  "grafana/rigkit.json (docs/operating.md)")
    sys.exit(code)


@cli.command()
@inventory_option
@host_option
@click.option("-v", "--verbose", count=True, help="also list what passed")
@click.option("--data", "data", metavar="KEY=VALUE", multiple=True, help="override a spec key, as pyinfra --data")
def check(inventory: str | None, hosts: tuple[str, ...], verbose: int, data: tuple[str, ...]) -> None:
    """Validate the spec and the rendered files with real validators, without touching a host.

    Results go to stdout (``rigkit check | less``), warnings to stderr. Exit 0 when valid (warnings
    included), 2 for an invalid spec or a file a validator rejects, 1 when a validator could not run
    (e.g. the llama-swap schema could not be fetched: the line says what to do).
    """
    from rigkit.render.checks import verdict_code

    from rigkit.lockfile.path import lock_file_path
    from rigkit.lockfile.view import model_problems
    from rigkit.spec.inventory import default_inventory
    from rigkit.spec.model import unset_operator_values
    from rigkit.spec.secrets import hf_token
    from rigkit.spec.validate import spec_warnings

    host_specs = load_or_exit(inventory, hosts, parse_data(data))
    inv = inventory or default_inventory()
    codes = []
    for hs, _files, results in check_hosts(host_specs):
        host_codes = []
        for warning in spec_warnings(hs.spec):
            warn(str(warning), indent="  ")
        unset = unset_operator_values(hs.spec)
        if unset:  # what being unset means, said once
            err.print(f"  {len(unset)} operator value(s) unset: the rendered files carry a RIGKIT-UNSET placeholder "
                      "where each is used and the deploy refuses until every one is set (in group_data/all.py, "
                      f"or the host's data in {inv}; README \"The real rig in three steps\")")
        print_verdicts(hs.name, results, out, verbose)
        host_codes.append(verdict_code(results))
        for problem in hs.lock_problems:  # pins, images, the release: what `rigkit lock` has still to resolve
            if "no lock yet" not in problem:  # a missing lock is said once, below
                warn(problem, indent="  ")
        lock_file, model_lock_problems = model_problems(hs.spec, inv)
        for problem in model_lock_problems:  # the lock's models, when there is one: as strict as the spec
            error(f"{hs.name}: {problem}", indent="  ")
        if model_lock_problems:
            host_codes.append(exitcodes.INVALID)
            out.print(f"  vram: estimate skipped — {lock_file} does not match the spec (above); the co-load check "
                      "used the declared vram_gib figures")
        elif lock_file:
            out.print(f"  {lock_file}: matches the spec")
            host_codes.append(_print_fits(hs, lock_file))
        else:
            path = lock_file_path(hs.spec, inv)
            relock = hints.command("lock")
            warn(f"lockfile: no lock ({path} does not exist); the deploy "
                 f"refuses without one: `{relock}` resolves the pins, images, "
                 "llama-swap release and models into it", indent="  ")
            out.print("  vram: estimate skipped — no model lock (the estimate reads the GGUF headers and config.json "
                      "summaries the lock records); the co-load check used the declared vram_gib figures")
        host_code = exitcodes.combine(*host_codes)
        verdict = {exitcodes.OK: "spec valid", exitcodes.INVALID: "spec invalid (the errors above)"}.get(
            host_code, "spec valid as far as checked (a validator could not run: above)")
        out.print(Text.assemble((hs.name, "bold"), f": {verdict}"))
        codes += host_codes
    token = hf_token()  # the one read of this command
    out.print(f"HF token: {'from ' + token.source if token else 'none found (set HF_TOKEN or run `hf auth login`)'}; "
              "value not shown, installed only as /etc/rigkit/secrets/hf.env")
    sys.exit(exitcodes.combine(*codes))


def _print_fits(hs, lock_file: str) -> int:
    """Each member's VRAM estimate beside its declared figure (rigkit.spec.vram); the co-load check
    again with the larger of the two. Returns the exit code it adds (2 when a member cannot fit)."""

    from rigkit.lockfile.document import load_lock
    from rigkit.spec.validate import co_load_problems
    from rigkit.spec.vram import member_fits

    code = exitcodes.OK
    fits = member_fits(hs.spec, load_lock(lock_file))
    for f in fits:
        declared = f"{f.declared_gib:g} GiB declared" if f.declared_gib is not None else "no figure declared"
        shown = f"{f.estimate_gib:g} GiB" if f.estimate_gib is not None else "no estimate"
        out.print(f"  vram {f.member}: estimate {shown} beside {declared} — {f.detail}")
        if f.error:
            error(f"{hs.name}: {f.error}", indent="  ")
            code = exitcodes.INVALID
        if f.warning:
            warn(f.warning, indent="  ")
    figures = {f.member: f.estimate_gib for f in fits if f.estimate_gib is not None and not f.error}
    for problem in co_load_problems(hs.spec, figures):
        error(f"{hs.name}: {problem} (figures: the larger of declared and estimated)", indent="  ")
        code = exitcodes.INVALID
    return code


@cli.command()
@inventory_option
@host_option
@click.option("--data", "data", metavar="KEY=VALUE", multiple=True, help="override a spec key, as pyinfra --data")
@click.option("--reboot", is_flag=True, help="reboot when the new kernel or driver needs it (data reboot=true)")
@click.option("--force", is_flag=True, help="deploy despite declared lock files (data force=true)")
@click.option("--dry", is_flag=True, help="show what would change (pyinfra --dry), change nothing")
@click.option("--no-smoke", is_flag=True, help="skip the post-deploy smoke bench")
@click.option("--smoke", "smoke_asked", is_flag=True,
              help="run the smoke on a host the probe found converged too (by default only after a full run)")
@click.option("--full", is_flag=True, help="run pyinfra's deploy on every host, without the probe path first")
@click.option("--no-revert", is_flag=True, help="leave a host whose change failed as the change left it (said)")
@click.option("--confirm-budget", type=click.FloatRange(min=1), metavar="S", default=None,
              help="seconds the confirmation may take [default: the asked members' cold_boot_s + 60]")
@click.option("--canary", type=click.IntRange(min=1), metavar="N", default=None,
              help="deploy the first N hosts first, confirmed, before any other (docs/operating.md 'A lab of rigs')")
@click.option("--batch", type=click.IntRange(min=1), metavar="K", default=None,
              help="then K hosts at a time [default: the rest at once]; the first batch that fails stops the run")
@click.option("--retry-failed", is_flag=True,
              help="only the hosts whose last deploy failed, was refused, unreachable or not reached (said which and why)")
@click.option("-v", "--verbose", count=True, help="pyinfra verbosity (-v, -vv, -vvv)")
@exits_when_unreachable
def deploy(inventory: str | None, hosts: tuple[str, ...], data: tuple[str, ...], reboot: bool, force: bool,
           dry: bool, no_smoke: bool, smoke_asked: bool, full: bool, no_revert: bool, confirm_budget: float | None,
           canary: int | None, batch: int | None, retry_failed: bool, verbose: int) -> None:
    """Converge the hosts to the declared rig with pyinfra (deploy.py), confirmed by inference or put back.

    Refuses with exit 2, touching nothing, when the spec is invalid, an operator value it needs is
    unset or a validator of ``rigkit check`` rejects a rendered file; with exit 1, touching nothing,
    when such a validator could not run or the host lock is held (a window, a rollback).

    The full run holds each host's lock throughout. A host it changed is then confirmed (rigkit.deploy.transaction:
    services active, power limit read back, files as declared, a real completion through llama-swap to
    each live member it touched and to the resident); a host whose deploy or confirmation failed is
    put back to the generation it started from, confirmed again, and the deploy exits 1 saying
    "reverted to generation N" (the attempt stays in `rigkit generations` as failed). --no-revert
    leaves it as the change left it. Then the post-deploy smoke, still under the lock.

    First, unless --full, each host's lock is taken, its current generation read and drift's probe run
    under it, in one round trip per host, every host at once (rigkit.deploy.converged; a lock refused:
    exit 1, nothing touched). A host whose generation was recorded by this rigkit build from this
    spec and lock, with no hold, window, pending reboot or other lock holder, where the probe finds
    nothing the deploy would change, is said "converged (probe)" and left alone — no pyinfra run, no
    confirmation, no smoke unless --smoke. Every other host takes the full run below, its reasons on
    one line, its lock taken again for it. --full takes it everywhere.

    A deploy that changes the host records a new generation on it (``rigkit generations``); ``--dry``
    says which generation it would replace. A host held by ``rigkit rollback`` is kept at the held
    generation (the spec is not applied; the deploy says so) until ``rigkit rollback --release``.

    Across several hosts (rigkit.deploy.fleet): --canary N deploys the first N first, --batch K the rest K
    at a time, each batch locked when it starts; a batch where a host failed or was refused, or no host was
    reached, stops the run (the later hosts untouched, said "not reached"), exit 1. Each host's outcome is
    recorded as it ends (rigkit.deploy.outcomes); --retry-failed takes the hosts the last run left to retry.
    """
    from rigkit.spec.inventory import default_inventory
    from rigkit.spec.model import unset_operator_values

    if smoke_asked and no_smoke:
        error("--smoke and --no-smoke: choose one")
        sys.exit(exitcodes.INVALID)
    overrides = parse_data(data)
    if reboot:
        overrides["reboot"] = True
    if force:
        overrides["force"] = True
    if retry_failed and hosts:
        error("--retry-failed and --host: choose one (--retry-failed takes the hosts the last run left to retry)")
        sys.exit(exitcodes.INVALID)
    host_specs = load_or_exit(inventory, hosts, overrides)
    if retry_failed:
        host_specs = _retry_failed(inventory, host_specs)
    from rigkit.deploy import fleet

    try:  # the batches, before any host is touched
        plan = fleet.batches([hs.name for hs in host_specs], canary or 0, batch or 0)
    except ValueError as exc:
        error(str(exc))
        sys.exit(exitcodes.INVALID)
    unset = {hs.name: unset_operator_values(hs.spec) for hs in host_specs}
    if any(unset.values()):
        for name, keys in unset.items():
            for key in keys:
                error(f"{name}: {key} is unset (operator-supplied); the deploy needs it")
        error(f"set each in group_data/all.py (or the host's data in the inventory); `{hints.command('check')}` "
              "says what each value is and where to find it")
        sys.exit(exitcodes.INVALID)
    for line in spec_warning_lines(host_specs):  # what `rigkit check` warns about is said here too
        warn(line)
    # the validators of `rigkit check`, before any host is touched: a rejected file is exit 2,
    # a validator that could not run exit 1
    checked, _ = validate_or_exit(host_specs, console=err, what="the deploy", remember=True)
    # the deploy uses only the lock: every pin, image and the release resolved there, for what the spec declares
    lock_refusals = [f"{hs.name}: {p}" for hs in host_specs for p in hs.lock_problems]
    if lock_refusals:
        for line in lock_refusals:
            error(line)
        sys.exit(exitcodes.INVALID)
    from rigkit.deploy import changes

    inv = inventory or default_inventory()
    out = Console(verbose)
    if dry:  # pyinfra's plan, then rigkit's own summary of it per host, each conditional row said to run or not
        names = [hs.name for hs in host_specs]
        proc, plans = changes.plan(inv, hosts, names, overrides, verbose, out)
        print_plan(proc.stdout, names, plans)
        sys.exit(exitcodes.FAILED if proc.returncode else exitcodes.OK)
    from rigkit.spec.secrets import hf_token

    import secrets as pysecrets

    from rigkit.deploy.outcomes import Record

    rendered, token = {hs.name: f for hs, f, _ in checked}, hf_token()
    by_name = {hs.name: hs for hs in host_specs}

    def deploy_batch(names: list[str], ended, watch) -> int:
        return changes.deploy([by_name[n] for n in names], inv, overrides, rendered, watch, token, full=full,
                              smoke_asked=smoke_asked, no_smoke=no_smoke, no_revert=no_revert,
                              confirm_budget=confirm_budget, verbose=verbose, ended=ended)

    record = Record(inv, run=pysecrets.token_hex(4))
    sys.exit(fleet.rollout(list(by_name), plan, deploy_batch, record.ended, out, canary=bool(canary)))


def spec_warning_lines(host_specs) -> list[str]:
    """The spec's warnings (:func:`rigkit.spec.validate.spec_warnings`) of every host of ``host_specs``
    (:class:`rigkit.spec.inventory.HostSpec`), one line per distinct warning naming every host it applies
    to, in the inventory's order (``lab1, lab2: strata.args: …``): a lab whose hosts share a spec reads
    one line naming them all, not one line per host; lines in the order first met."""
    from rigkit.spec.validate import spec_warnings

    hosts: dict[str, list[str]] = {}
    for hs in host_specs:
        for warning in spec_warnings(hs.spec):
            hosts.setdefault(str(warning), []).append(hs.name)
    return [f"{', '.join(dict.fromkeys(names))}: {text}" for text, names in hosts.items()]


def _retry_failed(inventory: str | None, host_specs: list) -> list:
    """``rigkit deploy --retry-failed``: of ``host_specs`` (the inventory's), those the last run left to
    retry (:func:`rigkit.deploy.outcomes.to_retry`), each said with its last outcome and why. Exits 2 when
    no run of this inventory is recorded (or its record cannot be read), 0 when nothing is left to retry."""
    from rigkit.deploy.outcomes import Record, to_retry
    from rigkit.spec.inventory import default_inventory

    record = Record(inventory or default_inventory())
    try:
        last = record.read()
    except ValueError as exc:
        error(f"--retry-failed: {exc}")
        sys.exit(exitcodes.INVALID)
    if not last:
        error(f"--retry-failed: no deploy of {record.inventory} is recorded (looked for {record.path}); "
              "a deploy without --retry-failed records one")
        sys.exit(exitcodes.INVALID)
    take, said = to_retry(last, [hs.name for hs in host_specs])
    for line in said:
        err.print(Text(f"retry: {line}"))
    if not take:
        err.print(Text(f"retry: the last deploy left no host to retry (every host ok or converged; {record.path})"))
        sys.exit(exitcodes.OK)
    return [hs for hs in host_specs if hs.name in take]


def main() -> None:
    """Console-script entry point: run the click group, exit with its code.

    pyinfra's CLI package gevent-patches the process when imported (its loader is what reads
    the inventory and group_data); import it before anything opens a socket, as pyinfra's
    own command does.
    """
    import pyinfra_cli  # noqa: F401

    sys.stdout = PipeSafe(sys.stdout)
    sys.exit(cli.main(standalone_mode=True))


class PipeSafe:
    """``sys.stdout`` for a command whose reader may stop early (``rigkit check | head``): the first
    write to a closed pipe (``BrokenPipeError``) points file descriptor 1 at ``/dev/null`` and every
    later write goes nowhere, so the command finishes and exits with its own code (0 for a clean
    check) instead of a traceback and exit 1. Everything else is the wrapped stream's."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._gone = False

    def _lost(self) -> None:
        self._gone = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())  # Python's own flush at exit then succeeds
        os.close(devnull)

    def write(self, text: str) -> int:
        if not self._gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._lost()
        return len(text)

    def flush(self) -> None:
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._lost()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


from rigkit.cli.bench import bench  # noqa: E402

cli.add_command(bench)

from rigkit.cli.models import models  # noqa: E402
from rigkit.cli.lock import lock  # noqa: E402

cli.add_command(models)
cli.add_command(lock)

from rigkit.cli.drift import drift  # noqa: E402
from rigkit.cli.report import report  # noqa: E402

cli.add_command(drift)
cli.add_command(report)

from rigkit.cli.wirein import wire_in  # noqa: E402

cli.add_command(wire_in)

from rigkit.cli.window import window  # noqa: E402

cli.add_command(window)

from rigkit.cli.generations import generations, rollback  # noqa: E402

cli.add_command(generations)
cli.add_command(rollback)

from rigkit.cli.bisect import bisect  # noqa: E402

cli.add_command(bisect)
