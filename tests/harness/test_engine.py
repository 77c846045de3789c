"""The real Docker engine on the sandbox host: Debian 13's docker.io
26.1 with containerd and runc under the host's systemd 257, Compose v2.40.3 as the CLI plugin, the
sandbox registry answering as ghcr.io, the NVIDIA toolkit's real ``nvidia-ctk`` (the pinned release, built from
its Go module) and its stand-in hook recording GPU requests (the hook needs a GPU; the CLI does not).
A fresh host, not the converged copy: the engine is installed by hand, outside any deploy."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostctl  # noqa: E402
import nvidia_ctk_release  # noqa: E402

pytestmark = pytest.mark.harness


def images() -> dict[str, str]:
    return json.loads((hostctl.fixtures_www() / "images.json").read_text())


@pytest.fixture(scope="module")
def ehost(make_module_host):
    h = make_module_host("e1")
    h.run("pacman -Sy >/dev/null && pacman -S --noconfirm --needed docker docker-compose nvidia-container-toolkit >/dev/null "
          "&& timeout 120 systemctl enable --now docker.service", timeout=300)
    return h


def test_the_engine_is_real_and_compose_is_v2_40_3(ehost):
    v = json.loads(ehost.run("timeout 20 docker version --format '{{json .}}'").stdout)
    assert v["Server"]["Version"] == "26.1.5+dfsg1"
    assert {c["Name"] for c in v["Server"]["Components"]} >= {"Engine", "containerd", "runc", "docker-init"}
    assert ehost.run("timeout 20 docker compose version").stdout.strip() == "Docker Compose version v2.40.3"
    info = ehost.run("timeout 20 docker info --format '{{.Driver}} {{.CgroupDriver}} {{.CgroupVersion}}'").stdout.split()
    assert info == ["overlay2", "systemd", "2"]  # cgroup v2 under systemd 257 (hostctl: the host's own v2 tree)


def test_the_host_is_as_new_as_a_rig_pacman_7_systemd_257_docker_26(ehost):
    """Issue 58: the sandbox plays a current Arch box with programs of that age (Debian 13 trixie's,
    notes/sandbox-trixie.md), not Debian 12's pacman 6.0, systemd 252 and Docker 20.10."""
    pacman = re.search(r"Pacman v(\d+)\.(\d+)\.(\d+)", ehost.run("pacman --version").stdout)
    assert pacman and int(pacman[1]) == 7, pacman
    systemd = ehost.run("systemctl --version").stdout.splitlines()[0]  # "systemd 257 (257.13-1~deb13u1)"
    assert systemd.startswith("systemd ") and int(systemd.split()[1]) >= 257, systemd
    server = ehost.run("timeout 20 docker version --format '{{.Server.Version}}'").stdout.strip()
    assert int(server.split(".")[0]) >= 26, server


