"""docker/dockerd stand-ins: containers are real processes, children of the fake dockerd."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
from netcfg import BLOCK, FIX_URL, manifest, real_docker  # noqa: E402  (conftest puts tests/harness on sys.path)

MANIFEST = manifest()  # mirror.json, its URLs at this session's fixtures address (RIGKIT_HARNESS_NET)
TINY = Path("/work/shared/reference/llama/make_tiny_gguf.py")
IMG = "ghcr.io/ggml-org/llama.cpp:server-cuda"
pytestmark = [pytest.mark.harness,
              pytest.mark.skipif(real_docker(), reason="the docker stand-in is retired: hosts run the real engine (RIGKIT_HARNESS_DOCKER=stub brings it back)")]
COMPOSE = """
name: hyperqwen
x-hq: &hq
  image: ghcr.io/syv-ai/hyperqwen:sha-0123456
  env_file:
    - path: .env
      required: false
  volumes:
    - ${MODELS_DIR:-./models}:/app/models
services:
  prepare:
    <<: *hq
    command: prepare
  single:
    <<: *hq
    profiles: [single]
    command: single
    ports:
      - "${BIND:-127.0.0.1}:${PORT:-18020}:${PORT:-18020}"
    deploy: {resources: {reservations: {devices: [{driver: nvidia, count: 1, capabilities: [gpu]}]}}}
    depends_on:
      prepare: {condition: service_completed_successfully}
