"""Nothing leaks, nothing is lost (issue "Nothing leaks…") on a deployed sandbox host:

- a token change: while the deploy writes the new HF token, a watcher on the host (as root, every
  ~20 ms) finds the token in no file another user could read — only in ``hf.env`` and, for the
  moment of sudo's copy, in the upload folder only the SSH user can enter; afterwards only in
  ``hf.env``; ``hyperqwen.env`` stays readable by the llama-swap user (the folder keeps its group);
- a hand-edited rendered file is backed up when the deploy replaces it, the backup named in the
  output; the next deploy changes nothing;
- a model file that fails its hash and whose refetch fails (the hub refusing the token) stays in
  place, and Strata answers;
- a needed package missing: one ``pacman -Syu --needed`` (pacman's own log says so), never ``-Sy``
  alone; the second deploy changes nothing;
- shell payloads in every kind of place the spec accepts them (issue #28) are carried literally and
  run nowhere: no canary file on the host or the control machine.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
RIGKIT = str(Path(sys.executable).parent / "rigkit")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402

PROJECT = sandbox_project.cwd()
TOKEN = hostctl.hub_token()
NEW_TOKEN = "hf_" + "Zq7" * 12  # a token of the right shape the hub does not know
SUMMARY = re.compile(r"^(?P<host>\S+): (?P<total>\d+) operations: (?P<changed>\d+) changed", re.M)

WATCH = r'''
import json, os, sys, time
token, stop, out = sys.argv[1].encode(), sys.argv[2], sys.argv[3]
roots = ["/tmp", "/var/tmp", "/dev/shm", "/home", "/root", "/var/lib/rigkit", "/etc/rigkit", "/etc/llama-swap",
         "/opt/rigkit/hyperqwen", "/var/cache/rigkit"]
hits = {}
def scan(d, depth):
    try:
        entries = list(os.scandir(d))
    except OSError:
        return
    for e in entries:
        try:
            if e.is_dir(follow_symlinks=False):
                if depth < 4 and e.name not in ("venv", "wheels"):
                    scan(e.path, depth + 1)
            elif e.is_file(follow_symlinks=False) and e.stat().st_size < 1 << 20:
                with open(e.path, "rb") as fh:
                    if token in fh.read():
                        st, pst = os.stat(e.path), os.stat(os.path.dirname(e.path))
                        hits[e.path] = {"mode": st.st_mode & 0o777, "uid": st.st_uid, "dir_mode": pst.st_mode & 0o777,
                                        "dir_uid": pst.st_uid}
        except OSError:
            continue
end = time.monotonic() + 600
open(out + ".ready", "w").close()
while not os.path.exists(stop) and time.monotonic() < end:
    for r in roots:
        scan(r, 0)
    time.sleep(0.02)
json.dump(hits, open(out, "w"))
'''


def deploy(host, *args, token: str = TOKEN, popen: bool = False, timeout: float = 900):
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=host.name, HF_TOKEN=token)
    argv = [RIGKIT, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--full", *args]
    return subprocess.run(argv, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=timeout)


def changed(proc) -> int:
    m = SUMMARY.search(proc.stderr)
    assert m, proc.stderr[-3000:]
    return int(m["changed"])


def strata_answers(host) -> None:
    body = json.dumps({"model": "strata", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    code = host.run(f"curl -sS -m 120 -o /dev/null -w '%{{http_code}}' 127.0.0.1:8080/v1/chat/completions "
                    f"-H 'Content-Type: application/json' -d {shlex.quote(body)}").stdout.strip()
    assert code == "200", code


@pytest.fixture(scope="module")
def host(make_module_host):
    return make_module_host("sf", converged=True)


def test_a_token_change_never_puts_the_token_in_a_file_another_user_can_read(host):
    host.write("/root/watch.py", WATCH)
    host.run("rm -f /root/watch.stop /root/watch.json /root/watch.json.ready")
    host.run(f"nohup python3 /root/watch.py {NEW_TOKEN} /root/watch.stop /root/watch.json >/dev/null 2>&1 &")
    end = time.monotonic() + 30
    while host.run("test -e /root/watch.json.ready", check=False).returncode != 0:
        assert time.monotonic() < end, "the watcher did not start"
        time.sleep(0.2)
    try:
        proc = deploy(host, token=NEW_TOKEN)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert NEW_TOKEN not in proc.stdout + proc.stderr
    finally:
        host.run("touch /root/watch.stop")
    end = time.monotonic() + 60
    while host.run("test -s /root/watch.json", check=False).returncode != 0:
        assert time.monotonic() < end, "the watcher did not finish"
        time.sleep(0.3)
    hits = json.loads(host.run("cat /root/watch.json").stdout)
    assert "/etc/rigkit/secrets/hf.env" in hits, hits  # the watcher saw the token land
    rig_uid = int(host.run("id -u rig").stdout)
    for path, st in hits.items():
        if path == "/etc/rigkit/secrets/hf.env":
            assert st["mode"] == 0o600 and st["uid"] == 0, st
            continue
        # sudo's copy: the upload waits in a folder only the SSH user (and root) can enter
        assert path.startswith("/var/lib/rigkit/upload/"), (path, st)
        assert st["dir_mode"] == 0o700 and st["dir_uid"] == rig_uid, (path, st)
    # afterwards: only hf.env holds it; the folder kept its one owner; llama-swap reads the API key
    left = host.run(f"grep -rlsF {NEW_TOKEN} /tmp /var/tmp /dev/shm /home /root /var/lib/rigkit /etc /opt/rigkit "
                    "--exclude=watch.json", check=False).stdout.split()
    assert left == ["/etc/rigkit/secrets/hf.env"], left
    assert host.run("stat -c '%U:%G %a' /etc/rigkit/secrets").stdout.strip() == "root:llama-swap 750"
    key = host.run("sudo -u llama-swap cat /etc/rigkit/secrets/hyperqwen.env").stdout
    assert key.startswith("VLLM_API_KEY=")
    back = deploy(host)
    assert back.returncode == 0, back.stderr[-3000:]


def test_a_hand_edited_rendered_file_is_kept_as_a_named_backup(host):
    path = "/etc/modprobe.d/rigkit-nouveau.conf"
    with host.hand_edit(path, "# the operator was here"):  # put back if the deploy did not replace it
        edited = host.run(f"cat {path}").stdout
        proc = deploy(host)
        assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(rf"{re.escape(path)}: its content was not written by rigkit \(edited by hand\?\); the replaced file is "
                  rf"kept as ({re.escape(path)}\.rigkit-bak-\d{{8}}T\d{{6}}Z)", proc.stderr)
    assert m, proc.stderr[-3000:]
    assert host.run(f"cat {m[1]}").stdout == edited
    assert "the operator was here" not in host.run(f"cat {path}").stdout
    again = deploy(host)
    assert changed(again) == 0, again.stderr[-3000:]


def test_a_failed_refetch_keeps_the_model_file_and_strata_answers(host):
    gguf = "/srv/models/strata/strata-coder-Q4_K_M.gguf"
    # bit rot in the last byte (tensor data): the file no longer matches the lock
    host.run(f"python3 -c \"p='{gguf}'; b=bytearray(open(p,'rb').read()); b[-1]^=1; open(p,'wb').write(b)\"")
    before = host.run(f"sha256sum {gguf}").stdout.split()[0]
    proc = deploy(host, token=NEW_TOKEN)  # the hub refuses this token: the refetch fails
    assert proc.returncode != 0
    assert "HTTP 401" in proc.stderr and NEW_TOKEN not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert host.run(f"sha256sum {gguf}").stdout.split()[0] == before
    strata_answers(host)
    old = host.run("docker inspect --format '{{.Id}}' strata").stdout.strip()  # serving the rotten file's copy
    fixed = deploy(host)  # the right token: the verified successor replaces it
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    assert host.run(f"sha256sum {gguf}").stdout.split()[0] != before
    # the running server still had the rotten file mapped: llama-swap restarts through the activation path, and
    # Strata serves from a fresh container, i.e. from the verified file (before, it went on serving the old copy)
    assert re.search(r"Restart llama-swap for its new unit or binary, a docker restart or new model files[^\n]*\n"
                     r"\s+\[\S+\] Success", fixed.stderr), fixed.stderr[-4000:]
    strata_answers(host)
    new = host.run("docker inspect --format '{{.Id}}' strata").stdout.strip()
    assert new and new != old


def test_a_missing_package_is_installed_with_one_pacman_syu_never_sy_alone(host):
    host.run("pacman -R --noconfirm docker-buildx")
    host.run("cp /var/log/pacman.log /root/pacman.log.before")
    proc = deploy(host)
    assert proc.returncode == 0, proc.stderr[-3000:]
    new = host.run("diff /root/pacman.log.before /var/log/pacman.log | sed -n 's/^> //p'", check=False).stdout
    runs = re.findall(r"\[PACMAN\] Running '([^']*)'", new)
    assert runs == ["pacman -Syu --noconfirm --needed docker-buildx"], new[-2000:]
    assert host.run("pacman -Q docker-buildx", check=False).returncode == 0
    again = deploy(host)
    assert changed(again) == 0, again.stderr[-3000:]
    strata_answers(host)


CANARY = "/tmp/rigkit-canary"
PAYLOAD = f"$(touch {CANARY}-a) `touch {CANARY}-b`; touch {CANARY}-c && touch {CANARY}-d"


def test_every_accepted_shell_payload_is_carried_literally_and_runs_nowhere(host):
    """Issue #28 on the real deploy: one deploy carries shell payloads in every kind of place the spec
    accepts them (a llama-swap member's description and env — llama-swap runs members without a shell
    — HyperQwen's .env, a declared lock file the preflight tests in a root shell), activates the config,
    and no canary file exists afterwards, on the host or here; the payloads are in the host's files as
    written. A plain deploy puts the rig back (it runs last in the module)."""
    subprocess.run(f"rm -f {CANARY}*", shell=True, check=False)
    host.run(f"rm -f {CANARY}*")
    data = {
        "llama_swap": {"members": {"strata": {"description": PAYLOAD, "env": [f"RIGKIT_NOTE={PAYLOAD}"]}}},
        "hyperqwen": {"extra_env": {"RIGKIT_NOTE": PAYLOAD}},
        "lock_files": [f"/run/rigkit lock {PAYLOAD}"],
    }
    args = [a for k, v in data.items() for a in ("--data", f"{k}={json.dumps(v)}")]
    proc = deploy(host, *args)
    try:
        assert proc.returncode == 0, proc.stderr[-4000:]
        left = host.run(f"ls {CANARY}* 2>/dev/null || true").stdout.split()
        assert left == [], f"a payload ran on the host as root: {left}"
        assert not list(Path("/tmp").glob("rigkit-canary*")), "a payload ran on the control machine"
        import yaml

        live = yaml.safe_load(host.run("cat /etc/llama-swap/config.yaml").stdout)
        assert live["models"]["strata"]["description"] == PAYLOAD
        assert f"RIGKIT_NOTE={PAYLOAD}" in live["models"]["strata"]["env"]
        from rigkit.common.envfile import parse_env_text

        assert parse_env_text(host.run("cat /opt/rigkit/hyperqwen/.env").stdout)["RIGKIT_NOTE"] == PAYLOAD
        strata_answers(host)  # the member started with the payload in its environment, as one value
    finally:
        back = deploy(host)
        assert back.returncode == 0, back.stderr[-3000:]
    assert host.run(f"ls {CANARY}* 2>/dev/null || true").stdout.split() == []
