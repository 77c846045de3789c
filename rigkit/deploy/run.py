"""Running the deploy (``deploy.py`` through pyinfra), reading its results per host, and its
post-deploy smoke, for ``rigkit deploy`` and ``rigkit rollback`` alike (their confirmation and
revert: :mod:`rigkit.deploy.transaction`). What they say goes to an :class:`Output` (the CLI's
prints it: :class:`rigkit.cli.deployout.Console`); nothing here prints."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path
from typing import Protocol

from rigkit import exitcodes, hints


class Output(Protocol):
    """Where a deploy, rollback or wire-in reports as it runs (the CLI prints it on stderr:
    :class:`rigkit.cli.deployout.Console`; tests record it)."""

    def note(self, text: str, error: bool = False) -> None:
        """One line for the operator (``error``: it says what failed)."""

    def pyinfra_log(self, line: str) -> None:
        """One line of pyinfra's log (with its newline), as it comes."""

    def pyinfra_ended(self, proc: subprocess.CompletedProcess, dry: bool) -> None:
        """pyinfra's run ended: ``proc.stdout`` holds its ``--json`` results (a dry run's plan)."""

    def host_log(self, stdout: str, stderr: str) -> None:
        """What a command on the host printed, as it printed it (the wire-in's activation log: its
        stdout to stdout, its stderr to stderr)."""


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


#: Seconds pyinfra is given to stop after a SIGINT before it is terminated, then killed.
STOP_GRACE_S = 30.0


