"""``rigkit bench``: smoke benchmarks that count right.

Exit codes (DESIGN.md): 0 every verdict PASS, WARN or "no baseline"; 1 a FAIL verdict — a
failed workload (5xx, engine dead, stall, cut stream, wrong counts, not an event stream,
thinking ate max_tokens), a verbatim quoting FAIL, more than 15% slower than the baseline
beyond the noise of both runs (an unstable run is WARN, never FAIL: results.compare_speed) — or the target cannot be reached, or
the llama-swap member is not already running; 2 bad arguments, inventory or input files.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from contextlib import ExitStack
from typing import Any
from urllib.parse import urlsplit

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rigkit import exitcodes, paths
from rigkit.bench import llama_swap
from rigkit.bench.metrics import ACCEPTANCE_FLOOR
from rigkit.bench.nvml import EnergyReader
from rigkit.bench.workloads import PRESETS, WORKLOAD_NAMES
from rigkit.cli.common import labelled, styled
from rigkit.common import gpu
from rigkit.common.envfile import parse_env_text
from rigkit.remote import Remote, RemoteError, SSHForward
from rigkit.report import prometheus
from rigkit.report.prometheus import metrics_option

# requests and what imports it (the bench's client, runner, session, context, results) load inside the
# command: `rigkit` imports this module before pyinfra_cli gevent-patches sockets (rigkit.cli.main.main),
# and nothing may import urllib3 first (rigkit/cli/__init__.py).

REMOTE_KEY_FILE = paths.HYPERQWEN_SECRET_FILE
KEY_NAME = "VLLM_API_KEY"


class BenchAbort(Exception):
    """Stop with ``code`` and ``message`` (already worded for the operator)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_key_file(text: str, source: str) -> str:
    """The API key from an env file (``VLLM_API_KEY=...``, read by :func:`rigkit.common.envfile.parse_env_text`,
    the host side's reader) or a file holding only the key. Raises ValueError naming the key and
    ``source`` — never the value."""
    value = parse_env_text(text).get(KEY_NAME)
    if value:
        return value
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if len(lines) == 1 and "=" not in lines[0]:
        return lines[0]
    raise ValueError(f"{KEY_NAME} not found in {source}")


