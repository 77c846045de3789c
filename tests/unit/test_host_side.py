"""The host side (rigkit/host/): the one host config, the one host lock, and the
one-of-each readers (env files, JSON files, nvidia-smi, client connections, "is a window open")."""

from __future__ import annotations

import ast
import json
import re
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rigkit.spec.layers import validate_layers
from rigkit.common import busy, net
from rigkit.host import busy as host_busy
from rigkit.host import net as host_net
from rigkit.common import envfile, gpu, jsonfile
from rigkit.common import lock as lock_record
from rigkit.host import lock as host_lock
from rigkit.host.config import ConfigError, HostConfig, load
from rigkit.common.journal import expected_deviations, is_open, read_journal

ROOT = Path(__file__).resolve().parents[2]
HOST = ROOT / "rigkit" / "host"


def test_no_host_module_names_a_port_or_a_rig_path_in_code():
    """Ports and paths come from the host config; docstrings may describe the rig's defaults."""
    offenders = []
    for path in sorted(HOST.rglob("*.py")):
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and id(node) not in docs:
                v = node.value
                if v in (8080, 18020, 18030, 18040) or (isinstance(v, str) and any(
                        p in v for p in ("8080", "/var/lib/rigkit", "/srv/models", "/opt/rigkit", "/etc/llama-swap",
                                         "/etc/rigkit/secrets"))):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {v!r}")
    assert not offenders, "\n".join(offenders)


# ------------------------------------------------------------------------------ host config
def test_the_rendered_host_config_is_what_the_host_side_reads(tmp_path, monkeypatch):
    from rigkit.render.files import render

    spec = validate_layers([{"llama_swap": {"port": 8090}, "paused_timers": ["agent-sync.timer"],
                                 "lock_files": ["/run/gpu-busy"], "vram_idle_mib": 300}])
    files = render(spec)
    f = files["/etc/rigkit/host.json"]
    assert (f.mode, f.owner) == ("0644", "root:root")
    (tmp_path / "host.json").write_text(f.text)
    monkeypatch.setenv("RIGKIT_HOST_CONFIG", str(tmp_path / "host.json"))
    cfg = load()
    assert cfg.proxy_url == "http://127.0.0.1:8090" and cfg.proxy_port == 8090
    assert cfg.resident == "strata"
    assert cfg.get("members", "strata", "role") == "resident"
    assert cfg.get("watchdog", "members") == ["hyperqwen"]
    assert cfg.get("paused_timers") == ["agent-sync.timer"] and cfg.get("lock_files") == ["/run/gpu-busy"]
    assert "rigkit-keeper.service" in cfg.own_units and "rigkit-window.service" in cfg.own_units
    assert cfg.path("lock") == Path("/var/lib/rigkit/rig.lock")
    assert cfg.vram_idle == (60.0, 300.0, 0)  # (timeout_s, idle_mib, index) for rigkit.host.gpu.wait_idle
    assert "VLLM_API_KEY=" not in f.text and "HF_TOKEN=" not in f.text  # paths of the secret files only


def test_a_missing_or_foreign_host_config_is_a_config_error_naming_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"host.json: no host config \(the deploy renders it"):
        load(tmp_path / "host.json")
    (tmp_path / "host.json").write_text('{"version": 9}')
    with pytest.raises(ConfigError, match="not a version-1 rigkit host config"):
        load(tmp_path / "host.json")
    with pytest.raises(ConfigError, match=r"x.json: no `paths`"):
        HostConfig({"version": 1}, "x.json").path("lock")


