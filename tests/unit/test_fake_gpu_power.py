"""The sandbox's GPU models power honestly enough to test the energy path (issue 31 part 3): the
HyperQwen stand-in engine (tests/harness/stubs/openai_stub.py), registered by the runtime hook
stand-in as a container would be, reports its load; the fake ``nvidia-smi``'s draw is min(limit,
demand) while it is busy and the resting draw otherwise, and the engine's decode follows the limit
(``sqrt(min(limit, demand) / demand)``: a model, not a measurement). The bench's own meter reads the
fake through the product's parser: power.draw, sampled and integrated, as on a real card (no driver lists
an energy counter field: the fake refuses ``total_energy_consumption`` as the real tool does, issue 37).

Nothing here depends on this machine's speed: a reading "in the middle of a request" is taken while the
engine holds the request at a gate the test opens (:func:`held_mid_stream`), the sampler is known to have
read the busy draw before the request goes on, and a speed is checked only against the least time the
engine's model can take."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from rigkit.remote import free_port
from rigkit.common import gpu
from rigkit.bench.client import stream_chat
from rigkit.bench.energy import EnergyMeter

ROOT = Path(__file__).resolve().parents[2]
STUBS = ROOT / "tests" / "harness" / "stubs"
CHUNK_S = 0.04  # the engine's seconds per chunk at full speed (its ``chunk_s`` control file)
CHUNKS = 21  # a 50-token chat at DFLASH_TOKENS=7: the prefill's one token, then 20 verify steps of ~2.5 (issue 65)


@pytest.fixture
def engine(tmp_path):
    """The stand-in engine on a free port, registered with a fake GPU in ``tmp_path/gpu`` through
    the runtime hook (an OCI state and config.json naming its pid, ``FAKE_GPU_SHARE`` and a bind
    mount), with chunks of 40 ms (``chunk_s``)."""
    gpu_dir, share, control = tmp_path / "gpu", tmp_path / "share", tmp_path / "control"
    for d in (gpu_dir / "procs", share, control):
        d.mkdir(parents=True)
    (gpu_dir / "module_version").write_text("?\n")  # no driver package here: DRIVER "?" on both sides
    (control / "chunk_s").write_text(f"{CHUNK_S}\n")
    port = free_port()
    env = {**os.environ, "FAKE_GPU_SHARE": str(share), "DFLASH_TOKENS": "7"}
    proc = subprocess.Popen([sys.executable, str(STUBS / "openai_stub.py"), "--kind", "vllm", "--port", str(port),
                             "--alias", "hq", "--control-dir", str(control)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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
        line = proc.stdout.readline()  # it says so once it listens (or its stdout ends: it died)
        assert "server is listening" in line, line
        yield {"port": port, "smi": smi, "share": share, "gpu_dir": gpu_dir, "control": control}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


def chat(port: int, tokens: int = 50):
    return stream_chat(f"http://127.0.0.1:{port}/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens, "stream": True,
                        "stream_options": {"include_usage": True}})


def wait_for(cond, what: str, limit_s: float = 60.0) -> None:
    """Poll ``cond()`` until it holds; the limit only guards a hang."""
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def load(engine) -> dict:
    """The engine's own word on its load (``load.json``: busy, busy_s up to since)."""
    return json.loads((engine["share"] / "load.json").read_text())


def idle(engine) -> None:
    """Wait until the engine has recorded the end of its last stream (it does so after the last
    byte, so a client may have its answer first)."""
    wait_for(lambda: load(engine)["busy"] == 0, "the engine never said it was done")


@contextmanager
def held_mid_stream(engine):
    """A streamed chat (in a thread) that the engine holds once it has taken it (load.json says busy)
    and before its first chunk: the engine reads its ``chunk_s`` control file there, and here that file
    is a FIFO, whose read waits until the test writes it. Yields ``box``; when the block ends the chunk
    time is written (the stream goes on), and after it ``box["r"]`` is the request's result."""
    gate = engine["control"] / "chunk_s"
    chunk_s = gate.read_text()
    gate.unlink()
    os.mkfifo(gate)
    box: dict = {}
    t = threading.Thread(target=lambda: box.setdefault("r", chat(engine["port"])), daemon=True)
    t.start()
    held = False
    try:
        wait_for(lambda: load(engine)["busy"] == 1, "the engine never took the request")
        held = True
        yield box
        assert load(engine)["busy"] == 1  # still held: what the block read, it read mid-stream
    finally:
        if held:  # the engine is at its read of the FIFO, or on its way there: this write meets it
            with open(gate, "w") as f:
                f.write(chunk_s)
        tmp = gate.with_name(".chunk_s")
        tmp.write_text(chunk_s)
        os.replace(tmp, gate)
    t.join()
    idle(engine)


