"""Which path a model file's bytes take from a hub that stores it in Xet, as the Hub now stores
every large file: the agent's fetch takes the LFS bridge (``Location``), never Xet
(``notes/hub-xet.md``). The hub here answers a Xet-backed file as the Hub answers any client
(:mod:`tests.hub.server`: ``X-Xet-Hash``, ``Link: rel="xet-auth"``, the token route, no CAS);
these tests hold it to that, and tie the agent's real fetch environment to the path the model
tests run:

- the agent's fetch, run as the deploy runs it, takes the bridge from a hub that advertises Xet,
  with Xet switched off in its own process and no Xet cache or log written;
- huggingface-hub's own ``hf_hub_download`` against the same hub takes the Xet path without the
  switch (so the hub really advertises it) and the bridge with the agent's :data:`HUB_ENV`
  (so the switch really turns it off).

A failure here means the rig would fetch by a path the model tests (resume, corrupt byte, cut
connection, nothing lost: ``test_fetch.py``) do not run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from huggingface_hub import ModelInfo

from rigkit.host.fetch import HUB_ENV
from rigkit.lockfile.document import load_lock
from rigkit.lockfile.errors import LockError, LockFormatError
from rigkit.lockfile.hub import lock_hub_model
from tests.hub import repos
from tests.hub.server import XET_TOKEN_TTL, xet_hash

from .helpers import TOKEN, bridge_path, repo_bytes, xet_requests

ROOT = Path(__file__).resolve().parents[2]
STRATA_FILE = "strata-coder-Q4_K_M.gguf"

#: The headers the Hub sends for a Xet-backed file's ``resolve`` (a 302), from a captured
#: ``curl -I`` through a Hub mirror (padeoe/hf-mirror-site#50, 2026-04-09: its
#: ``access-control-expose-headers`` and the ``link``/``location`` lines) and huggingface/hf-hub#208
#: ("a 302 with X-Xet-Hash and X-Linked-Size").
XET_RESOLVE_HEADERS = {"location", "link", "x-xet-hash", "x-linked-etag", "x-linked-size", "x-repo-commit", "etag",
                       "accept-ranges"}


def _head(url: str, token: str | None = TOKEN):
    import httpx2

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx2.head(url, headers=headers, follow_redirects=False)


def _clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The test process's environment without any HF_* setting (so a switch comes only from what
    runs), with HOME and HF_HOME in ``home`` (where a Xet cache or log would land)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HOME=str(home), HF_HOME=str(home / "hf-home"), PYTHONPATH=str(ROOT), **extra)
    return env


def _xet_footprint(home: Path) -> list[str]:
    """Whatever hf_xet left under ``home`` (its cache and logs: ``$HF_HOME/xet``, else
    ``~/.cache/huggingface/xet``; the place hf_xet 1.8.0 names in its ``HF_XET_CACHE`` lookup)."""
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if "xet" in p.relative_to(home).parts)


def test_every_lfs_file_resolves_as_the_hub_answers_for_a_xet_backed_file(hub, lock):
    from huggingface_hub.file_download import get_hf_file_metadata, hf_hub_url

    for name, entry in lock["models"].items():
        repo_id, commit = entry["source"]["repo_id"], entry["commit"]
        for f in entry["files"]:
            url = hf_hub_url(repo_id, f["path"], revision=commit, endpoint=hub.endpoint)
            resp = _head(url)
            meta = get_hf_file_metadata(url, token=TOKEN, endpoint=hub.endpoint)
            if "git_blob" in f:  # a regular file: served by the hub itself, no Xet
                assert resp.status_code == 200 and "x-xet-hash" not in resp.headers, (name, f["path"])
                assert meta.xet_file_data is None
                continue
            assert resp.status_code == 302, (name, f["path"])
            assert XET_RESOLVE_HEADERS <= set(resp.headers.keys()), (name, f["path"])
            data = repo_bytes(hub, repo_id, f["path"])
            assert resp.headers["x-xet-hash"] == xet_hash(data) != f["sha256"]
            assert resp.headers["x-linked-etag"] == f'"{f["sha256"]}"' and int(resp.headers["x-linked-size"]) == f["size"]
            assert resp.links["xet-auth"]["url"] == f"{hub.endpoint}/api/models/{repo_id}/xet-read-token/{commit}"
            assert resp.links["xet-reconstruction-info"]["url"].endswith(f"/cas/v1/reconstructions/{xet_hash(data)}")
            # huggingface-hub reads both paths from it: Xet's file data, and the bridge's one URL
            assert meta.xet_file_data is not None and meta.xet_file_data.file_hash == xet_hash(data)
            assert meta.xet_file_data.refresh_route == resp.links["xet-auth"]["url"]
            assert meta.location.split("?")[0].endswith(bridge_path(hub, repo_id, f["path"]))
            assert meta.etag == f["sha256"] and meta.size == f["size"]


def test_the_xet_token_route_answers_huggingface_hub_and_hf_xet_alike(hub, lock):
    """``GET /api/models/{repo}/xet-read-token/{rev}``: huggingface-hub reads the connection info
    from headers (``utils/_xet.py`` ``parse_xet_connection_info_from_headers``), hf_xet from the
    JSON body (xet-core ``xet_client/src/hub_client/types.rs`` ``CasJWTInfo``, camelCase)."""
    import httpx2
    from huggingface_hub.utils import build_hf_headers
    from huggingface_hub.utils._xet import XetFileData, refresh_xet_connection_info

    commit = lock["models"]["strata"]["commit"]
    route = f"{hub.endpoint}/api/models/{repos.STRATA}/xet-read-token/{commit}"
    t0 = int(time.time())
    info = refresh_xet_connection_info(file_data=XetFileData("0" * 64, route), headers=build_hf_headers(token=TOKEN))
    body = httpx2.get(route, headers={"Authorization": f"Bearer {TOKEN}"}).json()
    t1 = int(time.time())
    assert set(body) == {"casUrl", "exp", "accessToken"}
    assert info.endpoint == body["casUrl"] == f"http://127.0.0.1:{hub.cdn.server_address[1]}/cas"
    # each answer's expiry is its own second + the TTL: the two requests may straddle a second
    assert all(t0 + XET_TOKEN_TTL <= exp <= t1 + XET_TOKEN_TTL for exp in (info.expiration_unix_epoch, body["exp"]))
    assert info.access_token.startswith("xet_")
    assert TOKEN not in json.dumps(body)
    assert httpx2.get(route).status_code == 401  # a private hub: no token, no Xet token either
    hub.hub.clear_log()  # the token route was this test's point


@pytest.mark.slow
def test_the_agent_fetch_takes_the_lfs_bridge_from_a_hub_that_advertises_xet(hub, lock, host, tmp_path):
    """The tie: the agent's fetch as the deploy runs it (``rigkit-agent fetch``, an environment
    with no HF_* switch of the test's) against a hub that advertises Xet for every LFS file."""
    lock_file = tmp_path / "lock.json"
    lock_file.write_text(json.dumps(lock))
    home = tmp_path / "home"
    home.mkdir()
    # rigkit-agent's own entry point (the console script calls exactly this), reporting at exit
    # what huggingface-hub decided in that process
    code = ("import atexit, json, sys\n"
            "def report():\n"
            "    from huggingface_hub import constants\n"
            "    from huggingface_hub.utils._runtime import is_xet_available\n"
            "    print(json.dumps({'disable_xet': constants.HF_HUB_DISABLE_XET, 'xet_available': is_xet_available(),\n"
            "                      'hf_xet_loaded': 'hf_xet' in sys.modules}), file=sys.stderr)\n"
            "atexit.register(report)\n"
            "sys.argv[0] = 'rigkit-agent'\n"
            "from rigkit.host.__main__ import main\n"
            "main()\n")
    args = [sys.executable, "-c", code, "fetch", "--lock", str(lock_file), "--model", "strata",
            "--models-root", str(host["models_root"]), "--state-dir", str(host["state_dir"]),
            "--token-file", str(host["token_file"]), "--endpoint", hub.endpoint, "--progress", "off"]
    proc = subprocess.run(args, env=_clean_env(home), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["fetched"] == [STRATA_FILE]
    assert json.loads(proc.stderr.splitlines()[-1]) == {"disable_xet": True, "xet_available": False,
                                                        "hf_xet_loaded": False}
    assert (host["models_root"] / "strata" / STRATA_FILE).read_bytes() == repo_bytes(hub, repos.STRATA, STRATA_FILE)
    # the hub's threads append to its log as each answer ends, so the order of two requests is not
    # the log's: compare them as a set of (method, role, status, auth)
    log = sorted(hub.hub.requests(), key=lambda r: r["role"] != "hub")
    assert sorted((r["method"], r["role"], r["status"], r["auth"]) for r in log) == [("GET", "cdn", 200, "none"),
                                                                                     ("HEAD", "hub", 302, "ok")]
    assert log[1]["path"] == bridge_path(hub, repos.STRATA, STRATA_FILE)  # the bridge's one URL, whole file
    assert xet_requests(hub) == [] and _xet_footprint(home) == []
    # and the console script itself, as pyinfra runs it: the same path
    hub.hub.clear_log()
    (host["models_root"] / "strata" / STRATA_FILE).unlink()
    agent = str(Path(sys.executable).parent / "rigkit-agent")
    proc = subprocess.run([agent, *args[3:]], env=_clean_env(home), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted((r["method"], r["role"]) for r in hub.hub.requests()) == [("GET", "cdn"), ("HEAD", "hub")]
    assert _xet_footprint(home) == []


_HF_HUB_DOWNLOAD = """
import json, sys
from huggingface_hub import hf_hub_download
try:
    path = hf_hub_download(sys.argv[1], sys.argv[2], token=sys.argv[3], endpoint=sys.argv[4])
    print(json.dumps({"ok": True, "size": len(open(path, "rb").read())}))
except Exception as exc:
    print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("switch", ["none", "agent"])
def test_huggingface_hubs_own_download_takes_xet_unless_the_agents_switch_is_set(hub, tmp_path, switch):
    """Without the switch huggingface-hub 2.4.0 goes to the Xet token route and the CAS (hf_xet
    runs, writes its log under ``$HF_HOME/xet``, and fails: the sandbox has no CAS); with the
    agent's :data:`HUB_ENV` it downloads the bridge's URL. This holds the hub's headers to
    what the client reads as Xet, and :data:`HUB_ENV` to what switches it off."""
    home = tmp_path / "home"
    home.mkdir()
    env = _clean_env(home, **(HUB_ENV if switch == "agent" else {}))
    proc = subprocess.run([sys.executable, "-c", _HF_HUB_DOWNLOAD, repos.STRATA, STRATA_FILE, TOKEN, hub.endpoint],
                          env=env, capture_output=True, text=True, timeout=120)
    out = json.loads(proc.stdout.splitlines()[-1])
    xet, bridge = xet_requests(hub), [r for r in hub.hub.requests() if r["role"] == "cdn"]
    if switch == "agent":
        assert out == {"ok": True, "size": len(repo_bytes(hub, repos.STRATA, STRATA_FILE))}
        assert xet == [] and [r["path"] for r in bridge] == [bridge_path(hub, repos.STRATA, STRATA_FILE)]
        assert _xet_footprint(home) == []
    else:
        assert not out["ok"] and "CAS Client Error" in out["error"] and "404" in out["error"], out
        assert any("/xet-read-token/" in r["path"] and r["auth"] == "ok" for r in xet)
        assert any(r["role"] == "cas" and "/reconstructions/" + xet_hash(repo_bytes(hub, repos.STRATA, STRATA_FILE))
                   in r["path"] for r in xet)
        assert bridge == []
        assert any(p.startswith("hf-home/xet/logs/") for p in _xet_footprint(home))
    hub.hub.clear_log()  # the Xet requests were this test's point


def _model_info(size: int) -> ModelInfo:
    return ModelInfo(id="big/GGUF", sha="a" * 40, siblings=[
        {"rfilename": "big-Q8_0.gguf", "size": size, "blobId": "b" * 40,
         "lfs": {"sha256": "c" * 64, "size": size, "pointerSize": 134}}])


class _Api:
    """``HfApi.model_info``'s answer for one repo, parsed by huggingface-hub's own ``ModelInfo``."""

    def __init__(self, size: int):
        self.size = size

    def model_info(self, repo_id, revision, files_metadata, timeout=None):
        return _model_info(self.size)


SOURCE = {"repo_id": "big/GGUF", "revision": "main", "include": ["*.gguf"], "exclude": [], "path": "big"}


def test_a_hub_file_over_the_bridges_50_gb_is_refused_when_locking_and_loading():
    """The bridge serves no file above 50 GB (huggingface-hub's MAX_HTTP_DOWNLOAD_SIZE): such a file
    is refused naming it before any host is touched; exactly 50 GB is accepted."""
    limit = 50_000_000_000
    assert lock_hub_model("big", SOURCE, _Api(limit))["files"][0]["size"] == limit
    with pytest.raises(LockError) as err:
        lock_hub_model("big", SOURCE, _Api(limit + 1))
    assert str(err.value) == (
        "models.big: big/GGUF@main: big-Q8_0.gguf: 50000000001 bytes is over the 50 GB (50000000000 bytes) the Hub's "
        "LFS bridge serves in one file, the path rigkit's fetch takes (notes/hub-xet.md); choose a file split into "
        "parts of at most that")


def test_a_lock_naming_a_hub_file_over_50_gb_is_invalid_but_a_url_file_is_not(tmp_path):
    big = 60_000_000_000
    entry = {"source": SOURCE, "commit": "a" * 40, "total_bytes": big,
             "files": [{"path": "big-Q8_0.gguf", "size": big, "sha256": "c" * 64}]}
    path = tmp_path / "lock.json"
    path.write_text(json.dumps({"version": 1, "models": {"big": entry}}))
    with pytest.raises(LockFormatError) as err:
        load_lock(path)
    assert any("big-Q8_0.gguf: 60000000000 bytes is over the 50 GB" in p for p in err.value.problems), err.value.problems
    url = "https://example.org/big-Q8_0.gguf"
    path.write_text(json.dumps({"version": 1, "models": {"big": {
        "source": {"url": url, "sha256": "c" * 64, "path": "big"}, "total_bytes": big,
        "files": [{"path": "big-Q8_0.gguf", "size": big, "sha256": "c" * 64, "url": url}]}}}))
    assert load_lock(path)["models"]["big"]["total_bytes"] == big  # not the Hub's bridge: its own server's business
