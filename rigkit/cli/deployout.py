"""The deploy's output on the terminal (``rigkit deploy``, ``rigkit rollback``, ``rigkit wire-in
--activate``): :class:`Console`, the :class:`rigkit.deploy.run.Output` the CLI hands the transaction
and pyinfra's runs (:mod:`rigkit.deploy`), pyinfra's log as the operator reads it (:class:`QuietLog`),
one line per host of its results (:func:`print_results`) and the summary of a dry run
(:func:`print_plan`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from rigkit import hints
from rigkit.cli import common
from rigkit.cli.common import err


class Console:
    """:class:`rigkit.deploy.run.Output` on stderr: notes as lines (an error in red), pyinfra's log
    through a :class:`QuietLog` per run (``verbose``: ``rigkit deploy -v`` lists unchanged operations
    too), then one line per host of a real run's results (:func:`print_results`)."""

    def __init__(self, verbose: int = 0) -> None:
        self.verbose = verbose
        self._log: QuietLog | None = None

    def note(self, text: str, error: bool = False) -> None:
        """One line on stderr, ``text`` as it is (``error: `` before it with ``error``)."""
        if error:
            common.error(text)
        else:
            err.print(text)

    def pyinfra_log(self, line: str) -> None:
        """One line of pyinfra's log: through this run's :class:`QuietLog`."""
        if self._log is None:
            self._log = QuietLog(sys.stderr, verbose=self.verbose > 0)
        self._log.write(line)

    def host_log(self, stdout: str, stderr: str) -> None:
        """What a command on the host printed: its stdout to stdout, its stderr to stderr."""
        sys.stdout.write(stdout)
        if stderr:
            sys.stderr.write(stderr)

    def pyinfra_ended(self, proc: subprocess.CompletedProcess, dry: bool) -> None:
        """The log's last block and count; a real run's results per host (a dry run's plan is the
        caller's to summarize: :func:`print_plan`)."""
        if self._log is not None:
            self._log.close()
            self._log = None
        if not dry:
            print_results(proc.stdout)


def print_results(stdout: str) -> None:
    """One line per host from ``pyinfra --json -y`` results: operations changed/unchanged/failed
    (pyinfra 3.10: ``results.operations[].{success,no_change,error}`` list host names)."""
    try:
        results = json.loads(stdout)["results"]
    except (ValueError, KeyError, TypeError):
        if stdout.strip():
            sys.stdout.write(stdout)
        return
    per_host: dict[str, dict[str, int]] = {}
    for op in results.get("operations", []):
        for kind in ("success", "no_change", "error"):
            for name in op.get(kind, []):
                per_host.setdefault(name, {"success": 0, "no_change": 0, "error": 0})[kind] += 1
    for name, c in sorted(per_host.items()):
        total = sum(c.values())
        err.print(f"{name}: {total} operations: {c['success']} changed, {c['no_change']} unchanged, {c['error']} failed")
    for name in results.get("failed_hosts", []) or []:
        err.print(f"{name}: failed")


def plan_summary(plan: dict, hosts: list[str]) -> dict[str, dict[str, list[str]]]:
    """Per host of ``hosts``, from ``pyinfra --dry --json``'s plan (pyinfra 3.10
    ``pyinfra_cli.prints.build_plan_json``: ``plan[].{name, names, hosts_with_change,
    hosts_with_conditional_change}``, one entry per operation of the deploy): ``{"change": [the operations
    that would change the host], "conditional": [those gated on an earlier change (``_if``)], "total":
    [every operation], "record": [the generation record, when it would run]}``, names as
    ``Role | Operation``. The generation record (:data:`rigkit.drift.plan.GENERATION_OP`) is rigkit's own
    bookkeeping, said by the deploy's own generation line, never counted as a change of the rig; it is
    listed in ``record`` so that a plan that changes nothing on the rig but records a generation says so."""
    from rigkit.drift.plan import GENERATION_OP

    out: dict[str, dict[str, list[str]]] = {h: {"change": [], "conditional": [], "total": [], "record": []}
                                            for h in hosts}
    for op in plan.get("plan", []):
        name = " | ".join(op.get("names") or []) or op.get("name") or op.get("op_hash", "?")
        for host in hosts:
            out[host]["total"].append(name)
            if name == GENERATION_OP:
                if host in (op.get("hosts_with_change") or []):
                    out[host]["record"].append(name)
                continue
            if host in (op.get("hosts_with_change") or []):
                out[host]["change"].append(name)
            elif host in (op.get("hosts_with_conditional_change") or []):
                out[host]["conditional"].append(name)
    return out


