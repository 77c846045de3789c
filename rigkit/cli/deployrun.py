"""Running the deploy (``deploy.py`` through pyinfra), reading its results per host, and its
post-deploy smoke, for ``rigkit deploy`` and ``rigkit rollback`` alike (their confirmation and
revert: :mod:`rigkit.cli.confirmrun`)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

from rigkit import exitcodes, hints
from rigkit.cli.common import err


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
        err.print(f"{name}: {total} operations: {c['success']} changed, {c['no_change']} unchanged, {c['error']} failed",
                  markup=False)
    for name in results.get("failed_hosts", []) or []:
        err.print(f"{name}: failed", markup=False)


def plan_summary(plan: dict, hosts: list[str]) -> dict[str, dict[str, list[str]]]:
    """Per host of ``hosts``, from ``pyinfra --dry --json``'s plan (pyinfra 3.10
    ``pyinfra_cli.prints.build_plan_json``: ``plan[].{name, names, hosts_with_change,
    hosts_with_conditional_change}``, one entry per operation of the deploy): ``{"change": [the operations
    that would change the host], "conditional": [those gated on an earlier change (``_if``)], "total":
    [every operation]}``, names as ``Role | Operation``. The generation record
    (:data:`rigkit.drift.plan.GENERATION_OP`) is rigkit's own bookkeeping, said by the deploy's own
    generation line, never counted as a change of the rig."""
    from rigkit.drift.plan import GENERATION_OP

    out: dict[str, dict[str, list[str]]] = {h: {"change": [], "conditional": [], "total": []} for h in hosts}
    for op in plan.get("plan", []):
        name = " | ".join(op.get("names") or []) or op.get("name") or op.get("op_hash", "?")
        for host in hosts:
            out[host]["total"].append(name)
            if name == GENERATION_OP:
                continue
            if host in (op.get("hosts_with_change") or []):
                out[host]["change"].append(name)
            elif host in (op.get("hosts_with_conditional_change") or []):
                out[host]["conditional"].append(name)
    return out


def print_plan(stdout: str, hosts: list[str]) -> None:
    """rigkit's summary of a dry run (:func:`plan_summary`) on stdout, one block per host: the operations
    that would change it, then the conditional ones — pyinfra lists every ``_if``-gated operation (a
    restart after a changed file) as a "Conditional Change" on every run, converged or not, because it
    decides when it runs: they run only when an operation before them changes something, so with
    nothing to change none of them runs. pyinfra's text other than JSON is passed on as it is."""
    try:
        plan = json.loads(stdout)
    except ValueError:
        if stdout.strip():
            sys.stdout.write(stdout)
        return
    for host, s in plan_summary(plan, hosts).items():
        change, cond = s["change"], s["conditional"]
        if not change:
            print(f"{host}: the deploy would change nothing ({len(s['total'])} operations checked)"
                  + (f"; {len(cond)} conditional operation(s) — each runs only after an operation before it "
                     "changes something — would not run" if cond else ""))
            continue
        print(f"{host}: the deploy would change {len(change)} of {len(s['total'])} operations:")
        for name in change:
            print(f"  change       {name}")
        for name in cond:
            print(f"  conditional  {name} (runs only if an operation before it changes something)")


class QuietLog:
    """pyinfra's log as the operator reads it: each operation block (``--> Starting operation: NAME``,
    then a ``[host] RESULT`` line per host, pyinfra 3.10's format) whose every result is ``No changes``
    is left out unless ``verbose`` (``rigkit deploy -v``), and said once at the end as a count; every
    other line is written to ``stream`` as it comes, each ```rigkit …``` hint in it completed
    (:func:`rigkit.hints.complete`, for the host its ``[host]`` prefix names)."""

    START = "--> Starting operation:"
    RESULT = re.compile(r"^\s+\[(?P<host>[^\]]+)\] (?P<what>.*?)\s*$")

    def __init__(self, stream, verbose: bool = False) -> None:
        self.stream, self.verbose = stream, verbose
        self.block: list[str] | None = None
        self.left_out = 0

    def _emit(self, lines: list[str]) -> None:
        for line in lines:
            m = self.RESULT.match(line)
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


