"""The GPU's memory back near idle before the next tenant starts (issue #30 item 4):
:func:`rigkit.host.gpu.wait_idle` against the sandbox's own fake ``nvidia-smi``
(tests/harness/stubs/nvidia-smi, on PATH behind a wrapper; state in ``$RIGKIT_FAKE_GPU_DIR``, the board
in ``$RIGKIT_FAKE_GPU_BOARD``) with live, dead and zombie holder processes and the board's
``memory_release_s`` (a killed process's memory is freed only after the driver tore its context down);
the ``--query-compute-apps`` parser on NVIDIA's CSV format; the window's wait step and its place in the
restore. The waits run on a test clock (``clock``: time moves by the wait's own sleeps), and a killed
holder's memory is released when the test moves the fake driver's clock, so no result depends on how
fast this machine runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.common.gpu import APPS_QUERY_COMMAND, parse_apps
from rigkit.host import gpu

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "tests" / "harness" / "stubs" / "nvidia-smi"
UUID = "GPU-3c1f9b2e-7a54-4d1e-9c0b-2f6e8a913d57"  # the fake board's


# ------------------------------------------------------------------------------ the parser
def test_the_compute_apps_parser_reads_nvidias_csv_with_na_fields_and_names_with_commas():
    text = (f"{UUID}, 4242, 21600, /usr/bin/python3\n"
            f"{UUID}, 63488, [N/A], [Not Found]\n"  # a process the tool cannot account or resolve
            f"{UUID}, 77, 256, llama-server, the big one\n"  # the name is last: it may hold a comma
            f"{UUID}, [N/A], 300, [Not Found]\n")
    assert parse_apps(text, 0) == {"state": "ok", "message": "", "apps": [
        {"gpu_uuid": UUID, "pid": 4242, "used_mib": 21600.0, "name": "/usr/bin/python3"},
        {"gpu_uuid": UUID, "pid": 63488, "used_mib": None, "name": "[Not Found]"},
        {"gpu_uuid": UUID, "pid": 77, "used_mib": 256.0, "name": "llama-server, the big one"},
        {"gpu_uuid": UUID, "pid": None, "used_mib": 300.0, "name": "[Not Found]"}]}
    # with the header and the units (no noheader/nounits): the same apps
    with_units = ("gpu_uuid, pid, used_gpu_memory [MiB], process_name\n"
                  f"{UUID}, 4242, 21600 MiB, /usr/bin/python3\n{UUID}, 63488, [N/A], [Not Found]\n")
    assert [(a["pid"], a["used_mib"]) for a in parse_apps(with_units, 0)["apps"]] == [(4242, 21600.0), (63488, None)]
    assert parse_apps("", 0) == {"state": "ok", "message": "", "apps": []}  # nothing runs: nothing printed
    assert parse_apps("Failed to initialize NVML: Driver/library version mismatch", 18)["state"] == "mismatch"
    assert parse_apps("", 127) == {"state": "missing", "message": "nvidia-smi not found", "apps": []}
    assert APPS_QUERY_COMMAND == ("nvidia-smi --query-compute-apps=gpu_uuid,pid,used_gpu_memory,process_name "
                                      "--format=csv,noheader,nounits")


NAMES = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=30).map(
    str.strip).filter(bool)
APPS = st.lists(st.tuples(st.one_of(st.none(), st.integers(1, 2 ** 22)), st.one_of(st.none(), st.integers(0, 49152)),
                          NAMES), max_size=6)


@settings(max_examples=200, deadline=None)
@given(APPS, st.booleans())
def test_every_listing_nvidia_smi_can_print_reads_back_as_its_apps(apps, units):
    rows = [f"{UUID}, {'[N/A]' if pid is None else pid}, "
            f"{'[N/A]' if mib is None else str(mib) + (' MiB' if units else '')}, {name}" for pid, mib, name in apps]
    text = ("gpu_uuid, pid, used_gpu_memory [MiB], process_name\n" if units else "") + "\n".join(rows)
    got = parse_apps(text, 0)
    assert [(a["pid"], a["used_mib"], a["name"]) for a in got["apps"]] == \
        [(pid, None if mib is None else float(mib), name) for pid, mib, name in apps]


# ------------------------------------------------------------------------------ against the fake
@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake nvidia-smi on PATH with its GPU dir and board file in ``tmp_path``; returns
    ``(hold(mib) -> Popen, board(**keys), procs dir)``. Holders are killed at the end."""
    gpu_dir = tmp_path / "gpu"
    (gpu_dir / "procs").mkdir(parents=True)
    (gpu_dir / "module_version").write_text("?\n")  # no driver package here: DRIVER "?" on both sides
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nexec {sys.executable} {STUB} \"$@\"\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    board_file = tmp_path / "board.json"
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("RIGKIT_FAKE_GPU_DIR", str(gpu_dir))
    monkeypatch.setenv("RIGKIT_FAKE_GPU_BOARD", str(board_file))
    holders: list[subprocess.Popen] = []

    def hold(mib: int, argv=("sleep", "60")) -> subprocess.Popen:
        p = subprocess.Popen(list(argv))
        holders.append(p)
        (gpu_dir / "procs" / f"{p.pid}.mib").write_text(f"{mib}\n")
        return p

    def board(**keys) -> None:
        board_file.write_text(json.dumps(keys))

    try:
        yield hold, board, gpu_dir / "procs"
    finally:
        for p in holders:
            p.kill()
            p.wait()