#: How a conditional row reads, by whether it would run in this plan (None: not known, the deploy file
#: did not say: :mod:`rigkit.deploy.planned`).
CONDITIONAL = {True: "will run: what it waits on changes in this plan",
               False: "will not run: nothing it waits on changes in this plan",
               None: "runs only if an operation before it changes something"}


def print_plan(stdout: str, hosts: list[str], runs: dict[str, dict[str, bool]] | None = None) -> None:
    """rigkit's summary of a dry run (:func:`plan_summary`) on stdout, one block per host: the operations
    that would change it, then the conditional ones — pyinfra lists every ``_if``-gated operation (a
    restart after a changed file) as a "Conditional Change" on every run, converged or not, because it
    decides when it runs. ``runs`` (``{host: {operation: would run}}``, :func:`rigkit.deploy.planned.read`)
    says which would run in this plan: each row says so (:data:`CONDITIONAL`), and one that would run is
    counted with the changes. A host with nothing to change and no conditional row that would run reads
    "would change nothing" — and, when the plan still records a generation (its declared state — spec,
    lock, rigkit build — differs from the current generation's, which the generation line above it
    says), that it records one without changing the rig. pyinfra's text other than JSON is passed on as
    it is."""
    try:
        plan = json.loads(stdout)
    except ValueError:
        if stdout.strip():
            sys.stdout.write(stdout)
        return
    for host, s in plan_summary(plan, hosts).items():
        change, cond = s["change"], s["conditional"]
        known = (runs or {}).get(host, {})
        will = [name for name in cond if known.get(name) is True]
        if not change and not will:
            print(f"{host}: the deploy would change nothing " + ("on the rig " if s["record"] else "")
                  + f"({len(s['total'])} operations checked)"
                  + ("; it would only record a new generation, whose declared state differs from the current "
                     "one's as the generation line above says" if s["record"] else "")
                  + (f"; {len(cond)} conditional operation(s) — each runs only after an operation before it "
                     "changes something — would not run" if cond else ""))
            continue
        print(f"{host}: the deploy would change {len(change) + len(will)} of {len(s['total'])} operations:")
        for name in change:
            print(f"  change       {name}")
        for name in cond:
            print(f"  conditional  {name} — {CONDITIONAL[known.get(name)]}")


class QuietLog:
    """pyinfra's log as the operator reads it: each operation block (``--> Starting operation: NAME``,
    then a ``[host] RESULT`` line per host, pyinfra 3.10's format) whose every result is ``No changes``
    is left out unless ``verbose`` (``rigkit deploy -v``), and said once at the end as a count (so is
    pyinfra's ``Error: executed N commands`` under a failed one, :attr:`EXECUTED`); every
    other line is written to ``stream`` as it comes, each ```rigkit …``` hint in it completed
    (:func:`rigkit.hints.complete`, for the host its ``[host]`` prefix names)."""

    START = "--> Starting operation:"
    RESULT = re.compile(r"^\s+\[(?P<host>[^\]]+)\] (?P<what>.*?)\s*$")
    #: pyinfra's own closing line of a failed operation (pyinfra 3.10 ``api/operations.py``:
    #: ``f"executed {executed_commands} commands"`` through ``log_error_or_warning``): the lines above it
    #: say why, and rigkit says which operation failed after the run; left out unless ``verbose``.
    EXECUTED = re.compile(r"^(\x1b\[[0-9;]*m)*Error: (\x1b\[[0-9;]*m)*executed \d+ commands")

    def __init__(self, stream, verbose: bool = False) -> None:
        self.stream, self.verbose = stream, verbose
        self.block: list[str] | None = None
        self.left_out = 0

    def _emit(self, lines: list[str]) -> None:
        for line in lines:
            m = self.RESULT.match(line)
            if m and not self.verbose and self.EXECUTED.match(m.group("what")):
                continue
            self.stream.write(hints.complete(line, host=m.group("host") if m else None))
        self.stream.flush()

    def _end_block(self) -> None:
        block, self.block = self.block, None
        if block is None:
            return
        results = [m.group("what") for m in map(self.RESULT.match, block[1:]) if m]
        if not self.verbose and results and all(r == "No changes" for r in results) \
                and all(self.RESULT.match(ln) or not ln.strip() for ln in block[1:]):
            self.left_out += 1
            return
        self._emit(block)

    def write(self, line: str) -> None:
        """Take one line of pyinfra's log (with its newline)."""
        if line.startswith(self.START):
            self._end_block()
            self.block = [line]
        elif self.block is not None and (self.RESULT.match(line) or not line.strip()):
            self.block.append(line)
        else:
            self._end_block()
            self._emit([line])

    def close(self) -> None:
        """End of the log: the last block, and how many unchanged operations were left out."""
        self._end_block()
        if self.left_out:
            self._emit([f"    ({self.left_out} operation(s) with no changes not listed; -v lists them)\n"])