# ------------------------------------------------------------------------------ the host lock
def test_the_lock_refuses_a_second_taker_naming_the_holder(tmp_path):
    path = tmp_path / "rig.lock"
    first = host_lock.RigLock(path, "window 1", command="rigkit-agent window run")
    first.acquire()
    try:
        rec = json.loads(path.read_text())
        assert rec["what"] == "window 1" and rec["pid"] == os.getpid() and rec["command"] == "rigkit-agent window run"
        st = host_lock.state(path)
        assert st["held"] and st["holder"]["what"] == "window 1"
        with pytest.raises(host_lock.LockHeld, match=r"the rig is locked by window 1 \(pid \d+, since .*: rigkit-agent window run\)"):
            host_lock.RigLock(path, "activation").acquire()
        assert host_lock.try_lock(path, "keeper") is None
    finally:
        first.release()
    assert path.read_text() == "" and not host_lock.state(path)["held"]
    with host_lock.RigLock(path, "activation") as second:
        assert second.warnings == []


def test_a_holder_killed_with_sigkill_is_reclaimed_with_a_warning(tmp_path):
    path = tmp_path / "rig.lock"
    code = ("import sys; from rigkit.host.lock import RigLock; "
            f"lk = RigLock({str(path)!r}, 'window 7'); lk.acquire(); print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)  # holds until killed
    assert proc.stdout.readline().strip() == "held"
    with pytest.raises(host_lock.LockHeld, match="window 7"):
        host_lock.RigLock(path, "activation").acquire()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    st = host_lock.state(path)
    assert not st["held"] and st["stale"]["what"] == "window 7"
    lock = host_lock.RigLock(path, "activation")
    warnings = lock.acquire()
    try:
        assert len(warnings) == 1 and "reclaimed the rig lock from window 7" in warnings[0]
        assert "its pid is gone" in warnings[0]
    finally:
        lock.release()


def test_util_linux_flock_sees_the_same_lock(tmp_path):
    """The deploy's fact reads the lock with ``flock -n`` (util-linux): the same kernel lock."""
    path = tmp_path / "rig.lock"
    with host_lock.RigLock(path, "activation"):
        assert subprocess.run(["flock", "-n", "-s", str(path), "true"]).returncode == 1
    assert subprocess.run(["flock", "-n", "-s", str(path), "true"]).returncode == 0
    assert lock_record.parse_state(False, '{"what": "window 3", "pid": 1}')["stale"]["what"] == "window 3"
    assert lock_record.parse_state(True, "garbage") == {"held": True, "holder": None, "stale": None}


def test_two_takers_at_once_have_exactly_one_winner(tmp_path):
    path = tmp_path / "rig.lock"
    code = ("import sys; from rigkit.host.lock import RigLock, LockHeld\n"
            f"l = RigLock({str(path)!r}, sys.argv[1])\n"
            "try:\n    l.acquire(); print('won', flush=True); sys.stdin.read()\n"
            "except LockHeld as e:\n    print('lost:', e, flush=True)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, f"taker {i}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=ROOT) for i in range(4)]
    outs = [p.stdout.readline().strip() for p in procs]  # the winner holds the lock until every taker has said
    for p in procs:
        p.stdin.close()
        p.wait(timeout=30)
    assert sum(o == "won" for o in outs) == 1, outs
    assert all(o == "won" or o.startswith("lost: the rig is locked by taker") for o in outs), outs


def _agent_env(tmp_path) -> dict:
    from rigkit.render.files import render_host_config
    from rigkit.spec.validate import spec_from_layers

    data = json.loads(render_host_config(spec_from_layers([{"paused_timers": [], "lock_files": []}])))
    data["paths"].update(lock=str(tmp_path / "rig.lock"), window_journal=str(tmp_path / "window.json"))
    (tmp_path / "host.json").write_text(json.dumps(data))
    return {**os.environ, "RIGKIT_HOST_CONFIG": str(tmp_path / "host.json")}


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (``T`` in /proc/<pid>/stat, the field after the command name)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] in "Tt"


