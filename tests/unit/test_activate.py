"""The activation path's logic (rigkit.host.activate) with the host's side effects replaced by a recorder:
which members get a completion and in what order, backups, restore on failure, a first activation
left stopped, holds. The real thing runs on the sandbox (tests/harness/test_wirein.py)."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from rigkit.spec.layers import validate_layers
from rigkit import agentcmd
from rigkit.host import activate as act
from rigkit.common.holds import read_holds
from rigkit.common import swapconfig

OLD = """healthCheckTimeout: 60
models:
  strata: {cmd: "docker run strata", proxy: "http://127.0.0.1:18030"}
  gguf-baseline: {cmd: "docker run gguf", proxy: "http://127.0.0.1:18040"}
hooks: {on_startup: {preload: [strata]}}
"""
NEW = OLD.replace(
    "  gguf-baseline:", '  hyperqwen: {cmd: "docker compose up single", proxy: "http://127.0.0.1:18020"}\n  gguf-baseline:')


class FakeHost(act.Host):
    """Records systemctl verbs and completions; ``fail`` maps a member to the error its completion raises."""

    def __init__(self, fail=None, fail_health=False):
        super().__init__("http://127.0.0.1:8090", "llama-swap.service", "/nonexistent/hyperqwen.env", log=self._log)
        self.calls, self.lines, self.fail, self.fail_health = [], [], dict(fail or {}), fail_health

    def _log(self, msg):
        self.lines.append(msg)

    def systemctl(self, verb):
        self.calls.append(("systemctl", verb))

    def wait_health(self):
        self.calls.append(("health",))
        if self.fail_health:
            raise act.ActivationError("llama-swap did not answer /health within 60 s")

    def complete(self, member, timeout_s):
        self.calls.append(("complete", member))
        if member in self.fail:
            err = self.fail.pop(member)
            raise act.ActivationError(f"{member}: {err}")
        return "HTTP 200 in 0.1 s"


@pytest.fixture
def live(tmp_path):
    p = tmp_path / "config.yaml"
    p.write_text(OLD)
    return p


def completions(host):
    return [c[1] for c in host.calls if c[0] == "complete"]


def test_changed_members_and_probe_order_put_the_resident_last():
    old, new = swapconfig.parse_config(OLD, "old", yaml), swapconfig.parse_config(NEW, "new", yaml)
    assert swapconfig.changed_members(old, new) == ["hyperqwen"]
    assert swapconfig.probe_order(old, new) == ["hyperqwen", "strata"]
    assert swapconfig.probe_order(None, new) == ["hyperqwen", "gguf-baseline", "strata"]  # first activation: all
    assert swapconfig.member_diff(new, old) == {"added": [], "removed": ["hyperqwen"], "changed": []}
    assert swapconfig.resident(new) == "strata"


def test_parse_config_refuses_what_is_not_a_llama_swap_config():
    with pytest.raises(ValueError, match=r"^x: not a llama-swap config \(no `models` mapping\)$"):
        swapconfig.parse_config("a: 1\n", "x", yaml)
    with pytest.raises(ValueError, match=r"^x: not valid YAML"):
        swapconfig.parse_config("a: [\n", "x", yaml)


def test_activation_backs_up_installs_restarts_and_probes_changed_members_then_strata(live, tmp_path):
    host = FakeHost()
    rc = act.activate(NEW, live, host, tmp_path / "holds.json", owner="root:root", now=lambda: 0)
    assert rc == 0, host.lines
    assert live.read_text() == NEW
    assert (tmp_path / "config.yaml.bak-19700101T000000Z").read_text() == OLD
    assert host.calls == [("systemctl", "restart"), ("health",), ("complete", "hyperqwen"), ("complete", "strata")]
    assert host.lines[-1] == f"activated: {live} is live and strata is loaded"


def test_same_config_is_nothing_to_do_unless_a_restart_is_asked(live, tmp_path):
    host = FakeHost()
    assert act.activate(OLD, live, host, tmp_path / "holds.json") == 0
    assert host.calls == [] and "already holds this config" in host.lines[-1]
    assert act.activate(OLD, live, host, tmp_path / "holds.json", force_restart=True) == 0
    assert completions(host) == ["strata"] and not list(tmp_path.glob("*.bak-*"))


def test_a_broken_new_member_restores_the_backup_and_strata_answers(live, tmp_path):
    host = FakeHost(fail={"hyperqwen": "HTTP 502 through llama-swap after 0.4 s: upstream command exited prematurely"})
    rc = act.activate(NEW, live, host, tmp_path / "holds.json", owner="root:root", now=lambda: 0)
    assert rc == 1
    assert live.read_text() == OLD
    assert completions(host) == ["hyperqwen", "strata"]  # the failed member, then the restored resident
    assert [c for c in host.calls if c[0] == "systemctl"] == [("systemctl", "restart")] * 2
    assert "FAILED: hyperqwen: HTTP 502 through llama-swap after 0.4 s: upstream command exited prematurely" in host.lines
    assert host.lines[-1].startswith("rolled back: the previous config is live again and strata answers")


def test_no_revert_leaves_the_failed_config_live_and_names_the_backup(live, tmp_path):
    host = FakeHost(fail={"hyperqwen": "HTTP 502 through llama-swap after 0.4 s"})
    rc = act.activate(NEW, live, host, tmp_path / "holds.json", owner="root:root", now=lambda: 0, revert=False)
    assert rc == 1 and live.read_text() == NEW
    assert [c for c in host.calls if c[0] == "systemctl"] == [("systemctl", "restart")] and completions(host) == [
        "hyperqwen"]
    assert host.lines[-1] == (f"--no-revert: the failed config stays live as {live}; the previous one is "
                              f"{tmp_path / 'config.yaml.bak-19700101T000000Z'}; the activation FAILED")


def test_a_failed_first_activation_leaves_llama_swap_stopped_and_moves_the_config_aside(tmp_path):
    live = tmp_path / "config.yaml"
    host = FakeHost(fail_health=True)
    rc = act.activate(NEW, live, host, tmp_path / "holds.json", owner="root:root", now=lambda: 0)
    assert rc == 1
    assert not live.exists()
    assert (tmp_path / "config.yaml.failed-19700101T000000Z").read_text() == NEW
    assert host.calls[-1] == ("systemctl", "stop")
    assert host.lines[-1].startswith("FIRST ACTIVATION FAILED: there is no previous config to restore; "
                                     "llama-swap is left STOPPED")


def test_a_hold_refuses_activation_and_rollback_records_it_until_released(live, tmp_path):
    holds = tmp_path / "holds.json"
    assert act.activate(NEW, live, FakeHost(), holds, owner="root:root", now=lambda: 0) == 0
    host = FakeHost()
    assert act.rollback(live, host, holds, now=lambda: 60) == 0, host.lines
    assert live.read_text() == OLD and completions(host) == ["strata"]
    hold = read_holds(holds)["llama-swap"]
    assert hold["since"] == "1970-01-01T00:01:00Z" and hold["by"] == "rigkit wire-in --rollback"
    assert hold["restored_from"] == str(tmp_path / "config.yaml.bak-19700101T000000Z")
    assert hold["held_back_members"] == {"added": ["hyperqwen"], "removed": [], "changed": []}
    assert open(hold["held_back_copy"]).read() == NEW
    assert hold["live_sha256"] == swapconfig.sha256_text(OLD) and hold["held_back_sha256"] == swapconfig.sha256_text(NEW)
    refused = FakeHost()
    assert act.activate(NEW, live, refused, holds) == 1 and refused.calls == [] and live.read_text() == OLD
    assert refused.lines[-1].startswith(f"held: {live} was rolled back by `rigkit wire-in --rollback` at 1970-01-01T00:01:00Z")
    assert act.rollback(live, FakeHost(), holds) == 1  # already held
    assert act.release(holds, log=lambda m: None) == 0 and read_holds(holds) == {}
    assert act.activate(NEW, live, FakeHost(), holds, now=lambda: 120) == 0 and live.read_text() == NEW


def test_rollback_without_a_differing_backup_is_invalid_input(live, tmp_path):
    host = FakeHost()
    assert act.rollback(live, host, tmp_path / "holds.json") == 2
    assert host.lines[-1] == f"error: no backup {live}.bak-* differs from the live config; nothing to roll back to"


def test_remote_command_runs_the_agent_in_a_unit_of_its_own_and_prints_its_log(tmp_path):
    cmd = agentcmd.remote_command(["--config", "/var/lib/rigkit/llama-swap/config.next.yaml", "--live", "/etc/llama-swap/config.yaml"],
                             agent="/opt/rigkit/venv/bin/rigkit-agent", log="/var/lib/rigkit/activate.log")
    assert cmd.startswith("mkdir -p /var/lib/rigkit && id=$(date +%s%N)-$$ && systemd-run --unit=rigkit-activate-$id "
                          "--collect --wait --quiet ")
    assert ("/opt/rigkit/venv/bin/rigkit-agent activate --config /var/lib/rigkit/llama-swap/config.next.yaml "
            "--live /etc/llama-swap/config.yaml; rc=$?; cat /var/lib/rigkit/activate.log.$id 2>/dev/null; "
            "mv -f /var/lib/rigkit/activate.log.$id /var/lib/rigkit/activate.log 2>/dev/null; exit $rc") in cmd
    # the shell part runs as written: a fake systemd-run on PATH writes the log, the command prints it
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "systemd-run"
    fake.write_text("#!/bin/sh\nfor a; do case $a in StandardOutput=truncate:*) echo activated > ${a#*:};; esac; done\n"
                    "exit 3\n")
    fake.chmod(0o755)
    log = tmp_path / "state" / "activate.log"
    import subprocess

    p = subprocess.run(["sh", "-c", agentcmd.remote_command(["--release"], agent="agent", log=str(log))], capture_output=True,
                       text=True, env={"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"})
    assert (p.returncode, p.stdout) == (3, "activated\n") and log.read_text() == "activated\n"
    assert [f.name for f in log.parent.iterdir()] == ["activate.log"]


def test_rigkits_own_units_include_their_instances():
    from rigkit.common.net import is_own_unit

    own = ["rigkit-activate.service", "rigkit-keeper.service"]
    assert is_own_unit("rigkit-activate-1733051234000000000-42.service", own)
    assert is_own_unit("rigkit-keeper.service", own) and not is_own_unit("agent-sync.service", own)

def _host_config(tmp_path, journal_state=None):
    from rigkit.render.files import render_host_config

    data = json.loads(render_host_config(validate_layers([{"paused_timers": [], "lock_files": []}])))
    data["paths"].update(lock=str(tmp_path / "rig.lock"), holds=str(tmp_path / "holds.json"),
                         window_journal=str(tmp_path / "window.json"))
    (tmp_path / "host.json").write_text(json.dumps(data))
    if journal_state:
        (tmp_path / "window.json").write_text(json.dumps({"id": "w1", "state": journal_state}))
    return tmp_path / "host.json"


def test_an_activation_is_refused_while_the_host_lock_is_held_naming_the_holder(tmp_path, monkeypatch, capsys):
    from rigkit.host.lock import RigLock

    monkeypatch.setenv("RIGKIT_HOST_CONFIG", str(_host_config(tmp_path)))
    with RigLock(tmp_path / "rig.lock", "window w1 (hyperqwen)", command="rigkit-agent window run"):
        assert act.main(["--release"]) == 1
    out = capsys.readouterr().out
    assert "error: the rig is locked by window w1 (hyperqwen) (pid " in out and "rigkit-agent window run" in out
    assert act.main(["--release"]) == 0  # free again
    assert "no hold recorded" in capsys.readouterr().out


def test_an_activation_is_refused_while_a_window_is_open(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RIGKIT_HOST_CONFIG", str(_host_config(tmp_path, journal_state="open")))
    assert act.main(["--rollback"]) == 1
    out = capsys.readouterr().out
    assert "rollback: window w1 is open" in out and "refused" in out
    assert (tmp_path / "rig.lock").read_text() == ""  # released on the way out


def test_installed_config_keeps_the_replaced_files_mode(live, tmp_path):
    os.chmod(live, 0o640)
    assert act.activate(NEW, live, FakeHost(), tmp_path / "holds.json", owner="root:root") == 0
    assert live.stat().st_mode & 0o777 == 0o640


def test_wire_in_refuses_without_an_action_or_a_host():
    import subprocess
    import sys
    from pathlib import Path

    rigkit = str(Path(sys.executable).parent / "rigkit")
    none = subprocess.run([rigkit, "wire-in", "-i", "inventory/sandbox.py", "--host", "demo"], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[2])
    assert none.returncode == 2 and "say what to do: --show, --activate, --rollback or --release" in none.stderr
    nohost = subprocess.run([rigkit, "wire-in", "--show"], capture_output=True, text=True)
    assert nohost.returncode == 2 and "Missing option '--host'" in nohost.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="installs the staging copy as root:root")
def test_sync_staging_sets_the_staging_copy_to_the_live_config_only_when_they_differ(tmp_path):
    live, staging = tmp_path / "config.yaml", tmp_path / "state" / "config.next.yaml"
    assert act.sync_staging(live, staging) is False and not staging.exists()  # no live config: nothing
    live.write_text("models: {a: {cmd: x}}\n")
    assert act.sync_staging(live, staging) is True
    assert staging.read_text() == live.read_text() and oct(staging.stat().st_mode & 0o777) == "0o600"
    assert act.sync_staging(live, staging) is False  # already the same
    staging.write_text("models: {rolled-back: {cmd: y}}\n")
    assert act.sync_staging(live, staging) is True and staging.read_text() == live.read_text()
    assert act.sync_staging(live, None) is False


def test_the_deploy_surfaces_the_backup_and_failures_from_the_agents_log():
    from rigkit.operations.llama_swap import surfaced_lines

    log = ["[12:00:01] backed up /etc/llama-swap/config.yaml to /etc/llama-swap/config.yaml.bak-20250101T000000Z",
           "[12:00:01] members: added hyperqwen", "[12:00:02] installed the new config as /etc/llama-swap/config.yaml (abc)",
           "[12:00:03] FAILED: hyperqwen: HTTP 500 through llama-swap after 1.0 s: x",
           "[12:00:04] restored the previous config from /etc/llama-swap/config.yaml.bak-20250101T000000Z",
           "[12:00:05] completion to strata (the resident, so it stays loaded) ..."]
    assert surfaced_lines(log) == [
        "replaced the live /etc/llama-swap/config.yaml (any edits by hand included); the previous config is kept as "
        "/etc/llama-swap/config.yaml.bak-20250101T000000Z",
        "FAILED: hyperqwen: HTTP 500 through llama-swap after 1.0 s: x",
        "restored the previous config from /etc/llama-swap/config.yaml.bak-20250101T000000Z"]


def test_a_restart_waits_for_the_gpus_memory_between_stop_and_start(monkeypatch):
    from rigkit.host import gpu

    calls = []

    class H(act.Host):
        def systemctl(self, verb):
            calls.append(verb)

    def wait(timeout_s, idle_mib, log, index=0):
        calls.append(("wait", timeout_s, idle_mib, index))
        return {"waited_s": 0}

    monkeypatch.setattr(gpu, "wait_idle", wait)
    H("http://x", "llama-swap.service", "/none", vram=(60.0, 512.0, 0)).restart()
    assert calls == ["stop", ("wait", 60.0, 512.0, 0), "start"]

    def busy(timeout_s, idle_mib, log, index=0):
        raise gpu.VramBusy("GPU 0 memory not back near idle after 60 s: 22609 MiB used, ceiling 512 MiB", {})

    monkeypatch.setattr(gpu, "wait_idle", busy)
    calls.clear()
    with pytest.raises(act.ActivationError, match=r"22609 MiB used, ceiling 512 MiB; llama-swap is stopped"):
        H("http://x", "llama-swap.service", "/none", vram=(60.0, 512.0, 0)).restart()
    assert calls == ["stop"]
    H("http://x", "llama-swap.service", "/none").restart()  # no vram section: a plain restart
    assert calls == ["stop", "restart"]