def data_text(value) -> str:
    """The ``--data KEY=TEXT`` text that pyinfra reads back as ``value`` (``pyinfra_cli.util.parse_cli_arg``
    turns ``true``/``false`` into booleans, then tries ``int``, then JSON, else keeps the string): a
    string it would read as something else (``610.60``, ``7``, ``true``, ``[1]``) goes as JSON, as does
    every value that is not a string."""
    if not isinstance(value, str):
        return json.dumps(value)
    if value.lower() in ("true", "false"):
        return json.dumps(value)
    try:
        int(value)
        return json.dumps(value)
    except ValueError:
        pass
    try:
        json.loads(value)
        return json.dumps(value)
    except ValueError:
        return value


def run_pyinfra(inventory: str, hosts: tuple[str, ...] | list[str], overrides: dict, dry: bool = False,
                verbose: int = 0, extra_env: dict[str, str] | None = None):
    """Run ``pyinfra -y INVENTORY deploy.py`` (``--dry`` without ``-y`` when ``dry``) limited to
    ``hosts``, with ``overrides`` as ``--data`` and ``extra_env`` added to its environment (``rigkit
    rollback``'s generation and lease). A real run prints one line per host (:func:`print_results`)
    and keeps the results JSON in ``proc.stdout``; a dry run keeps the plan JSON there. Returns ``(proc, env)``:
    the finished process and the environment the smoke runs with."""

    project = Path(__file__).resolve().parents[2]
    cmd = [str(Path(sys.executable).parent / "pyinfra"), "-y", inventory, str(project / "deploy.py")]
    if dry:
        cmd = [c for c in cmd if c != "-y"] + ["--dry"]
    for name in hosts:
        cmd += ["--limit", name]
    for key, value in overrides.items():
        cmd += ["--data", f"{key}={data_text(value)}"]
    if verbose:
        cmd.append("-" + "v" * verbose)
    err.print("$ " + shlex.join(["pyinfra", *cmd[1:]]), markup=False)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(project), os.environ.get("PYTHONPATH")])),
           hints.INVENTORY_ENV: inventory, **(extra_env or {})}  # the deploy's own hints name this inventory
    cmd.insert(2, "--json")  # the results (or the plan) as JSON on stdout; pyinfra's log stays on stderr
    popen = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    quiet = QuietLog(sys.stderr, verbose=verbose > 0)

    def relay() -> None:  # pyinfra's log goes on to our stderr as it comes, and is kept for failed_operations
        for line in popen.stderr:
            quiet.write(line)
            log.append(line)
        quiet.close()

    relayer = threading.Thread(target=relay, daemon=True)
    relayer.start()
    stdout = popen.stdout.read()
    popen.wait()
    relayer.join(10)
    proc = subprocess.CompletedProcess(cmd, popen.returncode, stdout, "".join(log))
    if not dry:  # a dry run's plan is the caller's to summarize (print_plan)
        print_results(proc.stdout)
    return proc, env


def ran_operations(proc: subprocess.CompletedProcess) -> bool:
    """True when :func:`run_pyinfra`'s run got as far as executing operations (pyinfra's
    ``Beginning operation run`` line): what it changed must then be assumed changed."""
    return "--> Beginning operation run" in (proc.stderr or "")


def failed_operations(proc: subprocess.CompletedProcess) -> list[str]:
    """The names of the operations that failed in :func:`run_pyinfra`'s run: from ``pyinfra
    --json``'s results, or — when pyinfra stopped without writing them (``No hosts remaining!``
    after a host's operation failed) — the last operation its log started. Empty when none ran."""
    try:
        ops = json.loads(proc.stdout)["results"]["operations"]
        failed = [op.get("name", "?") for op in ops if op.get("error")]
        if failed:
            return failed
    except (ValueError, KeyError, TypeError):
        pass
    started = [ln.split("--> Starting operation:", 1)[1].strip() for ln in (proc.stderr or "").splitlines()
               if "--> Starting operation:" in ln]
    return started[-1:] if started and ran_operations(proc) else []


