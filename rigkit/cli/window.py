"""``rigkit window``: measure a tenant on the GPU in a window, and always come back to the
resident model (DESIGN.md "Lifecycle"; the host side is :mod:`rigkit.host.window`).

The control side builds the window's *plan* from the host's spec (timers, lock files, ports,
VRAM, bench settings — the host agent has no spec of its own), starts the window on the host
over SSH (the connection settings pyinfra uses, :class:`rigkit.remote.Remote`), follows its journal
and, at the end, copies ``/var/lib/rigkit/windows/<id>/`` back (journal, bench results with the
host context; ``chart.png`` is drawn here, where matplotlib is).

``--sweep`` runs a sweep inside the window (:mod:`rigkit.report.sweep` on this side,
:mod:`rigkit.host.window.sweep` on the host): HyperQwen's draft length (``dflash_tokens``; a crash it
finds is a result, not a failure) or the GPU's power limit (``power_limit``, each limit checked
against the card's range read over SSH before anything changes; the declared limit put back at
restore).

Exit codes (:mod:`rigkit.exitcodes`): 0 the window ran, restored steady and every bench verdict
passed (``--restore``/``--abort``: steady is back, or nothing was open); 1 refused by preflight,
a step failed, aborted, a FAIL verdict, restore failed or the host unreachable; 2 invalid input
(inventory, spec, arguments, unset ``paused_timers``/``lock_files``, a tenant that cannot fit
the declared VRAM), nothing touched.
"""

from __future__ import annotations

import io
import json
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from rigkit import exitcodes, hints, paths
from rigkit.bench.workloads import PRESETS
from rigkit.cli.common import (err, error, exits_when_unreachable, host_option, inventory_option, labelled, load_or_exit,
                               parse_data, styled)
from rigkit.common.gpu import QUERY_COMMAND, parse_query
from rigkit.remote import Remote, RemoteError

TENANTS = ("hyperqwen",)
#: Following the journal survives SSH drops shorter than this (s).
RECONNECT_S = 60.0


def build_plan(host_name: str, spec: Any, tenant: str, presets: list[str], force: bool,
               healthy_timeout_s: float) -> dict[str, Any]:
    """The plan :mod:`rigkit.host.window` runs (a JSON-able dict), from the host's RigSpec.

    What the host knows of itself — ports, units, the resident, the API key file — comes from its host
    config (:func:`rigkit.host.window.commands.with_host_config`), not from here. Keys: ``host``,
    ``tenant``, ``paused_timers``, ``lock_files`` (this run's spec, ``--data`` included), ``tenant_vram_gib`` (GiB, :func:`rigkit.spec.members.hyperqwen_vram_gib`),
    ``gpu_vram_gib``, ``vram_reserve_gib``, ``force``, ``bench`` (preset names),
    ``bench_settings`` (``spec.bench``), ``context`` (what makes the numbers comparable),
    ``timeouts`` (s: ``healthy_s``, ``vram_free_s``, ``proxy_s``, ``resident_s``, ``timer_drain_s``,
    ``warmup_s``, ``tenant_stop_s``).
    """
    from rigkit.spec.members import hyperqwen_vram_gib

    hq = spec.hyperqwen
    resident = spec.llama_swap.preload[0]
    rmember = spec.llama_swap.members.get(resident)
    resident_s = max(120.0, 3 * float(getattr(rmember, "cold_boot_s", None) or 60))
    return {
        "host": host_name, "tenant": tenant, "tenant_vram_gib": hyperqwen_vram_gib(spec),
        "gpu_vram_gib": spec.gpu_vram_gib, "vram_reserve_gib": spec.vram_reserve_gib,
        "paused_timers": list(spec.paused_timers or []), "lock_files": list(spec.lock_files or []),
        "force": force, "bench": presets,
        "bench_settings": spec.bench.model_dump(),
        "context": {"quantization": "W4A16", "speculative": f"{hq.spec} (DFLASH_TOKENS={hq.dflash_tokens})"
                    if hq.spec == "dflash2" else hq.spec, "image": hq.image.reference(),
                    "gpu_memory_utilization": hq.gpu_memory_utilization},
        "timeouts": {"healthy_s": healthy_timeout_s, "vram_free_s": 60, "proxy_s": 60, "resident_s": resident_s,
                     "timer_drain_s": 60, "warmup_s": 600, "tenant_stop_s": hq.stop_timeout_s + 30},
    }