def _read_key_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return parse_key_file(fh.read(), path)
    except OSError as exc:
        raise BenchAbort(exitcodes.INVALID, f"--api-key-file {path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise BenchAbort(exitcodes.INVALID, f"--api-key-file: {exc}") from None


def check_member_running(base_url: str, member: str, api_key: str | None) -> str | None:
    """Whether llama-swap's ``GET /running`` lists ``member`` in state ``ready``
    (notes/llama-swap.md: ``{"running": [{"model", "state"}]}``, no side effects): None when
    it does, else the sentence saying why it is not benched (a request through :8080 would
    swap the resident out). Raises :class:`BenchAbort` (exit 1) when ``/running`` does not
    answer."""
    import requests

    try:
        running = llama_swap.running(base_url, timeout_s=10, api_key=api_key)
    except (requests.RequestException, ValueError, AttributeError):
        running = None
    if running is None:
        raise BenchAbort(exitcodes.FAILED, "llama-swap's /running did not answer; is "
                                           "llama-swap up? (nothing was benched)")
    states = {str(r.get("model")): str(r.get("state")) for r in running if isinstance(r, dict)}
    if states.get(member) != "ready":
        now = ", ".join(f"{m} {s}" for m, s in sorted(states.items())) or "nothing"
        return (f"member {member!r} is not running in llama-swap (running: {now}); "
                f"benching it through :8080 would swap the resident out — open a "
                f"window to bench it standalone")
    return None


def _getattr_path(obj: Any, *names: str) -> Any:
    for n in names:
        if obj is None:
            return None
        obj = obj.get(n) if isinstance(obj, dict) else getattr(obj, n, None)
    return obj


class AgentEnergyReader:
    """A reader for :class:`rigkit.bench.energy.EnergyMeter` that reads the host's GPU through its
    agent: one ``rigkit-agent energy --serve`` session over SSH (:mod:`rigkit.bench.nvml`) kept open for
    the whole bench, a line sent per reading and a JSON line back — the card's counter through NVML, or
    sampled ``power.draw`` where the card has none, as the reading says. NVML cannot be reached over a
    plain SSH command, and a session rather than an agent call per reading keeps each reading to one
    round trip: no SSH connection, Python start or ``nvmlInit`` (up to seconds without persistence mode)
    inside the bracket around a request, and the sampled method's 0.25 s interval holds.

    + host_name, connection: the inventory host (as the user the inventory names, no sudo: NVML's
      counter and nvidia-smi's draw need no root).
    + timeout_s: how long one reading may take.

    Started on the first reading; a reading that fails (the session ended, a timeout) is state
    ``error`` with the reason, and the next reading starts a new session. :meth:`close` ends it.
    """

    def __init__(self, host_name: str, connection: dict[str, Any], timeout_s: float = 15.0) -> None:
        self.host_name = host_name
        self.connection = connection
        self.timeout_s = timeout_s
        self._proc: Any = None
        self._lines: Any = None
        self._lock = threading.Lock()

    def _start(self) -> None:
        import queue

        self._proc = Remote(self.host_name, self.connection).popen(
            shlex.join([paths.AGENT_BIN, "energy", "--serve"]), as_root=False, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self._lines = queue.Queue()
        proc, lines = self._proc, self._lines

        def pump() -> None:
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, name="agent-energy", daemon=True).start()

    def _fail(self, why: str) -> dict[str, Any]:
        err = ""
        if self._proc is not None:
            self.close()
            try:
                err = (self._proc.stderr.read() or "").strip()[-300:]
            except (OSError, ValueError):
                pass
        self._proc = None
        return {"state": "error", "message": f"{self.host_name}: rigkit-agent energy: {why}"
                + (f": {err}" if err else ""), "gpus": []}

    def __call__(self) -> dict[str, Any]:
        import queue

        with self._lock:
            try:
                if self._proc is None:
                    self._start()
                self._proc.stdin.write("\n")
                self._proc.stdin.flush()
            except FileNotFoundError:
                return {"state": "error", "message": "ssh: command not found on the control machine", "gpus": []}
            except (BrokenPipeError, OSError, ValueError) as exc:
                return self._fail(f"the session ended ({exc})")
            try:
                line = self._lines.get(timeout=self.timeout_s)
            except queue.Empty:
                return self._fail(f"no reading within {self.timeout_s:g} s")
            if line is None:
                return self._fail(f"the session ended (exit {self._proc.wait()})")
            try:
                got = json.loads(line)
            except ValueError:
                return self._fail(f"not a reading: {line.strip()[:200]!r}")
            return got if isinstance(got, dict) else self._fail(f"not a reading: {line.strip()[:200]!r}")

    def close(self) -> None:
        """End the session (its stdin closed: the agent shuts NVML down and exits)."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: it would not go
            proc.kill()
            proc.wait()


def local_energy_reader(base_url: str):
    """``(reader, where)`` for a bare ``--url``: this machine's GPU
    (:class:`rigkit.bench.nvml.EnergyReader`: the counter, else sampled power.draw) when the URL's host is
    a loopback address (the server runs here), else ``(None, why)``: another machine's GPU cannot be
    read from here."""
    hostname = (urlsplit(base_url).hostname or "").lower()
    if hostname in ("localhost", "::1") or hostname.startswith("127."):
        return EnergyReader(), "this machine (the --url server is local)"
    return None, f"the server {hostname or base_url} is not on this machine: its GPU is not read"


def host_target(stack: ExitStack, inventory: str, host: str, member: str,
                api_key_file: str | None, console: Any) -> tuple[Any, dict[str, Any], Any, Any]:
    """Open the SSH forward to the host's llama-swap, check the member is running, read the
    host context (nvidia-smi over the same SSH) and the API key. Returns the target, the
    host context, the host's ``spec.bench`` (BenchSpec: the operator's bench defaults) and the
    energy reader (:class:`AgentEnergyReader`, closed with ``stack``); raises :class:`BenchAbort`."""
    from rigkit.bench.context import Target
    try:
        from rigkit.spec.inventory import load_hosts
    except ImportError as exc:
        raise BenchAbort(exitcodes.INVALID, f"cannot load inventories: {exc}") from None
    try:
        hosts = load_hosts(inventory, [host])
    except Exception as exc:  # noqa: BLE001 - any inventory/spec error is invalid input
        problems = getattr(exc, "problems", None)
        detail = "; ".join(str(p) for p in problems) if problems else str(exc)
        raise BenchAbort(exitcodes.INVALID, f"{inventory}: {detail}") from None
    match = [h for h in hosts if h.name == host]
    if not match:
        raise BenchAbort(exitcodes.INVALID, f"host {host!r} is not in {inventory}")
    hs = match[0]
    members = hs.spec.llama_swap.members
    if member not in members:
        raise BenchAbort(exitcodes.INVALID, f"--member {member!r}: not a llama-swap member of "
                                            f"{host} (members: {', '.join(sorted(members))})")
    port = int(hs.spec.llama_swap.port)
    ctx: dict[str, Any] = {"host": host, "member": member}
    try:
        fwd = stack.enter_context(SSHForward(hs.name, hs.connection, port))
    except RemoteError as exc:
        raise BenchAbort(exitcodes.FAILED, str(exc)) from None
    remote = Remote(hs.name, hs.connection)
    api_key = _read_key_file(api_key_file) if api_key_file else None
    is_hq = _getattr_path(members[member], "service") == "hyperqwen" or member == "hyperqwen"
    if api_key is None and is_hq:
        try:
            key_file = remote.run(f"cat {REMOTE_KEY_FILE}", as_root=True, timeout=30)
        except RemoteError as exc:  # not "no key": the host was not reached
            raise BenchAbort(exitcodes.FAILED, str(exc)) from None
        rc, out = key_file.returncode, key_file.stdout
        if rc == 0:
            try:
                api_key = parse_key_file(out, f"{host}:{REMOTE_KEY_FILE}")
            except ValueError as exc:
                labelled("warning:", f"{exc}; sending no API key", console=console)
        else:
            labelled("warning:", f"could not read {KEY_NAME} from "
                     f"{host}:{REMOTE_KEY_FILE}; sending no API key", console=console)
    not_ready = check_member_running(fwd.url, member, api_key)
    if not_ready:
        ctx["not_running"] = not_ready
    try:
        smi_proc = remote.run(gpu.QUERY_COMMAND, as_root=False, timeout=30)
    except RemoteError as exc:  # not "GPU context unknown": the host was not reached
        raise BenchAbort(exitcodes.FAILED, str(exc)) from None
    try:
        rc, out, err = smi_proc.returncode, smi_proc.stdout, smi_proc.stderr
        smi = gpu.parse_query(out if rc == 0 else out + err, rc)
        if smi["state"] == "ok":
            ctx.update(gpu.bench_context(smi))
        else:
            labelled("warning:", f"nvidia-smi on {host} failed (exit {rc}): "
                     f"{err.strip()[:200]}; GPU context unknown", console=console)
    except ValueError as exc:
        labelled("warning:", f"GPU context of {host} unknown: {exc}", console=console)
    mspec = members[member]
    for key, names in (("quantization", ("quantization",)),):
        val = _getattr_path(mspec, *names)
        if val:
            ctx[key] = val
    if is_hq:
        hq = _getattr_path(hs.spec, "hyperqwen")
        spec_mode = _getattr_path(hq, "spec") or _getattr_path(hq, "env", "SPEC")
        dft = _getattr_path(hq, "dflash_tokens") or _getattr_path(hq, "env", "DFLASH_TOKENS")
        if spec_mode:
            ctx["speculative"] = f"{spec_mode}" + (f" (DFLASH_TOKENS={dft})" if dft else "")
    target = Target(chat_url=f"{fwd.url}/v1/chat/completions",
                    aux_base=f"{fwd.url}/upstream/{member}", model=member, swap_base=fwd.url,
                    label=f"{host}/{member} via llama-swap 127.0.0.1:{port}", api_key=api_key)
    reader = AgentEnergyReader(hs.name, hs.connection)
    stack.callback(reader.close)
    return target, ctx, _getattr_path(hs.spec, "bench"), reader


@click.command("bench")
@click.option("--url", help="Base URL of an OpenAI-compatible server (e.g. http://127.0.0.1:18020).")
@click.option("-i", "--inventory", envvar="RIGKIT_INVENTORY", default="inventory/rig.py",
              show_default=True, help="pyinfra inventory (env RIGKIT_INVENTORY).")
@click.option("--host", help="Inventory host whose llama-swap member to bench (with --member).")
@click.option("--member", help="llama-swap member to bench; it must already be running (ready).")
@click.option("--workload", "workloads", multiple=True, type=click.Choice(WORKLOAD_NAMES[1:]),
              help="Workload to run (repeatable; default all but long). The warm-up always runs first "
                   "unless --no-warmup.")
@click.option("--no-warmup", is_flag=True, help="Skip the discarded warm-up (figures are then "
                                                "marked warm-up NOT done).")
@click.option("--baseline", "baseline_files", multiple=True, type=click.Path(dir_okay=False),
              help="A summary.json to compare with (repeatable): the verdict uses the first "
                   "whose context matches; speed-ups are shown against each.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Results folder (default results/bench-<run id>).")
@click.option("--results", "results_dir", default="results", show_default=True,
              envvar="RIGKIT_RESULTS", type=click.Path(file_okay=False),
              help="Where earlier runs are (env RIGKIT_RESULTS): without --baseline (or bench.baseline) each workload "
                   "is compared with the last steady comparable run there (same host and member, "
                   "context, preset, max_tokens, power limit; an unstable run is never the baseline), named in the output.")
@click.option("--repeat-unstable", type=click.IntRange(0, 5), default=2, show_default=True,
              envvar="RIGKIT_BENCH_REPEAT_UNSTABLE",
              help="Measure a workload again, up to this many more times, when its decode "
                   "(quoting: prefill) tok/s CV is above 10% (still unstable: WARN, never FAIL on "
                   "speed) or it reads slower than the baseline beyond the noise (a FAIL must "
                   "hold when measured again).")
@click.option("--context", "context_file", type=click.Path(dir_okay=False),
              help="JSON object of context values (gpu, driver, power_limit_w, quantization, "
                   "speculative…) for a bare --url; overrides what was measured.")
@click.option("--model", help="model field to send (default: the server's first model, or "
                              "the member).")
@click.option("--api-key-file", type=click.Path(dir_okay=False),
              help=f"File holding {KEY_NAME}=... (or just the key); sent as a bearer token, "
                   f"never printed.")
@click.option("--preset", type=click.Choice(["auto", *PRESETS]), default="auto", show_default=True,
              help="Operator settings: rig (29k quoting, thinking budgets, 3 repetitions) or "
                   "small (tiny CPU servers). auto: rig when the server's context fits it.")
@click.option("--quoting-tokens", type=click.IntRange(min=50), help="Quoting prompt size in tokens.")
@click.option("--max-tokens", type=click.IntRange(min=1), help="max_tokens for chat prompts.")
@click.option("--stall-timeout", type=click.FloatRange(min=0.05),
              help="Seconds without data before a stream counts as stalled [default: the "
                   "host's bench.stall_timeout_s, else 120].")
@click.option("--no-energy", is_flag=True,
              help="Do not read the GPU's energy (the card's counter through NVML, else nvidia-smi power.draw "
                   "sampled and integrated) nor "
                   "its idle draw before the run.")
@click.option("--health-budget", type=click.FloatRange(min=0), default=120.0, show_default=True,
              help="Seconds to wait for a server that is loading its model (HTTP 503 Loading "
                   "model) or asks to retry later (429/503 Retry-After) before the workload "
                   "fails as loading/rate-limited (never as a dead engine).")
@click.option("--acceptance-floor", type=click.FloatRange(0.0, 1.0), default=ACCEPTANCE_FLOOR, show_default=True,
              help="The long workload (--workload long): a window of its generation whose speculative-decoding "
                   "acceptance rate (accepted / drafted tokens, 0-1) falls below this is a WARN naming the window.")
@metrics_option("bench")
def bench(url, inventory, host, member, workloads, no_warmup, baseline_files, out_dir,
          results_dir, repeat_unstable, context_file, model, api_key_file, preset, quoting_tokens,
          max_tokens, stall_timeout, no_energy, health_budget, acceptance_floor, metrics_file):
    """Smoke-bench a served model: tokens from usage, warm first, thinking-aware.

    Either --url URL, or -i INVENTORY --host NAME --member NAME (through an SSH forward to the
    host's llama-swap). Writes requests.jsonl, summary.json and chart.png to --out. Exit 0 OK,
    1 a FAIL verdict (failed workload, verbatim quoting FAIL, >15% slower than baseline) or an
    unreachable target, 2 bad arguments.
    """
    if bool(url) == bool(host or member):
        raise click.UsageError("give either --url, or --host and --member (with -i)")
    if not url and not (host and member):
        raise click.UsageError("--host and --member go together")

    console = Console(stderr=True, markup=False, soft_wrap=True)  # text as it is, a line whole in a pipe; colour from styles (rigkit.cli.common)
    try:
        code = _run(console, url, inventory, host, member, list(workloads), no_warmup,
                    list(baseline_files), out_dir, context_file, model, api_key_file, preset,
                    quoting_tokens, max_tokens, stall_timeout, health_budget, no_energy,
                    results_dir, repeat_unstable, metrics_file=metrics_file, acceptance_floor=acceptance_floor)
    except BenchAbort as exc:
        click.echo(f"rigkit bench: {exc}", err=True)
        sys.exit(exc.code)
    sys.exit(code)


def _not_running(console, target, host_ctx, workloads, no_warmup, out_dir, preset_name,
                 metrics=(None, None, None)) -> int:
    """Every workload NOT-RUN because the member is not loaded: no request reaches it (any
    ``/upstream/<member>`` request would make llama-swap load it). Writes the results folder
    all the same (the report shows the attempt) and returns 0."""
    from rigkit.bench.runner import new_run_id, report_lines
    from rigkit.bench.session import not_run_summary, workload_names
    from rigkit.report.chart import write_outputs

    why = host_ctx.pop("not_running")
    run_id = new_run_id()
    out_dir = out_dir or os.path.join("results", f"bench-{run_id}")
    os.makedirs(out_dir, exist_ok=True)
    open(os.path.join(out_dir, "requests.jsonl"), "a", encoding="utf-8").close()
    labelled("NOT-RUN:", why, console=console)
    summary = not_run_summary(target, host_ctx, workload_names(workloads, not no_warmup), why,
                              preset_name, run_id=run_id)
    written = write_outputs(out_dir, summary, [])
    for line in report_lines(summary):
        click.echo(line)
    click.echo(f"wrote {written['requests']}, {written['summary']}, {written['chart']}")
    return exitcodes.combine(summary["exit_code"], _write_metrics(summary, *metrics))


def _run(console, url, inventory, host, member, workloads, no_warmup, baseline_files, out_dir,
         context_file, model, api_key_file, preset_name, quoting_tokens, max_tokens,
         stall_timeout, health_budget=120.0, no_energy=False, results_dir="results",
         repeat_unstable=2, metrics_file=None, acceptance_floor=None) -> int:
    from rigkit.bench.context import Target, load_context_file
    from rigkit.bench.results import find_baselines, load_baseline
    from rigkit.bench.runner import report_lines
    from rigkit.bench.session import BenchSession, TargetUnreachable
    from rigkit.report.chart import write_outputs

    try:
        baselines = [load_baseline(p) for p in baseline_files]
        extra_ctx = load_context_file(context_file) if context_file else {}
    except ValueError as exc:
        raise BenchAbort(exitcodes.INVALID, str(exc)) from None
    with ExitStack() as stack:
        if url:
            base = url.rstrip("/")
            if base.endswith("/v1"):
                base = base[:-3]
            key = _read_key_file(api_key_file) if api_key_file else None
            target = Target(chat_url=f"{base}/v1/chat/completions", aux_base=base, label=base,
                            api_key=key)
            host_ctx: dict[str, Any] = {}
            spec_bench = None
            read_energy, where = local_energy_reader(base)
            if read_energy is not None:
                stack.callback(read_energy.close)
        else:
            target, host_ctx, spec_bench, read_energy = host_target(stack, inventory, host, member,
                                                                    api_key_file, console)
            where = f"{host} (its agent over SSH)"
            if host_ctx.get("not_running"):
                return _not_running(console, target, host_ctx, workloads, no_warmup, out_dir,
                                    preset_name, metrics=(metrics_file, host, member))
        if spec_bench is not None and not baselines and _getattr_path(spec_bench, "baseline"):
            try:
                baselines = [load_baseline(spec_bench.baseline)]
            except ValueError as exc:
                raise BenchAbort(exitcodes.INVALID, f"bench.baseline: {exc}") from None
        if model:
            target.model = model
        context = {k: v for k, v in host_ctx.items() if v is not None}
        if url:
            context["target"] = target.label  # a bare --url: its runs are compared by URL
        context.update(extra_ctx)
        session = BenchSession(
            target, settings=spec_bench.model_dump() if spec_bench is not None else None,
            preset=preset_name, workloads=workloads, warmup=not no_warmup,
            quoting_tokens=quoting_tokens, max_tokens=max_tokens, stall_timeout_s=stall_timeout,
            health_budget_s=health_budget, repeat_unstable=repeat_unstable, baselines=baselines,
            acceptance_floor=ACCEPTANCE_FLOOR if acceptance_floor is None else acceptance_floor, context=context, say=lambda text: console.print(text, highlight=False))
        out_dir = out_dir or os.path.join("results", f"bench-{session.run_id}")
        if not baselines:  # the last comparable run of this member, per workload (verdict)
            session.baselines = find_baselines(results_dir, exclude=out_dir)
        try:
            session.prepare()
        except TargetUnreachable as exc:
            raise BenchAbort(exitcodes.FAILED, str(exc)) from None
        console.print(f"bench {target.label} · run {session.run_id} · results in {out_dir}")
        if no_energy:
            read_energy, where = None, "not asked (--no-energy)"
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=False) as prog:
            task = prog.add_task("requests", total=session.total_requests)
            done_before: dict[str, int] = {}

            def progress(name: str, done: int, n: int) -> None:
                done_before[name] = done
                prog.update(task, completed=sum(done_before.values()),
                            description=f"{name} {done}/{n}")

            def warn(text: str) -> None:
                styled(text, "bold yellow", console=console)

            summary = session.run(out_dir, read_energy=read_energy, where=where,
                                  energy_unavailable=where, progress=progress, warn=warn)
        paths = write_outputs(out_dir, summary, session.baselines)
    for line in report_lines(summary):
        click.echo(line)
    click.echo(f"wrote {paths['requests']}, {paths['summary']}, {paths['chart']}")
    if url:  # a bare --url run is labelled by what it measured
        host, member = prometheus.url_labels(base, target.model)
    return exitcodes.combine(summary["exit_code"], _write_metrics(summary, metrics_file, host, member))


def _write_metrics(summary, metrics_file, host, member) -> int:
    """``--metrics FILE``: the run's figures per host, member and workload (:mod:`rigkit.report.prometheus`).
    Returns 0, or 1 (said on stderr) when another ``*.prom`` file of the folder already carries one of
    its series (:class:`rigkit.report.prometheus.SeriesClash`: nothing written)."""
    if metrics_file:
        try:
            click.echo(f"wrote {prometheus.write(metrics_file, prometheus.bench_families(summary, host, member))}")
        except prometheus.SeriesClash as exc:
            click.echo(f"rigkit bench: {exc}", err=True)
            return exitcodes.FAILED
    return 0
