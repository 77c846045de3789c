"""``rigkit generations`` (list and compare what each deploy left on a host) and ``rigkit rollback``
(bring one back, under the host lock, and hold it there) — :mod:`rigkit.deploy.generations`,
:mod:`rigkit.host.generations`.

A rollback is the deploy itself (``deploy.py`` through pyinfra) applying a recorded generation
instead of the spec: the same pinned ``pacman -U`` path for pins (a driver change reaches the
reboot gate), the same activation path for llama-swap's config (a real completion to the changed
members, then the resident), the same daemon.json merge. ``rigkit rollback`` holds the host lock
for the whole run (``rigkit-agent lock hold`` over SSH, a lease its own commands join); a run that
fails part-way is followed by a deploy of the generation it started from, and says so.
"""

from __future__ import annotations

import json
import secrets as pysecrets
import subprocess
import sys
import threading

import click

from rigkit import exitcodes
from rigkit.cli.common import err, inventory_option, load_or_exit, out


def _one_host(inventory: str | None, host: str, overrides: dict | None = None):
    specs = load_or_exit(inventory, (host,), overrides)
    if len(specs) != 1:
        err.print(f"[red]error:[/] --host {host!r}: expected one host of the inventory, got {len(specs)}")
        sys.exit(exitcodes.INVALID)
    return specs[0]


def _remote(hs):
    from rigkit.remote import Remote

    return Remote(hs.name, hs.connection)


def _agent_json(remote, *args: str, timeout: float = 60) -> dict:
    """``rigkit-agent ARGS`` → its JSON stdout; exits 1 naming the host and the agent's error."""
    proc = remote.agent(*args, timeout=timeout)
    if proc.returncode != 0:
        why = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()[-1]
        err.print(f"[red]error:[/] {remote.name}: rigkit-agent {' '.join(args)}: {why}", markup=True)
        sys.exit(exitcodes.FAILED)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        err.print(f"[red]error:[/] {remote.name}: rigkit-agent {' '.join(args)}: not JSON: {proc.stdout[-200:]!r}")
        sys.exit(exitcodes.FAILED)


def _holds(remote) -> dict:
    """The host's holds (:func:`rigkit.host.holds.parse`); exits 1 naming the file when it is not a
    JSON object of hold records (a hold is a safety record: never read as "no hold")."""
    from rigkit import paths
    from rigkit.host import holds

    proc = remote.run(f"cat {paths.HOLDS_FILE} 2>/dev/null || true")
    try:
        return holds.parse(proc.stdout, paths.HOLDS_FILE)
    except holds.HoldsError as exc:
        from rich.markup import escape

        err.print(f"[red]error:[/] {escape(f'{remote.name}: {exc}')}", markup=True, highlight=False)
        sys.exit(exitcodes.FAILED)


def list_lines(index: dict, hold: dict | None) -> list[str]:
    """One line per generation, oldest first: ``*`` marks the current one, ``H`` the held one;
    ``n  time  operator  reason: what changed``."""
    lines = []
    for g in index.get("generations", []):
        mark = ("*" if g["n"] == index.get("current") else " ") + ("H" if hold and g["n"] == hold.get("generation") else " ")
        lines.append(f"{mark} {g['n']:>3}  {g.get('time')}  {g.get('operator')}  {g.get('reason')}: "
                     + "; ".join(g.get("changed") or []))
    return lines