def stop_child(popen: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> int | None:
    """Stop a pyinfra run that rigkit is leaving (an interrupt of rigkit itself): SIGINT as a terminal's
    Ctrl-C sends it (pyinfra stops between its commands), then SIGTERM, then SIGKILL, ``grace_s`` seconds
    apart, and reap it. Returns its exit code (None if it could not be reaped). Whatever comes next (a
    bisect's way back, a transaction's revert) deploys the same host, so it must never run beside this one:
    a SIGINT to rigkit's pid alone left pyinfra deploying a bisect step while the way back deployed the
    start (both recorded "generation 19"; found by an operator's trial)."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if popen.poll() is not None:
            break
        try:
            popen.send_signal(sig)
        except ProcessLookupError:
            break
        try:
            popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            continue
    try:
        return popen.wait(grace_s)
    except subprocess.TimeoutExpired:
        return None


def run_pyinfra(inventory: str, hosts: tuple[str, ...] | list[str], overrides: dict, dry: bool = False,
                verbose: int = 0, extra_env: dict[str, str] | None = None, *, out: Output):
    """Run ``pyinfra -y INVENTORY deploy.py`` (``--dry`` without ``-y`` when ``dry``) limited to
    ``hosts``, with ``overrides`` as ``--data`` and ``extra_env`` added to its environment (``rigkit
    rollback``'s generation and lease). The command line and pyinfra's log go to ``out`` as they come
    (:meth:`Output.pyinfra_ended` at the end); the results JSON stays in ``proc.stdout`` (a dry run's
    plan JSON). Returns ``(proc, env)``: the finished process and the environment the smoke runs with."""

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
    out.note("$ " + shlex.join(["pyinfra", *cmd[1:]]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(project), os.environ.get("PYTHONPATH")])),
           hints.INVENTORY_ENV: inventory, **(extra_env or {})}  # the deploy's own hints name this inventory
    cmd.insert(2, "--json")  # the results (or the plan) as JSON on stdout; pyinfra's log stays on stderr
    popen = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log: list[str] = []

    def relay() -> None:  # pyinfra's log goes on to ``out`` as it comes, and is kept for failed_operations
        for line in popen.stderr:
            out.pyinfra_log(line)
            log.append(line)

    relayer = threading.Thread(target=relay, daemon=True)
    relayer.start()
    try:
        stdout = popen.stdout.read()
        popen.wait()
    except BaseException:  # Ctrl-C (or SIGTERM made an exception) while pyinfra runs: it must stop first
        stop_child(popen)
        raise
    relayer.join(10)
    proc = subprocess.CompletedProcess(cmd, popen.returncode, stdout, "".join(log))
    out.pyinfra_ended(proc, dry)
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
    pass either) or were ``not comparable`` against the baseline given (a run left with no decode
    figure: not a FAIL, and not a pass either); ``""`` when every verdict is PASS or ``no baseline``,
    or the summary cannot be read."""
    try:
        verdicts = json.loads(summary_path.read_text()).get("verdicts") or {}
    except (OSError, ValueError, AttributeError):
        return ""
    warned = [f"{n} {v.get('verdict')} — {'; '.join(v.get('reasons') or [])}"
              for n, v in verdicts.items() if isinstance(v, dict) and v.get("verdict") in ("WARN", "not comparable")]
    return f" (with warnings: {' | '.join(warned)})" if warned else ""


def smoke(hs, inventory: str, env: dict[str, str], out: Output) -> int:
    """The post-deploy smoke of one host: ``rigkit bench --preset small --max-tokens 256 --workload
    chat-greedy`` (a short preset: a warm-up, then a few 256-token greedy answers) through llama-swap against each member up in steady state (:func:`smoke_members`),
    compared with ``bench.baseline`` when set; results under ``results/smoke/<host>/<UTC stamp>/<member>``;
    with ``metrics_textfile_dir`` set, the figures written on the host too (:func:`smoke_metrics`).
    Returns 0, or 1 when a bench fails (a FAIL verdict, a member not running, the host unreachable)."""
    import time

    members = smoke_members(hs.spec)
    if not members:
        out.note(f"{hs.name}: no member is up in steady state (no preloaded live member); no smoke")
        return exitcodes.OK
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    codes = []
    for member in members:
        smoke = [str(Path(sys.executable).parent / "rigkit"), "bench", "-i", inventory, "--host", hs.name,
                 "--member", member, "--workload", "chat-greedy", "--preset", "small", "--max-tokens", "256",
                 "--out", str(Path("results") / "smoke" / hs.name / stamp / member)]
        if hs.spec.bench.baseline:
            smoke += ["--baseline", hs.spec.bench.baseline]
        if hs.spec.metrics_textfile_dir:  # the bench's own writer; smoke_metrics hands the text to the host
            folder = Path(smoke[smoke.index("--out") + 1])
            folder.mkdir(parents=True, exist_ok=True)  # --metrics wants its folder to exist
            smoke += ["--metrics", str(folder / SMOKE_METRICS)]
        out.note(f"post-deploy smoke: $ {shlex.join(['rigkit', *smoke[1:]])}")
        rc = subprocess.run(smoke, env=env).returncode
        out.note(f"post-deploy smoke: {hs.name}/{member}: {'FAILED (exit %d)' % rc if rc else 'passed'}"
                 + smoke_warnings(Path(smoke[smoke.index("--out") + 1]) / "summary.json"))
        codes.append(exitcodes.FAILED if rc else exitcodes.OK)
    if hs.spec.metrics_textfile_dir:
        smoke_metrics(hs, {m: Path("results") / "smoke" / hs.name / stamp / m / SMOKE_METRICS for m in members}, out)
    return exitcodes.combine(*codes)


#: The file each member's smoke bench writes its metrics to (``rigkit bench --metrics``), beside its summary.json.
SMOKE_METRICS = "rigkit_bench.prom"


def smoke_metrics(hs, written: dict[str, Path], out: Output) -> bool:
    """Hand the smoke's figures to the host's agent as its ``rigkit_bench.prom`` (``rigkit-agent metrics bench``,
    :func:`rigkit.host.promfile.put`) in ``metrics_textfile_dir``, where the host's node_exporter reads the agent's
    other parts. ``written`` is ``{member: the file its smoke bench wrote with --metrics}`` (a member whose bench
    wrote none is left out): the same series as ``rigkit bench --metrics``, from the same writer, labelled
    ``host``/``member``/``workload``; the members' texts go together and the agent's parser makes one family of
    each name. Best effort, as every metrics writer: a failure is a note, never the smoke's exit code. Returns
    whether the file was written."""
    from rigkit.remote import Remote, RemoteError

    texts = []
    for path in written.values():
        try:
            texts.append(path.read_text())
        except OSError:
            continue
    if not texts:
        out.note(f"post-deploy smoke: {hs.name}: no metrics to write (no member's bench wrote any)")
        return False
    try:
        proc = Remote(hs.name, hs.connection).agent("metrics", "bench", stdin="".join(texts))
    except RemoteError as exc:
        out.note(f"post-deploy smoke: metrics not written: {exc}", error=True)
        return False
    said = " ".join((proc.stdout + proc.stderr).split())
    out.note(f"post-deploy smoke: metrics on {hs.name}: {said}" if proc.returncode == 0 else
             f"post-deploy smoke: metrics not written on {hs.name} (rigkit-agent metrics exit {proc.returncode}): "
             f"{said[-300:]}", error=proc.returncode != 0)
    return proc.returncode == 0
