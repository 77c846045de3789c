"""The GPU's energy while the bench runs: joules per request, then per workload joules, average
watts, tok/J and J/token beside tok/s (issue 31; DESIGN.md "Versions and units of measure").

Source: :class:`rigkit.bench.nvml.EnergyReader` — the card's counter through NVML
(``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver loaded), else ``nvidia-smi
--query-gpu=index,power.draw --format=csv,noheader,nounits`` (:data:`rigkit.common.gpu.ENERGY_QUERY`,
parsed by :func:`rigkit.common.gpu.parse_energy`). Two methods, chosen by the first reading:

- ``counter``: the card's cumulative energy counter (J), read right before and right after each
  request; the request's joules are the difference. nvidia-smi has no field for it (every driver
  captured refuses ``total_energy_consumption``, the whole query with it): it is NVML's (issue 41).
- ``sampled``: ``power.draw`` (W) is read every ``interval_s`` by a background thread while the
  request runs, plus once at each end, and integrated by the trapezoid rule; each reading is
  stamped at the middle of its nvidia-smi call. Used when the card has no counter (no NVML library,
  NVML not starting, a card older than Volta: the reading's ``counter_unavailable`` says which).

Both measure the same quantity, the card's energy over the request: J, W = J / s, tok/J and J/token
mean the same whichever measured them (tests/unit/test_nvml.py compares them on the sandbox's model).

Idle: before the first workload :meth:`EnergyMeter.idle` measures the card's draw for a few
seconds with nothing sent; it is reported apart (``summary.json`` ``energy.idle``) and never
subtracted from a workload's joules. A request's joules include its prefill: J/token is per
completion token of the whole request.

The readings come from a callable, so the same meter reads this host's GPU (the window's bench and
sweeps, :class:`rigkit.bench.nvml.EnergyReader`) or the rig's through its agent over SSH (``rigkit bench
--host``: one ``rigkit-agent energy --serve`` session, rigkit.cli.bench).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rigkit.common import gpu

#: How long :meth:`EnergyMeter.idle` measures by default (s).
IDLE_S = 2.0
#: A workload whose average draw is within this many W (or this share of the idle draw, the
#: larger) of the idle draw did no measurable work on the GPU: its joules are not the engine's.
AT_IDLE_W, AT_IDLE_SHARE = 2.0, 0.05

METHOD_WORDS = {
    "counter": "the card's energy counter (NVML)",
    "sampled": "power.draw sampled and integrated",
}


def trapezoid_j(samples: list[tuple[float, float]]) -> float | None:
    """Joules from ``[(t_s, watts)]`` by the trapezoid rule over the samples in time order;
    None with fewer than two samples."""
    pts = sorted(samples)
    if len(pts) < 2:
        return None
    return sum((t1 - t0) * (w0 + w1) / 2.0 for (t0, w0), (t1, w1) in zip(pts, pts[1:]))


class Span:
    """One measured stretch (a request, or the idle wait): ``joules`` (J, None when it could not
    be measured), ``seconds`` (s between the readings), ``samples`` (readings used), ``note`` (why
    not, when ``joules`` is None)."""

    def __init__(self) -> None:
        self.joules: float | None = None
        self.seconds: float | None = None
        self.samples = 0
        self.note: str | None = None

    @property
    def avg_w(self) -> float | None:
        """Average draw over the span (W): joules / seconds."""
        if self.joules is None or not self.seconds:
            return None
        return self.joules / self.seconds

    def record(self) -> dict[str, Any]:
        """The request record's fields: ``energy_j`` (J), ``energy_s`` (s), ``avg_w`` (W), or
        ``energy_j`` None and ``energy_note``."""
        if self.joules is None:
            return {"energy_j": None, "energy_note": self.note}
        return {"energy_j": round(self.joules, 4), "energy_s": round(self.seconds or 0.0, 4),
                "avg_w": round(self.avg_w, 3) if self.avg_w is not None else None}


class EnergyMeter:
    """Reads the GPU's energy around each request.

    + read: returns :func:`rigkit.common.gpu.parse_energy`'s dict (never raises), optionally with
      ``source`` (what measured it) and ``counter_unavailable`` (why not the counter), as
      :class:`rigkit.bench.nvml.EnergyReader` gives them.
    + where: words for the operator naming where the readings come from (``rig over SSH``).
    + interval_s: seconds between ``power.draw`` samples (method ``sampled`` only).
    + gpu_index: the GPU to read (the rig has one).

    :attr:`method` is ``counter``, ``sampled`` or None (then :attr:`unavailable` says why), fixed
    by the first reading (:meth:`start`).
    """

    def __init__(self, read: Callable[[], dict[str, Any]], *, where: str = "this host",
                 interval_s: float = 0.25, gpu_index: int = 0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._read = read
        self.where = where
        self.interval_s = interval_s
        self.gpu_index = gpu_index
        self._clock = clock
        self._sleep = sleep
        self.method: str | None = None
        self.unavailable: str | None = None
        self.idle_span: Span | None = None
        self.source: str | None = None
        self.counter_unavailable: str | None = None
        self._started = False
        self._first: dict[str, Any] = {}

    def reading(self) -> tuple[float, float | None, float | None, str | None]:
        """One reading: ``(t_s, energy_j, power_draw_w, error)``; the figures None where the card has
        none or the query failed. ``t_s`` is the middle of the call on :attr:`clock`, except for a
        counter reading that carries the reader's own stamp (``t_s``: :class:`rigkit.bench.nvml.EnergyReader`
        stamps the host's monotonic clock as the counter is read): the seconds between two such
        stamps are the stretch the counter's difference covers, whatever the transport's latency
        (an SSH round trip) adds to the call."""
        t0 = self._clock()
        smi = self._read()
        t = (t0 + self._clock()) / 2.0
        if not self._first:
            self._first = smi
        g, why = gpu.card(smi, self.gpu_index)
        if g is None:
            return t, None, None, (why or "")[:220]
        stamp = smi.get("t_s")
        if g.get("energy_j") is not None and isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
            t = float(stamp)
        return t, g.get("energy_j"), g.get("power_draw_w"), None

    def start(self) -> str | None:
        """Take the first reading and choose the method; returns it (None: no energy here)."""
        if self._started:
            return self.method
        self._started = True
        _, energy, power, err = self.reading()
        self.source = self._first.get("source") or gpu.ENERGY_QUERY_COMMAND
        self.counter_unavailable = self._first.get("counter_unavailable")
        if energy is not None:
            self.method = "counter"
        elif power is not None:
            self.method = "sampled"
        else:
            self.unavailable = err or "the card reports no power.draw ([N/A]/[Not Supported])"
        return self.method

    @contextmanager
    def measure(self) -> Iterator[Span]:
        """Measure what runs inside the ``with`` block; the yielded :class:`Span` is filled in
        when the block ends (also when it raises)."""
        span = Span()
        if not self.start():
            span.note = f"no energy: {self.unavailable}"
            yield span
            return
        if self.method == "counter":
            t0, e0, _, err0 = self.reading()
            try:
                yield span
            finally:
                t1, e1, _, err1 = self.reading()
                span.seconds, span.samples = t1 - t0, 2
                if e0 is None or e1 is None:
                    span.note = f"energy counter not read: {err0 or err1 or 'no value'}"
                elif e1 < e0:
                    span.note = (f"energy counter went back ({e0:.1f} J to {e1:.1f} J: the "
                                 "driver was reloaded?)")
                else:
                    span.joules = e1 - e0
            return
        samples: list[tuple[float, float]] = []
        errors: list[str] = []
        stop = threading.Event()

        def take() -> None:
            t, _, w, err = self.reading()
            if w is not None:
                samples.append((t, w))
            elif err:
                errors.append(err)

        def loop() -> None:
            while not stop.wait(self.interval_s):
                take()

        take()
        t_start = samples[0][0] if samples else self._clock()
        thread = threading.Thread(target=loop, name="energy-sampler", daemon=True)
        thread.start()
        try:
            yield span
        finally:
            stop.set()
            thread.join()
            take()
            span.samples = len(samples)
            span.seconds = (samples[-1][0] - t_start) if samples else None
            span.joules = trapezoid_j(samples)
            if span.joules is None:
                span.note = f"power.draw not read: {errors[0] if errors else 'fewer than 2 samples'}"

    def idle(self, seconds: float = IDLE_S) -> Span:
        """The card's draw for ``seconds`` with nothing sent (kept as :attr:`idle_span`)."""
        with self.measure() as span:
            if self.method:
                self._sleep(seconds)
        self.idle_span = span
        return span

    def describe(self) -> dict[str, Any]:
        """The summary's ``energy`` object: ``method`` (``counter``/``sampled``/None),
        ``method_words``, ``source`` (the NVML call or the nvidia-smi command the first reading came
        from), ``counter_unavailable`` (why not the counter; None when it measured), ``where``,
        ``unavailable``, ``idle`` (``{"seconds", "joules", "avg_w"}`` or None)."""
        idle = None
        if self.idle_span is not None and self.idle_span.joules is not None:
            s = self.idle_span
            idle = {"seconds": round(s.seconds or 0.0, 3), "joules": round(s.joules or 0.0, 3),
                    "avg_w": round(s.avg_w, 2) if s.avg_w is not None else None}
        return {"method": self.method, "method_words": METHOD_WORDS.get(self.method or ""),
                "source": self.source or gpu.ENERGY_QUERY_COMMAND, "counter_unavailable": self.counter_unavailable,
                "where": self.where, "unavailable": self.unavailable, "idle": idle}

    def close(self) -> None:
        """Close the reader when it can be (:meth:`rigkit.bench.nvml.EnergyReader.close`)."""
        close = getattr(self._read, "close", None)
        if callable(close):
            close()


