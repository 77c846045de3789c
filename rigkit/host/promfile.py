"""The rig's state as Prometheus metrics, in node_exporter's textfile format (issue 47).

node_exporter's textfile collector reads every ``*.prom`` file in the folder its
``--collector.textfile.directory`` names, at each scrape. The host config's ``metrics.textfile_dir``
(the spec's ``metrics_textfile_dir``, unset by default: then nothing is written) is that folder; each
writer writes *its part* into a file of its own, so no writer clobbers another's:

============================  ==========================================================  ===========
file                          written by                                                  part
============================  ==========================================================  ===========
``rigkit_power.prom``         the healer (``rigkit-agent power``, ``rigkit-power.timer``)  power
``rigkit_state.prom``         every agent timer job (keeper, watchdog, power) and          state
                              ``rigkit-agent generation`` (record, fail, hold, release)
``rigkit_drift.prom``         ``rigkit drift --metrics FILE`` (control side, the fleet)    drift
``rigkit_bench.prom``         ``rigkit bench --metrics FILE`` (control side); on the host: bench
                              the deploy's smoke, through ``rigkit-agent metrics bench``
============================  ==========================================================  ===========

(the control side's two go to the FILE given; :mod:`rigkit.report.prometheus` builds them with this module's
:func:`write`). Every file is written with ``prometheus_client.write_to_textfile`` (prometheus-client
0.26.0, ``prometheus_client/exposition.py``: the text goes to ``<path>.<pid>.<thread id>`` in the same
folder, then ``os.rename`` onto ``<path>`` — atomic, and a temp name that does not end in ``.prom`` is
never read by the collector), under umask 022, so the file is 0644: world-readable, never writable by
another user. No secret reaches a file: the figures come from the power record, the lock's record (its
holder's *kind*, one word of :data:`LOCK_KINDS`, never its free-text ``what``/``command``), the
generations index (numbers and times), the holds (whether one is held), bench summaries and drift
findings (counts by kind and severity).

Names and units follow Prometheus' conventions (https://prometheus.io/docs/practices/naming/): base
units (``_seconds``, ``_watts``, ``_joules``), ``_total`` for counters, ``_timestamp_seconds`` for a
time (Unix epoch, s), ``_info`` for labels-as-data (value 1). Labels: ``host`` (inventory name, control
side only: on the host, the scrape's ``instance`` names it), ``member`` and ``workload`` (spec names),
``kind`` and ``severity`` (drift's fixed words), ``result`` (the healer's fixed words). Label values are
escaped by prometheus-client's exposition (``\\``, ``"`` and newline), so any spec name stays one
value; tests/unit/test_promfile.py holds that with generated names and ``promtool check metrics``.

Host side: standard library + prometheus-client (the agent's allowed set, rigkit.render.wheelhouse).
"""

from __future__ import annotations

import calendar
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest, write_to_textfile

#: The parts and their file names (module docstring).
PARTS = ("power", "state", "drift", "bench")
#: The healer's ``last_check.result`` words (:mod:`rigkit.host.power`), one series each.
POWER_RESULTS = ("as declared", "re-applied", "failed", "stood down", "unread")
#: What kind of actor holds the host lock: the first word of its record's ``what``
#: (``"keeper: bringing strata back"`` → ``keeper``); any other word is ``other``.
LOCK_KINDS = ("deploy", "rollback", "activation", "release", "window", "sweep", "confirmation", "revert",
              "power", "keeper", "watchdog", "other")


def file_name(part: str) -> str:
    """``rigkit_<part>.prom`` for one of :data:`PARTS`; ValueError for any other part."""
    if part not in PARTS:
        raise ValueError(f"unknown metrics part {part!r} (one of {', '.join(PARTS)})")
    return f"rigkit_{part}.prom"


class _Families:
    """A collector that yields fixed metric families (prometheus-client's custom-collector
    protocol: ``collect()``), so one registry per writer holds exactly what that writer knows."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterable[Metric]:
        return iter(self.families)


def registry(families: Iterable[Metric]) -> CollectorRegistry:
    """A fresh registry (never the process-global one) holding ``families``."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Families(families))
    return reg