@pytest.fixture
def clock(monkeypatch):
    """:func:`gpu.wait_idle`'s clock: time that moves only by its sleeps, each kept in ``slept``;
    ``on_sleep(n)``, when set, runs at its n-th sleep (a step of the test at a known point of the wait)."""
    c = SimpleNamespace(t=0.0, slept=[], on_sleep=None)

    def sleep(s: float) -> None:
        c.slept.append(s)
        c.t += s
        if c.on_sleep:
            c.on_sleep(len(c.slept))

    monkeypatch.setattr(gpu, "time", SimpleNamespace(monotonic=lambda: c.t, sleep=sleep))
    return c


def age_deaths(procs: Path, pids, seconds: float) -> None:
    """Move the fake driver's clock for the dead holders ``pids``: each was first seen dead (its
    ``procs/<pid>.gone``, written by the reading that saw it die) ``seconds`` earlier."""
    for pid in pids:
        gone = procs / f"{pid}.gone"
        gone.write_text("%.3f\n" % (float(gone.read_text()) - seconds))


def test_a_live_holder_times_out_with_a_message_naming_the_memory_the_ceiling_the_wait_and_the_holder(fake, clock):
    hold, _, _ = fake
    p = hold(20000)
    said: list[str] = []
    with pytest.raises(gpu.VramBusy) as exc:
        gpu.wait_idle(1.0, 512, said.append, interval_s=0.2)
    # a reading every 0.2 s, never a sleep past the timeout; it gives up at the reading at 1 s
    assert len(clock.slept) == 5 and all(0 < s <= 0.2 for s in clock.slept) and sum(clock.slept) == pytest.approx(1.0)
    assert (exc.value.seen["polls"], exc.value.seen["waited_s"]) == (6, 1.0)
    assert re.fullmatch(rf"GPU 0 memory not back near idle after 1 s \(timeout 1 s\): 20001 MiB used, "
                        rf"ceiling 512 MiB; compute apps still holding memory: pid {p.pid} sleep 20000 MiB "
                        rf"\(nvidia-smi --query-compute-apps=gpu_uuid,pid,used_gpu_memory,process_name "
                        rf"--format=csv,noheader,nounits\)", str(exc.value)), str(exc.value)
    assert exc.value.seen["used_mib"] == 20001
    assert said == [f"waiting for GPU 0 memory to come back near idle: 20001 MiB used, ceiling 512 MiB; "
                    f"held by pid {p.pid} sleep 20000 MiB"]


