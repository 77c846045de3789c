"""The sandbox's GPU models power honestly enough to test the energy path (issue 31 part 3): the
HyperQwen stand-in engine (tests/harness/stubs/openai_stub.py), registered by the runtime hook
stand-in as a container would be, reports its load; the fake ``nvidia-smi``'s draw is min(limit,
demand) while it is busy and the resting draw otherwise, and the engine's decode follows the limit
(``sqrt(min(limit, demand) / demand)``: a model, not a measurement). The bench's own meter reads the
fake through the product's parser: power.draw, sampled and integrated, as on a real card (no driver lists
an energy counter field: the fake refuses ``total_energy_consumption`` as the real tool does, issue 37)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rigkit.bench.tunnel import free_port
from rigkit.host import gpu
from rigkit.host.bench.client import stream_chat
from rigkit.host.bench.energy import EnergyMeter

ROOT = Path(__file__).resolve().parents[2]
STUBS = ROOT / "tests" / "harness" / "stubs"


@pytest.fixture
def engine(tmp_path):
    """The stand-in engine on a free port, registered with a fake GPU in ``tmp_path/gpu`` through
    the runtime hook (an OCI state and config.json naming its pid, ``FAKE_GPU_SHARE`` and a bind
    mount), with chunks of 40 ms (``chunk_s``)."""
    gpu_dir, share, control = tmp_path / "gpu", tmp_path / "share", tmp_path / "control"
    for d in (gpu_dir / "procs", share, control):
        d.mkdir(parents=True)
    (gpu_dir / "module_version").write_text("?\n")  # no driver package here: DRIVER "?" on both sides
    (control / "chunk_s").write_text("0.04\n")
    port = free_port()
    env = {**os.environ, "FAKE_GPU_SHARE": str(share), "DFLASH_TOKENS": "7"}
    proc = subprocess.Popen([sys.executable, str(STUBS / "openai_stub.py"), "--kind", "vllm", "--port", str(port),
                             "--alias", "hq", "--control-dir", str(control)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({
        "process": {"args": ["/app/entrypoint.py", "single"], "env": ["FAKE_GPU_SHARE=/app/models/gpu"]},
        "root": {"path": str(tmp_path / "rootfs")},
        "mounts": [{"type": "bind", "destination": "/app/models/gpu", "source": str(share)}]}))
    henv = {**os.environ, "RIGKIT_FAKE_GPU_DIR": str(gpu_dir)}

    def smi(*args: str) -> str:
        r = subprocess.run([sys.executable, str(STUBS / "nvidia-smi"), *args], env=henv, capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    try:
        subprocess.run([sys.executable, str(STUBS / "nvidia-container-runtime-hook"), "prestart"], env=henv, check=True,
                       input=json.dumps({"id": "c1", "pid": proc.pid, "bundle": str(bundle)}), text=True, timeout=30)
        for _ in range(100):
            try:
                import requests
                requests.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except Exception:  # noqa: BLE001 - not listening yet
                time.sleep(0.1)
        yield {"port": port, "smi": smi, "share": share, "gpu_dir": gpu_dir}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def chat(port: int, tokens: int = 50):
    return stream_chat(f"http://127.0.0.1:{port}/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens, "stream": True,
                        "stream_options": {"include_usage": True}})


def draw_while(port, smi) -> tuple[str, object]:
    """power.draw read in the middle of a streamed request, and the request's result."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", chat(port)))
    t.start()
    time.sleep(0.35)
    mid = smi("--query-gpu=power.draw", "--format=csv,noheader,nounits").strip()
    t.join()
    return mid, box["r"]


def test_the_engines_load_drives_the_draw_and_the_counter_and_the_limit_its_speed(engine):
    smi, port = engine["smi"], engine["port"]
    hook = json.loads((engine["share"] / "gpu.json").read_text())
    assert hook == {"power_limit_w": 350.0, "power_demand_w": 370.0}  # written by the hook at the start
    assert smi("--query-gpu=power.draw", "--format=csv,noheader,nounits") == "32.00\n"  # resident, idle
    mid, r = draw_while(port, smi)
    assert r.ok and mid == "350.00"  # busy: min(limit 350, demand 370)
    assert smi("--query-gpu=power.draw", "--format=csv,noheader,nounits") == "32.00\n"

    # the bench's meter reads the fake through the product's parser: a busy request draws near the limit
    def read():
        return gpu.parse_energy(smi(*gpu.ENERGY_QUERY[1:]), 0)

    meter = EnergyMeter(read, interval_s=0.05)
    assert meter.start() == "sampled"  # nvidia-smi has no energy counter field
    with meter.measure() as span:
        fast = chat(port)
    assert fast.ok and fast.completion_tokens == 50
    assert 32.0 < span.avg_w <= 350.0 and span.avg_w > 200.0, span.record()  # mostly busy, never above the limit

    if os.geteuid() != 0:
        pytest.skip("nvidia-smi -pl needs root (the fake refuses it as the real one does)")
    assert "was set to 185.00 W" in smi("-pl", "185")
    assert json.loads((engine["share"] / "gpu.json").read_text())["power_limit_w"] == 185.0  # told to the engine
    mid, slow = draw_while(port, smi)
    assert mid == "185.00"
    # decode at sqrt(185/370) = 0.71 of the speed: each chunk 40 ms / 0.71 = 57 ms
    assert slow.ok and slow.decode_tps < 0.85 * fast.decode_tps, (slow.decode_tps, fast.decode_tps)


def test_the_energy_counter_field_is_refused_as_the_real_tool_does_and_the_meter_samples_the_draw(engine, tmp_path):
    smi = engine["smi"]
    env = {**os.environ, "RIGKIT_FAKE_GPU_DIR": str(engine["gpu_dir"])}

    def raw(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(STUBS / "nvidia-smi"), *args], env={**env, **extra},
                              capture_output=True, text=True, timeout=30)

    # the whole query refused for the one field no driver lists: the real tool's words, exit 2, no stderr
    r = raw("--query-gpu=index,total_energy_consumption,power.draw", "--format=csv,noheader,nounits")
    assert (r.returncode, r.stdout, r.stderr) == (2, 'Field "total_energy_consumption" is not a valid field to query.\n\n',
                                                  "")
    assert gpu.parse_energy(r.stdout, r.returncode)["state"] == "error"
    # what rigkit asks: the draw
    assert smi(*gpu.ENERGY_QUERY[1:]) == "0, 32.00\n"
    assert smi("--query-gpu=power.draw", "--format=csv,noheader") == "32.00 W\n"
    meter = EnergyMeter(lambda: gpu.parse_energy(smi(*gpu.ENERGY_QUERY[1:]), 0), interval_s=0.1)
    assert meter.start() == "sampled"
    with meter.measure() as span:
        r = chat(engine["port"])
    assert r.ok and span.samples >= 3 and 32.0 <= span.avg_w <= 350.0, span.record()
    # a board that reports no draw ({"power_draw": false} in its board.json): no energy, and why
    board = tmp_path / "no-draw.json"
    board.write_text('{"power_draw": false}')
    nodraw = raw(*gpu.ENERGY_QUERY[1:], RIGKIT_FAKE_GPU_BOARD=str(board))
    assert (nodraw.returncode, nodraw.stdout) == (0, "0, [N/A]\n")
    meter = EnergyMeter(lambda: gpu.parse_energy(nodraw.stdout, 0))
    assert meter.start() is None and meter.unavailable == "the card reports no power.draw ([N/A]/[Not Supported])"