@pytest.mark.parametrize("eof", [True, False], ids=["eof-and-sigterm-at-once", "sigterm-alone"])
def test_lock_hold_stopped_by_a_signal_lets_go_whole(tmp_path, eof):
    """``rigkit-agent lock hold`` ended by SIGTERM leaves no record: the lock is free, not "free, but
    <holder> died holding it". ``systemctl stop`` of a holder's unit (``sleep N | rigkit-agent lock
    hold``, as the tests' and the coverage's holders run) ends the sleep and signals the agent at once:
    here the holder is stopped (SIGSTOP) while its stdin closes and SIGTERM comes, so both are waiting
    when it runs again — the order a busy machine made by chance, made every time. A handler that
    raised landed inside the release and left the record (the stale lock test_drift met)."""
    env = _agent_env(tmp_path)
    hold = subprocess.Popen([sys.executable, "-m", "rigkit.host", "lock", "hold", "--what", "drift coverage",
                             "--lease", "t-cov"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT)
    try:
        assert hold.stdout.readline().strip() == "held"
        assert host_lock.state(tmp_path / "rig.lock")["holder"]["what"] == "drift coverage"
        hold.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 30  # a bounded poll of the process's state (the bound guards a hang)
        while not _stopped(hold.pid):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        if eof:
            hold.stdin.close()
        hold.send_signal(signal.SIGTERM)
        hold.send_signal(signal.SIGCONT)
        assert hold.wait(timeout=30) == 0
    finally:
        if hold.poll() is None:
            hold.kill()
            hold.wait()
    assert host_lock.state(tmp_path / "rig.lock") == {"held": False, "holder": None, "stale": None}


@pytest.mark.parametrize("current", [False, True], ids=["run", "run --current"])
def test_lock_run_stopped_by_a_signal_lets_go_whole(tmp_path, current):
    """``rigkit-agent lock run -- CMD`` ended by SIGTERM (``systemctl stop`` of the unit it runs in: systemd
    signals every process of the unit, the agent and CMD alike) leaves no record: the signal is passed on to
    CMD, whose end ends the run through its release. Before, Python's default death skipped the release and
    left "window test-7" a dead holder's record (test_generations' holder, caught by the harness's
    after-each-test check)."""
    env = _agent_env(tmp_path)
    argv = [sys.executable, "-m", "rigkit.host", "lock", "run", "--what", "window test-7",
            *(["--current"] if current else []), "--", "sleep", "60"]
    run = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 30  # a bounded poll of the lock's state (the bound guards a hang)
        while (host_lock.state(tmp_path / "rig.lock").get("holder") or {}).get("what") != "window test-7":
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.01)
        deadline = time.monotonic() + 30  # ... and for its command to have started (the agent's child)
        while not Path(f"/proc/{run.pid}/task/{run.pid}/children").read_text().split():
            assert time.monotonic() < deadline and run.poll() is None
            time.sleep(0.01)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=30) != 0  # sleep ended by the signal passed on
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert host_lock.state(tmp_path / "rig.lock") == {"held": False, "holder": None, "stale": None}


# ------------------------------------------------------------------------------ one of each
def test_env_files_are_read_one_way():
    text = '# comment\nexport HF_TOKEN="hf_abc"\nVLLM_API_KEY=\'k 1\'\n\nEMPTY=\nBAD LINE\n'
    assert envfile.parse_env_text(text) == {"HF_TOKEN": "hf_abc", "VLLM_API_KEY": "k 1", "EMPTY": ""}


def test_env_file_values_missing_or_empty_are_none(tmp_path):
    (tmp_path / "k.env").write_text("VLLM_API_KEY=\n")
    assert envfile.read_value(tmp_path / "k.env", "VLLM_API_KEY") is None
    assert envfile.read_value(tmp_path / "absent.env", "VLLM_API_KEY") is None


def test_json_files_are_written_atomically_with_their_mode(tmp_path):
    p = jsonfile.write_atomic(tmp_path / "d" / "x.json", {"b": 1, "a": [2]}, mode=0o600)
    assert p.read_text() == '{\n  "a": [\n    2\n  ],\n  "b": 1\n}\n' and (p.stat().st_mode & 0o777) == 0o600
    assert not [f for f in p.parent.iterdir() if f.name != "x.json"]
    assert jsonfile.read_object(tmp_path / "none.json") is None
    (tmp_path / "l.json").write_text("[1]")
    with pytest.raises(ValueError, match="l.json: not a JSON object"):
        jsonfile.read_object(tmp_path / "l.json")


