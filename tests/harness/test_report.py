"""``rigkit report`` on a deployed sandbox host (issue 16): after the deploy and one ``rigkit
bench`` of each member, the page shows the host, its drift state now and the bench history
chart; headless Chromium opens it from disk with no console error; the screenshot is kept in
``out/test-artefacts/report-sandbox.png``. Also the README's bench command against both
sandbox members: strata passes (quoting NOT-RUN on the tiny model, saying why), gguf-baseline
(not loaded: the resident is strata) is NOT-RUN with no request sent, never FAIL."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import sandbox_project  # noqa: E402

from rigkit.common.gpu import ENERGY_QUERY_COMMAND  # noqa: E402
from rigkit.bench.nvml import COUNTER_SOURCE  # noqa: E402

PROJECT = sandbox_project.cwd()
NAME = os.environ.get("RIGKIT_HARNESS_PREFIX", "rkt-") + "rp1"


rigkit = sandbox_project.rigkit  # rigkit(host, *args, timeout=…)


@pytest.fixture(scope="module")
def rig(make_module_host):
    host = make_module_host("rp1", converged=True)
    assert host.name == NAME
    return host


def test_readme_bench_passes_on_strata_and_is_not_run_on_the_unloaded_baseline(rig, tmp_path):
    strata = rigkit(rig, "bench", "-i", "inventory/sandbox.py", "--host", rig.name, "--member", "strata",
                    "--out", str(tmp_path / "results" / "strata"))
    assert strata.returncode == 0, strata.stdout + strata.stderr[-3000:]
    lines = strata.stdout.splitlines()
    assert lines[-2] == "result: OK"
    assert any(ln.startswith("quoting: NOT-RUN — the model has ") for ln in lines)
    summary = json.loads((tmp_path / "results" / "strata" / "summary.json").read_text())
    assert summary["preset"] == "small"
    assert {summary["workloads"][n]["status"] for n in ("chat-greedy", "chat-sampled")} == {"ok"}
    # energy (issues 31, 41): the card's counter through NVML, read by the host's agent (one `rigkit-agent energy
    # --serve` session over SSH: the real pynvml against the stand-in libnvidia-ml.so.1, whose counter is the fake
    # GPU's power model), the idle draw apart; Strata is llama.cpp on the sandbox's CPU, so its draw stays at
    # the resting level: J/token and tok/J are in the summary, marked not power-modelled, and shown as n/a
    e = summary["energy"]
    assert (e["method"], e["source"], e["counter_unavailable"]) == ("counter", COUNTER_SOURCE, None), e
    assert e["where"] == f"{rig.name} (its agent over SSH)" and e["idle"]["avg_w"] == pytest.approx(32.0, abs=1)
    assert any(ln.startswith("energy: the card's energy counter (NVML) on ") for ln in lines), lines
    keep_energy_lines(strata.stdout, "counter")
    for n in ("chat-greedy", "chat-sampled"):
        e = summary["workloads"][n]["energy"]
        assert e["tok_per_j"] > 0 and e["j_per_token"] > 0 and e["power_modelled"] is False, e
        line = next(ln for ln in lines[lines.index(next(x for x in lines if x.startswith(f"{n}: n="))):]
                    if ln.startswith("  energy: "))
        assert " · tok/J n/a (not power-modelled: " in line, line  # at the idle draw: no tok/J shown (issue 39)
    base = rigkit(rig, "bench", "-i", "inventory/sandbox.py", "--host", rig.name, "--member",
                  "gguf-baseline", "--out", str(tmp_path / "results" / "gguf"))
    assert base.returncode == 0, base.stdout + base.stderr[-3000:]
    assert ("chat-greedy: NOT-RUN — member 'gguf-baseline' is not running in llama-swap (running: "
            "strata ready)") in base.stdout
    # the resident is still the one loaded: nothing swapped it out
    assert '"strata"' in rig.run("curl -s 127.0.0.1:8080/running").stdout

    page = rigkit(rig, "report", "-i", "inventory/sandbox.py", "--results", str(tmp_path / "results"),
                  "--out", str(tmp_path / "report"))  # drift's probe, no plan: the default
    assert page.returncode == 0, page.stderr[-3000:]
    index = Path(page.stdout.strip())
    assert index == (tmp_path / "report" / "index.html")

    sys.path.insert(0, str(ROOT))
    from tests.report.browser import load, screenshot

    seen = load(index)
    assert seen.errors == [], seen.stderr[-3000:]
    assert f'data-host="{rig.name}"' in seen.dom
    for m in ("gguf-baseline", "hyperqwen", "strata"):
        assert f'data-member="{m}"' in seen.dom
    assert f'data-chart="{rig.name}/strata"' in seen.dom and "<svg" in seen.dom
    assert '<span class="status clean">clean</span>' in seen.dom  # drift now: the host is as declared
    assert "420 W (enforced 420 W" in seen.dom
    assert 'data-energy="chat-greedy"' in seen.dom and "tok/J n/a — not power-modelled" in seen.dom
    art = ROOT / "out" / "test-artefacts"
    art.mkdir(parents=True, exist_ok=True)
    screenshot(index, art / "report-sandbox.png")


def bench_energy(rig, out: Path) -> tuple[dict, str]:
    """``rigkit bench`` of Strata's chat-greedy alone (no warm-up): its summary and stdout (its energy lines
    kept in ``out/test-artefacts/bench-energy-<folder>.txt``)."""
    r = rigkit(rig, "bench", "-i", "inventory/sandbox.py", "--host", rig.name, "--member", "strata",
               "--workload", "chat-greedy", "--no-warmup", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    keep_energy_lines(r.stdout, out.name)
    return json.loads((out / "summary.json").read_text()), r.stdout


def keep_energy_lines(stdout: str, name: str) -> None:
    """The bench's energy lines, for the record (``out/test-artefacts/bench-energy-NAME.txt``)."""
    art = ROOT / "out" / "test-artefacts"
    art.mkdir(parents=True, exist_ok=True)
    (art / f"bench-energy-{name}.txt").write_text(
        "".join(ln + "\n" for ln in stdout.splitlines() if "energy" in ln or ": n=" in ln))