def test_a_killed_holders_memory_counts_until_the_boards_release_time_then_the_wait_returns(fake, clock):
    hold, board, procs = fake
    board(memory_release_s=3600)  # released only once the test moves the driver's clock an hour on (below)
    p = hold(21600)
    other = hold(300)
    for h in (p, other):
        h.kill()
        h.wait()

    def readings_done(n: int) -> None:
        if n == 2:  # two readings saw both dead (procs/<pid>.gone written by the first) and still held
            assert sorted(f.name for f in procs.iterdir()) == sorted(
                f"{h.pid}.{ext}" for h in (p, other) for ext in ("gone", "mib"))
            age_deaths(procs, (p.pid, other.pid), 3600)

    clock.on_sleep = readings_done
    said: list[str] = []
    seen = gpu.wait_idle(10, 512, said.append, interval_s=0.2)
    # the first reading saw both dead and still listed: a context being torn down
    assert seen["first_used_mib"] == 1 + 21600 + 300
    assert sorted((a["pid"], a["used_mib"], a["name"]) for a in seen["first_apps"]) == sorted(
        [(p.pid, 21600.0, "[Not Found]"), (other.pid, 300.0, "[Not Found]")])
    # held at the readings at 0 and 0.2 s, released at the one after the release time: 0.4 s
    assert (seen["polls"], seen["waited_s"], clock.slept) == (3, 0.4, [0.2, 0.2]), seen
    assert (seen["used_mib"], seen["ceiling_mib"]) == (1, 512)
    assert said[1:] == ["GPU 0 memory back near idle after 0.4 s (1 MiB used, ceiling 512 MiB)"], said
    assert list(procs.iterdir()) == []  # released: the holders' files are gone


def test_with_no_release_time_a_dead_or_zombie_holder_is_released_at_the_first_reading(fake, clock):
    hold, _, procs = fake
    dead = hold(21600)
    dead.kill()
    dead.wait()
    zombie = hold(8000, (sys.executable, "-c", "pass"))  # exits, never reaped until the end: a zombie
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # blocks until it exited; leaves it unreaped
    assert Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    said: list[str] = []
    seen = gpu.wait_idle(5, 512, said.append)
    assert (seen["polls"], seen["used_mib"], seen["first_apps"], said) == (1, 1, [], [])  # one reading: idle
    assert (seen["waited_s"], clock.slept) == (0, [])  # no wait at all
    assert list(procs.iterdir()) == []


def test_memory_above_the_ceiling_with_no_app_listed_is_not_idle(fake):
    _, board, _ = fake
    board(memory_idle_mib=700)  # e.g. a display on the card: memory the process list does not show
    with pytest.raises(gpu.VramBusy, match=r"after \d+(\.\d+)? s \(timeout 0\.5 s\): 700 MiB used, ceiling 512 MiB; "
                                           r"compute apps still holding memory: none listed \("):
        gpu.wait_idle(0.5, 512, interval_s=0.2)
    assert gpu.wait_idle(0.5, 700)["used_mib"] == 700  # at the ceiling: idle


def test_a_driver_that_cannot_answer_fails_at_once_naming_nvidia_smis_state(fake, clock, tmp_path):
    (tmp_path / "gpu" / "force_mismatch").touch()
    with pytest.raises(gpu.VramBusy, match=r"^GPU 0 memory cannot be read: nvidia-smi: mismatch: Failed to "
                                           r"initialize NVML: Driver/library version mismatch") as exc:
        gpu.wait_idle(30, 512)
    assert (exc.value.seen["polls"], clock.slept) == (1, [])  # at once: one reading, no wait
    with pytest.raises(gpu.VramBusy, match=r"^GPU 1 memory cannot be read: nvidia-smi lists no GPU 1$"):
        (tmp_path / "gpu" / "force_mismatch").unlink()
        gpu.wait_idle(30, 512, index=1)


def test_the_fake_honours_the_compute_apps_fields_asked_and_refuses_an_unknown_one(fake):
    hold, _, _ = fake
    p = hold(1234)
    run = lambda *a: subprocess.run(["nvidia-smi", *a], capture_output=True, text=True, timeout=30)  # noqa: E731
    assert run("--query-compute-apps=pid,process_name,used_gpu_memory", "--format=csv").stdout == \
        f"pid, process_name, used_gpu_memory [MiB]\n{p.pid}, sleep, 1234 MiB\n"
    assert run("--query-compute-apps=used_memory,name,gpu_uuid", "--format=csv,noheader,nounits").stdout == \
        f"1234, sleep, {UUID}\n"
    r = run("--query-compute-apps=pid,bogus", "--format=csv")
    assert (r.returncode, r.stdout) == (2, 'Field "bogus" is not a valid field to query.\n\n')


