"""``rigkit bisect`` names a planted *pair* on a converged sandbox host (issue 68; the same parts as
tests/harness/test_bisect.py, whose generations A and E it uses, in a module of its own so that the two walks run
in separate lanes).

A: HyperQwen the running resident, its context below the DFlash guard so that a draft of 8 tokens is a valid spec
value alone; E: A with HyperQwen's ``sandbox-draft`` image (tests/harness/images.py: slow only with a draft longer
than 7), ``dflash_tokens`` 8 and a new description. Neither the image nor the draft length is slow alone.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from rigkit.deploy.bisect import plan_steps

pytestmark = pytest.mark.harness
sys.path.insert(0, str(Path(__file__).resolve().parent))
import images  # noqa: E402
import sandbox_project  # noqa: E402
from test_bisect import A_DATA, PAIR_SUSPECTS, assert_back_at, e, index  # noqa: E402

rigkit = sandbox_project.rigkit


@pytest.fixture(scope="module")
def host(make_module_host):
    h = make_module_host("bp", converged=True)  # generation 1: the golden deploy
    h.quiet_automatic_jobs()
    return h


def test_a_planted_pair_is_named_as_the_pair(host):
    """A, then E: A with HyperQwen's image slow only with a draft longer than 7 tokens, ``dflash_tokens``
    8 and a new description — neither the image nor the draft length is slow alone. A bisect A..E with pairs (the
    default) takes the prefix search to the last suspect (the draft length), tries it alone (fast), then searches
    its partner among the suspects before it, and names the pair: the image and the draft length, not the
    description between them. The step with the image and the draft length but not the description is measured
    slow only because a deploy that changes HyperQwen's image restarts it (its member's ``starts_from_sha256``;
    before, nothing restarted the running container and the walk named the description). The host ends at E,
    drift clean."""
    for data in (A_DATA, e()):  # generations 2 (A) and 3 (E)
        proc = rigkit(host, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--full", data=data)
        assert proc.returncode == 0, proc.stderr[-4000:]
    bad = index(host, e())["current"]
    good = bad - 1
    running = host.run("docker inspect -f '{{range .Config.Env}}{{println .}}{{end}}' hyperqwen-single-1").stdout
    assert "DFLASH_TOKENS=8" in running.splitlines() and f"SANDBOX_TUNED_DRAFT={images.TUNED_DRAFT}" in running, running
    t0 = time.monotonic()
    proc = rigkit(host, "bisect", "-i", "inventory/sandbox.py", "--host", host.name, "--good", str(good), "--bad",
                  str(bad), "--member", "hyperqwen", data=e(), timeout=1200)
    took = time.monotonic() - t0
    err = proc.stderr
    assert proc.returncode == 0, err[-6000:]
    for name in PAIR_SUSPECTS:  # the walk's steps name what they hold
        assert name in err, err[-6000:]
    found = [ln for ln in err.splitlines() if "FOUND" in ln]
    assert len(found) == 1 and "FOUND a pair: image hyperqwen + spec hyperqwen.dflash_tokens make hyperqwen slower " \
        "together, neither alone" in found[0], err[-6000:]
    # the culprit alone was measured fast, and the pair slow: the figures behind the answer
    alone = [ln for ln in err.splitlines() if re.search(r"^\S+:   step \d+: spec hyperqwen\.dflash_tokens: ", ln)]
    pair = [ln for ln in err.splitlines()
            if re.search(r"^\S+:   step \d+: image hyperqwen, spec hyperqwen\.dflash_tokens: ", ln)]
    assert len(alone) == 1 and alone[0].endswith(": PASS"), err[-6000:]
    assert len(pair) == 1 and pair[0].endswith(": FAIL"), err[-6000:]
    deploys = len(re.findall(r": step \d+: deploying ", err))
    steps = plan_steps(len(PAIR_SUSPECTS))
    bound = steps["name"] + steps["alone"] + steps["partner"]  # the good one, the search, alone, the partner
    assert deploys <= bound, (deploys, bound, err[-6000:])
    assert f"back at generation {bad}, where the bisect started" in err, err[-3000:]
    assert_back_at(host, bad, e())
    print(f"\nbisect {good}..{bad} (a planted pair): {took:.0f} s, {deploys} deploys before the way back\n" + "\n".join(
        ln for ln in err.splitlines() if ("step " in ln and "tok/s" in ln) or " deploy(s) (" in ln))