def assert_sampled(summary: dict, why: str) -> None:
    """The bench measured the sampled draw (power.draw in its own nvidia-smi query), saying why not the counter."""
    e = summary["energy"]
    assert (e["method"], e["source"], e["counter_unavailable"]) == ("sampled", ENERGY_QUERY_COMMAND, why), e
    assert e["idle"]["avg_w"] == pytest.approx(32.0, abs=1)  # the same resting draw the counter measured
    w = summary["workloads"]["chat-greedy"]["energy"]
    assert w["method"] == "sampled" and w["tok_per_j"] > 0 and w["joules"] > 0, w


def test_without_the_nvml_library_the_bench_samples_the_draw(rig, tmp_path):
    lib = "/usr/lib/libnvidia-ml.so.1"  # the soname link nvidia-utils ships, what pynvml loads
    rig.run(f"mv {lib} {lib}.away")
    try:
        summary, out = bench_energy(rig, tmp_path / "no-lib")
    finally:
        rig.run(f"mv {lib}.away {lib}")
    assert_sampled(summary, "NVML: NVML Shared Library Not Found (code 12)")  # pynvml's LibraryNotFound
    assert "energy: power.draw sampled and integrated (no counter: NVML: NVML Shared Library Not Found" in out


def test_on_a_board_without_a_counter_the_bench_samples_the_draw(rig, tmp_path):
    board = "/etc/fake-gpu/board.json"  # the fake GPU's board overrides (stubs/nvidia-smi)
    before = rig.run(f"cat {board}", check=False)
    kept = json.loads(before.stdout) if before.returncode == 0 else None
    body = json.dumps({**(kept or {}), "energy_counter": False})  # a card older than Volta: NVML answers 3
    rig.run(f"mkdir -p /etc/fake-gpu && printf '%s' '{body}' > {board}")
    try:
        summary, _ = bench_energy(rig, tmp_path / "no-counter")
    finally:
        rig.run(f"printf '%s' '{json.dumps(kept)}' > {board}" if kept is not None else f"rm -f {board}")
    assert_sampled(summary, "GPU 0 has no energy counter: NVML: Not Supported (code 3)")
