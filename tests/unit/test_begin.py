"""Where a change starts (:func:`rigkit.deploy.transaction.begin`): the host lock taken and the current
generation read in one session (``rigkit-agent lock hold --current``), against the real agent run
locally (``python -m rigkit.host`` with a host config pointing into ``tmp_path``) instead of over SSH.

What must hold: a granted lock costs one session and no other agent call; the agent's own refusal
(a live holder, an open window) is final — one session, never a second take, and what the agent
said on the way (a dead holder's lock reclaimed) reaches the operator in the refusal; only an agent
that predates ``--current`` goes the two-step way (``generation current``, then ``lock hold``)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from rigkit import paths
from rigkit.deploy import transaction
from rigkit.host import lock as host_lock
from rigkit.remote import Remote
from rigkit.render.files import render_host_config
from rigkit.spec.validate import spec_from_layers

ROOT = Path(__file__).resolve().parents[2]
PINS = {"nvidia-open-dkms": "610.57-1", "nvidia-utils": "610.57-1", "opencl-nvidia": "610.57-1", "cuda": "13.3.1-1"}
AGENT = f"{shlex.quote(sys.executable)} -m rigkit.host"


class LocalRemote(Remote):
    """A :class:`Remote` whose "host" is this machine: the command runs under ``sh -c`` with the
    agent path replaced by ``agent`` (the real agent by default); ``sessions`` counts what was run."""

    def __init__(self, env: dict[str, str], agent: str = AGENT) -> None:
        super().__init__("box", {})
        self.env, self.agent_cmd, self.sessions = env, agent, []

    def argv(self, command: str, as_root: bool) -> list[str]:
        command = command.replace(paths.AGENT_BIN, self.agent_cmd)
        self.sessions.append(command)
        return ["env", *(f"{k}={v}" for k, v in self.env.items()), "sh", "-c", f"cd {shlex.quote(str(ROOT))} && {command}"]


@pytest.fixture
def host(tmp_path):
    """The agent's config with its lock, window journal and generations under ``tmp_path``."""
    data = json.loads(render_host_config(spec_from_layers([{"pacman_pins": dict(PINS), "paused_timers": [],
                                                             "lock_files": []}])))
    data["paths"].update(lock=str(tmp_path / "rig.lock"), window_journal=str(tmp_path / "window.json"),
                         generations=str(tmp_path / "generations"))
    (tmp_path / "host.json").write_text(json.dumps(data))
    env = {"RIGKIT_HOST_CONFIG": str(tmp_path / "host.json"), "PYTHONPATH": str(ROOT)}
    return SimpleNamespace(path=tmp_path, env=env, lock=tmp_path / "rig.lock")


class Said:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, text: str, error: bool = False) -> None:
        self.lines.append(text)


def _begin(remote):
    return transaction.begin(SimpleNamespace(name="box"), remote, "the deploy", "lease1", "rigkit deploy", Said())


def test_a_granted_lock_and_where_the_host_starts_cost_one_session(host):
    remote = LocalRemote(host.env)
    ch = _begin(remote)
    try:
        assert len(remote.sessions) == 1 and "lock hold" in remote.sessions[0] and "--current" in remote.sessions[0]
        assert ch.hold is not None and ch.hold.alive() and ch.start is None and ch.start_record is None
        assert host_lock.state(host.lock)["holder"]["lease"] == "lease1"
    finally:
        transaction.end(ch)
    assert not host_lock.state(host.lock)["held"]


def test_a_live_holder_refuses_in_one_session_naming_it(host):
    other = subprocess.Popen(["sh", "-c", f"{AGENT} lock hold --what 'window w1' --lease other"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, **host.env})
    try:
        assert other.stdout.readline().strip() == "held"
        remote = LocalRemote(host.env)
        with pytest.raises(transaction.ChangeRefused, match=r"^box: the deploy refused, nothing touched: .*window w1"):
            _begin(remote)
        assert len(remote.sessions) == 1  # the refusal is final: no second take, no generation read
        assert host_lock.state(host.lock)["holder"]["lease"] == "other"
    finally:
        other.stdin.close()
        other.wait(10)


def test_an_open_window_refuses_once_and_the_reclaim_warning_reaches_the_refusal(host):
    # a window that died holding the lock (its record stands, no flock, its pid gone) and left its journal open
    host.lock.write_text(json.dumps({"what": "window w2", "pid": 2 ** 22 + 7, "command": "rigkit-agent window",
                                     "since": "2026-12-04T00:00:00Z"}) + "\n")
    (host.path / "window.json").write_text(json.dumps({"id": "w2", "state": "open"}))
    remote = LocalRemote(host.env)
    with pytest.raises(transaction.ChangeRefused) as refused:
        _begin(remote)
    text = str(refused.value)
    assert "warning: reclaimed the rig lock from window w2" in text and "window w2 is open" in text, text
    assert len(remote.sessions) == 1
    assert not host_lock.state(host.lock)["held"]