def plan_problems(spec: Any) -> list[str]:
    """Why no window can be planned for ``spec`` (exit 2), one line each: unset operator values
    the window needs, a tenant that cannot fit ``gpu_vram_gib`` with the reserve, no resident."""
    from rigkit.spec.members import hyperqwen_vram_gib

    out = []
    for key in ("paused_timers", "lock_files"):
        if getattr(spec, key) is None:
            out.append(f"{key} is unset (operator-supplied); the window needs it ([] for none)")
    need = hyperqwen_vram_gib(spec)
    if need + spec.vram_reserve_gib > spec.gpu_vram_gib:
        out.append(f"hyperqwen needs {need:g} GiB (gpu_memory_utilization {spec.hyperqwen.gpu_memory_utilization} "
                   f"x gpu_vram_gib {spec.gpu_vram_gib:g}) + vram_reserve_gib {spec.vram_reserve_gib:g}: "
                   f"more than the card's {spec.gpu_vram_gib:g} GiB")
    if not spec.llama_swap.preload:
        out.append("llama_swap.preload is empty: no resident model to come back to")
    return out


class WindowRemote(Remote):
    """``rigkit-agent window ...`` on one host over SSH (:class:`rigkit.remote.Remote`), and the
    window's results fetched back."""

    def agent(self, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """``rigkit-agent window ARGS`` (:meth:`rigkit.remote.Remote.agent`)."""
        return super().agent("window", *args, stdin=stdin, timeout=timeout)

    def fetch(self, window_id: str, dest: Path) -> Path:
        """Copy ``/var/lib/rigkit/windows/<id>/`` into ``dest`` (tar over SSH). Returns the folder."""
        WINDOWS_DIR = paths.WINDOWS_DIR

        proc = self.run(f"tar -C {WINDOWS_DIR} -cf - {shlex.quote(window_id)}", as_root=True, timeout=300,
                        text=False)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr.decode(errors="replace").strip()[-300:] or f"tar exited {proc.returncode}")
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(proc.stdout), mode="r:") as tar:
            kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(dest, **kw)
        return dest / window_id


def _print_steps(journal: dict, seen: dict[int, str], host: str | None = None) -> None:
    """Print each step whose status changed since the last call (``seen``: index -> status); the
    hints in a step's detail completed for ``host`` (:func:`rigkit.hints.complete`)."""
    for i, st in enumerate(journal.get("steps") or []):
        if seen.get(i) == st["status"]:
            continue
        seen[i] = st["status"]
        dur = f"{st['duration_s']:8.2f} s" if st.get("duration_s") is not None else " " * 10
        colour = {"ok": "green", "failed": "red", "running": "cyan"}.get(st["status"], "white")
        label = ("restore: " if st.get("phase") == "restore" else "") + st["name"]
        err.print(Text.assemble(f"  {label:<24} ", (f"{st['status']:<7}", colour), f" {dur}  ",
                                hints.complete(st.get("detail") or "", host=host)))