SMI_OK = "0, NVIDIA GeForce RTX 3090, GPU-1, 610.57, 24576, 1, 350.00, 420.00, 420.00, 100.00, 450.00\n"


def test_one_nvidia_smi_parser_for_facts_window_and_bench():
    smi = gpu.parse_query(SMI_OK, 0)
    g = smi["gpus"][0]
    assert smi["state"] == "ok" and g["memory_total_gib"] == 24.0 and g["memory_total_mib"] == 24576.0
    assert (g["power_limit_w"], g["power_min_w"], g["power_max_w"]) == (420.0, 100.0, 450.0)
    assert gpu.bench_context(smi) == {"gpu": "NVIDIA GeForce RTX 3090", "driver": "610.57", "power_limit_w": 420.0,
                                      "memory_total_gib": 24.0, "gpu_count": 1}
    assert gpu.parse_query("Failed to initialize NVML: Driver/library version mismatch", 18)["state"] == "mismatch"
    assert gpu.parse_query("No devices were found", 6)["state"] == "no-gpu"
    assert gpu.parse_query("", 127)["state"] == "missing"
    assert gpu.bench_context(gpu.parse_query("", 127)) == {}


def test_the_deploy_fact_uses_the_same_parser():
    from rigkit.operations.facts.nvidia import NvidiaSmi

    fact = NvidiaSmi()
    assert fact.process([SMI_OK.strip(), "__RIGKIT_RC__=0"]) == gpu.parse_query(SMI_OK, 0)
    assert gpu.QUERY_COMMAND in fact.command()


def _row(n, local, remote, inode, state="01"):
    return f"{n}: {local} {remote} {state} 00000000:00000000 00:00000000 00000000 0 0 {inode} 1 0"


TCP = "\n".join([
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
    _row(0, "0100007F:1F90", "00000000:0000", 100, "0A"),    # llama-swap listening on :8080
    _row(1, "0100007F:1F90", "0100007F:C350", 101),          # :8080 <- 127.0.0.1:50000 (the keeper)
    _row(2, "0100007F:C350", "0100007F:1F90", 102),          # the keeper's end
    _row(3, "0100007F:1F90", "0100007F:C351", 103),          # :8080 <- 127.0.0.1:50001 (an agent job)
    _row(4, "0100007F:C351", "0100007F:1F90", 104),          # its end, not rigkit's
    _row(5, "0100007F:C352", "0100007F:46B4", 105),          # llama-swap -> a member on :18100
])


def test_client_connections_leave_rigkits_own_requests_out():
    assert net.clients([TCP], 8080) == ["127.0.0.1:50000", "127.0.0.1:50001"]
    assert net.clients([TCP], 8080, own_inodes={102}) == ["127.0.0.1:50001"]
    assert net.clients([TCP], 18100) == []  # llama-swap's own connections to members are not clients


def test_proc_net_tcp_addresses_are_read_as_text():
    assert net._hex_ip("0100007F") == "127.0.0.1"
    assert net._hex_ip("00000000000000000000000001000000") == "::1"
    assert net._hex_ip("0000000000000000FFFF00000100007F") == "127.0.0.1"  # v4-mapped


def test_a_process_is_placed_in_its_unit_from_its_cgroup():
    v1 = "12:pids:/system.slice/rigkit-keeper.service\n1:name=systemd:/system.slice/rigkit-keeper.service\n"
    v2 = "0::/system.slice/rigkit-window.service\n"
    assert net.parse_cgroup_units(v1) == {"rigkit-keeper.service"}
    assert net.parse_cgroup_units(v2) == {"rigkit-window.service"}