def test_begin_reads_the_live_config_the_host_serves_in_the_same_session(host):
    """What serves is read with where the host starts (``live_sha256``: the live llama-swap config's
    sha256, None when there is none): the deploy judges "staged only" by it, since a wire-in activation
    changes the live config without recording a generation."""
    from rigkit.common.swapconfig import sha256_text

    live = host.path / "config.yaml"
    data = json.loads((host.path / "host.json").read_text())
    data["llama_swap"]["config"] = str(live)
    (host.path / "host.json").write_text(json.dumps(data))
    for text in (None, "models: {}\n"):
        if text is not None:
            live.write_text(text)
        remote = LocalRemote(host.env)
        ch = _begin(remote)
        try:
            assert len(remote.sessions) == 1
            assert ch.start_live == (None if text is None else sha256_text(text))
        finally:
            transaction.end(ch)


def test_an_agent_that_predates_current_goes_the_two_step_way(host, tmp_path):
    # the agent of an older rigkit: argparse refuses the flag it does not know (exit 2, "usage: ...")
    old = tmp_path / "old-agent"
    old.write_text(f'#!/bin/sh\ncase " $* " in *" --current "*) echo "usage: rigkit-agent lock" >&2; '
                   f'echo "rigkit-agent lock: error: unrecognized arguments: --current" >&2; exit 2;; esac\n'
                   f'exec {AGENT} "$@"\n')
    old.chmod(0o755)
    remote = LocalRemote(host.env, agent=str(old))
    ch = _begin(remote)
    try:
        assert ch.hold is not None and ch.hold.alive()
        assert [("--current" in s, "generation current" in s) for s in remote.sessions] == [
            (True, False), (False, True), (False, False)], remote.sessions
    finally:
        transaction.end(ch)


def test_a_host_without_an_agent_is_begun_without_a_lock(host):
    remote = LocalRemote(host.env, agent="/nonexistent/rigkit-agent")
    ch = _begin(remote)
    assert ch.hold is None and ch.start is None


# ------------------------------------------------------------------ lock run --current (the probe's session)
def _run_current(host, *cmd, lease="lease1"):
    argv = ["sh", "-c", f"{AGENT} lock run --what 'rigkit deploy' --lease {lease} --current -- " + " ".join(map(shlex.quote, cmd))]
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **host.env}, timeout=60)


def test_lock_run_current_reads_where_the_host_starts_then_runs_the_command_under_the_lock(host):
    ran = _run_current(host, "sh", "-c", f"cat {shlex.quote(str(host.lock))}")
    assert ran.returncode == 0, ran.stderr
    first, *rest = ran.stdout.splitlines()
    lock = json.loads(first)
    assert lock["held"] is True and lock["current"] is None and lock["record"] is None and lock["warnings"] == []
    assert "index" in lock
    record = json.loads(rest[0])  # what the command read: the lock's record, this lease's, while it ran
    assert record["lease"] == "lease1" and record["what"] == "rigkit deploy"
    assert not host_lock.state(host.lock)["held"]  # let go when the command ended


def test_lock_run_current_refused_says_why_in_its_first_line_and_runs_nothing(host):
    host.lock.write_text(json.dumps({"what": "window w2", "pid": 2 ** 22 + 7, "command": "rigkit-agent window",
                                     "since": "2026-12-04T00:00:00Z"}) + "\n")
    (host.path / "window.json").write_text(json.dumps({"id": "w2", "state": "open"}))
    ran = _run_current(host, "touch", str(host.path / "ran"))
    assert ran.returncode == 1 and not (host.path / "ran").exists()
    [line] = ran.stdout.splitlines()
    lock = json.loads(line)
    assert lock["held"] is False and "window w2 is open" in lock["refused"]
    assert lock["warnings"] and "reclaimed the rig lock from window w2" in lock["warnings"][0]
    assert "reclaimed the rig lock from window w2" in lock["refused"]  # the refusal says it too


