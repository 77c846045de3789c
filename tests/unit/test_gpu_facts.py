"""``benchmarks/gpu_facts.sh`` (issue 31 part 4): every nvidia-smi query rigkit parses, run read-only,
the raw output saved and each parser's reading printed — here against the sandbox's fake nvidia-smi
on PATH behind a wrapper that logs every argument list it is given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rigkit.common import gpu
from rigkit.host import gpu as host_gpu

ROOT = Path(__file__).resolve().parents[2]
SETTERS = ("-pl", "--power-limit", "-pm", "--persistence-mode", "-lgc", "-rgc", "-ac", "-rac", "-r",
           "--gpu-reset", "-e", "-c", "-mig", "-lmc", "-rmc")


def test_gpu_facts_runs_every_parsed_query_read_only_and_prints_each_reading(tmp_path):
    gpu_dir = tmp_path / "gpu"
    (gpu_dir / "procs").mkdir(parents=True)
    (gpu_dir / "module_version").write_text("?\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "argv.log"
    (bin_dir / "nvidia-smi").write_text(
        f"#!/bin/sh\nprintf '%s\\n' \"$*\" >>{log}\nexec {sys.executable} {ROOT}/tests/harness/stubs/nvidia-smi \"$@\"\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RIGKIT_FAKE_GPU_DIR": str(gpu_dir),
           "RIGKIT_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "facts"
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_facts.sh"), str(out)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ran = log.read_text().splitlines()
    wanted = [" ".join(argv[1:]) for argv, _ in host_gpu.PARSED.values()] + [" ".join(a[1:]) for a in host_gpu.RAW.values()]
    assert ran == wanted  # exactly rigkit's queries, nothing else
    assert not [a for line in ran for a in line.split() if a.split("=")[0] in SETTERS]
    for name in [*host_gpu.PARSED, *host_gpu.RAW]:
        assert (out / f"{name}.out").exists() and (out / f"{name}.rc").exists()
    lines = r.stdout.splitlines()
    i = lines.index(f"--- what rigkit's parsers read ({sys.executable}) ---")
    readings = lines[i + 1:]
    assert readings[0] == f"query ({gpu.QUERY_COMMAND}; exit 0): ok"
    assert readings[1].startswith('  GPU 0: {"driver_version": "?", "index": 0, "memory_total_gib": 24.0, ')
    assert readings[2] == f"energy ({gpu.ENERGY_QUERY_COMMAND}; exit 0): ok"
    assert readings[3] == '  GPU 0: {"energy_j": null, "index": 0, "power_draw_w": 21.5}'
    assert readings[4] == "  energy method: sampled power.draw (nvidia-smi has no energy counter field)"


def test_gpu_facts_refuses_a_command_that_would_set_the_card(tmp_path, monkeypatch):
    py = tmp_path / "py"
    py.write_text(f"#!/bin/sh\nif [ \"$3\" = --commands ]; then printf 'bad\\tnvidia-smi -pl 300\\tparsed\\n'; "
                  f"else exec {sys.executable} \"$@\"; fi\n")
    py.chmod(0o755)
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_facts.sh"), str(tmp_path / "o")],
                       env={**os.environ, "RIGKIT_PYTHON": str(py)}, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (1, "gpu_facts: refusing 'nvidia-smi -pl 300': -pl would change the card\n")