def test_own_socket_inodes_come_from_the_units_processes(tmp_path):
    proc = tmp_path / "proc"
    for pid, unit, inode in ((10, "rigkit-keeper.service", 102), (11, "agent-sync.service", 104)):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::/system.slice/{unit}\n")
        os.symlink(f"socket:[{inode}]", proc / str(pid) / "fd" / "3")
    (proc / "net").mkdir()
    (proc / "net" / "tcp").write_text(TCP)
    assert host_net.own_socket_inodes(["rigkit-keeper.service"], proc) == {102}
    assert host_net.client_connections(8080, ["rigkit-keeper.service"], proc) == ["127.0.0.1:50001"]


def test_no_journal_or_a_closed_one_means_no_window_and_no_expected_deviation(tmp_path):
    assert read_journal(tmp_path / "window.json") is None
    assert expected_deviations(None) == []
    (tmp_path / "window.json").write_text('{"state": "restored", "changed": {"proxy_stopped": true}}')
    j = read_journal(tmp_path / "window.json")
    assert not is_open(j) and expected_deviations(j) == []
    (tmp_path / "window.json").write_text("[1]")
    with pytest.raises(ValueError, match="window.json: not a JSON object"):
        read_journal(tmp_path / "window.json")
    assert is_open({"state": "preflight"}) and is_open({"state": "restore-failed"})


def test_the_deploy_fact_counts_clients_with_the_same_counter():
    from rigkit.operations.facts.rig import RigBusy

    fact = RigBusy()
    cmd = fact.command(8080, ["rigkit-keeper.service"], ["/run/agent session.lock"])
    assert "/proc/net/tcp" in cmd and "[ -e '/run/agent session.lock' ]" in cmd
    out = ["__RIGKIT_PORT__=8080", *TCP.splitlines(), "__RIGKIT_OWN_INODES__", "102", "__RIGKIT_LOCKS__",
           "/run/agent session.lock"]
    assert fact.process(out) == {"port": 8080, "clients": ["127.0.0.1:50001"], "locks": ["/run/agent session.lock"]}
    assert fact.process(["__RIGKIT_PORT__=8080", *TCP.splitlines(), "__RIGKIT_OWN_INODES__", "__RIGKIT_LOCKS__"]) == \
        {"port": 8080, "clients": ["127.0.0.1:50000", "127.0.0.1:50001"], "locks": []}


def test_the_rig_is_busy_under_a_present_lock_file_or_a_client_and_one_function_words_it(tmp_path):
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(TCP)
    (tmp_path / "held.lock").write_text("")
    state = host_busy.read(8080, (), [str(tmp_path / "held.lock"), str(tmp_path / "absent.lock")], proc)
    assert state == {"port": 8080, "clients": ["127.0.0.1:50000", "127.0.0.1:50001"],
                     "locks": [str(tmp_path / "held.lock")]}
    assert busy.refusal(state, "a reboot is needed (x)") == (
        f"a reboot is needed (x) but lock file(s) present: {tmp_path / 'held.lock'} (a session holds the GPU); "
        "llama-swap (:8080) has 2 established client connection(s), from 127.0.0.1:50000, 127.0.0.1:50001; "
        "run again when the rig is idle, or pass --force")
    assert busy.refusal({"port": 8080, "clients": [], "locks": []}) is None
    many = {"port": 8080, "locks": [], "clients": [f"10.0.0.{i}:1" for i in range(7)]}
    assert busy.reasons(many) == ["llama-swap (:8080) has 7 established client connection(s), from 10.0.0.0:1, "
                                  "10.0.0.1:1, 10.0.0.2:1, 10.0.0.3:1, 10.0.0.4:1 and 2 more"]


