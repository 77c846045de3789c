"""`rigkit bench -i INVENTORY --host NAME --member NAME`: SSH forward, llama-swap's /running,
host context over SSH. The inventory loader and ssh are replaced by fakes; llama-swap and the
member are the replay server."""

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import subprocess

import rigkit.cli.bench as cli_bench
import rigkit.remote as remote
import rigkit.spec.inventory
from rigkit.cli.bench import bench
from rigkit.remote import ForwardError, SSHForward
from rigkit.spec.model import BenchSpec

from .replay import Script, vllm_stream

SECRET = "sk-remote-secret-77aa"
CONNECTION = {"ssh_hostname": "rig.lan", "ssh_port": 2222, "ssh_user": "op",
              "ssh_key": "/home/op/.ssh/id_ed25519", "_sudo": True}


def host_spec():
    members = {"strata": SimpleNamespace(service="strata"),
               "hyperqwen": SimpleNamespace(service="hyperqwen")}
    spec = SimpleNamespace(
        llama_swap=SimpleNamespace(port=8080, members=members),
        hyperqwen=SimpleNamespace(port=18020, spec="dflash2", dflash_tokens=7),
        bench=BenchSpec(baseline=None, quoting_prompt_tokens=400, max_tokens=48,
                        reasoning_effort="medium", sampled_temperature=0.7, stall_timeout_s=5.0))
    return SimpleNamespace(name="rig", spec=spec, connection=dict(CONNECTION))


@pytest.fixture
def rig(monkeypatch, replay):
    """Fakes for the inventory, the SSH forward (to the replay server) and remote commands."""
    calls = {"load": [], "ssh": [], "forward": []}

    def load_hosts(path, names):
        calls["load"].append((path, names))
        return [host_spec()]

    class FakeForward:
        def __init__(self, host_name, connection, remote_port, ready_timeout_s=20.0):
            calls["forward"].append((host_name, connection, remote_port))
            self.url = replay.url

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    def run(self, command, *, as_root, stdin=None, timeout=60, text=True):
        calls["ssh"].append(command)
        if command.startswith("nvidia-smi"):
            return subprocess.CompletedProcess(command, 0, "0, NVIDIA GeForce RTX 3090, GPU-1, 610.57, 24576, 21000, "
                                               "350.00, 420.00, 420.00, 100.00, 450.00\n", "")
        if command == "cat /etc/rigkit/secrets/hyperqwen.env" and as_root:
            return subprocess.CompletedProcess(command, 0, f"VLLM_API_KEY={SECRET}\n", "")
        return subprocess.CompletedProcess(command, 127, "", "not found")

    monkeypatch.setattr(rigkit.spec.inventory, "load_hosts", load_hosts)
    monkeypatch.setattr(cli_bench, "SSHForward", FakeForward)  # where the bench command reads it
    monkeypatch.setattr(remote.Remote, "run", run)
    replay.default = Script(vllm_stream(answer=["abc"] * 4))
    return SimpleNamespace(replay=replay, calls=calls)


def invoke(tmp_path, *args):
    return CliRunner().invoke(bench, ["-i", "inventory/lab.py", "--host", "rig",
                                      "--out", str(tmp_path / "out"), *args])


def test_member_not_ready_in_llama_swap_is_not_run_without_a_request(rig, tmp_path):
    rig.replay.running = [{"model": "strata", "state": "ready"},
                          {"model": "hyperqwen", "state": "starting"}]
    result = invoke(tmp_path, "--member", "hyperqwen")
    why = ("member 'hyperqwen' is not running in llama-swap (running: hyperqwen starting, "
           "strata ready); benching it through :8080 would swap the resident out — open a "
           "window to bench it standalone")
    assert result.exit_code == 0, result.output
    assert f"chat-greedy: NOT-RUN — {why}" in result.stdout.splitlines()
    assert f"  verdict: NOT-RUN — {why}" in result.stdout.splitlines()
    assert result.stdout.splitlines()[-2] == "result: OK"
    assert rig.replay.requests_seen == []
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {n: v["verdict"] for n, v in summary["verdicts"].items()} == {
        "chat-greedy": "NOT-RUN", "chat-sampled": "NOT-RUN", "quoting": "NOT-RUN",
        "warmup": "NOT-RUN"}


def test_ready_member_is_benched_through_the_forward_with_host_context(rig, tmp_path):
    rig.replay.running = [{"model": "hyperqwen", "state": "ready"}]
    result = invoke(tmp_path, "--member", "hyperqwen", "--workload", "chat-greedy",
                    "--no-warmup", "--preset", "small")
    assert result.exit_code == 0, result.output
    assert rig.calls["load"] == [("inventory/lab.py", ["rig"])]
    assert rig.calls["forward"] == [("rig", CONNECTION, 8080)]
    from rigkit.common.gpu import QUERY_COMMAND

    assert QUERY_COMMAND in rig.calls["ssh"]
    assert {r["model"] for r in rig.replay.requests_seen} == {"hyperqwen"}
    assert rig.replay.seen_headers[-1]["Authorization"] == f"Bearer {SECRET}"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    ctx = summary["context"]
    assert (ctx["gpu"], ctx["driver"], ctx["power_limit_w"], ctx["host"], ctx["member"]) == (
        "NVIDIA GeForce RTX 3090", "610.57", 420.0, "rig", "hyperqwen")
    assert ctx["speculative"] == "dflash2 (DFLASH_TOKENS=7)"
    assert summary["target"] == "rig/hyperqwen via llama-swap 127.0.0.1:8080"
    outputs = [result.stdout, result.stderr] + [
        p.read_text(errors="replace") for p in (tmp_path / "out").iterdir() if p.suffix != ".png"]
    assert not [o for o in outputs if SECRET in o]


def test_unknown_member_is_invalid_input(rig, tmp_path):
    result = invoke(tmp_path, "--member", "nope")
    assert result.exit_code == 2
    assert result.stderr == ("rigkit bench: --member 'nope': not a llama-swap member of rig "
                             "(members: hyperqwen, strata)\n")


def test_inventory_error_is_invalid_input(monkeypatch, tmp_path):
    def load_hosts(path, names):
        raise rigkit.spec.inventory.InventoryError("host 'rig' is not in inventory/lab.py")

    monkeypatch.setattr(rigkit.spec.inventory, "load_hosts", load_hosts)
    result = invoke(tmp_path, "--member", "hyperqwen")
    assert result.exit_code == 2
    assert result.stderr == ("rigkit bench: inventory/lab.py: host 'rig' is not in "
                             "inventory/lab.py\n")


def test_forward_uses_pyinfra_connection_settings_in_batch_mode():
    fwd = SSHForward("rig", CONNECTION, 8080)
    fwd.local_port = 40000
    assert fwd.argv() == [
        "ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", "2222", "-l", "op",
        "-i", "/home/op/.ssh/id_ed25519", "-o", "IdentitiesOnly=yes", "-N", "-o",
        "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=15", "-L",
        "127.0.0.1:40000:127.0.0.1:8080", "rig.lan"]


def test_forward_that_ssh_cannot_open_raises_with_ssh_own_message(tmp_path):
    conn = {"ssh_hostname": "127.0.0.1", "ssh_port": 9, "ssh_known_hosts_file": "/dev/null",
            "ssh_strict_host_key_checking": False}
    with pytest.raises(ForwardError, match=r"^rig: SSH forward to 127.0.0.1:8080 failed "
                                          r"\(ssh exit 255\): .*Connection refused"):
        with SSHForward("rig", conn, 8080, ready_timeout_s=10):
            pass