@click.command()
@inventory_option
@click.option("--host", "host", required=True, metavar="NAME", help="the host")
@click.option("--diff", "diff_pair", nargs=2, type=int, metavar="A B", help="what differs from generation A to B")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout (the index, or the diff)")
def generations(inventory: str | None, host: str, diff_pair: tuple[int, int] | None, as_json: bool) -> None:
    """List the generations recorded on a host (number, time, operator, what changed), or with
    ``--diff A B`` what differs between two: files as diffs (secrets masked), pins, units,
    llama-swap members, the spec's keys. Exit 0, 1 when the host cannot be read, 2 bad input."""
    from rigkit.drift.compare import mask
    from rigkit.deploy.generations import diff, diff_text
    from rigkit.host.holds import GENERATION
    from rigkit.spec.secrets import read_hf_token

    hs = _one_host(inventory, host)
    remote = _remote(hs)
    if diff_pair:
        known = [g["n"] for g in _agent_json(remote, "generation", "list").get("generations", [])]
        unknown = [n for n in diff_pair if n not in known]
        if unknown:
            err.print(f"[red]error:[/] --diff {diff_pair[0]} {diff_pair[1]}: {hs.name} has no generation "
                      f"{unknown[0]} (kept: {', '.join(map(str, known)) or 'none'})", markup=True)
            sys.exit(exitcodes.INVALID)
        a, b = (_agent_json(remote, "generation", "show", str(n), "--files") for n in diff_pair)
        token = read_hf_token()
        d = diff(a, b, lambda text: mask(text, [token] if token else []) or "")
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
        out.print(f"{hs.name}: no generation recorded yet (the next deploy that changes something records one)",
                  markup=False)
        sys.exit(exitcodes.OK)
    out.print(f"{hs.name}: {len(index['generations'])} generation(s); * current"
              + (f", H held (rollback to {hold.get('rolled_back_to')}; `rigkit rollback --host {hs.name} --release`)"
                 if hold else ""), markup=False)
    for line in list_lines(index, hold):
        out.print(line, markup=False)
    sys.exit(exitcodes.OK)


