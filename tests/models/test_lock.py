"""The lock file's models (rigkit.lockfile.hub) against the test hub, with the real huggingface-hub client."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rigkit.lockfile.document import dumps_lock
from rigkit.lockfile.errors import LockError
from rigkit.lockfile.hub import lock_models, select_files
from rigkit.lockfile.view import check_lock
from tests.hub import repos
from tests.hub.server import git_blob_id
from .helpers import TOKEN, WRONG_TOKEN, model_sources, repo_bytes

ROOT = Path(__file__).resolve().parents[2]


def test_lock_resolves_branch_to_commit_and_exact_files(hub, lock):
    entry = lock["models"]["hyperqwen"]
    assert entry["commit"] == hub.hub.repos[repos.W4A16].refs["main"]
    assert entry["source"] == {"repo_id": repos.W4A16, "revision": "main", "path": "hyperqwen/Qwen3.8-27B-W4A16-AutoRound",
                               "include": ["*.safetensors", "*.json", "*.txt", "tokenizer*", "*.jinja", "*.py"],
                               "exclude": []}
    assert [f["path"] for f in entry["files"]] == [
        "chat_template.jinja", "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"]
    for f in entry["files"]:
        data = repo_bytes(hub, repos.W4A16, f["path"])
        assert f["size"] == len(data)
        if f["path"].endswith(".safetensors"):
            assert f == {"path": f["path"], "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        else:
            assert f == {"path": f["path"], "size": len(data), "git_blob": git_blob_id(data)}
    assert entry["total_bytes"] == sum(f["size"] for f in entry["files"])


def test_lock_gguf_models_take_one_file_each(lock):
    assert [f["path"] for f in lock["models"]["gguf-baseline"]["files"]] == ["Qwen3.8-27B-Q4_K_M.gguf"]
    assert [f["path"] for f in lock["models"]["strata"]["files"]] == ["strata-coder-Q4_K_M.gguf"]
    assert set(lock["models"]) == {"hyperqwen", "hyperqwen-dflash2", "gguf-baseline", "strata"}


def test_lock_text_is_deterministic_and_holds_no_token(hub):
    first, _ = lock_models(model_sources(), endpoint=hub.endpoint, token=TOKEN)
    second, _ = lock_models(model_sources(), endpoint=hub.endpoint, token=TOKEN)
    assert dumps_lock(first) == dumps_lock(second)
    assert TOKEN not in dumps_lock(first) and hub.endpoint not in dumps_lock(first)
    assert dumps_lock(first).endswith("}\n") and json.loads(dumps_lock(first)) == first


def test_unset_models_are_skipped_and_named(hub):
    from rigkit.spec.model import _default_models

    result, skipped = lock_models(_default_models(), endpoint=hub.endpoint, token=TOKEN)
    assert skipped == ["gguf-baseline", "hyperqwen-dflash2", "strata"]
    assert list(result["models"]) == ["hyperqwen"]


def test_select_files_uses_hub_glob_semantics():
    assert select_files(["a.gguf", "x-Q4_K_M.gguf", "sub/y-Q4_K_M.gguf", "README.md"], ["*Q4_K_M*.gguf"], []) == [
        "sub/y-Q4_K_M.gguf", "x-Q4_K_M.gguf"]
    assert select_files(["a.json", "b.json"], [], ["b.*"]) == ["a.json"]


def test_spec_edited_after_locking_is_refused_with_relock(lock):
    models = model_sources()
    assert check_lock(models, lock, "inventory/x.lock.json") == []
    models["strata"] = models["strata"].model_copy(update={"revision": "v2"})
    models["gguf-baseline"] = models["gguf-baseline"].model_copy(update={"include": ["*Q8_0*.gguf"]})
    assert check_lock(models, lock, "inventory/x.lock.json") == [
        "models.gguf-baseline: spec changed since inventory/x.lock.json was written "
        "(include ['*Q4_K_M*.gguf'] → ['*Q8_0*.gguf']); re-lock with `rigkit models lock -i inventory/rig.py`",
        "models.strata: spec changed since inventory/x.lock.json was written (revision 'main' → 'v2'); "
        "re-lock with `rigkit models lock -i inventory/rig.py`",
    ]


def test_model_added_or_removed_after_locking_is_refused(lock):
    models = model_sources()
    extra = models["strata"].model_copy(update={"path": "other"})
    del models["strata"]
    models["other"] = extra
    assert check_lock(models, lock, "L") == [
        "models.other: not in L; re-lock with `rigkit models lock -i inventory/rig.py`",
        "models.strata: in L but not in the spec; re-lock with `rigkit models lock -i inventory/rig.py`",
    ]


def test_lock_with_wrong_token_fails_without_showing_it(hub):
    with pytest.raises(LockError) as err:
        lock_models(model_sources(), endpoint=hub.endpoint, token=WRONG_TOKEN)
    assert str(err.value) == (
        f"models.gguf-baseline: {repos.GGUF}@main: the hub refused the HF token (HTTP 401; from HF_TOKEN or hf's "
        "token file, value not shown); renew it")
    assert WRONG_TOKEN not in str(err.value)


def test_lock_unknown_revision_names_the_key(hub):
    models = model_sources()
    models["strata"] = models["strata"].model_copy(update={"revision": "no-such-branch"})
    with pytest.raises(LockError, match=r"models\.strata: rigkit-test/Strata-Coder-GGUF@no-such-branch: revision not "
                                        r"found on the hub; check models\.strata\.revision"):
        lock_models(models, endpoint=hub.endpoint, token=TOKEN)


def test_lock_url_model_records_size_and_sha256(hub):
    from rigkit.spec.model import ModelSource

    data = repo_bytes(hub, repos.STRATA, "strata-coder-Q4_K_M.gguf")
    sha = hashlib.sha256(data).hexdigest()
    url = f"{hub.endpoint.rsplit(':', 1)[0]}:{hub.cdn.server_address[1]}/lfs/{repos.STRATA}/{sha}/strata-coder-Q4_K_M.gguf"
    result, _ = lock_models({"strata": ModelSource(url=url, sha256=sha, path="strata")}, endpoint=hub.endpoint)
    assert result["models"]["strata"]["files"] == [
        {"path": "strata-coder-Q4_K_M.gguf", "size": len(data), "sha256": sha, "url": url}]


def _run(args, env, cwd):
    return subprocess.run([sys.executable, "-m", "rigkit", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120)


@pytest.mark.slow
def test_cli_lock_writes_beside_inventory_then_check_refuses_edit(hub, tmp_path):
    inv = tmp_path / "inventory" / "lab.py"
    inv.parent.mkdir()
    body = ('hosts = [("box", {"ssh_hostname": "127.0.0.1", "models": {'
            f'"hyperqwen-dflash2": {{"repo_id": "{repos.DFLASH2}"}}, "gguf-baseline": {{"repo_id": "{repos.GGUF}"}}, '
            f'"strata": {{"repo_id": "{repos.STRATA}", "revision": "REV"}}}}}})]\n')
    inv.write_text(body.replace("REV", "main"))
    env = {**os.environ, "HF_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}
    proc = _run(["models", "lock", "-i", str(inv)], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lock_file = tmp_path / "inventory" / "lab.lock.json"
    assert f"wrote {lock_file}" in proc.stderr
    assert TOKEN not in proc.stderr + proc.stdout + lock_file.read_text()
    assert _run(["models", "check", "-i", str(inv)], env, tmp_path).returncode == 0
    inv.write_text(body.replace("REV", "v2"))
    proc = _run(["models", "check", "-i", str(inv)], env, tmp_path)
    assert proc.returncode == 2
    assert "models.strata: spec changed since" in proc.stderr and f"re-lock with `rigkit models lock -i {inv}`" in proc.stderr


@pytest.mark.slow
def test_cli_lock_wrong_token_exits_1_without_printing_it(hub, tmp_path):
    inv = tmp_path / "lab.py"
    inv.write_text('hosts = [("box", {"ssh_hostname": "127.0.0.1"})]\n')
    env = {**os.environ, "HF_TOKEN": WRONG_TOKEN, "PYTHONPATH": str(ROOT)}
    proc = _run(["models", "lock", "-i", str(inv)], env, tmp_path)
    assert proc.returncode == 1
    assert "the hub refused the HF token (HTTP 401" in proc.stderr
    assert WRONG_TOKEN not in proc.stderr + proc.stdout
    assert not (tmp_path / "lab.lock.json").exists()


# --- the lock read as strictly as the spec (issue 15) -------------------------------------------

SANDBOX_LOCK = ROOT / "inventory" / "sandbox.lock.json"
REL = "a relative path inside the model folder (no '..', no leading '/', no empty part)"


def _edited(tmp_path, edit) -> Path:
    lock = json.loads(SANDBOX_LOCK.read_text())
    edit(lock)
    path = tmp_path / "lab.lock.json"
    path.write_text(json.dumps(lock))
    return path


BAD_LOCKS = [
    pytest.param(lambda lk: lk["models"]["strata"]["files"][0].pop("sha256"),
                 "models.strata.files[0]: each file needs exactly one of sha256 (64 hex) or git_blob (40 hex)",
                 id="file-without-a-hash"),
    pytest.param(lambda lk: lk["models"]["strata"]["files"][0].update(sha256="ABC"),
                 "models.strata.files[0].sha256: 64 lower-case hex digits ('ABC')", id="bad-sha256"),
    pytest.param(lambda lk: lk["models"]["strata"].pop("commit"),
                 "models.strata: a hub model needs its commit (40 hex), what `rigkit models lock -i inventory/rig.py` resolved",
                 id="hub-entry-without-commit"),
    pytest.param(lambda lk: lk["models"]["strata"].update(commit="main"),
                 "models.strata.commit: 40 lower-case hex digits ('main')", id="commit-not-a-sha"),
    pytest.param(lambda lk: lk["models"]["strata"]["files"][0].update(path="../../etc/shadow"),
                 f"models.strata.files[0].path: {REL} ('../../etc/shadow')", id="file-path-climbs-out"),
    pytest.param(lambda lk: lk["models"]["strata"]["files"][0].update(path="/etc/shadow"),
                 f"models.strata.files[0].path: {REL} ('/etc/shadow')", id="file-path-absolute"),
    pytest.param(lambda lk: lk["models"]["strata"]["source"].update(path="strata/../../root"),
                 f"models.strata.source.path: {REL} ('strata/../../root')", id="model-folder-climbs-out"),
    pytest.param(lambda lk: lk["models"].update(strata=["not", "an", "entry"]),
                 "models.strata: expected a mapping", id="entry-of-the-wrong-type"),
    pytest.param(lambda lk: lk["models"]["strata"].update(files={"a": 1}),
                 "models.strata.files: expected a list", id="files-of-the-wrong-type"),
    pytest.param(lambda lk: lk["models"]["strata"]["files"][0].update(size="12"),
                 "models.strata.files[0].size: expected an integer ('12')", id="size-a-string"),
    pytest.param(lambda lk: lk["models"]["strata"].update(total_bytes=1),
                 "models.strata: total_bytes 1 is not the sum of the file sizes", id="total-bytes-wrong"),
    pytest.param(lambda lk: lk["models"]["strata"].update(extra=1), "models.strata.extra: unknown key",
                 id="unknown-key"),
]


@pytest.mark.parametrize(("edit", "message"), BAD_LOCKS)
def test_a_malformed_lock_entry_is_refused_naming_the_file_and_the_entry(tmp_path, edit, message):
    from rigkit.lockfile.document import load_lock
    from rigkit.lockfile.errors import LockFormatError

    path = _edited(tmp_path, edit)
    with pytest.raises(LockFormatError) as info:
        load_lock(path)
    assert any(p.startswith(f"{path}: {message}") for p in info.value.problems), info.value.problems


def test_not_json_names_the_file(tmp_path):
    from rigkit.lockfile.document import load_lock
    from rigkit.lockfile.errors import LockFormatError

    (tmp_path / "x.lock.json").write_text("{nope")
    with pytest.raises(LockFormatError, match=r"x\.lock\.json: not JSON \(line 1 column 2"):
        load_lock(tmp_path / "x.lock.json")


def test_the_sandbox_lock_is_valid():
    from rigkit.lockfile.document import load_lock

    assert set(load_lock(SANDBOX_LOCK)["models"]) == {"hyperqwen", "hyperqwen-dflash2", "gguf-baseline", "strata"}


SANDBOX_MODELS = ('{"hyperqwen-dflash2": {"repo_id": "rigkit-test/Qwen3.8-27B-DFlash2-W4A16"}, '
                  '"gguf-baseline": {"repo_id": "rigkit-test/Qwen3.8-27B-GGUF"}, '
                  '"strata": {"repo_id": "rigkit-test/Strata-Coder-GGUF"}}')


@pytest.mark.slow
@pytest.mark.parametrize("command", [["models", "check"], ["check"]])
def test_models_check_and_check_read_the_lock_and_exit_2_on_a_bad_entry(tmp_path, command):
    lock = json.loads(SANDBOX_LOCK.read_text())
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "lab.py").write_text(f'hosts = [("box", {{"ssh_hostname": "b", "models": {SANDBOX_MODELS}}})]\n')
    lock_file = tmp_path / "inventory" / "lab.lock.json"
    lock_file.write_text(json.dumps(lock))
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    if command == ["check"]:  # the good lock: check says it matches
        proc = _run([*command, "-i", "inventory/lab.py"], env, tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "inventory/lab.lock.json: matches the spec" in proc.stdout
    lock["models"]["strata"]["files"][0]["path"] = "../../etc/shadow"
    lock["models"]["gguf-baseline"] = 7
    lock_file.write_text(json.dumps(lock))
    proc = _run([*command, "-i", "inventory/lab.py"], env, tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"inventory/lab.lock.json: models.strata.files[0].path: {REL}" in proc.stderr
    assert "inventory/lab.lock.json: models.gguf-baseline: expected a mapping" in proc.stderr
    assert "Traceback" not in proc.stderr