def test_nvidia_ctk_is_the_real_pinned_release_and_merges_the_runtime_as_nvidia_documents(ehost):
    """The package carries the real Go binary (an ELF, not a script) at the pinned version; ``runtime configure
    --runtime=docker`` keeps other keys, logs on stderr (logrus), and fails on an empty file ("EOF") — the three
    ways the retired Python stand-in differed. The deploy does not call it (README "Real parts")."""
    pin = nvidia_ctk_release.VERSION.lstrip("v")
    assert ehost.run("od -An -tx1 -N4 /usr/bin/nvidia-ctk").stdout.split() == ["7f", "45", "4c", "46"]  # \x7fELF
    assert ehost.run("nvidia-ctk --version").stdout.splitlines()[0] == f"NVIDIA Container Toolkit CLI version {pin}"
    assert ehost.run("pacman -Q nvidia-container-toolkit").stdout == f"nvidia-container-toolkit {pin}-1\n"
    ehost.run("""mkdir -p /root/ctk && echo '{"log-driver": "journald", "exec-opts": ["native.cgroupdriver=cgroupfs"]}' """
              "> /root/ctk/daemon.json")
    r = ehost.run("nvidia-ctk runtime configure --runtime=docker --config=/root/ctk/daemon.json")
    assert r.stdout == "" and "It is recommended that docker daemon be restarted." in r.stderr
    assert json.loads(ehost.run("cat /root/ctk/daemon.json").stdout) == {
        "exec-opts": ["native.cgroupdriver=cgroupfs"], "log-driver": "journald",
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    empty = ehost.run(": > /root/ctk/daemon.json && nvidia-ctk runtime configure --runtime=docker "
                      "--config=/root/ctk/daemon.json", check=False)
    assert empty.returncode == 1 and "unable to load config for runtime docker: EOF" in empty.stderr


def test_a_digest_pull_comes_from_the_sandbox_registry_as_ghcr_io(ehost):
    ref = "ghcr.io/ggml-org/llama.cpp@" + images()["ghcr.io/ggml-org/llama.cpp"]
    assert ehost.run(f"timeout 120 docker pull -q {ref}").stdout.strip() == ref
    missing = ehost.run("timeout 60 docker pull ghcr.io/ggml-org/llama.cpp@sha256:" + "ab" * 32, check=False)
    assert missing.returncode == 1
    assert "manifest unknown" in missing.stderr and "Error response from daemon" in missing.stderr


def test_gpus_all_reaches_the_toolkit_hook_and_a_missing_model_fails_like_llama_server(ehost):
    ref = "ghcr.io/ggml-org/llama.cpp@" + images()["ghcr.io/ggml-org/llama.cpp"]
    ehost.run("rm -rf /run/fake-gpu/requests")
    r = ehost.run(f"timeout 120 docker run --rm --init --name e-missing --gpus all {ref} --model /models/nope.gguf", check=False)
    assert r.returncode == 1
    assert "failed to open GGUF file '/models/nope.gguf'" in r.stderr and "main: exiting due to model loading error" in r.stderr
    recs = [json.loads(x) for x in ehost.run("cat /run/fake-gpu/requests/*.json").stdout.replace("}\n{", "}\x00{").split("\x00")]
    assert len(recs) == 1 and recs[0]["visible_devices"] == "all"
    assert recs[0]["args"][-2:] == ["--model", "/models/nope.gguf"]
    # without the hook on PATH dockerd has no "nvidia" device driver: --gpus fails with the engine's error
    ehost.run("mv /usr/bin/nvidia-container-runtime-hook /root/hook && timeout 60 systemctl restart docker")
    try:
        r = ehost.run(f"timeout 60 docker run --rm --gpus all {ref} --model /x", check=False)
        assert r.returncode == 125 and 'could not select device driver "" with capabilities: [[gpu]]' in r.stderr
    finally:
        ehost.run("mv /root/hook /usr/bin/nvidia-container-runtime-hook && timeout 60 systemctl restart docker")


def test_a_daemon_json_the_engine_rejects_stops_it_from_starting(ehost):
    ehost.run("cp /etc/docker/daemon.json /root/daemon.json.ok 2>/dev/null || echo '{}' > /root/daemon.json.ok")
    ehost.run("""mkdir -p /etc/docker && echo '{"no-such-option": true}' > /etc/docker/daemon.json""")
    try:
        r = ehost.run("timeout 60 systemctl restart docker", check=False)
        assert r.returncode != 0
        log = ehost.run("journalctl -u docker.service -n 30 --no-pager").stdout
        assert "unable to configure the Docker daemon with file /etc/docker/daemon.json" in log
        assert "no-such-option" in log
    finally:
        ehost.run("cp /root/daemon.json.ok /etc/docker/daemon.json && systemctl reset-failed docker.service; "
                  "timeout 60 systemctl restart docker")


def test_restarting_the_engine_stops_running_containers(ehost):
    """No live-restore (the rig's daemon.json does not set it): a restart of docker.service takes every
    container down, and a --rm one is gone."""
    ref = "ghcr.io/syv-ai/hyperqwen@" + images()["ghcr.io/syv-ai/hyperqwen"]
    ehost.run("mkdir -p /srv/e-models")
    ehost.run(f"timeout 120 docker run -d --rm --init --name e-long -e PREPARE=0 -v /srv/e-models:/app/models {ref} single")
    assert ehost.run("docker ps --format '{{.Names}}'").stdout.split() == ["e-long"]
    ehost.run("timeout 60 systemctl restart docker")
    assert ehost.run("docker ps -a --format '{{.Names}}'").stdout.split() == []


def test_hyperqwen_prepare_refuses_an_incomplete_model_under_no_download_then_prepares_once(ehost):
    """The HyperQwen image's ``prepare`` (the engine stand-in's, tests/harness/stubs/hyperqwen_prepare.py)
    under the real engine, with the bind the rendered compose file gives it (``$MODELS_DIR`` at
    ``/app/models``): an incomplete base model and ``NO_DOWNLOAD=1`` is refused naming what is
    missing; a complete one is prepared once, in place; a second run changes nothing. (Moved here
    from the retired docker stand-in's tests.)"""
    ref = "ghcr.io/syv-ai/hyperqwen@" + images()["ghcr.io/syv-ai/hyperqwen"]
    base = "/srv/models/hyperqwen-e/Qwen3.8-27B-W4A16-AutoRound"
    ehost.run(f"rm -rf /srv/models/hyperqwen-e && mkdir -p {base}")
    run = (f"timeout 120 docker run --rm -v /srv/models/hyperqwen-e:/app/models -e NO_DOWNLOAD=1 -e DFLASH2=0 "
           f"-e FAST_VARIANT=0 {ref} prepare")
    r = ehost.run(run, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("prepare: error: base model incomplete in /app/models/Qwen3.8-27B-W4A16-AutoRound (missing: config.json, "
            "model.safetensors.index.json) and NO_DOWNLOAD=1: refusing to download") in r.stdout + r.stderr
    ehost.write(f"{base}/config.json", "{}")
    ehost.write(f"{base}/model.safetensors.index.json", '{"weight_map": {"a": "model-00001.safetensors"}}')
    ehost.write(f"{base}/model-00001.safetensors", "x")
    assert "requantized" in ehost.run(run).stdout
    index = json.loads(ehost.run(f"cat {base}/model.safetensors.index.json").stdout)
    assert index["metadata"]["hyperqwen_prepared"]["lm_head"] == "int8"
    before = ehost.run(f"sha256sum {base}/*").stdout
    assert "already prepared" in ehost.run(run).stdout
    assert ehost.run(f"sha256sum {base}/*").stdout == before