class LockHold:
    """The host lock held over SSH for a whole rollback (``rigkit-agent lock hold --lease ID``): taken
    by :meth:`take`, ended by :meth:`release` (closing stdin) or by the session dying."""

    def __init__(self, remote, what: str) -> None:
        from rigkit import paths

        self.remote, self.what = remote, what
        self.lease = pysecrets.token_hex(8)
        self.command = (f"{paths.AGENT_BIN} lock hold --what {json.dumps(what)} --lease {self.lease}")
        self.proc: subprocess.Popen | None = None
        self.stderr: list[str] = []

    def take(self, timeout_s: float = 60) -> str | None:
        """Take it; None when held, else why not (the holder named)."""
        self.proc = subprocess.Popen(self.remote.argv(self.command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout_s)
        if line and line[0].strip() == "held":
            return None
        self.proc.kill()
        self.proc.wait()
        reader.join(2)
        return "; ".join(s.strip() for s in self.stderr if s.strip()) or "the host lock could not be taken"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def release(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.proc = None


@click.command()
@inventory_option
@click.option("--host", "host", required=True, metavar="NAME", help="the host")
@click.option("--to", "to", type=int, metavar="N", help="the generation to bring back")
@click.option("--release", is_flag=True, help="remove the hold a rollback left: the next deploy applies the spec")
@click.option("--force", is_flag=True, help="roll back despite client connections or declared lock files")
@click.option("--reboot", is_flag=True, help="reboot when the generation's kernel or driver needs it")
@click.option("--no-smoke", is_flag=True, help="skip the post-rollback smoke bench")
@click.option("-v", "--verbose", count=True, help="pyinfra verbosity")
def rollback(inventory: str | None, host: str, to: int | None, release: bool, force: bool, reboot: bool,
             no_smoke: bool, verbose: int) -> None:
    """Bring back generation N on a host under the host lock, then hold it there: files, units, pins
    (pacman -U from the archive), llama-swap's config (through the activation path), daemon.json's
    keys, recorded as a new generation "rollback to N" with a hold; then the smoke, still under the
    lock (a failing smoke is exit 1, the rollback itself stays done). The next deploy keeps the host
    at it until ``--release``. A rollback that fails part-way deploys the generation it started from and
    exits 1 naming the failed step. Refused (exit 1, nothing touched) while the lock is held, or when
    generation N needs a model the host has not verified (named)."""
    from rigkit.host.lock import LEASE_ENV
    from rigkit.cli.deployrun import failed_operations, ran_operations, run_pyinfra, smoke
    from rigkit.deploy.source import GENERATION_ENV, REASON_ENV
    from rigkit.spec.inventory import default_inventory

    if release == (to is not None):
        err.print("[red]error:[/] give exactly one of --to N and --release", markup=True)
        sys.exit(exitcodes.INVALID)
    if to is not None and to < 1:
        err.print(f"[red]error:[/] --to {to}: a generation number (1 or more; `rigkit generations --host {host}`)",
                  markup=True)
        sys.exit(exitcodes.INVALID)
    overrides = {k: True for k, on in (("force", force), ("reboot", reboot)) if on}
    hs = _one_host(inventory, host, overrides)
    remote = _remote(hs)
    if release:
        proc = remote.agent("generation", "release", timeout=60)
        for line in (proc.stderr + proc.stdout).splitlines():
            err.print(f"{hs.name}: {line}", markup=False)
        sys.exit(exitcodes.OK if proc.returncode == 0 else exitcodes.FAILED)
    index = _agent_json(remote, "generation", "list")
    known = [g["n"] for g in index.get("generations", [])]
    start = index.get("current")
    if to not in known:
        err.print(f"[red]error:[/] --to {to}: {hs.name} has no generation {to} (kept: "
                  f"{', '.join(map(str, known)) or 'none'})", markup=True)
        sys.exit(exitcodes.INVALID)
    if to == start:
        err.print(f"{hs.name}: generation {to} is already the current one; nothing to roll back", markup=False)
        sys.exit(exitcodes.OK)
    missing = _agent_json(remote, "generation", "check", str(to)).get("missing") or []
    if missing:
        err.print(f"[red]error:[/] {hs.name}: generation {to} needs what this host has not verified; refused, nothing "
                  "touched (deploy a spec with those models, or fetch them, first):", markup=True)
        for m in missing:
            err.print(f"  {m}", markup=False)
        sys.exit(exitcodes.FAILED)
    inv = inventory or default_inventory()
    hold = LockHold(remote, f"rollback to generation {to}")
    why = hold.take()
    if why:
        err.print(f"[red]error:[/] {hs.name}: rollback to generation {to} refused, nothing touched: {why}", markup=True)
        sys.exit(exitcodes.FAILED)
    err.print(f"{hs.name}: holding the host lock for the rollback to generation {to} (from generation {start})",
              markup=False)
    try:
        env = {GENERATION_ENV: str(to), REASON_ENV: f"rollback to {to}", LEASE_ENV: hold.lease}
        proc, run_env = run_pyinfra(inv, [hs.name], overrides, verbose=verbose, extra_env=env)
        if proc.returncode != 0:
            failed = failed_operations(proc)
            step = "; ".join(failed) if failed else "before any operation ran (see pyinfra's output above)"
            err.print(f"[red]error:[/] {hs.name}: rollback to generation {to} failed at: {step}", markup=True)
            if not ran_operations(proc):
                err.print(f"{hs.name}: nothing was changed by it; the host stays at generation {start}", markup=False)
                sys.exit(exitcodes.FAILED)
            err.print(f"{hs.name}: restoring generation {start}, where the rollback started", markup=False)
            back, _ = run_pyinfra(inv, [hs.name], overrides, verbose=verbose,
                                  extra_env={GENERATION_ENV: str(start), LEASE_ENV: hold.lease})
            if back.returncode == 0:
                err.print(f"{hs.name}: the host is at generation {start} again (the rollback to {to} failed at: "
                          f"{step})", markup=False)
            else:
                err.print(f"[red]error:[/] {hs.name}: restoring generation {start} failed too, at: "
                          f"{'; '.join(failed_operations(back)) or 'its start'}; the host is between "
                          f"generations: run `rigkit rollback --host {hs.name} --to {start}`", markup=True)
            sys.exit(exitcodes.FAILED)
        after = _agent_json(remote, "generation", "list")
        err.print(f"{hs.name}: rolled back to generation {to}, recorded as generation {after.get('current')}; held: "
                  f"the next deploy keeps this host there until `rigkit rollback --host {hs.name} --release`",
                  markup=False)
        # the smoke while the lock is still held: nothing else changes the rig between the rollback and it
        code = exitcodes.OK if no_smoke else smoke(hs, inv, run_env)
        if code:
            err.print(f"[red]error:[/] {hs.name}: the rollback to generation {to} is done and recorded (generation "
                      f"{after.get('current')}, held), but its post-deploy smoke FAILED (above); the host stays at "
                      f"generation {after.get('current')}", markup=True)
    finally:
        lost = not hold.alive()
        hold.release()
    if lost:
        err.print(f"[yellow]warn[/]  {hs.name}: the SSH session holding the host lock ended during the rollback "
                  "(a reboot?); it was not held to the end", markup=True)
    sys.exit(code)
