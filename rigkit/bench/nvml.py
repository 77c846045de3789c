"""The GPU's energy as the bench reads it: the card's cumulative counter through NVML when it has one,
else ``power.draw`` sampled through nvidia-smi (issue 41; DESIGN.md "Versions and units of measure").

Source of the counter: NVML's ``nvmlDeviceGetTotalEnergyConsumption`` (NVML API reference, "Device
Queries": ``unsigned long long`` mJ consumed since the driver was last loaded; Volta and newer), read
through NVIDIA's own binding ``nvidia-ml-py`` (``pynvml``, pinned in the agent's wheelhouse: pure Python,
ctypes to the driver's ``libnvidia-ml.so.1``). The calls, as its 13.615.71 resolves them by name:
``nvmlInit()`` → ``nvmlInitWithFlags(0)``, ``nvmlDeviceGetHandleByIndex`` → ``…_v2``,
``nvmlDeviceGetTotalEnergyConsumption``, ``nvmlShutdown``; ``nvmlErrorString`` only to word a code the
binding has no words for. Zeus/ML.ENERGY read the card's energy the same way.

Without a counter — no library (``pynvml.NVMLError_LibraryNotFound``: no driver installed), no NVML
(driver not loaded, code 9; driver/library version mismatch until a reboot, 18), a card without one
(``NVML_ERROR_NOT_SUPPORTED``, 3) — the reading is :func:`rigkit.common.gpu.query_energy`'s: ``power.draw``
in a query of its own, asking only fields every captured driver lists in ``--help-query-gpu``, sampled
and integrated by the meter (:mod:`rigkit.bench.energy`). Each reading names its method and source,
and why the counter is not used.

``rigkit-agent energy [--serve] [--index N]`` prints readings as JSON lines (:func:`main`): ``rigkit bench
--host`` keeps one ``--serve`` session open over SSH for the whole bench.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable

from rigkit.common import gpu

#: Where a counter reading comes from (the summary's ``energy.source``).
COUNTER_SOURCE = ("NVML nvmlDeviceGetTotalEnergyConsumption (nvidia-ml-py, the driver's libnvidia-ml.so.1; "
                  "mJ since the driver loaded)")


def _why(exc: Exception) -> str:
    """An NVML error in words: ``NVML: Not Supported (code 3)``; a missing library says so."""
    code = getattr(exc, "value", None)
    return f"NVML: {exc}" + (f" (code {code})" if code is not None else "")


class EnergyReader:
    """The energy reader of :class:`rigkit.bench.energy.EnergyMeter` on this host: a callable that
    returns one reading (never raises) shaped as :func:`rigkit.common.gpu.parse_energy`'s
    (``{"state", "message", "gpus": [{"index", "energy_j", "power_draw_w"}]}``) plus ``method``
    (``counter``/``sampled``), ``source`` (the call or the nvidia-smi command) and
    ``counter_unavailable`` (why not the counter, None when it is read); a counter reading also
    ``t_s``, this host's monotonic clock (s) as the counter is read, so that the meter's seconds are
    the stretch the counter covers (:meth:`rigkit.bench.energy.EnergyMeter.reading`).

    + index: the GPU (NVML and nvidia-smi number the cards alike).
    + sampled: the fallback reader (default :func:`rigkit.common.gpu.query_energy`).

    NVML is opened on the first reading and kept open (``nvmlInit`` costs up to seconds on a card
    without persistence mode: each reading a fresh init would widen the bracket around every request);
    :meth:`close` shuts it down. A counter that the card does not support (3) switches this reader to
    the sampled draw for good; any other error on a read is a failed reading (state ``error``), the
    counter kept for the next.
    """

    def __init__(self, index: int = 0, sampled: Callable[[], dict[str, Any]] | None = None) -> None:
        self.index = index
        self._sampled = sampled
        self._handle: Any = None
        self._opened = False
        self._inited = False
        self.counter_unavailable: str | None = None

    def _open(self) -> None:
        self._opened = True
        try:
            import pynvml
        except ImportError as exc:  # the agent's wheelhouse carries it; a bare checkout may not
            self.counter_unavailable = f"nvidia-ml-py is not installed ({exc})"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:  # LibraryNotFound, DriverNotLoaded, LibRmVersionMismatch, ...
            self.counter_unavailable = _why(exc)
            return
        self._inited = True
        try:
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
        except pynvml.NVMLError as exc:
            self.counter_unavailable = f"GPU {self.index}: {_why(exc)}"
            self.close()

    def __call__(self) -> dict[str, Any]:
        if not self._opened:
            self._open()
        if self._handle is not None:
            import pynvml

            try:
                stamp = time.monotonic()  # as the counter is read (the call itself takes µs to ms)
                mj = pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
            except pynvml.NVMLError_NotSupported as exc:
                self.counter_unavailable = f"GPU {self.index} has no energy counter: {_why(exc)}"
                self.close()
            except pynvml.NVMLError as exc:
                return {"state": "error", "message": _why(exc), "gpus": [], "method": "counter",
                        "source": COUNTER_SOURCE, "counter_unavailable": None}
            else:
                return {"state": "ok", "message": "", "method": "counter", "source": COUNTER_SOURCE,
                        "counter_unavailable": None, "t_s": stamp,
                        "gpus": [{"index": self.index, "energy_j": mj / 1000.0, "power_draw_w": None}]}
        return {**(self._sampled or gpu.query_energy)(), "method": "sampled", "source": gpu.ENERGY_QUERY_COMMAND,
                "counter_unavailable": self.counter_unavailable}

    def close(self) -> None:
        """Shut NVML down (``nvmlShutdown``) if this reader started it; further readings are sampled
        (``counter_unavailable`` says the reader was closed when nothing else did)."""
        self._handle = None
        if not self._inited:
            return
        self.counter_unavailable = self.counter_unavailable or "NVML shut down (the reader was closed)"
        self._inited = False
        try:
            import pynvml

            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - the driver went away meanwhile: nothing left to shut down
            pass


def main(argv: list[str]) -> int:
    """``rigkit-agent energy [--index N] [--serve]``: one reading of :class:`EnergyReader` as a JSON line;
    with ``--serve`` one reading per line read from stdin (its content ignored), until stdin closes, NVML
    opened once. Exit 0 (a failed reading is a reading: its ``state`` says so), 2 on bad arguments."""
    import argparse

    ap = argparse.ArgumentParser(prog="rigkit-agent energy", description="the GPU's energy readings as JSON lines")
    ap.add_argument("--index", type=int, default=0, help="the GPU (default 0)")
    ap.add_argument("--serve", action="store_true", help="a reading per line of stdin, until it closes")
    a = ap.parse_args(argv)
    reader = EnergyReader(a.index)
    try:
        if not a.serve:
            print(json.dumps(reader(), sort_keys=True), flush=True)
            return 0
        for _ in sys.stdin:
            print(json.dumps(reader(), sort_keys=True), flush=True)
        return 0
    finally:
        reader.close()