def host_result(proc: subprocess.CompletedProcess, name: str) -> tuple[list[str] | None, int, bool]:
    """Host ``name``'s part of :func:`run_pyinfra`'s run: ``(the operations that failed on it, or None
    when it did not fail; how many operations changed it; whether operations ran at all)``. From
    ``pyinfra --json``'s results (``operations[].{success,error}`` list host names,
    ``failed_hosts``), or, when pyinfra stopped without writing them, :func:`failed_operations`."""
    ran = ran_operations(proc)
    try:
        results = json.loads(proc.stdout)["results"]
        ops = results.get("operations", [])
    except (ValueError, KeyError, TypeError, AttributeError):
        return (failed_operations(proc) if proc.returncode != 0 else None), 0, ran
    failed = [op.get("name", "?") for op in ops if name in (op.get("error") or [])]
    changed = sum(1 for op in ops if name in (op.get("success") or []))
    host_failed = bool(failed) or name in (results.get("failed_hosts") or [])
    return (failed if host_failed else None), changed, ran


def smoke_members(spec) -> list[str]:
    """The members up in steady state: the preloaded (``ttl 0``, resident) members of the live config,
    in preload order. Members on demand (HyperQwen wired in) are not up in steady state."""
    from rigkit.spec.members import live_member_ids

    live = live_member_ids(spec)
    return [m for m in spec.llama_swap.preload if m in live]


def smoke_warnings(summary_path: Path) -> str:
    """`` (with warnings: chat-greedy WARN — decode unstable …)`` for a smoke whose verdicts
    passed with a WARN (an unstable run is never a FAIL on speed, and must not read as a clean
    pass either); ``""`` when every verdict is PASS, or the summary cannot be read."""
    try:
        verdicts = json.loads(summary_path.read_text()).get("verdicts") or {}
    except (OSError, ValueError, AttributeError):
        return ""
    warned = [f"{n} {v.get('verdict')} — {'; '.join(v.get('reasons') or [])}"
              for n, v in verdicts.items() if isinstance(v, dict) and v.get("verdict") == "WARN"]
    return f" (with warnings: {' | '.join(warned)})" if warned else ""


def smoke(hs, inventory: str, env: dict[str, str]) -> int:
    """The post-deploy smoke of one host: ``rigkit bench --preset small --max-tokens 256 --workload
    chat-greedy`` (a short preset: a warm-up, then a few 256-token greedy answers) through llama-swap against each member up in steady state (:func:`smoke_members`),
    compared with ``bench.baseline`` when set; results under ``results/smoke/<host>/<UTC stamp>/<member>``.
    Returns 0, or 1 when a bench fails (a FAIL verdict, a member not running, the host unreachable)."""
    import time

    members = smoke_members(hs.spec)
    if not members:
        err.print(f"{hs.name}: no member is up in steady state (no preloaded live member); no smoke")
        return exitcodes.OK
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    codes = []
    for member in members:
        smoke = [str(Path(sys.executable).parent / "rigkit"), "bench", "-i", inventory, "--host", hs.name,
                 "--member", member, "--workload", "chat-greedy", "--preset", "small", "--max-tokens", "256",
                 "--out", str(Path("results") / "smoke" / hs.name / stamp / member)]
        if hs.spec.bench.baseline:
            smoke += ["--baseline", hs.spec.bench.baseline]
        err.print(f"post-deploy smoke: $ {shlex.join(['rigkit', *smoke[1:]])}", markup=False)
        rc = subprocess.run(smoke, env=env).returncode
        err.print(f"post-deploy smoke: {hs.name}/{member}: {'FAILED (exit %d)' % rc if rc else 'passed'}"
                  + smoke_warnings(Path(smoke[smoke.index("--out") + 1]) / "summary.json"), markup=False)
        codes.append(exitcodes.FAILED if rc else exitcodes.OK)
    return exitcodes.combine(*codes)
