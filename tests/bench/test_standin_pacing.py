"""The HyperQwen stand-in's pacing (tests/harness/stubs/openai_stub.py ``paced``): its chunks keep the
engine's clock, so a late wake of the thread that writes the stream never adds up over a request.

Why it matters (docs/bench.md "Why the sandbox's runs are rarely steady"): the stand-in once slept one step
after each write, every wake's lateness joined the stream, and on the shared 2-core machine its 10 ms steps
gave 222-241 tok/s (CV 2.6-3.7%) for a modelled 250; paced, 249.1-250.9 (CV 0.1-0.2%), same machine and load.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

STUB = Path(__file__).resolve().parents[2] / "tests" / "harness" / "stubs" / "openai_stub.py"


def _stub():
    """The stub as a module (its server starts only under ``__main__``); its own argv, not pytest's."""
    argv, sys.argv = sys.argv, [str(STUB)]
    try:
        spec = importlib.util.spec_from_file_location("openai_stub_paced", STUB)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.argv = argv


STUB_MOD = _stub()


class LateClock:
    """A clock whose every sleep wakes late by the next of ``lateness`` (s), and whose every write of an
    item costs ``write_s``: what a busy host's scheduler does to the stream's writer."""

    def __init__(self, lateness: list[float], write_s: float):
        self.now, self.lateness, self.write_s, self.wakes = 100.0, list(lateness), write_s, 0

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s + self.lateness[self.wakes % len(self.lateness)]
        self.wakes += 1


@settings(max_examples=200, deadline=None)
@given(k=st.integers(1, 300), step=st.floats(0.001, 0.05),
       lateness=st.lists(st.floats(0.0, 0.02), min_size=1, max_size=50), write=st.floats(0.0, 0.0005))
def test_each_chunk_leaves_at_its_deadline_and_lateness_never_adds_up(k, step, lateness, write):
    c = LateClock(lateness, write)
    start = c.now
    times = []
    for _item in STUB_MOD.paced(range(k), step, clock=c.clock, sleep=c.sleep):
        times.append(c.now)
        c.now += write  # writing the chunk
    worst = max(lateness) + write
    for j, t in enumerate(times, 1):
        # never early, and late by at most one wake's lateness (plus a write), whatever came before
        assert t >= start + j * step - 1e-9
        assert t <= start + j * step + worst + 1e-9
    # so the stream lasts k steps, give or take one lateness: the decode figure is the modelled engine's
    assert abs((times[-1] - start) - k * step) <= worst + 1e-9


def test_a_step_of_zero_writes_as_fast_as_it_can():
    c = LateClock([0.5], 0.0)
    assert list(STUB_MOD.paced("abc", 0.0, clock=c.clock, sleep=c.sleep)) == ["a", "b", "c"]
    assert c.wakes == 0

