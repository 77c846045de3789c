"""The host-side fetch (rigkit.host.fetch) against the test hub: placement, verification, the
record, resume, corruption, disk space, token, upstream removal, prepared HyperQwen."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigkit.host.fetch import fetch_model
from rigkit.host.modelrecords import PARTIAL_DIR, FetchError, LockInputError, compare, load_record, record
from tests.hub import repos

from .helpers import TOKEN, WRONG_TOKEN, all_text, bridge_path, repo_bytes

ROOT = Path(__file__).resolve().parents[2]
AGENT = str(Path(sys.executable).parent / "rigkit-agent")  # the console script, as on the host
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
W4A16_DIR = "hyperqwen/Qwen3.8-27B-W4A16-AutoRound"


def fetch(lock, name, host, hub, messages=None, **kw):
    log = messages.append if messages is not None else (lambda m: None)
    return fetch_model(lock, name, endpoint=hub.endpoint, log=log, progress="off", **host, **kw)


def byte_requests(hub):
    """GETs that moved file bytes (hub resolve of a regular file, or the CDN)."""
    return [r for r in hub.hub.requests("GET") if r["role"] == "cdn" or "/resolve/" in r["path"]]


def target(host, path=W4A16_DIR) -> Path:
    return host["models_root"] / path


def test_fetch_places_exactly_the_locked_files_verified(hub, lock, host):
    res = fetch(lock, "hyperqwen", host, hub)
    locked = [f["path"] for f in lock["models"]["hyperqwen"]["files"]]
    assert res.fetched == locked and res.adopted == [] and res.unchanged == []
    assert sorted(p.name for p in target(host).iterdir()) == sorted(locked)  # no README, no .partial left
    for rel in locked:
        assert (target(host) / rel).read_bytes() == repo_bytes(hub, repos.W4A16, rel)
    rec = load_record(host["state_dir"], "hyperqwen")
    assert rec["reference"] == "lock" and rec["commit"] == lock["models"]["hyperqwen"]["commit"]
    assert set(rec["files"]) == set(locked)
    st = (target(host) / SHARD1).stat()
    assert rec["files"][SHARD1]["size"] == st.st_size and rec["files"][SHARD1]["mtime_ns"] == st.st_mtime_ns
    # The token went to the hub, never to the CDN origin.
    assert {r["auth"] for r in hub.hub.requests() if r["role"] == "hub"} == {"ok"}
    assert {r["auth"] for r in hub.hub.requests() if r["role"] == "cdn"} == {"none"}


def test_second_run_downloads_nothing_and_asks_nothing(hub, lock, host):
    fetch(lock, "hyperqwen", host, hub)
    hub.hub.clear_log()
    res = fetch(lock, "hyperqwen", host, hub)
    assert res.fetched == [] and res.bytes_downloaded == 0
    assert res.unchanged == [f["path"] for f in lock["models"]["hyperqwen"]["files"]]
    assert hub.hub.requests() == []


def test_files_already_in_place_are_adopted_without_download(hub, lock, host):
    dest = target(host, "gguf-baseline")
    dest.mkdir(parents=True)
    (dest / "Qwen3.8-27B-Q4_K_M.gguf").write_bytes(repo_bytes(hub, repos.GGUF, "Qwen3.8-27B-Q4_K_M.gguf"))
    msgs = []
    res = fetch(lock, "gguf-baseline", host, hub, msgs)
    assert res.adopted == ["Qwen3.8-27B-Q4_K_M.gguf"] and res.fetched == []
    assert hub.hub.requests() == []
    assert "gguf-baseline: Qwen3.8-27B-Q4_K_M.gguf: present, sha256 matches the lock; adopted" in msgs
    assert load_record(host["state_dir"], "gguf-baseline")["files"]["Qwen3.8-27B-Q4_K_M.gguf"]["sha256"] == \
        lock["models"]["gguf-baseline"]["files"][0]["sha256"]


def test_files_not_in_the_lock_are_never_deleted(hub, lock, host):
    dest = target(host)
    dest.mkdir(parents=True)
    (dest / "README.md").write_text("operator notes\n")
    (dest / "extra").mkdir()
    (dest / "extra" / "keep.bin").write_bytes(b"x" * 10)
    fetch(lock, "hyperqwen", host, hub)
    fetch(lock, "hyperqwen", host, hub)
    assert (dest / "README.md").read_text() == "operator notes\n" and (dest / "extra" / "keep.bin").exists()


@pytest.fixture
def small_chunks(monkeypatch):
    """huggingface-hub writes a download in 10 MiB chunks (``constants.DOWNLOAD_CHUNK_SIZE``); the
    test files are ~0.5 MiB, so use 64 KiB chunks to let a cut land after some chunks, as it does
    in a multi-GiB shard."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 65536)