def summarize_energy(records: list[dict[str, Any]], idle_w: float | None,
                     method: str | None) -> dict[str, Any] | None:
    """A workload's energy from its successful request records (``energy_j``, ``energy_s``,
    ``completion_tokens``): ``joules`` (J), ``seconds`` (s), ``avg_w`` (W), ``tok_per_j``,
    ``j_per_token``, ``method``, ``requests`` (measured of the workload's successful ones),
    ``power_modelled`` (False when the average draw stayed within :data:`AT_IDLE_W` W /
    :data:`AT_IDLE_SHARE` of ``idle_w``, the idle draw: the GPU did no measurable work for these
    tokens, e.g. a model served by the CPU — the sandbox's Strata; None without an idle figure)
    and ``note``. None when no request was measured and there is no method."""
    ok = [r for r in records if r.get("ok")]
    measured = [r for r in ok if r.get("energy_j") is not None]
    if not measured:
        if method is None:
            return None
        notes = [r.get("energy_note") for r in ok if r.get("energy_note")]
        return {"joules": None, "method": method, "requests": 0,
                "note": notes[0] if notes else "no request was measured"}
    joules = sum(r["energy_j"] for r in measured)
    seconds = sum(r.get("energy_s") or 0.0 for r in measured)
    tokens = sum(r.get("completion_tokens") or 0 for r in measured)
    avg_w = joules / seconds if seconds else None
    out: dict[str, Any] = {
        "joules": round(joules, 3), "seconds": round(seconds, 3),
        "avg_w": round(avg_w, 2) if avg_w is not None else None,
        "completion_tokens": tokens,
        "tok_per_j": round(tokens / joules, 4) if joules > 0 and tokens else None,
        "j_per_token": round(joules / tokens, 4) if tokens else None,
        "method": method, "requests": len(measured), "of_requests": len(ok),
        "power_modelled": None, "note": None,
    }
    if idle_w is not None and avg_w is not None:
        at_idle = abs(avg_w - idle_w) <= max(AT_IDLE_W, AT_IDLE_SHARE * idle_w)
        out["power_modelled"] = not at_idle
        if at_idle:
            out["note"] = (f"not power-modelled: the card drew {avg_w:.1f} W, its idle level "
                           f"({idle_w:.1f} W), while these tokens were served: the work was not "
                           "on this GPU, so these joules are not the engine's")
    if len(measured) < len(ok):
        extra = f"measured {len(measured)} of {len(ok)} requests"
        out["note"] = f"{out['note']}; {extra}" if out["note"] else extra
    return out
