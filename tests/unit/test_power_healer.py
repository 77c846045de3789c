"""The power limit heals (issue #30 item 3): the host agent's healer (rigkit.host.power) against the
sandbox's own fake ``nvidia-smi`` (tests/harness/stubs/nvidia-smi, state in ``$RIGKIT_FAKE_GPU_DIR``),
whose ``driver_reload`` knob puts the limit back to the board's default as a module reload would.
The healer re-applies the declared limit, stands down while a window is open or the host lock is
held, and two healers at once set it once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rigkit.common import gpu
from rigkit.host import lock as host_lock
from rigkit.host import power
from rigkit.host.config import HostConfig
from tests.unit import fake_gpu

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the fake nvidia-smi sets a limit for root only")


@pytest.fixture
def rig(tmp_path, monkeypatch):
    """A fake GPU (``gpu/``), ``nvidia-smi`` on PATH (logging each ``--power-limit`` to ``pl.log``) and a
    host config rendered from the default spec (declared 420 W) with its paths in ``tmp_path``."""
    gpu_dir, data = fake_gpu.install(tmp_path, monkeypatch)
    (tmp_path / "host.json").write_text(json.dumps(data))
    monkeypatch.setenv("RIGKIT_HOST_CONFIG", str(tmp_path / "host.json"))
    return {"cfg": HostConfig(data, str(tmp_path / "host.json")), "gpu": gpu_dir, "tmp": tmp_path}


def enforced() -> float:
    return gpu.query()["gpus"][0]["power_enforced_w"]


def reload_driver(rig) -> None:
    (rig["gpu"] / "driver_reload").touch()


def pl_calls(rig) -> list[str]:
    log = rig["tmp"] / "pl.log"
    return log.read_text().splitlines() if log.exists() else []


def test_the_host_config_declares_the_spec_limit_and_the_agent_runs_the_healer_every_30_s():
    from rigkit.render.generations import declared_units
    from rigkit.render.files import AGENT_TIMERS, render, render_host_config
    from rigkit.spec.validate import spec_from_layers
    from roles.agent import TIMERS

    spec = spec_from_layers([{"paused_timers": [], "lock_files": [], "gpu_power_limit_w": 400}])
    data = json.loads(render_host_config(spec))
    assert data["power"] == {"limit_w": 400, "index": 0}
    assert data["paths"]["power_state"] == "/var/lib/rigkit/power.json"
    assert "rigkit-power.service" in data["own_units"]
    assert AGENT_TIMERS["rigkit-power"][1:] == ("power", 30) and "rigkit-power" in TIMERS
    files = render(spec)
    assert "OnUnitActiveSec=30s" in files["/etc/systemd/system/rigkit-power.timer"].text
    assert "ExecStart=/opt/rigkit/venv/bin/rigkit-agent power\n" in files["/etc/systemd/system/rigkit-power.service"].text
    assert "rigkit-power.timer" in declared_units(spec)["enabled"]


def test_the_fake_driver_reload_puts_the_limit_back_to_the_default_once(rig):
    assert enforced() == 420.0
    reload_driver(rig)
    assert enforced() == 350.0  # the board's default, as after `rmmod nvidia; modprobe nvidia`
    assert not (rig["gpu"] / "driver_reload").exists() and not (rig["gpu"] / "power_limit").exists()
    subprocess.run(["nvidia-smi", "-pl", "400"], check=True, capture_output=True)
    assert enforced() == 400.0  # the knob acted once


def test_a_driver_reload_is_healed_to_the_declared_limit_and_recorded(rig, capsys):
    reload_driver(rig)
    assert power.heal(rig["cfg"]) == 0
    assert enforced() == 420.0
    out = capsys.readouterr().out
    assert ("power: GPU 0 enforced 350 W, declared 420 W (a driver reload, an Xid reset or someone's nvidia-smi -pl); "
            "re-applied 420 W: enforced 420 W") in out
    st = json.loads((rig["tmp"] / "power.json").read_text())
    assert st["reapplies"] == 1 and st["declared_w"] == 420.0
    assert {k: st["last_reapply"][k] for k in ("from_w", "to_w", "enforced_w", "ok")} == \
        {"from_w": 350.0, "to_w": 420.0, "enforced_w": 420.0, "ok": True}
    assert st["last_check"]["result"] == "re-applied"
    assert pl_calls(rig)[-1] == "--id=0 --power-limit=420"
    assert not host_lock.state(rig["tmp"] / "rig.lock")["held"]
    # the next period: nothing to do, nothing set, the re-application kept in the record
    n = len(pl_calls(rig))
    assert power.heal(rig["cfg"]) == 0
    assert "power: GPU 0 enforces 420 W as declared" in capsys.readouterr().out and len(pl_calls(rig)) == n
    st = json.loads((rig["tmp"] / "power.json").read_text())
    assert st["last_check"]["result"] == "as declared" and st["last_reapply"]["from_w"] == 350.0


def test_someones_nvidia_smi_pl_is_healed_too(rig, capsys):
    subprocess.run(["nvidia-smi", "-pl", "300"], check=True, capture_output=True)
    assert power.heal(rig["cfg"]) == 0 and enforced() == 420.0
    assert "power: GPU 0 enforced 300 W, declared 420 W" in capsys.readouterr().out


def test_it_stands_down_while_the_lock_is_held_and_heals_once_it_is_free(rig, capsys):
    """A sweep (or a deploy, a rollback, a window) owns the limit while it holds the lock: the healer
    leaves the card as it is and says who holds it; the next period after the release heals it."""
    code = ("import sys, time; from rigkit.host.lock import try_lock; "
            f"lk = try_lock({str(rig['tmp'] / 'rig.lock')!r}, 'window w3 (hyperqwen)'); print('held', flush=True); "
            "sys.stdin.read(); lk.release()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        subprocess.run(["nvidia-smi", "-pl", "250"], check=True, capture_output=True)  # the sweep's cell
        assert power.heal(rig["cfg"]) == 0
        out = capsys.readouterr().out
        assert "power: the rig is locked by window w3 (hyperqwen) (pid" in out and "standing down" in out, out
        assert enforced() == 250.0 and pl_calls(rig) == ["-pl 420", "-pl 250"]
        st = json.loads((rig["tmp"] / "power.json").read_text())
        assert st["last_check"]["result"] == "stood down" and "last_reapply" not in st
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    assert power.heal(rig["cfg"]) == 0 and enforced() == 420.0


def test_it_stands_down_while_a_window_is_open(rig, capsys):
    (rig["tmp"] / "window.json").write_text('{"id": "w9", "state": "open"}')
    reload_driver(rig)
    assert power.heal(rig["cfg"]) == 0
    assert "power: window w9 is open" in capsys.readouterr().out and enforced() == 350.0
    (rig["tmp"] / "window.json").write_text('{"id": "w9", "state": "restored"}')
    assert power.heal(rig["cfg"]) == 0 and enforced() == 420.0


def test_two_healers_at_once_set_the_limit_once(rig):
    """Two periods that overlap (a slow nvidia-smi, a timer started by hand): one takes the lock and
    sets the limit, the other stands down or finds it set meanwhile — one ``--power-limit``."""
    reload_driver(rig)
    enforced()  # the reload happens at the next nvidia-smi run; both healers then see 350 W
    procs = [subprocess.Popen([sys.executable, "-m", "rigkit.host", "power"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert pl_calls(rig).count("--id=0 --power-limit=420") == 1, (pl_calls(rig), outs)
    said = "".join(o for o, _ in outs)
    assert said.count("re-applied 420 W") == 1, said
    # the other one stood down (the lock held), found it set meanwhile, or — started after the first
    # had finished (a loaded machine starts processes late) — found it as declared: never a second set
    assert ("standing down" in said or "as declared (set meanwhile)" in said
            or said.count("enforces 420 W as declared") == 1), said
    st = json.loads((rig["tmp"] / "power.json").read_text())
    assert st["reapplies"] == 1 and st["last_reapply"]["ok"] is True and enforced() == 420.0


def test_a_limit_that_does_not_hold_fails_the_unit_naming_what_it_reads(rig, capsys):
    """Open modules on some GPUs report success and change nothing (open-gpu-kernel-modules#483)."""
    reload_driver(rig)
    assert power.heal(rig["cfg"], apply=lambda index, watts: (True, "All done.")) == 1
    assert ("power: re-applying 420 W to GPU 0 (enforced 350 W) failed: GPU 0: power limit set to 420 W but "
            "enforced.power.limit reads 350 W") in capsys.readouterr().err
    st = json.loads((rig["tmp"] / "power.json").read_text())
    assert st["last_reapply"]["ok"] is False and st["last_check"]["result"] == "failed"
    assert not host_lock.state(rig["tmp"] / "rig.lock")["held"]


def test_a_declared_limit_outside_the_cards_range_is_not_applied(rig, capsys):
    cfg = HostConfig({**rig["cfg"].data, "power": {"limit_w": 460, "index": 0}}, "host.json")
    assert power.heal(cfg) == 1
    assert ("power: gpu_power_limit_w 460 W is outside GPU 0's limits 100–450 W (nvidia-smi "
            "power.min_limit/power.max_limit); not re-applying it (fix the spec and deploy)") in capsys.readouterr().err
    assert pl_calls(rig) == ["-pl 420"]


def test_an_unreadable_gpu_is_left_to_drift(rig, capsys):
    (rig["gpu"] / "force_mismatch").touch()
    assert power.heal(rig["cfg"], apply=lambda *_: pytest.fail("set without a reading")) == 0
    assert "power: nvidia-smi: mismatch: Failed to initialize NVML: Driver/library version mismatch" in \
        capsys.readouterr().out


def test_drift_and_the_report_show_the_last_re_application(rig):
    from rigkit.drift.run import power_healer_state
    from rigkit.report.page import healer_text

    assert healer_text(power_healer_state({}), True) == "never ran"
    reload_driver(rig)
    power.heal(rig["cfg"], now=lambda: 1764645600.0)
    data = json.loads((rig["tmp"] / "power.json").read_text())
    state = power_healer_state({"power_healer": {"exists": True, "data": data, "error": None}})
    assert state["reapplies"] == 1 and state["last_reapply"]["to_w"] == 420.0
    assert healer_text(state) == ("re-applied 420 W at 2025-12-02T03:20:00Z (enforced 350 W before; 1 in all); "
                                  "last check 2025-12-02T03:20:00Z: re-applied")
    assert healer_text(None, False) == "unknown (host not reached)"