@pytest.mark.slow
def test_transfer_cut_midway_resumes_with_range(hub, lock, host, small_chunks):
    hub.hub.fault(repos.W4A16, SHARD1, "cut", after=200_000, times=1)
    res = fetch(lock, "hyperqwen", host, hub)
    assert SHARD1 in res.fetched
    gets = [r for r in byte_requests(hub) if r["path"] == bridge_path(hub, repos.W4A16, SHARD1)]
    assert [g["range"] for g in gets] == [None, "bytes=196608-"]  # 3 whole 64 KiB chunks were written
    assert (target(host) / SHARD1).read_bytes() == repo_bytes(hub, repos.W4A16, SHARD1)


@pytest.fixture
def no_retry_pause(monkeypatch):
    """``http_get`` sleeps 1 s before resuming a cut transfer (``time.sleep(1)``); the property
    below cuts once per example, so its module's ``time`` skips that pause (nothing else of it)."""
    from huggingface_hub import file_download

    class _Time:
        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def sleep(seconds):
            pass

    monkeypatch.setattr(file_download, "time", _Time())


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=1, max_value=535_583))
def test_a_cut_anywhere_in_a_bridge_transfer_resumes_from_the_bytes_kept(hub, lock, small_chunks, no_retry_pause,
                                                                         tmp_path_factory, cut):
    """Whatever byte the connection to the LFS bridge is cut at, the file ends exact, and the
    client asks again only from the last whole chunk it wrote (64 KiB here; ``http_get`` discards
    a partial chunk): ``bytes=<kept>-``, or the whole file when none was kept."""
    root = tmp_path_factory.mktemp("cut")
    token_file = root / "hf.env"
    token_file.write_text(f"HF_TOKEN={TOKEN}\n")
    host = {"models_root": root / "models", "state_dir": root / "state", "token_file": token_file}
    hub.hub.reset()
    hub.hub.fault(repos.STRATA, "strata-coder-Q4_K_M.gguf", "cut", after=cut, times=1)
    res = fetch(lock, "strata", host, hub)
    data = repo_bytes(hub, repos.STRATA, "strata-coder-Q4_K_M.gguf")
    assert res.fetched == ["strata-coder-Q4_K_M.gguf"] and res.bytes_downloaded == len(data)
    assert (target(host, "strata") / "strata-coder-Q4_K_M.gguf").read_bytes() == data
    kept = cut - cut % 65536
    gets = [r for r in byte_requests(hub) if r["path"] == bridge_path(hub, repos.STRATA, "strata-coder-Q4_K_M.gguf")]
    assert [(g["range"], g["status"]) for g in gets] == [(None, -2), (f"bytes={kept}-" if kept else None,
                                                                        206 if kept else 200)]