def follow(remote: WindowRemote, on_interrupt) -> dict | None:
    """Follow the host's journal until the window is over; print steps as they change.

    Ctrl-C calls ``on_interrupt()`` once (asks the host to end early) and keeps following; a
    second Ctrl-C leaves (the window goes on and restores on the host). An SSH drop reconnects
    for up to :data:`RECONNECT_S` s. Returns the last journal, or None when the host was lost.
    """
    seen: dict[int, str] = {}
    last: dict | None = None
    interrupted = 0
    lost_since: float | None = None
    while True:
        proc = remote.popen(f"{paths.AGENT_BIN} window follow", as_root=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            for line in proc.stdout:
                lost_since = None
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if isinstance(j, dict):
                    last = j
                    _print_steps(j, seen, remote.name)
            rc = proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            interrupted += 1
            if interrupted > 1:
                styled(f"left the window; it goes on on the host and restores steady itself "
                       f"(`{hints.command('window', '--follow', host=remote.name)}` to watch, "
                       f"`{hints.command('window', '--restore', host=remote.name)}` if it was left open)", "yellow")
                return last
            on_interrupt()
            continue
        if rc == 0:
            return last
        stderr = proc.stderr.read().strip() if proc.stderr else ""
        lost_since = lost_since or time.monotonic()
        if time.monotonic() - lost_since > RECONNECT_S:
            error(f"lost {remote.name} ({stderr[-200:] or f'ssh exit {rc}'}); the window goes on on "
                  f"the host and restores steady itself; `{hints.command('window', '--follow', host=remote.name)}` "
                  f"to watch it again, `{hints.command('window', '--restore', host=remote.name)}` if it was left open")
            return None
        styled(f"ssh to {remote.name} dropped ({stderr[-120:] or f'exit {rc}'}); reconnecting", "yellow")
        time.sleep(2)


def _report(remote: WindowRemote, journal: dict, out: Path | None, mode: str | None = None) -> int:
    """Print the outcome, copy the results back, draw the charts; return the exit code (for
    ``--restore``/``--abort`` 0 once steady is back; for a window, 0 only when it also ran clean)."""
    state, outcome = journal.get("state"), journal.get("outcome")
    wid = journal.get("id")
    if journal.get("boot_to_healthy_s") is not None:
        err.print(f"boot to healthy: {journal['boot_to_healthy_s']} s")
    dest = None
    if state != "closed" or outcome != "refused":
        try:
            dest = remote.fetch(wid, out or Path("results"))
            err.print(f"window {wid}: journal and results copied to {dest}")
        except (RuntimeError, OSError, tarfile.TarError) as exc:  # RemoteError too: the window is over
            labelled("warning:", f"copying the results of window {wid} failed: {exc}")
    for preset, b in (journal.get("bench") or {}).items():
        summary_path = dest / f"bench-{preset}" / "summary.json" if dest else None
        if summary_path and summary_path.is_file():
            from rigkit.bench.runner import report_lines

            summary = json.loads(summary_path.read_text())
            click.echo(f"bench {preset} (window {wid}):")
            for line in report_lines(summary):
                click.echo("  " + line)
            try:
                from rigkit.report.chart import write_chart

                write_chart(str(summary_path.parent / "chart.png"), summary, None)
            except Exception as exc:  # noqa: BLE001 - the chart is a nicety
                labelled("warning:", f"chart for bench {preset} not drawn: {exc}")
        else:
            click.echo(f"bench {preset}: exit code {b.get('exit_code')}, verdicts {b.get('verdicts')}")
    if journal.get("sweep") and state != "closed":
        _sweep_report(remote.name, journal, dest or (out or Path("results")) / str(wid))
    benches_ok = all(b.get("exit_code") == 0 for b in (journal.get("bench") or {}).values())
    if outcome == "refused":
        labelled("refused:", str(journal.get("error")))
        return exitcodes.FAILED
    if state == "restored":
        msg = f"window {wid}: {outcome or 'restore replayed'}"
        if journal.get("error"):
            msg += f" — {journal['error']}"
        err.print(Text.assemble((msg, "green" if outcome == "ok" else "red"), "; steady state restored "
                  f"({journal.get('plan', {}).get('resident')} answers through "
                  f":{journal.get('plan', {}).get('proxy_port')}, timers resumed: "
                  f"{', '.join(journal.get('timers_active_before') or []) or 'none'})"))
        if mode in ("restore", "abort"):
            return exitcodes.OK
        return exitcodes.OK if outcome == "ok" and benches_ok else exitcodes.FAILED
    err.print(Text.assemble((f"window {wid} is {state}", "red"), f" ({outcome}: {journal.get('error')}); steady state "
              f"is NOT confirmed: run `{hints.command('window', '--restore', host=remote.name)}` (it replays the restore "
              "from the journal)"))
    return exitcodes.FAILED


def _sweep_report(host: str, journal: dict, folder: Path) -> None:
    """Print the sweep's table, frontier and recommendation and write them (``sweep.json``,
    ``sweep.txt``, ``sweep.svg``) into the window's copied folder."""
    from rigkit.report.sweep import result, table_lines, write_result

    plan = journal.get("plan") or {}
    res = result(journal["sweep"], int((plan.get("sweep") or {}).get("max_model_len") or
                                      journal["sweep"].get("max_model_len") or 0), host, journal.get("id"))
    for line in table_lines(res):
        click.echo(line)
    try:
        written = write_result(folder, res)
        err.print(f"sweep result: {', '.join(str(p) for p in written)}")
    except OSError as exc:
        labelled("warning:", f"the sweep result could not be written to {folder}: {exc}")


def _sweep_plan(hs: Any, sweep: str, contexts: str | None, workloads: str | None, runs: int, max_tokens: int,
                max_minutes: float | None, resume: bool, remote: "WindowRemote") -> dict | None:
    """The plan's ``sweep`` from the options (exit 2 on bad input, before the host is touched but
    for a read of its journal with ``--resume``); None when ``--resume`` finds nothing left to
    measure (the result is printed, no window is opened)."""
    from rigkit.report.sweep import (SweepArgError, check_power_limits, parse_contexts, parse_sweep, parse_workloads,
                                     plan_sweep)

    try:
        key, values = parse_sweep(sweep)
        ctx = parse_contexts(contexts, hs.spec.hyperqwen.max_model_len, key)
        wls = parse_workloads(workloads)
        sp = plan_sweep(hs.spec, key, values, ctx, wls, runs=runs, max_tokens=max_tokens,
                        max_minutes=max_minutes, resume=resume)
        if key == "power_limit":  # the card's own range, read (only read) before anything changes
            proc = remote.run(QUERY_COMMAND, as_root=False, timeout=60)  # raises when the host is not reached
            check_power_limits(values, parse_query(proc.stdout if proc.returncode == 0 else
                                                   (proc.stdout + proc.stderr), proc.returncode))
    except SweepArgError as exc:
        error(f"{hs.name}: {exc}")
        sys.exit(exitcodes.INVALID)
    except RemoteError:
        raise  # the host not reached: said by the command (exits_when_unreachable)
    except RuntimeError as exc:
        error(f"{hs.name}: {exc}")
        sys.exit(exitcodes.FAILED)
    if resume:
        from rigkit.common.sweepgrid import pending
        from rigkit.report.sweep import grid_of, result, table_lines

        proc = remote.agent("status")
        if proc.returncode != 0:
            error(f"{hs.name}: {hints.complete((proc.stderr or proc.stdout).strip()[-400:], host=hs.name)}")
            sys.exit(exitcodes.FAILED)
        last = json.loads(proc.stdout.strip().splitlines()[-1] or "null") or {}
        from rigkit.common.journal import is_open

        if is_open(last):
            error(f"{hs.name}: window {last.get('id')} is still open (state {last.get('state')!r}); "
                  f"run `{hints.command('window', '--restore', host=hs.name)}` first (it keeps the measured "
                  "cells), then --resume")
            sys.exit(exitcodes.FAILED)
        prev = last.get("sweep")
        if not prev or prev.get("param") != key:
            error(f"{hs.name}: --resume: no {key} sweep journal on the host (the last window, "
                  f"{last.get('id') or 'none'}, ran no such sweep); run the sweep without --resume")
            sys.exit(exitcodes.INVALID)
        left = pending(grid_of(sp), prev.get("cells") or [])
        if not left:
            err.print(f"{hs.name}: --resume: every cell of this grid is already measured (window "
                      f"{last.get('id')}); nothing to measure, no window opened")
            res = result({**prev, **grid_of(sp)}, sp["max_model_len"], hs.name, last.get("id"))
            for line in table_lines(res):
                click.echo(line)
            return None
        err.print(f"{hs.name}: --resume: {len(prev.get('cells') or [])} cell(s) of window {last.get('id')} kept, "
                  f"{len(left)} left to measure")
    err.print(f"{hs.name}: {sp['guard']}")
    return sp


@click.command("window")
@inventory_option
@host_option
@click.option("--tenant", type=click.Choice(TENANTS), default="hyperqwen", show_default=True,
              help="the tenant to swap in")
@click.option("--bench", "presets", metavar="PRESET", multiple=True,
              help="bench preset to run against the tenant (repeatable): rig or small")
@click.option("--data", "data", metavar="KEY=VALUE", multiple=True, help="override a spec key, as pyinfra --data")
@click.option("--force", is_flag=True, help="open the window despite client connections or lock files")
@click.option("--healthy-timeout", type=click.FloatRange(min=1), default=900.0, show_default=True,
              help="seconds the tenant gets from start to a 200 on /health")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="where the window's folder is copied [default: results/]")