def test_is_the_rig_busy_is_answered_and_worded_in_one_place():
    """rigkit/common/busy.py is the one place that words "the rig is busy" and the one caller of the
    client counter; the deploy's preflight, the reboot gate and the window's preflight use it."""
    offenders = []
    for path in sorted([*(ROOT / "rigkit").rglob("*.py"), *(ROOT / "roles").rglob("*.py")]):
        if path == ROOT / "rigkit" / "common" / "busy.py":
            continue
        text = path.read_text()
        for needle in ("lock file(s)", "client connection(s)", "net.clients(", "net.client_connections(",
                       "(a session holds the GPU)"):
            if needle in text:
                offenders.append(f"{path.relative_to(ROOT)}: {needle}")
    assert not offenders, "\n".join(offenders)
    for path in (ROOT / "rigkit" / "deploy" / "preflight.py", ROOT / "rigkit" / "operations" / "boot.py", HOST / "window" / "steps.py"):
        assert "busy.refusal(" in path.read_text(), path


def test_no_host_program_is_kept_as_a_string_and_model_files_are_compared_once():
    """Host programs are modules of rigkit/host (what they import: tests/unit/test_layout.py), run with
    ``python -m``; no control-side string imports rigkit.host. The one model-files comparison is
    rigkit.host.modelrecords.compare (drift's probe runs rigkit.host.modelcheck, built on modelrecords.status)."""
    offenders = []
    for path in sorted([*(ROOT / "rigkit").rglob("*.py"), *(ROOT / "roles").rglob("*.py")]):
        if HOST in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(
                    r"^\s*(from rigkit\.host\b|import rigkit\.host\b)", node.value, re.M):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: a host program in a string")
    for path in sorted(HOST.rglob("*.py")):
        if path != HOST / "modelrecords.py" and "differs from the record" in path.read_text():
            offenders.append(f"{path.relative_to(ROOT)}: a second model-files comparison")
    assert not offenders, "\n".join(offenders)
    probe_py = (ROOT / "rigkit" / "drift" / "probe.py").read_text()
    # rigkit-agent probe, or lock run --probe (the deploy's locked probe, issue 67): modelcheck.probe either way
    assert "{paths.AGENT_BIN} probe " in probe_py and "--probe " in probe_py


