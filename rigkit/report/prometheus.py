"""The fleet's figures as Prometheus metrics on the control side (issue 47): ``rigkit drift --metrics
FILE`` and ``rigkit bench --metrics FILE`` write what they found into FILE, in node_exporter's textfile
format, atomically through prometheus-client's own ``write_to_textfile`` (temp file + rename), as the
agent writes the rig's parts on the host (:mod:`rigkit.host.promfile`, which the control side does not
import: its docstring has the conventions and the part each file holds). Point the control machine's node_exporter at FILE's folder
(``--collector.textfile.directory``) and name FILE ``rigkit_drift.prom`` / ``rigkit_bench.prom``
(``*.prom``: the collector reads nothing else). notes/metrics.md has the scrape config and alerts.

Labels come only from names the spec validates or rigkit's own words: ``host`` (the inventory's host
name), ``member`` and ``workload`` (spec and workload names), ``kind`` and ``severity`` (drift's fixed
vocabulary, :mod:`rigkit.drift.severity`), ``verdict`` (the bench's verdict words) — and for a bare
``rigkit bench --url`` run what it measured (:func:`url_labels`: the URL without credentials, the model
asked for). prometheus-client escapes every label value, so a name with odd characters stays one value.

**One series, one file.** node_exporter's textfile collector reads every ``*.prom`` of its folder and
gathers them into one registry: a series two files carry is gathered twice, and the exporter serves one
of them, logs ``collected metric … was collected before with the same name and label values`` and still
reports ``node_textfile_scrape_error 0`` (node_exporter 1.5.0, checked in
``tests/unit/test_textfile_writers.py``; collector/textfile.go hands every file's families to the same
``prometheus.Gatherers``). :func:`write` therefore refuses to write a file that would carry a series
another ``*.prom`` file of the folder already carries (:class:`SeriesClash`), naming both.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import write_to_textfile
from prometheus_client.parser import text_string_to_metric_families

#: The bench's verdict words (:func:`rigkit.bench.results.verdict`), one series each.
VERDICTS = ("PASS", "WARN", "FAIL", "no baseline", "not comparable", "NOT-RUN")
#: A workload's figures: (metric name, summary metric, help). Medians of the run's requests.
BENCH_FIGURES = (
    ("rigkit_bench_decode_tokens_per_second", "decode_tps", "Median decode rate of the last smoke (tok/s, tokens from usage)."),
    ("rigkit_bench_prefill_tokens_per_second", "prefill_tps", "Median prefill rate of the last smoke (tok/s)."),
    ("rigkit_bench_ttft_seconds", "ttft_s", "Median time to first token of the last smoke (s)."),
)


def drift_families(findings: Iterable[Any], codes: dict[str, int], when: float | None = None) -> list[Metric]:
    """Drift's figures per host.

    + findings: :class:`rigkit.drift.compare.Finding` (``host``, ``kind``, ``severity``)
    + codes: ``{host: exit code}`` (0 clean, 3 drift, 1 not checked; every host checked)
    + when: the probe's time (Unix time, s; default now)

    ``rigkit_drift_findings{host,kind,severity}`` (findings of that kind and severity),
    ``rigkit_drift_found{host}`` (all findings; 0 for a clean host, so the series exists before drift
    does), ``rigkit_drift_exit_code{host}`` and ``rigkit_drift_timestamp_seconds{host}``."""
    when = time.time() if when is None else when
    found = GaugeMetricFamily("rigkit_drift_findings", "Drift findings of the last probe, by kind and severity.",
                              labels=["host", "kind", "severity"])
    by = Counter((f.host, f.kind, f.severity) for f in findings)
    for (host, kind, severity), n in sorted(by.items()):
        found.add_metric([host, kind, severity], float(n))
    total = GaugeMetricFamily("rigkit_drift_found", "All drift findings of the last probe on the host.", labels=["host"])
    code = GaugeMetricFamily("rigkit_drift_exit_code", "The last probe's exit code for the host (0 clean, 3 drift, "
                             "1 not checked, 2 invalid input).", labels=["host"])
    at = GaugeMetricFamily("rigkit_drift_timestamp_seconds", "When the host was last probed (Unix time, s).",
                           labels=["host"])
    for host in sorted(codes):
        total.add_metric([host], float(sum(n for (h, _k, _s), n in by.items() if h == host)))
        code.add_metric([host], float(codes[host]))
        at.add_metric([host], float(when))
    return [found, total, code, at]


def stands_behind(energy: dict[str, Any] | None) -> bool:
    """Whether a workload's ``energy`` (:func:`rigkit.bench.energy.summarize_energy`) holds a J/token the bench
    stands behind: one was measured, and the draw was the engine's work — not ``power_modelled`` False
    (the card stayed at its idle level: the joules are its resting draw, not these tokens', and the bench
    prints ``tok/J n/a``). A figure the bench does not stand behind is left out of the metrics, never written
    (an alert on J/token would fire on the idle draw)."""
    return bool(energy) and energy.get("j_per_token") is not None and energy.get("power_modelled") is not False


def bench_families(summary: dict[str, Any], host: str | None, member: str | None) -> list[Metric]:
    """The last smoke's figures per workload, from a bench ``summary.json`` object
    (:func:`rigkit.bench.runner.build_summary`: ``timestamp`` ISO 8601, ``workloads`` {name:
    {metrics: {decode_tps: {median…}, …}, energy: {j_per_token, …}}}, ``verdicts`` {name: {verdict}}),
    labelled ``host``/``member`` (the inventory host and llama-swap member benched; for a bare ``--url``
    run, :func:`url_labels`: what it measured) and ``workload``.

    :data:`BENCH_FIGURES`, ``rigkit_bench_energy_joules_per_token`` (J/token from the card's counter or
    sampled power.draw; absent when not measured, and when the bench does not stand behind it:
    :func:`stands_behind`), ``rigkit_bench_verdict{verdict}`` (1 for the
    workload's verdict, 0 for the other :data:`VERDICTS`) and ``rigkit_bench_timestamp_seconds``.

    Speculative decoding (the workload's ``spec_decode``, :func:`rigkit.bench.metrics.spec_delta`):
    ``rigkit_bench_spec_acceptance_rate`` (accepted / drafted tokens, 0–1),
    ``rigkit_bench_spec_acceptance_length`` (tokens per verify step, the bonus token included:
    1 + accepted / drafts), ``rigkit_bench_spec_acceptance_rate_by_position{position}`` (vLLM's
    ``position`` label, 0-based) — none of them for a workload whose counters other requests moved,
    and ``rigkit_bench_spec_acceptance_mixed`` (1 for such a workload, 0 for one read clean; absent where
    nothing was read: no speculative decoding, or not scraped)."""
    host, member = host or "", member or ""
    labels = ["host", "member", "workload"]
    fams = {name: GaugeMetricFamily(name, doc, labels=labels) for name, _m, doc in BENCH_FIGURES}
    jpt = GaugeMetricFamily("rigkit_bench_energy_joules_per_token", "Energy per generated token of the last smoke "
                            "(J/token).", labels=labels)
    verdict = GaugeMetricFamily("rigkit_bench_verdict", "The last smoke's verdict (1 for the one it was).",
                                labels=labels + ["verdict"])
    at = GaugeMetricFamily("rigkit_bench_timestamp_seconds", "When the last smoke ran (Unix time, s).", labels=labels)
    spec = spec_families(labels)
    try:
        when = datetime.fromisoformat(str(summary.get("timestamp"))).timestamp()
    except ValueError:
        when = None
    verdicts = summary.get("verdicts") or {}
    for wl in sorted(summary.get("workloads") or {}):
        w = summary["workloads"][wl]
        key = [host, member, wl]
        for name, metric, _doc in BENCH_FIGURES:
            stats = (w.get("metrics") or {}).get(metric)
            if stats and stats.get("median") is not None:
                fams[name].add_metric(key, float(stats["median"]))
        if stands_behind(w.get("energy")):
            jpt.add_metric(key, float(w["energy"]["j_per_token"]))
        word = (verdicts.get(wl) or {}).get("verdict")
        for v in VERDICTS:
            verdict.add_metric(key + [v], 1.0 if v == word else 0.0)
        if when is not None:
            at.add_metric(key, when)
        add_spec(spec, key, w.get("spec_decode"))
    return [*fams.values(), jpt, verdict, at, *spec.values()]


def spec_families(labels: list[str]) -> dict[str, GaugeMetricFamily]:
    """The empty speculative-decoding families of :func:`bench_families` (and the sweep's), keyed by name."""
    return {
        "rate": GaugeMetricFamily("rigkit_bench_spec_acceptance_rate", "Speculative decoding's acceptance rate of the "
                                  "last smoke: accepted / drafted tokens (0-1).", labels=labels),
        "length": GaugeMetricFamily("rigkit_bench_spec_acceptance_length", "Speculative decoding's mean acceptance "
                                    "length of the last smoke: tokens per verify step, the bonus token included "
                                    "(1 + accepted / drafts).", labels=labels),
        "by_position": GaugeMetricFamily("rigkit_bench_spec_acceptance_rate_by_position", "Speculative decoding's "
                                         "acceptance rate of the last smoke at one draft position (0-based, vLLM's "
                                         "position label): accepted at it / drafts (0-1).",
                                         labels=labels + ["position"]),
        "mixed": GaugeMetricFamily("rigkit_bench_spec_acceptance_mixed", "1 when requests that were not the bench's "
                                   "moved the engine's counters during the workload (no acceptance series then), "
                                   "else 0.", labels=labels),
    }


def add_spec(fams: dict[str, GaugeMetricFamily], key: list[str], sd: dict[str, Any] | None) -> None:
    """Add one workload's ``spec_decode`` (None: nothing read, nothing added) to :func:`spec_families`."""
    if not sd:
        return
    fams["mixed"].add_metric(key, 1.0 if sd.get("mixed") else 0.0)
    if sd.get("mixed"):
        return
    if sd.get("acceptance_rate") is not None:
        fams["rate"].add_metric(key, float(sd["acceptance_rate"]))
    if sd.get("acceptance_length") is not None:
        fams["length"].add_metric(key, float(sd["acceptance_length"]))
    for pos, rate in (sd.get("by_position") or {}).items():
        fams["by_position"].add_metric(key + [str(pos)], float(rate))


def url_labels(url: str, model: str | None) -> tuple[str, str]:
    """``(host, member)`` labels of a bare ``rigkit bench --url`` run: what it measured — the URL as
    ``scheme://host[:port][/path]`` (credentials, query and fragment left out: a label is never a
    secret) and the model it asked for (``""``: the server's default). Two runs against different
    URLs or models are then different series, as node_exporter needs them to be."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if ":" in netloc:  # an IPv6 address
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}", model or ""


class SeriesClash(ValueError):
    """A metrics file would carry a series another ``*.prom`` file of its folder already carries
    (module docstring: node_exporter would serve one and say nothing)."""


def _series(families: Iterable[Metric]) -> set[tuple[str, tuple]]:
    return {(s.name, tuple(sorted(s.labels.items()))) for fam in families for s in fam.samples}


def clash(path: str | Path, families: list[Metric]) -> str | None:
    """Why ``families`` cannot go to ``path``, or None: the first other ``*.prom`` file of its folder
    (sorted by name) that carries one of their series (name and labels, as prometheus-client's parser
    reads that file), naming it, the series and how many more. A file that cannot be read or parsed is
    left to node_exporter (which reports it in ``node_textfile_scrape_error``)."""
    target = Path(path).absolute()
    ours = _series(families)
    for other in sorted(target.parent.glob("*.prom")):
        if other.name == target.name:
            continue
        try:
            theirs = _series(text_string_to_metric_families(other.read_text()))
        except (OSError, ValueError):
            continue
        both = sorted(ours & theirs)
        if both:
            name, labels = both[0]
            series = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"
            more = f" (and {len(both) - 1} more)" if len(both) > 1 else ""
            return (f"{path} not written: {other} already carries {series}{more}; node_exporter's textfile collector "
                    "would serve one of the two and still report node_textfile_scrape_error 0. Write these figures "
                    f"to {other} instead, or remove it")
    return None


def check_path(_ctx: Any, param: Any, value: str | None) -> str | None:
    """click callback of ``--metrics FILE``: FILE must end in ``.prom`` (node_exporter's textfile collector
    reads nothing else) and its folder must exist; else a usage error (exit 2) naming the option, the
    value and what is allowed, before any host is touched."""
    import click

    if value is None:
        return None
    if not value.endswith(".prom"):
        raise click.BadParameter(f"{value!r}: a file name ending in .prom (node_exporter's textfile collector "
                                 "reads only *.prom files), e.g. /var/lib/prometheus/node-exporter/rigkit_drift.prom",
                                 param=param)
    if not Path(value).absolute().parent.is_dir():
        raise click.BadParameter(f"{value!r}: its folder {str(Path(value).absolute().parent)!r} does not exist "
                                 "(the textfile collector's folder)", param=param)
    return value


def metrics_option(part: str):
    """The ``--metrics FILE`` option of ``rigkit {part}``."""
    import click

    return click.option("--metrics", "metrics_file", metavar="FILE", callback=check_path,
                        help=f"also write the figures as Prometheus metrics to FILE (*.prom, atomically; "
                             f"node_exporter's textfile folder, e.g. rigkit_{part}.prom; notes/metrics.md)")


def write(path: str, families: list[Metric]) -> Path:
    """Write ``families`` to ``path`` with prometheus-client's ``write_to_textfile`` (a temp file in the
    same folder renamed over it: a scrape never sees half a file) from a registry of their own (never
    the process-global one). Returns the path. Raises :class:`SeriesClash` (nothing written) when another
    ``*.prom`` file of the folder carries one of its series (:func:`clash`), OSError when it cannot be
    written."""
    fixed = list(families)
    problem = clash(path, fixed)
    if problem:
        raise SeriesClash(problem)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(type("Families", (), {"collect": lambda self: iter(fixed)})())
    write_to_textfile(str(path), reg)
    return Path(path)