@click.option("--abort", "mode", flag_value="abort", help="ask the running window to end early (it restores)")
@click.option("--restore", "mode", flag_value="restore",
              help="replay the restore from the journal when a window was left open; nothing otherwise")
@click.option("--follow", "mode", flag_value="follow", help="follow the window that runs now")
@click.option("--sweep", "sweep", metavar="KEY=N,N,...",
              help="sweep a setting inside the window: dflash_tokens=3,5,7,9,11,15 (HyperQwen's draft length) or "
                   "power_limit=300,350,420 (the GPU's power limit in W, within the card's range)")
@click.option("--contexts", metavar="TOKENS,...",
              help="with --sweep: context sizes, ascending [default: 4096,16384,20480 and max_model_len; "
                   "power_limit: 4096,16384]")
@click.option("--workloads", metavar="NAME,...", help="with --sweep: chat-greedy, chat-sampled, quoting "
              "[default: chat-greedy,quoting]")
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True,
              help="with --sweep: requests per cell (figures are their medians)")
@click.option("--max-tokens", type=click.IntRange(min=16), default=256, show_default=True,
              help="with --sweep: max_tokens of each request (the prompt fills the rest of the context)")
@click.option("--max-minutes", type=click.FloatRange(min=0, min_open=True),
              help="with --sweep: stop cleanly between cells after this many minutes (resume with --resume)")