def test_lock_run_refuses_while_a_window_is_open_or_the_lock_is_held(tmp_path):
    """`rigkit-agent lock run` (the deploy's docker restart, its reboot) shares the activation's
    way of taking the lock (rigkit.host.standdown.lock_for_change)."""
    from rigkit.render.files import render_host_config
    from rigkit.spec.validate import spec_from_layers

    data = json.loads(render_host_config(spec_from_layers([{"paused_timers": [], "lock_files": []}])))
    data["paths"].update(lock=str(tmp_path / "rig.lock"), window_journal=str(tmp_path / "window.json"))
    (tmp_path / "host.json").write_text(json.dumps(data))
    env = {**os.environ, "RIGKIT_HOST_CONFIG": str(tmp_path / "host.json")}
    run = [sys.executable, "-m", "rigkit.host", "lock", "run", "--what", "deploy: restart docker", "--",
           "touch", str(tmp_path / "ran")]
    (tmp_path / "window.json").write_text('{"id": "w9", "state": "open"}')
    p = subprocess.run(run, capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 1 and "deploy: restart docker: window w9 is open" in p.stderr and "refused" in p.stderr
    (tmp_path / "window.json").unlink()
    with host_lock.RigLock(tmp_path / "rig.lock", "activation"):
        p = subprocess.run(run, capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 1 and "deploy: restart docker: the rig is locked by activation" in p.stderr
    assert not (tmp_path / "ran").exists()
    p = subprocess.run(run, capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 0 and (tmp_path / "ran").exists() and (tmp_path / "rig.lock").read_text() == ""


def test_a_change_waits_for_the_keepers_one_action_and_never_for_a_window(tmp_path, monkeypatch):
    """The race of a deploy's docker restart (Strata's container goes down), the keeper's next period
    (it takes the lock to bring Strata back) and the deploy's llama-swap restart one step later: one
    winner at a time, and the change goes through once the keeper let go (its wait said in the log)
    instead of failing on it. A window holding the lock is refused at once, as before."""
    from rigkit.host import standdown
    from rigkit.render.files import render_host_config
    from rigkit.spec.validate import spec_from_layers

    from rigkit.host.config import HostConfig

    data = json.loads(render_host_config(spec_from_layers([{"paused_timers": [], "lock_files": []}])))
    data["paths"].update(lock=str(tmp_path / "rig.lock"), window_journal=str(tmp_path / "window.json"))
    cfg = HostConfig(data, "host.json")
    # the holder takes the lock, says "held", lets go when told (a line on its stdin), says "released",
    # and lives on until killed
    code = ("import sys; from rigkit.host.lock import try_lock; "
            f"lk = try_lock({str(tmp_path / 'rig.lock')!r}, sys.argv[1]); print('held', flush=True); "
            "sys.stdin.readline(); lk.release(); print('released', flush=True); sys.stdin.read()")
    sleeps: list[float] = []
    waiting = threading.Event()

    def sleep(s: float) -> None:  # the lock's waits between tries: the test sees that it waits
        sleeps.append(s)
        waiting.set()
        time.sleep(s)

    monkeypatch.setattr(host_lock, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleep))
    keeper = subprocess.Popen([sys.executable, "-c", code, "keeper: bringing strata back"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert keeper.stdout.readline().strip() == "held"
        said: list[str] = []
        got: dict = {}

        def change() -> None:
            try:
                got["lock"] = standdown.lock_for_change(cfg, "activation of llama-swap's config (rigkit deploy)",
                                                        said.append)
            except BaseException as exc:  # noqa: BLE001 - reported below
                got["error"] = exc

        t = threading.Thread(target=change)
        t.start()
        assert waiting.wait(60), "lock_for_change never waited"  # a hang guard: it waits at its first try
        assert t.is_alive() and got == {} and said == []  # waiting for the keeper, not refused
        keeper.stdin.write("go\n")
        keeper.stdin.flush()
        t.join(60)
        assert not t.is_alive() and "error" not in got, got
        lock = got["lock"]
        try:
            assert keeper.stdout.readline().strip() == "released"  # the keeper finished first: one winner at a time
            assert json.loads((tmp_path / "rig.lock").read_text())["what"].startswith("activation")
            assert len(said) == 1 and re.fullmatch(r"warning: waited \d+\.\d s for keeper: bringing strata back "
                                                   r"\(pid \d+, since .*\) to finish", said[0]), said
        finally:
            lock.release()
    finally:
        keeper.kill()
        keeper.wait()
    window = subprocess.Popen([sys.executable, "-c", code, "window w3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    try:
        assert window.stdout.readline().strip() == "held"
        sleeps.clear()
        with pytest.raises(host_lock.LockHeld, match="locked by window w3"):
            standdown.lock_for_change(cfg, "activation", print)
        assert sleeps == []  # refused at once: not one wait
    finally:
        window.kill()
        window.wait()


# ------------------------------------------------------------------------------ the power range
def test_one_check_and_one_message_for_the_power_range():
    assert gpu.power_limit_problem(420, 100.0, 400.0, "GPU 0") == (
        "gpu_power_limit_w 420 W is outside GPU 0's limits 100–400 W (nvidia-smi power.min_limit/power.max_limit)")
    assert gpu.power_limit_problem(400, 100.0, 400.0) is None
    assert gpu.power_limit_problem(9999, None, 400.0) is None  # the card did not say


def test_no_second_power_range_check_comes_back():
    """A chained comparison (``lo <= w <= hi``) over a power value, or the range's message, anywhere but
    :func:`rigkit.common.gpu.power_limit_problem`, is a second copy."""
    offenders = []
    for path in sorted((ROOT / "rigkit").rglob("*.py")) + sorted((ROOT / "roles").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and len(node.ops) == 2 and path != ROOT / "rigkit" / "common" / "gpu.py":
                text = ast.unparse(node)
                if "power" in text or "min_w" in text or "max_w" in text:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "limits" in node.value \
                    and "outside" in node.value and path != ROOT / "rigkit" / "common" / "gpu.py":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not offenders, "use rigkit.common.gpu.power_limit_problem:\n" + "\n".join(offenders)