def test_partial_from_a_killed_run_is_resumed(hub, lock, host):
    f = next(f for f in lock["models"]["gguf-baseline"]["files"])
    data = repo_bytes(hub, repos.GGUF, f["path"])
    part = target(host, "gguf-baseline") / PARTIAL_DIR / f"{f['sha256']}.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(data[:300_000])
    msgs = []
    res = fetch(lock, "gguf-baseline", host, hub, msgs)
    assert res.fetched == [f["path"]] and res.bytes_downloaded == len(data) - 300_000
    assert [r["range"] for r in byte_requests(hub)] == ["bytes=300000-"]
    assert "gguf-baseline: Qwen3.8-27B-Q4_K_M.gguf: resuming at 292.97 KiB of 523.03 KiB" in msgs
    assert not part.parent.exists()


@pytest.mark.slow
def test_killed_agent_fetch_resumes_on_the_next_run(hub, lock, host, tmp_path):
    lock_file = tmp_path / "lock.json"
    lock_file.write_text(json.dumps(lock))
    hub.hub.fault(repos.STRATA, "strata-coder-Q4_K_M.gguf", "stall", after=250_000)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # The agent with 64 KiB download chunks (see small_chunks), killed while the hub stalls.
    code = ("import sys, huggingface_hub.constants as c; c.DOWNLOAD_CHUNK_SIZE = 65536; "
            "from rigkit.host.__main__ import main; main()")
    proc = subprocess.Popen([sys.executable, "-c", code, "fetch", "--lock", str(lock_file), "--model", "strata",
                             "--models-root", str(host["models_root"]), "--state-dir", str(host["state_dir"]),
                             "--token-file", str(host["token_file"]), "--endpoint", hub.endpoint],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    part = target(host, "strata") / PARTIAL_DIR / f"{lock['models']['strata']['files'][0]['sha256']}.part"
    # polls of state; the deadlines only guard a hang
    deadline = time.monotonic() + 60
    while not (part.exists() and part.stat().st_size == 196_608):  # 3 whole chunks; the 4th waits on the stall
        assert time.monotonic() < deadline and proc.poll() is None, "the agent never wrote the 3 chunks before the stall"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    hub.hub.release()
    deadline = time.monotonic() + 60
    while not any(r["method"] == "GET" and r["status"] == -2 for r in hub.hub.requests()):
        assert time.monotonic() < deadline, "the stalled request was never logged"
        time.sleep(0.05)  # the stalled handler logs its request once released
    assert part.stat().st_size == 196_608 and not (target(host, "strata") / "strata-coder-Q4_K_M.gguf").exists()
    hub.hub.clear_log()
    res = fetch(lock, "strata", host, hub)
    assert res.fetched == ["strata-coder-Q4_K_M.gguf"]
    assert [r["range"] for r in byte_requests(hub)] == ["bytes=196608-"]


def test_corrupted_download_is_detected_and_fetched_again(hub, lock, host):
    hub.hub.fault(repos.GGUF, "Qwen3.8-27B-Q4_K_M.gguf", "corrupt", times=1)
    msgs = []
    res = fetch(lock, "gguf-baseline", host, hub, msgs)
    assert res.fetched == ["Qwen3.8-27B-Q4_K_M.gguf"]
    assert len(byte_requests(hub)) == 2
    assert any("downloaded bytes fail verification" in m and "fetching it again" in m for m in msgs)
    assert (target(host, "gguf-baseline") / "Qwen3.8-27B-Q4_K_M.gguf").read_bytes() == \
        repo_bytes(hub, repos.GGUF, "Qwen3.8-27B-Q4_K_M.gguf")


def test_corrupted_twice_fails_and_leaves_nothing_in_place(hub, lock, host):
    hub.hub.fault(repos.GGUF, "Qwen3.8-27B-Q4_K_M.gguf", "corrupt", times=2)
    with pytest.raises(FetchError, match="failed twice, nothing left in place"):
        fetch(lock, "gguf-baseline", host, hub)
    dest = target(host, "gguf-baseline")
    assert [p.name for p in dest.rglob("*") if p.is_file()] == []


def test_corrupted_file_on_disk_is_replaced(hub, lock, host):
    fetch(lock, "hyperqwen", host, hub)
    shard = target(host) / SHARD2
    data = bytearray(shard.read_bytes())
    data[1000] ^= 0xFF
    shard.write_bytes(bytes(data))
    hub.hub.clear_log()
    msgs = []
    res = fetch(lock, "hyperqwen", host, hub, msgs)
    assert res.fetched == [SHARD2] and len(res.unchanged) == 7
    assert shard.read_bytes() == repo_bytes(hub, repos.W4A16, SHARD2)
    assert "hyperqwen: model-00002-of-00002.safetensors: sha256 or size does not match the lock " \
           "(540920 bytes, lock 540920); it will be replaced" in msgs


@pytest.mark.parametrize("failure", ["corrupt-twice", "wrong-token"])
def test_a_failed_refetch_leaves_the_previous_file_in_place(hub, lock, host, failure):
    """A file that fails its hash is replaced only by its verified successor: a refetch whose transfer
    fails (bytes that never verify, the hub refusing the token) leaves the old file where it was."""
    fetch(lock, "gguf-baseline", host, hub)
    gguf = target(host, "gguf-baseline") / "Qwen3.8-27B-Q4_K_M.gguf"
    data = bytearray(gguf.read_bytes())
    data[10] ^= 0xFF  # bit rot: the file no longer matches the lock
    gguf.write_bytes(bytes(data))
    if failure == "corrupt-twice":
        hub.hub.fault(repos.GGUF, "Qwen3.8-27B-Q4_K_M.gguf", "corrupt", times=2)
    else:
        host["token_file"].write_text(f"HF_TOKEN={WRONG_TOKEN}\n")
    with pytest.raises(FetchError):
        fetch(lock, "gguf-baseline", host, hub)
    assert gguf.read_bytes() == bytes(data), "the previous file must stay until its successor verifies"


def test_too_little_disk_is_refused_before_any_download(hub, lock, host):
    dest = target(host)
    dest.mkdir(parents=True)
    config = repo_bytes(hub, repos.W4A16, "config.json")
    (dest / "config.json").write_bytes(config)
    with pytest.raises(FetchError) as err:
        fetch(lock, "hyperqwen", host, hub, free_space=lambda p: 4096)
    need = lock["models"]["hyperqwen"]["total_bytes"] - len(config)
    assert str(err.value) == (
        f"hyperqwen: not enough disk at {dest}: {need} bytes (1.03 MiB) still to download for 7 file(s), "
        f"4096 bytes (4.00 KiB) free; {len(config)} B already in place, 0 B partially downloaded. Nothing was downloaded; "
        "free space or move the models root")
    assert byte_requests(hub) == [] and hub.hub.requests() == []
    assert sorted(p.name for p in dest.iterdir()) == ["config.json"]


@pytest.mark.slow
def test_too_little_disk_on_a_small_mount(hub, lock, host):
    mnt = host["models_root"]
    mnt.mkdir(parents=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a 512 KiB tmpfs")
    try:
        total = lock["models"]["hyperqwen"]["total_bytes"]
        with pytest.raises(FetchError, match=rf"not enough disk at .*: {total} bytes \(1\.03 MiB\) still to download "
                                             r"for 8 file\(s\), \d+ bytes \(\d+\.\d+ KiB\) free"):
            fetch(lock, "hyperqwen", host, hub)
        assert byte_requests(hub) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_wrong_token_is_a_clear_error_without_the_token(hub, lock, host):
    host["token_file"].write_text(f"HF_TOKEN={WRONG_TOKEN}\n")
    msgs = []
    with pytest.raises(FetchError) as err:
        fetch(lock, "strata", host, hub, msgs)
    assert str(err.value) == (
        f"strata: {repos.STRATA}@{lock['models']['strata']['commit']}: strata-coder-Q4_K_M.gguf: the hub refused "
        f"the HF token from {host['token_file']} (HTTP 401): check HF_TOKEN in {host['token_file']} (value not shown) "
        "and its access to the repo")
    assert WRONG_TOKEN not in str(err.value) + "".join(msgs) + all_text(host["models_root"], host["state_dir"])


@pytest.mark.slow
def test_agent_cli_wrong_token_exit_1_and_never_prints_it(hub, lock, host, tmp_path):
    lock_file = tmp_path / "lock.json"
    lock_file.write_text(json.dumps(lock))
    host["token_file"].write_text(f"HF_TOKEN={WRONG_TOKEN}\n")
    args = [AGENT, "fetch", "--lock", str(lock_file), "--model", "strata",
            "--models-root", str(host["models_root"]), "--state-dir", str(host["state_dir"]),
            "--token-file", str(host["token_file"]), "--endpoint", hub.endpoint]
    proc = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 1 and "(HTTP 401)" in proc.stderr
    assert WRONG_TOKEN not in proc.stderr + proc.stdout
    host["token_file"].write_text(f"HF_TOKEN={TOKEN}\n")
    proc = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["fetched"] == ["strata-coder-Q4_K_M.gguf"]
    assert TOKEN not in proc.stderr + proc.stdout + all_text(host["models_root"], host["state_dir"], lock_file)
    proc = subprocess.run(args[:5] + ["nope"] + args[6:], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert proc.returncode == 2 and "model 'nope' is not in the lock" in proc.stderr


def test_file_removed_upstream_after_locking_fails_loudly(hub, lock, host):
    hub.hub.remove(repos.W4A16, SHARD2)
    with pytest.raises(FetchError) as err:
        fetch(lock, "hyperqwen", host, hub)
    assert str(err.value) == (
        f"hyperqwen: {repos.W4A16}@{lock['models']['hyperqwen']['commit']}: {SHARD2}: gone upstream (HTTP 404) "
        "although the lock names it — the repo's history was rewritten or the file deleted; nothing fetched for it. "
        "Review upstream, then re-lock with `rigkit models lock`")
    assert not (target(host) / SHARD2).exists()
    assert (target(host) / SHARD1).read_bytes() == repo_bytes(hub, repos.W4A16, SHARD1)  # verified ones stay


def test_fetch_takes_the_locked_commit_not_the_branch(hub, lock, host):
    hub.hub.push(repos.W4A16, {"config.json": b'{"moved": true}\n'})
    fetch(lock, "hyperqwen", host, hub)
    assert (target(host) / "config.json").read_bytes() == repo_bytes(hub, repos.W4A16, "config.json")
    commit = lock["models"]["hyperqwen"]["commit"]
    assert all(f"/resolve/{commit}/" in r["path"] for r in hub.hub.requests("HEAD"))


def test_model_not_in_lock_is_invalid_input(lock, host, hub):
    with pytest.raises(LockInputError, match="model 'nope' is not in the lock"):
        fetch(lock, "nope", host, hub)


def test_url_model_is_fetched_and_verified_without_the_token(hub, host):
    data = repo_bytes(hub, repos.STRATA, "strata-coder-Q4_K_M.gguf")
    sha = hashlib.sha256(data).hexdigest()
    url = f"http://127.0.0.1:{hub.cdn.server_address[1]}/lfs/{repos.STRATA}/{sha}/strata-coder-Q4_K_M.gguf"
    lock = {"version": 1, "models": {"strata": {"source": {"url": url, "sha256": sha, "path": "strata"},
                                                "files": [{"path": "strata-coder-Q4_K_M.gguf", "size": len(data),
                                                           "sha256": sha, "url": url}],
                                                "total_bytes": len(data)}}}
    res = fetch(lock, "strata", host, hub)
    assert res.fetched == ["strata-coder-Q4_K_M.gguf"]
    assert (target(host, "strata") / "strata-coder-Q4_K_M.gguf").read_bytes() == data
    assert {r["role"] for r in hub.hub.requests()} == {"cdn"}


# --- HyperQwen: prepare rewrites files in place ------------------------------------------------

def fake_prepare(dest: Path) -> None:
    """What HyperQwen's prepare does, in small: rewrite the index and a shard, add files."""
    index = json.loads((dest / "model.safetensors.index.json").read_text())
    index["weight_map"]["lm_head.weight"] = "lm_head.int8.safetensors"
    (dest / "model.safetensors.index.json").write_text(json.dumps(index))
    (dest / SHARD1).write_bytes((dest / SHARD1).read_bytes()[:-16] + b"\x01" * 16)
    (dest / "lm_head.int8.safetensors").write_bytes(b"\x00" * 4096)


def test_record_after_prepare_is_the_reference_for_a_converged_run(hub, lock, host):
    fetch(lock, "hyperqwen", host, hub, prepared=True)
    fake_prepare(target(host))
    rec = record("hyperqwen", target(host), lock, host["state_dir"])
    assert rec["reference"] == "prepare" and "lm_head.int8.safetensors" in rec["files"]
    prepared = (target(host) / SHARD1).read_bytes()
    hub.hub.clear_log()
    res = fetch(lock, "hyperqwen", host, hub, prepared=True)
    assert res.fetched == [] and not res.prepare_needed and len(res.unchanged) == 8
    assert hub.hub.requests() == []
    assert (target(host) / SHARD1).read_bytes() == prepared
    assert compare("hyperqwen", target(host), host["state_dir"]) == []
    os.utime(target(host) / SHARD1)  # touched, same bytes: hashed once, still the reference
    res = fetch(lock, "hyperqwen", host, hub, prepared=True)
    assert res.fetched == [] and SHARD1 in res.unchanged and hub.hub.requests() == []


def test_adopting_a_prepared_box_without_record_keeps_prepared_files(hub, lock, host):
    dest = target(host)
    dest.mkdir(parents=True)
    for f in lock["models"]["hyperqwen"]["files"]:
        (dest / f["path"]).write_bytes(repo_bytes(hub, repos.W4A16, f["path"]))
    fake_prepare(dest)
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    msgs = []
    res = fetch(lock, "hyperqwen", host, hub, msgs, prepared=True)
    assert res.kept == ["model-00001-of-00002.safetensors", "model.safetensors.index.json"]
    assert res.fetched == [] and res.prepare_needed and hub.hub.requests() == []
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert ("hyperqwen: model.safetensors.index.json: differs from the lock; kept (prepare's output?) — run prepare, "
            "then record") in msgs
    record("hyperqwen", dest, lock, host["state_dir"])
    res = fetch(lock, "hyperqwen", host, hub, prepared=True)
    assert not res.prepare_needed and res.kept == [] and len(res.unchanged) == 8


def test_base_file_lost_after_prepare_is_fetched_and_prepare_needed(hub, lock, host):
    fetch(lock, "hyperqwen", host, hub, prepared=True)
    fake_prepare(target(host))
    record("hyperqwen", target(host), lock, host["state_dir"])
    (target(host) / SHARD2).unlink()
    res = fetch(lock, "hyperqwen", host, hub, prepared=True)
    assert res.fetched == [SHARD2] and res.prepare_needed
    assert load_record(host["state_dir"], "hyperqwen")["prepare_needed"] is True
    assert compare("hyperqwen", target(host), host["state_dir"])[-1] == \
        "hyperqwen: a base file was fetched again; prepare must run (then record)"
    res = fetch(lock, "hyperqwen", host, hub, prepared=True)  # remembered until prepare + record
    assert res.prepare_needed and res.fetched == []
    record("hyperqwen", target(host), lock, host["state_dir"])
    assert not fetch(lock, "hyperqwen", host, hub, prepared=True).prepare_needed


def test_secrets_never_reach_records_or_files(hub, lock, host):
    for name in lock["models"]:
        fetch(lock, name, host, hub)
    assert TOKEN not in all_text(host["models_root"], host["state_dir"])
    shutil.rmtree(host["models_root"])