def draw_while(engine) -> tuple[str, object]:
    """power.draw read in the middle of a streamed request, and the request's result."""
    with held_mid_stream(engine) as box:
        mid = engine["smi"]("--query-gpu=power.draw", "--format=csv,noheader,nounits").strip()
    return mid, box["r"]


def test_the_engines_load_drives_the_draw_and_the_counter_and_the_limit_its_speed(engine):
    smi, port = engine["smi"], engine["port"]
    hook = json.loads((engine["share"] / "gpu.json").read_text())
    assert hook == {"power_limit_w": 350.0, "power_demand_w": 370.0}  # written by the hook at the start
    assert smi("--query-gpu=power.draw", "--format=csv,noheader,nounits") == "32.00\n"  # resident, idle
    mid, r = draw_while(engine)
    assert r.ok and mid == "350.00"  # busy: min(limit 350, demand 370)
    assert smi("--query-gpu=power.draw", "--format=csv,noheader,nounits") == "32.00\n"

    # the bench's meter reads the fake through the product's parser: the busy draw while the engine
    # was busy (its own busy seconds), the resting draw for the rest of the span (the fake's clock)
    def read():
        return gpu.parse_energy(smi(*gpu.ENERGY_QUERY[1:]), 0)

    meter = EnergyMeter(read, interval_s=0.05)
    assert meter.start() == "sampled"  # nvidia-smi has no energy counter field
    busy0 = load(engine)["busy_s"]
    with meter.measure() as span:
        fast = chat(port)
        idle(engine)  # its end recorded before the span's last reading
    busy_s = load(engine)["busy_s"] - busy0
    assert fast.ok and fast.completion_tokens == 50 and fast.token_chunks == CHUNKS
    assert busy_s >= CHUNKS * CHUNK_S  # the request kept the engine busy: a sleep before every chunk
    # every sample is the resident draw or the busy one: the average lies between, never above the limit
    assert 32.0 <= span.avg_w <= 350.0 and span.samples >= 2, span.record()

    if os.geteuid() != 0:
        pytest.skip("nvidia-smi -pl needs root (the fake refuses it as the real one does)")
    assert "was set to 185.00 W" in smi("-pl", "185")
    assert json.loads((engine["share"] / "gpu.json").read_text())["power_limit_w"] == 185.0  # told to the engine
    mid, _ = draw_while(engine)
    assert mid == "185.00"
    # decode at sqrt(185/370) = 0.71 of the speed: each chunk 40 ms / 0.71 = 57 ms, so the request takes
    # at least 20 x 57 ms (at full speed it would take 20 x 41 ms plus the machine's own time)
    slow = chat(port)
    assert slow.ok and slow.token_chunks == CHUNKS
    assert slow.e2e_s >= CHUNKS * CHUNK_S / (185.0 / 370.0) ** 0.5, slow.e2e_s
    idle(engine)


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
    draws: list[float | None] = []

    def read():
        got = gpu.parse_energy(smi(*gpu.ENERGY_QUERY[1:]), 0)
        draws.append(got["gpus"][0]["power_draw_w"])
        return got

    meter = EnergyMeter(read, interval_s=0.1)
    assert meter.start() == "sampled"
    with meter.measure() as span:
        with held_mid_stream(engine) as box:  # the request held until the sampler read the busy draw
            n = len(draws)  # a reading may be under way; the one after it starts with the engine busy
            wait_for(lambda: len(draws) >= n + 2, "the sampler never read the draw")
    assert box["r"].ok and 350.0 in draws[2:-1]  # a sample between the span's first and last: mid-request
    assert span.samples >= 3 and 32.0 < span.avg_w <= 350.0, span.record()
    # a board that reports no draw ({"power_draw": false} in its board.json): no energy, and why
    board = tmp_path / "no-draw.json"
    board.write_text('{"power_draw": false}')
    nodraw = raw(*gpu.ENERGY_QUERY[1:], RIGKIT_FAKE_GPU_BOARD=str(board))
    assert (nodraw.returncode, nodraw.stdout) == (0, "0, [N/A]\n")
    meter = EnergyMeter(lambda: gpu.parse_energy(nodraw.stdout, 0))
    assert meter.start() is None and meter.unavailable == "the card reports no power.draw ([N/A]/[Not Supported])"