def text(families: Iterable[Metric]) -> str:
    """``families`` in the Prometheus text exposition format 0.0.4 (what the file holds)."""
    return generate_latest(registry(families)).decode()


def write(path: str | os.PathLike, families: Iterable[Metric]) -> Path:
    """Write ``families`` to ``path`` atomically (``write_to_textfile``: temp file + rename in the same
    folder) with mode 0644 (umask 022 while it writes); creates the folder (0755) when missing.
    Returns the path. Raises OSError when the folder or file cannot be written."""
    p = Path(path)
    old = os.umask(0o022)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(p), registry(families))
    finally:
        os.umask(old)
    return p


def textfile_dir(cfg: Any) -> Path | None:
    """The host config's ``metrics.textfile_dir`` (absolute path), or None when unset (nothing is
    written then)."""
    value = (cfg.data.get("metrics") or {}).get("textfile_dir")
    return Path(value) if value else None


def epoch(iso: str | None) -> float | None:
    """Seconds since the epoch of the host records' UTC time (``2026-12-02T03:04:05Z``,
    :func:`rigkit.common.jsonfile.iso_utc`); None for None or another shape."""
    if not iso:
        return None
    try:
        return float(calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return None


def _gauge(name: str, doc: str, value: float | None, labels: dict[str, str] | None = None) -> GaugeMetricFamily | None:
    if value is None:
        return None
    g = GaugeMetricFamily(name, doc, labels=list(labels or {}))
    g.add_metric(list((labels or {}).values()), float(value))
    return g


def power_families(state: dict[str, Any] | None) -> list[Metric]:
    """The healer's figures from its record (``paths.power_state``, :mod:`rigkit.host.power`: ``declared_w``,
    ``reapplies``, ``last_check`` {at, result, enforced_w}, ``last_reapply`` {at, ok}); ``[]`` before its
    first run.

    ``rigkit_power_limit_declared_watts``, ``rigkit_power_limit_enforced_watts`` (at the last check;
    absent when unread), ``rigkit_power_limit_reapplies_total`` (re-applications since the record began),
    ``rigkit_power_check_timestamp_seconds``, ``rigkit_power_check_result{result}`` (1 for the last
    check's result, 0 for the others of :data:`POWER_RESULTS`), ``rigkit_power_reapply_timestamp_seconds``
    and ``rigkit_power_reapply_ok`` (the last re-application; absent until one)."""
    if not state:
        return []
    check = state.get("last_check") or {}
    reapply = state.get("last_reapply") or {}
    out = [
        _gauge("rigkit_power_limit_declared_watts", "The declared GPU power limit (W, gpu_power_limit_w).",
               state.get("declared_w")),
        _gauge("rigkit_power_limit_enforced_watts", "The GPU's enforced.power.limit at the healer's last check (W).",
               check.get("enforced_w")),
        _gauge("rigkit_power_check_timestamp_seconds", "When the healer last checked the limit (Unix time, s).",
               epoch(check.get("at"))),
        _gauge("rigkit_power_reapply_timestamp_seconds", "When the healer last re-applied the limit (Unix time, s).",
               epoch(reapply.get("at"))),
        _gauge("rigkit_power_reapply_ok", "Whether the last re-application held (1) or failed (0).",
               (1.0 if reapply.get("ok") else 0.0) if reapply else None),
    ]
    c = CounterMetricFamily("rigkit_power_limit_reapplies", "Times the healer re-applied the declared power "
                            "limit (a driver reload, an Xid reset or someone's nvidia-smi -pl had changed it).")
    c.add_metric([], float(state.get("reapplies") or 0))
    out.append(c)
    if check.get("result") in POWER_RESULTS:
        r = GaugeMetricFamily("rigkit_power_check_result", "The healer's last check's result (1 for the one it was).",
                              labels=["result"])
        for word in POWER_RESULTS:
            r.add_metric([word], 1.0 if word == check["result"] else 0.0)
        out.append(r)
    return [f for f in out if f is not None]


def lock_kind(what: str | None) -> str:
    """The kind of actor of a lock record's ``what`` (:data:`LOCK_KINDS`): its first word, lower-cased,
    without a trailing ``:``; ``other`` for any word not listed (never the free text itself)."""
    word = (what or "").strip().split(" ", 1)[0].rstrip(":").lower()
    return word if word in LOCK_KINDS else "other"


def state_families(lock: dict[str, Any], window_open: bool, index: dict[str, Any],
                   holds: dict[str, dict[str, Any]]) -> list[Metric]:
    """What holds the rig and which generation runs.

    + lock: :func:`rigkit.host.lock.state` (``held``, ``holder`` {what, since, …})
    + window_open: whether a window's journal says one is open (:func:`rigkit.host.standdown.window_reason`)
    + index: the generations index (:func:`rigkit.host.generations.read_index`: ``current``, ``generations``
      [{n, time, failed?}])
    + holds: :func:`rigkit.common.holds.read_holds` (``generation`` {generation, since} when held)

    ``rigkit_lock_held`` (0/1), ``rigkit_lock_holder_info{kind}`` (1, while held),
    ``rigkit_lock_held_since_timestamp_seconds``, ``rigkit_window_open`` (0/1), ``rigkit_generation_current``
    (its number; absent before the first), ``rigkit_generation_current_timestamp_seconds``,
    ``rigkit_generations_failed`` (failed generations kept: changes put back), ``rigkit_generation_last_failed``
    and ``rigkit_generation_last_failed_timestamp_seconds`` (the newest failed one), ``rigkit_generation_hold``
    (0/1) and ``rigkit_generation_held`` (the held generation's number, while held)."""
    holder = lock.get("holder") or {}
    held = bool(lock.get("held"))
    gens = list(index.get("generations") or [])
    current = next((g for g in gens if g.get("n") == index.get("current")), None)
    failed = [g for g in gens if g.get("failed")]
    last_failed = max(failed, key=lambda g: g.get("n") or 0) if failed else None
    hold = holds.get("generation") or None
    out = [
        _gauge("rigkit_lock_held", "Whether the host lock (the host config's paths.lock) is held.", 1.0 if held else 0.0),
        _gauge("rigkit_lock_holder_info", "The kind of actor holding the host lock.", 1.0 if held else None,
               {"kind": lock_kind(holder.get("what"))}),
        _gauge("rigkit_lock_held_since_timestamp_seconds", "Since when the host lock is held (Unix time, s).",
               epoch(holder.get("since")) if held else None),
        _gauge("rigkit_window_open", "Whether a tenant window is open.", 1.0 if window_open else 0.0),
        _gauge("rigkit_generation_current", "The current generation's number.", current and current.get("n")),
        _gauge("rigkit_generation_current_timestamp_seconds", "When the current generation was recorded (Unix time, s).",
               epoch(current.get("time")) if current else None),
        _gauge("rigkit_generations_failed", "Failed generations kept on the host (changes put back).", float(len(failed))),
        _gauge("rigkit_generation_last_failed", "The newest failed generation's number (a change put back).",
               last_failed and last_failed.get("n")),
        _gauge("rigkit_generation_last_failed_timestamp_seconds", "When the newest failed generation was recorded "
               "(Unix time, s).", epoch(last_failed.get("time")) if last_failed else None),
        _gauge("rigkit_generation_hold", "Whether a hold keeps the host at a generation.", 1.0 if hold else 0.0),
        _gauge("rigkit_generation_held", "The generation a hold keeps the host at.",
               hold.get("generation") if isinstance(hold, dict) else None),
    ]
    return [f for f in out if f is not None]


def read_state(cfg: Any) -> list[Metric]:
    """:func:`state_families` from this host's files, each through its one reader (the lock's
    :func:`rigkit.host.lock.state`, :func:`rigkit.host.standdown.window_reason`, the generations index,
    :func:`rigkit.common.holds.read_holds`)."""
    from rigkit.host import generations, lock, standdown
    from rigkit.common import holds

    return state_families(lock.state(cfg.path("lock")), standdown.window_reason(cfg, "metrics") is not None,
                          generations.read_index(cfg.path("generations")), holds.read_holds(cfg.path("holds")))


def read_power(cfg: Any) -> list[Metric]:
    """:func:`power_families` from the healer's record (``paths.power_state``)."""
    from rigkit.common.jsonfile import read_object

    return power_families(read_object(cfg.path("power_state")))


READERS = {"power": read_power, "state": read_state}
#: The parts the control side hands the host as exposition text (``rigkit-agent metrics PART``, :func:`put`):
#: the deploy's smoke, whose figures are measured on the control side.
HANDED = ("bench",)
#: The most exposition text :func:`put` reads (bytes): a smoke's few members × workloads × series is ~10 KiB.
PUT_MAX_BYTES = 1 << 20


def put(cfg: Any, part: str, text: str) -> Path | None:
    """Write ``text`` (Prometheus exposition format 0.0.4, from the control side: the deploy's smoke) as this
    host's ``part`` file (one of :data:`HANDED`) in the textfile folder; None when the host config names no
    folder (nothing written).

    The text is read by prometheus-client's own parser (``prometheus_client.parser.text_string_to_metric_families``;
    the families of several texts one after the other — one per member benched — made one of each name) and
    written again through :func:`write`, so the file is what the exposition writer makes of it (atomic,
    0644) — never the bytes as sent. Raises ValueError naming what is wrong: another part, text over
    :data:`PUT_MAX_BYTES`, text the parser refuses, or a family not named ``rigkit_<part>_…`` (a part
    writes its own series only); OSError when the file cannot be written."""
    from prometheus_client.parser import text_string_to_metric_families

    if part not in HANDED:
        raise ValueError(f"metrics part {part!r} is not handed to the host (one of {', '.join(HANDED)})")
    if len(text.encode()) > PUT_MAX_BYTES:
        raise ValueError(f"{len(text.encode())} bytes of metrics, more than the {PUT_MAX_BYTES} allowed")
    try:
        parsed = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ValueError(f"not Prometheus exposition text: {exc}") from None
    by_name: dict[str, Metric] = {}  # several members' texts one after the other: one family of each name
    for fam in parsed:
        if fam.name in by_name:
            by_name[fam.name].samples.extend(fam.samples)
        else:
            by_name[fam.name] = fam
    families = list(by_name.values())
    prefix = f"rigkit_{part}_"
    foreign = sorted({f.name for f in families if not f.name.startswith(prefix)})
    if foreign:
        raise ValueError(f"series {', '.join(foreign)} not of the {part} part (names start {prefix})")
    folder = textfile_dir(cfg)
    return None if folder is None else write(folder / file_name(part), families)


def put_main(argv: list[str], stdin: Any = None) -> int:
    """``rigkit-agent metrics PART``: :func:`put` of the exposition text on stdin. Prints what it did (the file
    written, or that no folder is configured); exit 0, 2 for input :func:`put` refuses (the reason on stderr),
    1 when the file cannot be written."""
    from rigkit.host.config import ConfigError
    from rigkit.host.config import load as load_config

    if len(argv) != 1:
        print(f"usage: rigkit-agent metrics {{{','.join(HANDED)}}} < exposition text", file=sys.stderr)
        return 2
    text = (stdin or sys.stdin).read(PUT_MAX_BYTES + 1)
    try:
        path = put(load_config(), argv[0], text)
    except ConfigError as exc:
        print(f"metrics {argv[0]}: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"metrics {argv[0]}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"metrics {argv[0]}: not written: {exc}", file=sys.stderr)
        return 1
    print(f"written {path}" if path else "not written: the host config names no metrics.textfile_dir", flush=True)
    return 0


def publish(cfg: Any, *parts: str) -> list[Path]:
    """Write this host's ``parts`` (``power``, ``state``) into the textfile folder, when the host
    config names one (else nothing; returns ``[]``). Best effort: a part that cannot be read or written
    is said on stderr and skipped — metrics never fail the job that writes them. Returns the files written."""
    folder = textfile_dir(cfg)
    if folder is None:
        return []
    done = []
    for part in parts:
        try:
            done.append(write(folder / file_name(part), READERS[part](cfg)))
        except (OSError, ValueError) as exc:
            print(f"metrics: {file_name(part)} not written: {exc}", file=sys.stderr)
    return done
