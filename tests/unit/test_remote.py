"""SSH to the host is one path (rigkit/remote.py; that no other module builds an ssh argv is
tests/unit/test_one_piece.py's): the real ``ssh`` client against a closed port and against a real
SSH server (paramiko's, pyinfra's own dependency, in a thread here) whose host key does not verify
raises :class:`HostUnreachable` naming the host; a command that ran gives its own exit status back;
no answer within the timeout is :class:`RemoteTimeout`. The callers turn the raise into exit 1."""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import paramiko
import pytest

from rigkit.remote import HostReadError, HostUnreachable, Remote, RemoteTimeout, free_port, read_holds


class _Server(paramiko.ServerInterface):
    """An SSH server that lets anyone in (``none`` auth) and answers each ``exec`` with ``out``/``err``
    and exit status ``status`` — or never, with ``status`` None."""

    def __init__(self, status: int | None, seen: list[str]) -> None:
        self.status, self.seen = status, seen

    def get_allowed_auths(self, username: str) -> str:
        return "none"

    def check_auth_none(self, username: str) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command: bytes) -> bool:
        self.seen.append(command.decode())
        if self.status is not None:
            def answer() -> None:
                channel.sendall(b"out\n")
                channel.sendall_stderr(b"err\n")
                channel.send_exit_status(self.status)
                channel.close()
            threading.Thread(target=answer, daemon=True).start()
        return True


@pytest.fixture
def sshd(tmp_path):
    """A real SSH server on 127.0.0.1 (paramiko): ``.port``, ``.status`` (what the next command
    exits with), ``.seen`` (the commands it was asked), ``.known_hosts`` (a file trusting its key)."""
    key = paramiko.ECDSAKey.generate()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    state = SimpleNamespace(port=listener.getsockname()[1], status=0, seen=[], transports=[])
    state.known_hosts = tmp_path / "known_hosts"
    state.known_hosts.write_text(f"[127.0.0.1]:{state.port} {key.get_name()} {key.get_base64()}\n")

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            t = paramiko.Transport(conn)
            t.add_server_key(key)
            state.transports.append(t)
            try:
                t.start_server(server=_Server(state.status, state.seen))
            except (paramiko.SSHException, EOFError, OSError):
                pass

    threading.Thread(target=serve, daemon=True).start()
    yield state
    listener.close()
    for t in state.transports:
        t.close()


def _connection(port: int, known_hosts: Path, **more) -> dict:
    return {"ssh_hostname": "127.0.0.1", "ssh_port": port, "ssh_known_hosts_file": str(known_hosts),
            "ssh_strict_host_key_checking": True, **more}


def test_a_closed_port_raises_naming_the_host(tmp_path):
    remote = Remote("box", _connection(free_port(), tmp_path / "known_hosts"))
    with pytest.raises(HostUnreachable, match=r"^box: cannot reach the host over SSH \(ssh exit 255\): "
                                              r".*Connection refused"):
        remote.run("true", as_root=False)
    with pytest.raises(HostUnreachable, match=r"^box: .*Connection refused"):  # not "no hold"
        read_holds(remote)


def test_a_host_key_that_does_not_verify_raises_naming_the_host(sshd, tmp_path):
    other = paramiko.ECDSAKey.generate()
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"[127.0.0.1]:{sshd.port} {other.get_name()} {other.get_base64()}\n")
    for known in (wrong, tmp_path / "empty_known_hosts"):
        with pytest.raises(HostUnreachable, match=r"^box: cannot reach the host over SSH \(ssh exit 255\): "
                                                  r".*Host key verification failed"):
            Remote("box", _connection(sshd.port, known)).run("true", as_root=False)
    assert sshd.seen == []  # nothing ran


@pytest.mark.parametrize("status", [0, 1, 2, 3, 127, 254])
def test_a_command_that_ran_gives_its_own_exit_status(sshd, status):
    sshd.status = status
    proc = Remote("box", _connection(sshd.port, sshd.known_hosts)).run("exit it", as_root=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (status, "out\n", "err\n")
    assert sshd.seen == ["exit it"]


def test_sudo_only_where_the_command_asks_for_root_and_the_host_needs_it(sshd):
    for conn_sudo, as_root, want in ((True, True, "sudo -n id"), (True, False, "id"), (False, True, "id")):
        sshd.seen.clear()
        Remote("box", _connection(sshd.port, sshd.known_hosts, _sudo=conn_sudo)).run("id", as_root=as_root)
        assert sshd.seen == [want]


def test_a_host_read_that_fails_on_the_host_is_a_read_error(sshd):
    sshd.status = 1
    with pytest.raises(HostReadError, match=r"^box: cannot read /var/lib/rigkit/holds.json \(exit 1\): err"):
        read_holds(Remote("box", _connection(sshd.port, sshd.known_hosts)))


def test_no_answer_within_the_timeout_is_a_remote_timeout(sshd):
    sshd.status = None  # the server takes the command and never answers
    with pytest.raises(RemoteTimeout, match=r"^box: 'sleep forever' did not finish within 1 s"):
        Remote("box", _connection(sshd.port, sshd.known_hosts)).run("sleep forever", as_root=False, timeout=1)


def test_the_lock_hold_on_a_host_not_reached_raises_instead_of_refusing(tmp_path):
    from rigkit.deploy.transaction import LockHold

    hold = LockHold(Remote("box", _connection(free_port(), tmp_path / "kh")), "rigkit deploy", "lease")
    with pytest.raises(HostUnreachable, match=r"^box: .*Connection refused"):
        hold.take(timeout_s=20)



def test_wire_in_runs_its_commands_through_remote_as_root(monkeypatch):
    from rigkit.deploy import wirein

    seen = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: seen.append((argv, kw)) or
                        subprocess.CompletedProcess(argv, 0, "__RIGKIT_NONE__\n", ""))
    hs = SimpleNamespace(name="h1", connection={"ssh_hostname": "rig.lan", "ssh_user": "op", "_sudo": True})
    assert wirein.live_config(hs) is None
    (argv, kw), = seen
    assert argv[:-1] == Remote("h1", hs.connection).argv("x", as_root=True)[:-1]
    assert argv[-1].startswith("sudo -n sh -c ") and kw["timeout"] == 60.0


def test_a_wire_in_timeout_is_a_failure_naming_the_host(monkeypatch):
    from rigkit.deploy import wirein

    def hang(argv, **kw):
        raise subprocess.TimeoutExpired(argv, kw["timeout"])

    monkeypatch.setattr(subprocess, "run", hang)
    hs = SimpleNamespace(name="h1", connection={})
    try:
        wirein.live_config(hs)
    except wirein.WireInFailed as exc:
        assert str(exc) == ("h1: 'sh -c '\"'\"'if [ -e /etc/llama-swap/config.yaml ]; then cat /etc/llama-swap/"
                               "config.yaml; else echo __RIGKIT_NONE__; fi'\"'\"'' did not finish within 60 s")
    else:
        raise AssertionError("no failure")