@click.option("--resume", is_flag=True, help="with --sweep: keep the last sweep's cells and measure only the rest")
@exits_when_unreachable
def window(inventory, hosts, tenant, presets, data, force, healthy_timeout, out_dir, mode, sweep, contexts,
           workloads, runs, max_tokens, max_minutes, resume) -> None:
    """Swap the tenant in on one host for measuring, then always restore steady state.

    On the host, as the transient unit rigkit-window.service: preflight (client connections on
    the proxy, declared lock files, VRAM), pause the declared timers, stop llama-swap, confirm
    the VRAM is free, start hyperqwen.service, time boot-to-healthy, warm it up, run the --bench
    presets; then stop the tenant, start llama-swap, verify the resident with a real completion
    and resume exactly the timers that were active. With --sweep dflash_tokens=N,...: inside the
    same window, each draft length's .env (rendered here, guard lifted on purpose) is installed, the
    tenant started clean and each workload measured at each context from the shortest up, a crash
    ending that setting (rigkit.report.sweep; the deployed .env is put back at restore). With --sweep
    power_limit=W,...: each limit checked against the card's range first, then the tenant started once
    and measured at each limit (decode tok/s, tok/J, J/token), the best tok/J keeping >= 95% of the
    best decode tok/s recommended as a gpu_power_limit_w line; the declared limit is put back at
    restore, whatever happens. Exit 0 done, 1 failed/refused/aborted, 2 invalid input.
    """
    bad = [p for p in presets if p not in PRESETS]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: choose from {', '.join(PRESETS)}", param_hint="--bench")
    if not sweep:
        given = [n for n, v in (("--contexts", contexts), ("--workloads", workloads), ("--max-minutes", max_minutes),
                                ("--resume", resume or None)) if v is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)}: only with --sweep KEY=N,N,...")
    elif presets or mode:
        raise click.UsageError(f"--sweep runs its own measurements: not with "
                               f"{'--bench' if presets else '--' + str(mode)}")
    host_specs = load_or_exit(inventory, hosts, parse_data(data))  # every problem said, exit 2
    if len(host_specs) != 1:
        error(f"a window runs on one host; narrow with --host "
              f"(hosts: {', '.join(h.name for h in host_specs)})")
        sys.exit(exitcodes.INVALID)
    hs = host_specs[0]
    remote = WindowRemote(hs.name, hs.connection)
    if mode in ("abort", "restore"):
        proc = remote.agent(mode)
        if proc.returncode != 0:
            error(f"{hs.name}: {hints.complete((proc.stderr or proc.stdout).strip()[-400:], host=hs.name)}")
            sys.exit(exitcodes.FAILED)
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        if answer["action"] == "none":
            err.print(f"{hs.name}: no window is open (last: {answer.get('id') or 'none'}, state "
                      f"{answer.get('state') or '-'}); nothing changed")
            sys.exit(exitcodes.OK)
        err.print(f"{hs.name}: window {answer.get('id')}: "
                  + ("abort requested; it restores steady state" if answer["action"] == "abort"
                     else "replaying the restore from the journal"))
    elif mode == "follow":
        pass
    else:
        problems = plan_problems(hs.spec)
        if problems:
            for p in problems:
                error(f"{hs.name}: {p}")
            sys.exit(exitcodes.INVALID)
        plan = build_plan(hs.name, hs.spec, tenant, list(presets), force, healthy_timeout)
        if sweep:
            plan["sweep"] = _sweep_plan(hs, sweep, contexts, workloads, runs, max_tokens, max_minutes, resume, remote)
            if plan["sweep"] is None:
                sys.exit(exitcodes.OK)
        proc = remote.agent("start", stdin=json.dumps(plan))
        if proc.returncode != 0:
            error(f"{hs.name}: {hints.complete((proc.stderr or proc.stdout).strip()[-400:], host=hs.name)}")
            sys.exit(exitcodes.INVALID if proc.returncode == exitcodes.INVALID else exitcodes.FAILED)
        wid = json.loads(proc.stdout.strip().splitlines()[-1])["id"]
        err.print(f"{hs.name}: window {wid} ({tenant}) started as rigkit-window.service; Ctrl-C asks it to end "
                  "early (it restores), a lost connection leaves it running to its own restore")

    def on_interrupt() -> None:
        styled("Ctrl-C: asking the host to end the window early; it restores steady state "
               "(Ctrl-C again to leave it to the host)", "yellow")
        try:
            r = remote.agent("abort")
        except RemoteError as exc:  # the host not reached now: following goes on (it reconnects)
            error(f"abort failed: {exc}")
            return
        if r.returncode != 0:
            error(f"abort failed: {(r.stderr or r.stdout).strip()[-300:]}")

    old = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        journal = follow(remote, on_interrupt)
    finally:
        signal.signal(signal.SIGINT, old)
    if journal is None:
        sys.exit(exitcodes.FAILED)
    sys.exit(_report(remote, journal, out_dir, mode))