def test_the_locked_probe_reads_the_agents_answer_in_every_shape():
    """drift.probe.LockedProbe.process: held with the probe's encoded output; refused; a missing agent
    or one that predates ``--current`` (its usage text) reads as no lock; a held lock whose output is
    not the probe's has no sections."""
    from rigkit.drift.probe import HostProbe, LockedProbe, probe_script

    script = probe_script([("kernel", "echo 6.12.1-arch1-1")])
    probe_out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    held = json.dumps({"held": True, "current": 2, "index": {"current": 2}, "record": {"n": 2}, "warnings": []})
    read = LockedProbe().process([held, *probe_out])
    assert read["lock"]["current"] == 2 and read["sections"] == HostProbe().process(probe_out) and read["said"] == []
    refused = LockedProbe().process([json.dumps({"held": False, "refused": "held by window w1", "warnings": []})])
    assert refused["lock"]["refused"] == "held by window w1" and refused["sections"] is None
    for said in (["sh: 1: /opt/rigkit/venv/bin/rigkit-agent: not found"],
                 ["usage: rigkit-agent lock [-h] {status,run,hold} ...",
                  "rigkit-agent lock: error: unrecognized arguments: --lease"], [], ['{"not": "the agent"}']):
        assert LockedProbe().process(said) == {"lock": None, "sections": None, "said": [s for s in said if s.strip()]}
    assert LockedProbe().process([held, "not base64 !"])["sections"] is None
    # the command line carries the script encoded: nothing of it is quoted or split by the shells on the way
    command = LockedProbe().command("echo 'a b' \"$HOME\" `x`", "rigkit deploy", "L1")
    assert "echo" not in command and command.count("'") == 2 and "--lease L1 --current --" in command


def test_the_locked_probes_command_runs_the_probe_under_the_lock_through_a_real_shell(host):
    """LockedProbe's command as the host's shell runs it (the agent run locally): the script arrives
    whole (quotes, ``$``, backticks, newlines), runs while this lease holds the lock, and its output
    reads back as the probe's sections."""
    from rigkit.drift.probe import LockedProbe, probe_script

    script = probe_script([("odd", "printf '%s\\n' 'a b' \"\\$HOME\" '`x`'"),
                           ("lock", f"cat {shlex.quote(str(host.lock))}")])
    command = LockedProbe().command(script, "rigkit deploy", "L7").replace(paths.AGENT_BIN, AGENT)
    ran = subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **host.env},
                         timeout=60)
    read = LockedProbe().process(ran.stdout.splitlines())
    assert read["lock"]["held"] is True, ran.stdout
    assert read["sections"]["odd"] == ["a b", "$HOME", "`x`"]
    assert json.loads(read["sections"]["lock"][0])["lease"] == "L7"


@pytest.mark.parametrize("models", [{}, {"strata": {"repo_id": "r/s", "revision": "0" * 40, "files": {}}}])
def test_the_lock_run_runs_the_agents_checks_itself_as_its_probe_job_would(host, models):
    """``lock run --current --probe ARGS`` (issue 67: the agent started once per deploy probe): the
    held line carries what ``rigkit-agent probe ARGS`` prints and exits with, read back as the
    agent's section exactly as that job's own output reads; the script then has no agent section and
    still runs under the lock."""
    import base64

    from rigkit.drift.probe import AGENT_MODELS, RC, LockedProbe, parse_agent, probe_script

    args = [base64.b64encode(json.dumps({"version": 1, "models": models}).encode()).decode(), "0", ","]
    script = probe_script([("lock", f"cat {shlex.quote(str(host.lock))}")])
    command = LockedProbe().command(script, "rigkit deploy", "L8", agent=args).replace(paths.AGENT_BIN, AGENT)
    env = {**os.environ, **host.env}
    ran = subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    read = LockedProbe().process(ran.stdout.splitlines())
    alone = subprocess.run(["sh", "-c", f"{AGENT} probe {shlex.join(args)}"], capture_output=True, text=True, cwd=ROOT,
                           env=env, timeout=60)
    assert read["lock"]["held"] is True and "probe" not in read["lock"], ran.stdout
    assert read["sections"][AGENT_MODELS] == [*alone.stdout.splitlines(), f"{RC}{alone.returncode}"]
    assert parse_agent(read["sections"][AGENT_MODELS], models=True)[0]["rc"] == 0
    assert json.loads(read["sections"]["lock"][0])["lease"] == "L8"


@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=40),
                max_size=6))
def test_output_that_is_not_the_agents_answer_never_reads_as_a_lock(lines):
    """Whatever a host prints that does not start with the agent's JSON answer (``held`` a boolean) —
    a shell's error, a usage text, noise — reads as no lock (the full run), never as held or refused."""
    from rigkit.drift.probe import LockedProbe

    try:
        first = json.loads(lines[0]) if lines else None
    except ValueError:
        first = None
    assume(not (isinstance(first, dict) and isinstance(first.get("held"), bool)))
    read = LockedProbe().process(lines)
    assert read == {"lock": None, "sections": None, "said": [s for s in lines if s.strip()]}