# ------------------------------------------------------------------------------ the window
def _window(tmp_path, **plan):
    from rigkit.host.journal import Journal
    from rigkit.host.window.steps import Window

    data = {"id": "W1", "steps": [], "notes": [], "results_dir": str(tmp_path / "W1"),
            "changed": {"timers": [], "proxy_stopped": True, "tenant_started": True},
            "plan": {"tenant": "hyperqwen", "tenant_vram_gib": 19.5, "timeouts": {"vram_free_s": 5},
                     "proxy_unit": "llama-swap.service", **plan}}
    return Window(Journal(data, tmp_path / "window.json")), data


def test_the_windows_vram_free_step_waits_for_idle_first_and_journals_what_it_saw(fake, clock, tmp_path):
    hold, board, procs = fake
    board(memory_release_s=3600)
    p = hold(21600)
    p.kill()
    p.wait()
    clock.on_sleep = lambda n: n == 1 and age_deaths(procs, [p.pid], 3600)  # released after the first reading
    w, data = _window(tmp_path, vram_idle={"timeout_s": 10, "idle_mib": 512, "index": 0})
    detail = w.vram_free()
    assert re.fullmatch(rf"GPU memory near idle after 0\.5 s \(1 MiB used, ceiling 512 MiB, no compute app\); "
                        rf"held at first: 21601 MiB by pid {p.pid} \[Not Found\] 21600 MiB; 24\.00 GiB free of "
                        rf"24\.00 GiB \(used 1 MiB\); hyperqwen needs 19\.5 GiB", detail), detail
    assert (data["vram_idle"]["vram-free"]["waited_s"], data["vram_idle"]["vram-free"]["polls"]) == (0.5, 2)
    assert any("waiting for GPU 0 memory to come back near idle: 21601 MiB used" in n for n in data["notes"])
    # held past the bound: the step fails with the wait's message, journalled
    clock.on_sleep = None
    hold(21600)
    w, data = _window(tmp_path, vram_idle={"timeout_s": 0.5, "idle_mib": 512, "index": 0})
    from rigkit.host.journal import StepFailed

    with pytest.raises(StepFailed, match=r"^GPU 0 memory not back near idle after \d+(\.\d+)? s \(timeout 0\.5 s\): "
                                         r"21601 MiB used"):
        w.vram_free()
    assert data["vram_idle"]["vram-free"]["used_mib"] == 21601


def test_the_restore_waits_for_the_tenants_memory_before_starting_the_proxy_and_goes_on_when_it_is_not_released(
        fake, tmp_path, monkeypatch):
    hold, _, _ = fake
    hold(18000)  # the tenant's memory, never released
    w, data = _window(tmp_path, vram_idle={"timeout_s": 0.5, "idle_mib": 512, "index": 0})
    for name in ("r_stop_tenant", "r_start_proxy", "r_resident_ready", "r_verify", "r_resume_timers"):
        monkeypatch.setattr(w, name, lambda n=name: f"{n} done")
    from rigkit.host.window import steps as steps_mod

    proxy = {"state": "inactive"}
    monkeypatch.setattr(steps_mod, "unit_state", lambda unit: proxy["state"] if unit == "llama-swap.service" else "?")
    assert w.restore() is False
    names = [(s["name"], s["status"]) for s in data["steps"]]
    assert names == [("stop-tenant", "ok"), ("vram-released", "failed"), ("start-proxy", "ok"),
                     ("resident-ready", "ok"), ("verify-resident", "ok"), ("resume-timers", "ok")]
    failed = data["steps"][1]
    assert failed["phase"] == "restore" and "GPU 0 memory not back near idle after" in failed["detail"]
    assert "compute apps still holding memory: pid " in failed["detail"] and data["state"] == "restore-failed"
    # a proxy that came back by itself (a boot, with its resident loaded): the resident's memory is not waited for
    proxy["state"] = "active"
    data["steps"] = []
    assert w.restore() is True
    assert data["steps"][1]["detail"] == "not waited: llama-swap.service is already active (its resident holds the GPU's memory)"
