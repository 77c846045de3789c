"""rigkit lock's sources (rigkit.lockfile.resolve) against servers that answer as the real ones do:

- the Arch Linux Archive: package files built by the harness' own mirror builder (build_mirror.build_pkg,
  zstd packages with .PKGINFO/.MTREE), dated repository databases written by the real ``repo-add``
  (build_mirror.dated_repos), listings as nginx autoindex writes them (fixtures_server.autoindex), on
  127.0.0.1 — the identical fixture the sandbox serves in its fixtures namespace;
- a registry answering the distribution spec's token flow (401 + Bearer challenge → realm → token) and
  manifests by tag and digest, index and single manifest;
- a release server with and without GoReleaser's checksums file.
pacman's version order is held to pacman's own ``vercmp``.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.lockfile.errors import ResolveError
from rigkit.lockfile.archive import parse_listing, parse_repo_db, vercmp
from rigkit.lockfile.registry import MT_DOCKER_MANIFEST, MT_OCI_INDEX, Registry
from rigkit.lockfile.release import checksums_url, resolve as resolve_release
from rigkit.lockfile.document import diff
from rigkit.lockfile.resolve import Resolver, lock_sections
from rigkit.lockfile.view import lock_problems, resolved
from rigkit.spec.validate import spec_from_dict

HARNESS = Path(__file__).resolve().parents[1] / "harness"
sys.path.insert(0, str(HARNESS))
import build_mirror  # noqa: E402
import fixtures_server  # noqa: E402


# --------------------------------------------------------------------------------------------
# pacman's order


@pytest.mark.skipif(shutil.which("vercmp") is None, reason="pacman's vercmp is not installed")
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.from_regex(r"\A(?:[0-9]{1,2}:)?[0-9a-z._+~]{1,8}(?:-[0-9.]{1,3})?\Z", fullmatch=True),
                          st.from_regex(r"\A(?:[0-9]{1,2}:)?[0-9a-z._+~]{1,8}(?:-[0-9.]{1,3})?\Z", fullmatch=True)),
                min_size=1, max_size=1))
def test_vercmp_orders_versions_as_pacman_does(pairs):
    """Every generated pair of pacman versions: rigkit's vercmp and pacman's own ``vercmp`` agree."""
    for a, b in pairs:
        real = int(subprocess.run(["vercmp", a, b], capture_output=True, text=True, check=True).stdout)
        assert vercmp(a, b) == max(-1, min(1, real)), (a, b)


# --------------------------------------------------------------------------------------------
# a tiny Arch Linux Archive on 127.0.0.1


def _pkg(name: str, version: str, date: str) -> dict:
    deps = {"nvidia-utils": [], "opencl-nvidia": [f"nvidia-utils={version.split('-')[0]}"],
            "nvidia-open-dkms": [f"nvidia-utils={version.split('-')[0]}"], "cuda": []}[name]
    return {"name": name, "version": version, "repo": None, "archive_repo": "extra", "date": date, "depends": deps}


BASE = [_pkg(n, "610.57.04-1", "2025-11-20") for n in ("nvidia-utils", "opencl-nvidia", "nvidia-open-dkms")] + [
    _pkg(n, "610.60.02-1", "2026-01-01") for n in ("nvidia-utils", "opencl-nvidia", "nvidia-open-dkms")] + [
    _pkg("cuda", "13.3.1-1", "2025-11-20"), _pkg("cuda", "13.3.2-1", "2025-12-10"), _pkg("cuda", "13.4.0-1", "2026-01-01")]


def publish(root: Path, packages: list[dict]) -> None:
    """Build ``packages`` into the archive at ``root`` and (re)write the dated databases of their days."""
    work = root.parent / "work"
    for pkg in packages:
        shutil.rmtree(work, ignore_errors=True)
        build_mirror.build_pkg(pkg, work, root)
    build_mirror.dated_repos(root, packages)


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def list_directory(self, path):
        import io

        data = fixtures_server.autoindex(path, self.path)
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        return io.BytesIO(data)


def _serve(directory: Path, handler=_Handler):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


@pytest.fixture(scope="module")
def archive_template(tmp_path_factory):
    if shutil.which("repo-add") is None or shutil.which("bsdtar") is None:
        pytest.skip("repo-add/bsdtar (pacman's tools) not installed: make apt")
    root = tmp_path_factory.mktemp("archive-template") / "www"
    publish(root, BASE)
    return root


@pytest.fixture
def archive(archive_template, tmp_path):
    """``(www root, archive URL)``: a fresh copy of the template archive, served on 127.0.0.1."""
    root = tmp_path / "www"
    shutil.copytree(archive_template, root, symlinks=True)
    srv, url = _serve(root)
    yield root, f"{url}/archive/packages"
    srv.shutdown()


def test_listing_page_is_read_as_nginx_writes_it(archive):
    root, url = archive
    listing = parse_listing(requests.get(f"{url}/c/cuda/", timeout=5).text)
    assert {k: str(v) for k, v in listing.items()} == {
        "cuda-13.3.1-1-x86_64.pkg.tar.zst": "2025-11-20", "cuda-13.3.2-1-x86_64.pkg.tar.zst": "2025-12-10",
        "cuda-13.4.0-1-x86_64.pkg.tar.zst": "2026-01-01"}


def test_a_series_resolves_to_its_newest_version_with_the_dated_databases_sha256(archive):
    root, url = archive
    spec = spec_from_dict({"arch_archive_url": url})
    pins = Resolver().pins(spec)
    assert {p: e["version"] for p, e in pins.items()} == {
        "cuda": "13.3.2-1", "nvidia-open-dkms": "610.57.04-1", "nvidia-utils": "610.57.04-1", "opencl-nvidia": "610.57.04-1"}
    for pkg, entry in pins.items():  # what the lock records is the file the archive serves, byte for byte
        served = requests.get(entry["url"], timeout=5).content
        assert entry["sha256"] == hashlib.sha256(served).hexdigest()
        assert entry["csize"] == len(served)
        db = parse_repo_db((root / "archive" / entry["repo_db"].replace(".db", ".db.tar.gz")).read_bytes())
        assert db[entry["file"]]["SHA256SUM"] == [entry["sha256"]]
    assert pins["cuda"]["repo_db"] == "repos/2025/12/10/extra/os/x86_64/extra.db"


def test_an_exact_version_wins_and_is_verified(archive):
    _root, url = archive
    spec = spec_from_dict({"arch_archive_url": url, "pacman_pins": {"cuda": "13.3.1-1"}})
    assert Resolver().pins(spec)["cuda"]["version"] == "13.3.1-1"
    spec = spec_from_dict({"arch_archive_url": url, "pacman_pins": {"cuda": "13.3.9-1"}})
    with pytest.raises(ResolveError) as exc:
        Resolver().pins(spec)
    assert str(exc.value) == (f"pins.cuda: the archive has no cuda in the version 13.3.9-1 (declared by pacman_pins.cuda; "
                              f"{url}/c/cuda/ lists 13.3.1-1, 13.3.2-1, 13.4.0-1); declare a series or version it has")


def test_a_series_the_archive_lacks_is_an_error_naming_the_pin_and_the_series(archive):
    _root, url = archive
    spec = spec_from_dict({"arch_archive_url": url, "nvidia_driver_version": "610.58"})
    with pytest.raises(ResolveError) as exc:
        Resolver().pins(spec)
    assert str(exc.value).startswith("pins.nvidia-open-dkms: the archive has no nvidia-open-dkms in the series 610.58 "
                                     "(declared by nvidia_driver_version;")


def test_the_driver_packages_resolve_to_one_driver(archive):
    """A newer nvidia-utils of the series alone (its opencl-nvidia not yet in the archive) is not taken:
    a module and a library of two drivers is "Driver/library version mismatch"."""
    root, url = archive
    publish(root, [_pkg("nvidia-utils", "610.57.09-1", "2026-01-05")])
    pins = Resolver().pins(spec_from_dict({"arch_archive_url": url}))
    assert {pins[p]["version"] for p in ("nvidia-utils", "opencl-nvidia", "nvidia-open-dkms")} == {"610.57.04-1"}


class _Fixed(Resolver):
    """The archive for real; one image and the release answered without a network (their own tests are below)."""

    def image(self, name, image):
        return {"repository": image.repository, "ref": image.ref, "registry": image.registry,
                "digest": "sha256:" + hashlib.sha256(image.ref.encode()).hexdigest(), "kind": "manifest",
                "media_type": MT_DOCKER_MANIFEST, "amd64": None}

    def release(self, spec):
        return {"version": spec.llama_swap.version, "url": spec.llama_swap.release_url, "sha256": "c" * 64,
                "from": spec.llama_swap.release_url}


def test_lock_fills_second_lock_changes_nothing_update_shows_the_newer_driver(archive):
    root, url = archive
    spec = spec_from_dict({"arch_archive_url": url})
    first = lock_sections(spec, {}, resolver=_Fixed())
    assert lock_problems(spec, first) == []
    assert lock_sections(spec, first, resolver=_Fixed()) == first  # a second lock: nothing changes
    publish(root, [_pkg(n, "610.57.09-1", "2026-01-05") for n in ("nvidia-utils", "opencl-nvidia", "nvidia-open-dkms")])
    assert lock_sections(spec, first, resolver=_Fixed()) == first  # a plain lock keeps what is locked
    newer = lock_sections(spec, first, update=["nvidia-utils"], resolver=_Fixed())
    assert diff(first, newer) == [f"pins.{p}: 610.57.04-1 → 610.57.09-1" for p in ("nvidia-open-dkms", "nvidia-utils", "opencl-nvidia")]
    assert newer["pins"]["nvidia-utils"]["repo_db"] == "repos/2026/01/05/extra/os/x86_64/extra.db"
    assert diff(first, lock_sections(spec, first, update=["cuda"], resolver=_Fixed())) == []


def test_the_spec_is_resolved_by_its_lock_and_a_stale_entry_is_named(archive):
    _root, url = archive
    spec = spec_from_dict({"arch_archive_url": url})
    lock = {"version": 2, "models": {}, **lock_sections(spec, {}, resolver=_Fixed())}
    r = resolved(spec, lock)
    assert r.pacman_pins == {p: e["version"] for p, e in lock["pins"].items()}
    assert r.hyperqwen.image.reference() == "ghcr.io/syv-ai/hyperqwen@" + lock["images"]["hyperqwen"]["digest"]
    assert r.llama_swap.release_sha256 == "c" * 64
    moved = spec_from_dict({"arch_archive_url": url, "cuda_version": "13.4", "strata": {"image": {"ref": "b1234"}}})
    assert lock_problems(moved, lock, "rig.lock.json") == [
        "pins.cuda: locked for '13.3', the spec declares '13.4' (cuda_version); re-lock with `rigkit lock -i inventory/rig.py`",
        "images.strata: locked for ghcr.io/ggml-org/llama.cpp:server-cuda, the spec declares "
        "ghcr.io/ggml-org/llama.cpp:b1234 (strata.image); re-lock with `rigkit lock -i inventory/rig.py`"]
    stale = resolved(moved, lock)
    assert stale.pacman_pins is None and stale.strata.image.ref == "b1234"  # never a locked value for another intent


@pytest.mark.parametrize("want, key_data, version, ok", [
    ("13.3", {}, "13.3.2-1", True), ("13.3", {}, "13.4.0-1", False), ("13.3", {}, "13.30.1-1", False),
    ("13.3.2-1", {"pacman_pins": {"cuda": "13.3.2-1"}}, "13.3.2-1", True),
    ("13.3.2-1", {"pacman_pins": {"cuda": "13.3.2-1"}}, "13.3.2-2", False),
])
def test_every_locked_pin_is_held_to_the_series_the_spec_declares(want, key_data, version, ok):
    spec = spec_from_dict(key_data)
    lock = {"pins": {"cuda": {"want": want, "version": version, "url": "http://a/c.pkg.tar.zst", "sha256": "1" * 64}}}
    found = [p for p in lock_problems(spec, lock) if p.startswith("pins.cuda")]
    assert (found == []) == ok, found
    if not ok:
        assert f"the locked version {version!r} is not" in found[0] and repr(want) in found[0]


# --------------------------------------------------------------------------------------------
# the deploy's check of a package file against the lock


def test_a_tampered_package_file_is_refused_naming_the_lock_entry(archive, tmp_path):
    from rigkit.operations.pacman import verified_fetch

    root, url = archive
    entry = Resolver().pins(spec_from_dict({"arch_archive_url": url}), ["cuda"])["cuda"]
    cache = tmp_path / "cache"
    cache.mkdir()
    ok = subprocess.run(["bash", "-c", str(verified_fetch("cuda", entry, str(cache)))], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert hashlib.sha256((cache / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    served = root / "archive" / "packages" / "c" / "cuda" / entry["file"]
    served.write_bytes(served.read_bytes() + b"tampered")
    (cache / entry["file"]).unlink()
    bad = subprocess.run(["bash", "-c", str(verified_fetch("cuda", entry, str(cache)))], capture_output=True, text=True)
    got = hashlib.sha256(served.read_bytes()).hexdigest()
    assert bad.returncode == 1
    assert bad.stderr == (f"lock entry pins.cuda: {entry['file']} has sha256 {got}, the lock says {entry['sha256']}; "
                          "refusing to install it\n")
    assert not (cache / entry["file"]).exists()


# --------------------------------------------------------------------------------------------
# a registry behind the token flow


AMD64 = {"mediaType": MT_DOCKER_MANIFEST, "schemaVersion": 2, "config": {}, "layers": []}


class Registry401(http.server.BaseHTTPRequestHandler):
    """The distribution token flow as ghcr.io answers it: every ``/v2/`` request without the token is
    401 with ``Bearer realm=…/token,service=…,scope=repository:<name>:pull``; ``/token`` gives it
    (``refuse_token``: 403, as for a private image); manifests by tag or digest, HEAD without a body."""

    manifests: dict = {}
    tags: dict = {}
    refuse_token = False
    token = "anon-token-not-to-be-printed"

    def log_message(self, *args):
        pass

    def _answer(self, body: bool):
        if self.path.startswith("/token"):
            code = 403 if self.refuse_token else 200
            data = b'{"errors":[{"code":"DENIED"}]}' if self.refuse_token else json.dumps({"token": self.token}).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        name, _, ref = self.path[len("/v2/"):].partition("/manifests/")
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            self.send_response(401)
            host = f"http://127.0.0.1:{self.server.server_address[1]}"
            self.send_header("WWW-Authenticate", f'Bearer realm="{host}/token",service="ghcr.io",'
                                                 f'scope="repository:{name}:pull"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        digest = self.tags.get((name, ref), ref)
        if digest not in self.manifests:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        media, data = self.manifests[digest]
        self.send_response(200)
        self.send_header("Content-Type", media)
        self.send_header("Docker-Content-Digest", digest)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_HEAD(self):
        self._answer(False)

    def do_GET(self):
        self._answer(True)


@pytest.fixture
def registry():
    one = json.dumps(AMD64).encode()
    one_d = "sha256:" + hashlib.sha256(one).hexdigest()
    index = json.dumps({"mediaType": MT_OCI_INDEX, "schemaVersion": 2, "manifests": [
        {"digest": "sha256:" + "a" * 64, "platform": {"os": "linux", "architecture": "arm64"}},
        {"digest": one_d, "platform": {"os": "linux", "architecture": "amd64"}}]}).encode()
    index_d = "sha256:" + hashlib.sha256(index).hexdigest()
    handler = type("R", (Registry401,), {"manifests": {one_d: (MT_DOCKER_MANIFEST, one), index_d: (MT_OCI_INDEX, index)},
                                         "tags": {("syv-ai/hyperqwen", "sha-1a2b3c4"): one_d,
                                                  ("ggml-org/llama.cpp", "server-cuda"): index_d}})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{srv.server_address[1]}", one_d, index_d
    srv.shutdown()


def test_a_tag_resolves_through_the_token_flow_index_or_manifest_said_which(registry):
    handler, base, one_d, index_d = registry
    reg = Registry(requests.Session())
    got = reg.resolve("images.strata", "ghcr.io/ggml-org/llama.cpp", "server-cuda", base)
    assert (got["digest"], got["kind"], got["amd64"]) == (index_d, "index", one_d)
    got = reg.resolve("images.hyperqwen", "ghcr.io/syv-ai/hyperqwen", "sha-1a2b3c4", base)
    assert (got["digest"], got["kind"], got["amd64"]) == (one_d, "manifest", None)
    assert handler.token not in json.dumps(got)
    assert reg.resolve("images.hyperqwen", "ghcr.io/syv-ai/hyperqwen", one_d, base)["digest"] == one_d


def test_registry_failures_name_the_lock_entry(registry):
    handler, base, _one, _index = registry
    reg = Registry(requests.Session())
    with pytest.raises(ResolveError) as exc:
        reg.resolve("images.hyperqwen", "ghcr.io/syv-ai/hyperqwen", "no-such-tag", base)
    assert str(exc.value) == f"images.hyperqwen: {base}: no manifest syv-ai/hyperqwen:no-such-tag (HTTP 404): no such tag or digest"
    with pytest.raises(ResolveError) as exc:
        reg.resolve("images.hyperqwen", "ghcr.io/syv-ai/hyperqwen", "sha256:" + "b" * 64, base)
    assert "no manifest syv-ai/hyperqwen:sha256:" + "b" * 64 in str(exc.value)
    handler.refuse_token = True
    with pytest.raises(ResolveError) as exc:
        reg.resolve("images.hyperqwen", "ghcr.io/syv-ai/hyperqwen", "sha-1a2b3c4", base)
    assert str(exc.value) == (f"images.hyperqwen: token endpoint {base}/token refused an anonymous token for "
                              "repository:syv-ai/hyperqwen:pull (HTTP 403); is the image public?")


# --------------------------------------------------------------------------------------------
# the release


def test_the_release_sha256_comes_from_goreleasers_checksums_file_or_the_tarball(tmp_path):
    rel = tmp_path / "releases"
    rel.mkdir()
    tarball = rel / "llama-swap_250_linux_amd64.tar.gz"
    tarball.write_bytes(b"a tarball")
    sha = hashlib.sha256(b"a tarball").hexdigest()
    srv, base = _serve(tmp_path)
    try:
        url = f"{base}/releases/{tarball.name}"
        assert checksums_url(url) == f"{base}/releases/llama-swap_250_checksums.txt"
        assert resolve_release("llama_swap", "v250", url, requests.Session()) == {
            "version": "v250", "url": url, "sha256": sha, "from": url}  # no checksums file: hashed
        (rel / "llama-swap_250_checksums.txt").write_text(f"{'d' * 64}  llama-swap_250_darwin_arm64.tar.gz\n{sha}  {tarball.name}\n")
        assert resolve_release("llama_swap", "v250", url, requests.Session())["from"] == checksums_url(url)
        spec = spec_from_dict({"llama_swap": {"release_url": url, "release_sha256": "e" * 64}})
        with pytest.raises(ResolveError) as exc:
            Resolver().release(spec)
        assert str(exc.value) == (f"llama_swap.release_sha256: {'e' * 64} does not match {checksums_url(url)} ({sha}): "
                                  "the tarball is not the one the spec names")
    finally:
        srv.shutdown()


def test_real_rig_defaults_point_at_the_real_sources():
    spec = spec_from_dict({})
    assert spec.arch_archive_url == "https://archive.archlinux.org/packages"
    assert checksums_url(spec.llama_swap.release_url) == \
        "https://github.com/mostlygeek/llama-swap/releases/download/v250/llama-swap_250_checksums.txt"
    assert (spec.hyperqwen.image.registry, spec.strata.image.ref) == (None, "server-cuda")


def test_lock_format_v2_is_validated_and_v1_still_read(tmp_path, archive):
    from rigkit.lockfile.document import load_lock
    from rigkit.lockfile.errors import LockFormatError

    _root, url = archive
    spec = spec_from_dict({"arch_archive_url": url})
    lock = {"version": 2, "models": {}, **lock_sections(spec, {}, resolver=_Fixed())}
    p = tmp_path / "x.lock.json"
    p.write_text(json.dumps(lock))
    assert load_lock(p) == lock
    p.write_text(json.dumps({"version": 1, "models": {}}))
    assert lock_problems(spec, load_lock(p))[0].startswith("pins.cuda: not in the lock")
    bad = copy.deepcopy(lock)
    bad["pins"]["cuda"]["sha256"] = "XYZ"
    p.write_text(json.dumps(bad))
    with pytest.raises(LockFormatError) as exc:
        load_lock(p)
    assert exc.value.problems == [f"{p}: pins.cuda.sha256: 64 lower-case hex digits ('XYZ')"]


def test_an_update_that_moves_an_entry_but_not_its_version_says_what_moved():
    a = {"pins": {"cuda": {"want": "13.3", "version": "13.3.2-1", "url": "http://a/c.pkg.tar.zst", "sha256": "1" * 64}}}
    b = {"pins": {"cuda": {"want": "13.3", "version": "13.3.2-1", "url": "http://a/c.pkg.tar.zst", "sha256": "2" * 64}}}
    assert diff(a, b) == [f"pins.cuda: 13.3.2-1: sha256 {'1' * 64} → {'2' * 64}"]
    assert diff(a, a) == [] and diff({}, a) == ["pins.cuda: (none) → 13.3.2-1"]