"""


@pytest.fixture(scope="module")
def dhost(nspawn_host):
    h = nspawn_host
    a = MANIFEST["archive_url"]
    h.run("pacman -Sy >/dev/null && pacman -S --noconfirm --needed docker docker-compose docker-buildx "
          "nvidia-container-toolkit linux-lts linux-lts-headers dkms >/dev/null && pacman -U --noconfirm --needed "
          f"{a}/n/nvidia-utils/nvidia-utils-610.57-1-x86_64.pkg.tar.zst "
          f"{a}/n/nvidia-open-dkms/nvidia-open-dkms-610.57-1-x86_64.pkg.tar.zst >/dev/null && "
          "systemctl enable --now docker.service")
    models = h.root / "srv/models/tiny"
    models.mkdir(parents=True, exist_ok=True)
    if TINY.exists():
        subprocess.run([sys.executable, str(TINY), str(models / "tiny.gguf")], check=True, capture_output=True)
    else:
        (models / "tiny.gguf").write_bytes(b"GGUF" + b"\0" * 1024)
    return h


def test_gpus_need_the_nvidia_runtime_and_a_docker_restart(dhost):
    r = dhost.run(f"docker run --rm --gpus all {IMG} --version", check=False)
    assert r.returncode == 125
    assert 'could not select device driver "" with capabilities: [[gpu]]' in r.stderr
    dhost.run("nvidia-ctk runtime configure --runtime=docker >/dev/null && systemctl restart docker")
    assert "nvidia" in json.loads(dhost.run("docker info --format '{{json .Runtimes}}'").stdout)


def test_missing_model_fails_like_llama_server(dhost):
    r = dhost.run(f"docker run --rm --init --gpus all -v /srv/models/tiny:/models {IMG} -m /models/nope.gguf", check=False)
    assert r.returncode == 1
    assert "failed to load model '/models/nope.gguf'" in r.stdout + r.stderr


def test_model_container_holds_vram_serves_and_stops(dhost):
    dhost.run(f"(setsid docker run --rm --init --gpus all --name strata -p 127.0.0.1:18030:8080 -v /srv/models/tiny:/models "
              f"{IMG} -m /models/tiny.gguf --port 8080 -a strata >/tmp/strata.log 2>&1 &)")
    dhost.run("for i in $(seq 300); do curl -fsS http://127.0.0.1:18030/health >/dev/null && exit 0; sleep 0.1; done; "
              "cat /tmp/strata.log; exit 1")
    used = int(dhost.run("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits").stdout)
    assert used > 1
    pid = int(dhost.run("docker inspect --format '{{.State.Pid}}' strata").stdout)
    dockerd = int(dhost.run("systemctl show -p MainPID --value docker").stdout)
    assert int(dhost.run(f"ps -o ppid= -p {pid}").stdout) == dockerd
    r = dhost.run("curl -fsS http://127.0.0.1:18030/v1/chat/completions -H 'Content-Type: application/json' "
                  "-d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4}'")
    assert json.loads(r.stdout)["choices"]
    print(dhost.run("cat /tmp/strata.log").stdout[-400:])
    assert dhost.run("docker stop strata").stdout == "strata\n"
    assert dhost.run("curl -sS http://127.0.0.1:18030/health", check=False).returncode == 7  # port closed
    assert dhost.run("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits").stdout == "1\n"
    assert dhost.run("docker ps -a -q").stdout == ""  # --rm


def test_compose_single_serves_with_the_api_key_and_down_stops_it(dhost):
    dhost.write("/opt/rigkit/hyperqwen/compose.yaml", COMPOSE)
    # PREPARE=0: the entrypoint skips its own prepare (the layout is tested below)
    dhost.write("/opt/rigkit/hyperqwen/.env", "MODELS_DIR=/srv/models/hyperqwen\nVLLM_API_KEY=k-sandbox\nPREPARE=0")
    dhost.run("mkdir -p /srv/models/hyperqwen")
    cfg = dhost.run("docker compose -f /opt/rigkit/hyperqwen/compose.yaml config").stdout
    assert "/srv/models/hyperqwen:/app/models" in cfg
    # as rigkit starts it: `prepare` has run once already (--no-deps)
    dhost.run("(cd /opt/rigkit/hyperqwen && setsid docker compose -p hyperqwen up --no-deps single >/tmp/hq.log 2>&1 &)")
    dhost.run("for i in $(seq 100); do curl -fsS http://127.0.0.1:18020/health >/dev/null && exit 0; sleep 0.1; done; "
              "cat /tmp/hq.log; exit 1")
    assert dhost.run("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:18020/v1/models").stdout == "401"
    models = dhost.run("curl -fsS -H 'Authorization: Bearer k-sandbox' http://127.0.0.1:18020/v1/models").stdout
    assert json.loads(models)["data"][0]["id"] == "qwen3.8-27b"
    dhost.run("cd /opt/rigkit/hyperqwen && docker compose -p hyperqwen down")
    assert dhost.run("curl -sS http://127.0.0.1:18020/health", check=False).returncode == 7


def test_prepare_refuses_an_incomplete_model_under_no_download_then_prepares_once(dhost):
    dhost.write("/opt/rigkit/hyperqwen/compose.yaml", COMPOSE)
    dhost.write("/opt/rigkit/hyperqwen/.env", "MODELS_DIR=/srv/models/hyperqwen\nNO_DOWNLOAD=1\nDFLASH2=0\nFAST_VARIANT=0")
    base = "/srv/models/hyperqwen/Qwen3.8-27B-W4A16-AutoRound"
    dhost.run(f"rm -rf /srv/models/hyperqwen && mkdir -p {base}")
    run = "cd /opt/rigkit/hyperqwen && docker compose -p hyperqwen run --rm prepare"
    r = dhost.run(run, check=False)
    assert r.returncode == 1
    assert ("prepare: error: base model incomplete in /app/models/Qwen3.8-27B-W4A16-AutoRound (missing: config.json, "
            "model.safetensors.index.json) and NO_DOWNLOAD=1: refusing to download") in r.stdout + r.stderr
    dhost.write(f"{base}/config.json", "{}")
    dhost.write(f"{base}/model.safetensors.index.json", '{"weight_map": {"a": "model-00001.safetensors"}}')
    dhost.write(f"{base}/model-00001.safetensors", "x")
    assert "requantized" in dhost.run(run).stdout
    index = json.loads(dhost.run(f"cat {base}/model.safetensors.index.json").stdout)
    assert index["metadata"]["hyperqwen_prepared"]["lm_head"] == "int8"
    before = dhost.run(f"sha256sum {base}/*").stdout
    assert "already prepared" in dhost.run(run).stdout
    assert dhost.run(f"sha256sum {base}/*").stdout == before


def test_single_runs_prepare_first_and_does_not_serve_an_unprepared_layout(dhost):
    dhost.write("/opt/rigkit/hyperqwen/compose.yaml", COMPOSE)
    dhost.write("/opt/rigkit/hyperqwen/.env", "MODELS_DIR=/srv/models/hyperqwen\nNO_DOWNLOAD=1\nVLLM_API_KEY=k")
    dhost.run("rm -rf /srv/models/hyperqwen && mkdir -p /srv/models/hyperqwen")
    # attached `up` returns when the container exits (as compose does, whatever its exit code)
    dhost.run("cd /opt/rigkit/hyperqwen && timeout 60 docker compose -p hyperqwen up --no-deps single", check=False)
    logs = dhost.run("docker logs hyperqwen-single-1", check=False)
    assert "NO_DOWNLOAD=1: refusing to download" in logs.stdout + logs.stderr
    assert dhost.run("curl -sS http://127.0.0.1:18020/health", check=False).returncode == 7
