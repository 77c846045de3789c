"""A hub-compatible HTTP endpoint serving tiny repos, so the real huggingface-hub client runs in
tests (``HF_ENDPOINT=http://127.0.0.1:PORT``) and, later, in the sandbox's fixtures namespace.

What huggingface-hub 2.4.0 calls, and what this server answers (read from the installed
client: ``hf_api.HfApi.model_info`` / ``_iter_repo_tree_pages``, ``file_download.
get_hf_file_metadata`` / ``http_get``, ``utils/_http.hf_raise_for_status``):

- ``GET /api/models/{repo_id}[/revision/{rev}][?blobs=true]`` — model info: ``sha`` (the commit
  the revision resolves to) and ``siblings`` (``rfilename``; with ``blobs``, ``size``,
  ``blobId`` and, for LFS files, ``lfs: {sha256, size, pointerSize}``).
- ``GET /api/models/{repo_id}/tree/{rev}[/{path}][?recursive=true]`` — ``[{type: file|directory,
  path, oid, size, lfs: {oid, size, pointerSize}}]`` (one page, no ``Link`` header).
- ``HEAD|GET /{repo_id}/resolve/{rev}/{path}`` — headers ``X-Repo-Commit``, ``ETag`` (the git
  blob id, quoted). A regular file is served here (200, ``Content-Length``, ``Range`` → 206).
  An LFS file is Xet-backed, as every large file on the Hub now is, and answers as the Hub
  answers any client for one (captured: ``curl -I`` of a Xet-backed file's ``resolve`` through a
  Hub mirror, padeoe/hf-mirror-site#50 and #51; huggingface/hf-hub#208: "the initial HEAD
  response is a 302 with ``X-Xet-Hash`` and ``X-Linked-Size``"): ``302`` whose ``Location`` is the
  LFS bridge on the CDN origin (``/xet-bridge-us/<repo object id>/<xet hash>?X-Xet-Cas-Uid=…&
  response-content-disposition=…``, as ``cas-bridge.xethub.hf.co`` URLs are; a second port: a
  different origin, so the client drops the ``Authorization`` header as it does for the Hub's
  CDN), ``X-Linked-Etag`` (the sha256 oid), ``X-Linked-Size``, ``X-Xet-Hash`` and ``Link:
  <{endpoint}/api/models/{repo}/xet-read-token/{commit}>; rel="xet-auth", <{cas}/v1/
  reconstructions/{xet hash}>; rel="xet-reconstruction-info"``. huggingface-hub 2.4.0 reads the
  last two as ``XetFileData`` (``utils/_xet.py`` ``parse_xet_file_data_from_response``) and
  ``hf_hub_download`` then takes the Xet path (``file_download.py`` ``_download_to_tmp_and_move``:
  ``if xet_file_data is not None and is_xet_available(): xet_get(...)``); a client without Xet
  downloads ``Location``. The bridge serves the bytes with ``Range`` support.
- ``GET /api/models/{repo_id}/xet-read-token/{rev}`` — the Xet token route: the CAS URL, a
  short-lived access token and its expiry, both as headers ``X-Xet-Cas-Url``,
  ``X-Xet-Access-Token``, ``X-Xet-Token-Expiration`` (what huggingface-hub's
  ``parse_xet_connection_info_from_headers`` reads) and as the JSON body ``{"casUrl", "exp",
  "accessToken"}`` (what hf_xet reads: xet-core ``xet_client/src/hub_client/types.rs``
  ``CasJWTInfo``, ``rename_all = "camelCase"``).
- The CAS (``{cdn}/cas/…``, and anything else on the CDN origin but the bridge and ``/lfs/``):
  the sandbox has none. Every request there is logged (role ``cas``) and answered 404, so a
  client that takes the Xet path is seen, and fails at once (hf_xet 1.8.0: ``RuntimeError: …
  CAS Client Error … 404``), instead of fetching.
- Errors as the hub sends them: unknown revision → 404 ``X-Error-Code: RevisionNotFound``; a
  missing file → 404 ``X-Error-Code: EntryNotFound``; an unknown repo or no token for a private
  hub → 401 ``X-Error-Code: RepoNotFound``; a wrong token → 401 ``X-Error-Message: Invalid
  credentials in Authorization header``.

Repos are read from ``--root DIR`` (``DIR/<owner>/<name>/<files>``, written by
:mod:`tests.hub.repos` when the folder is empty). A file is LFS (and Xet-backed) when its name
ends in ``.safetensors``, ``.gguf`` or ``.bin``. Its ``X-Xet-Hash`` is a stand-in (64 hex digits,
:func:`xet_hash`), not xet-core's chunk Merkle hash: its only readers here are huggingface-hub's
parser and a CAS that does not exist. Commit shas are sha1s over the file list and parent, so
the same bytes give the same commits everywhere.

Test controls (Python methods on :class:`Hub`, or ``POST /_control/<name>`` with a JSON body):
``fault`` (``repo``, ``path``, ``kind``: ``cut`` — close the connection after ``after`` bytes;
``stall`` — send ``after`` bytes then hang until ``release``; ``corrupt`` — flip one byte; for
the next ``times`` GETs of that file's bytes), ``release``, ``remove`` (the file disappears
from every commit, as after a history rewrite), ``push`` (a new commit on ``main``), ``reset``;
``GET /_control/log`` lists requests (method, path, role: hub/cdn/cas, range, status, auth: on
the hub none/ok/bad, on the CDN none/sent — never the token).

Run: ``python -m tests.hub.server --root DIR --port 0 [--cdn-port 0] [--token-file F]``; it
prints ``HF_ENDPOINT=http://HOST:PORT`` on its first line. Binds 127.0.0.1 unless ``--host``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")
BAD_CREDENTIALS = "Invalid credentials in Authorization header"
#: Seconds a Xet access token from the token route is valid (the Hub's are short-lived JWTs).
XET_TOKEN_TTL = 3600


def git_blob_id(data: bytes) -> str:
    """``git hash-object``: sha1 of ``b"blob <size>\\0" + data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def xet_hash(data: bytes) -> str:
    """The stand-in ``X-Xet-Hash`` of ``data``: 64 hex digits (what huggingface-hub's
    ``utils/_xet.is_valid_xet_hash`` accepts), distinct from its sha256. Not xet-core's Merkle hash
    of the file's chunks (no CAS here reconstructs it; see the module doc)."""
    return hashlib.sha256(b"rigkit-test-hub xet\0" + data).hexdigest()


def repo_object_id(repo_id: str) -> str:
    """The repo's 24-hex object id (``_id`` in model info; the first folder of a bridge URL)."""
    return hashlib.md5(repo_id.encode()).hexdigest()[:24]


def lfs_pointer(data: bytes) -> bytes:
    """The git-lfs pointer file committed in place of ``data`` (git-lfs spec v1)."""
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
            f"size {len(data)}\n").encode()


@dataclass
class Entry:
    """One file at one commit: ``data``, and its hub metadata."""

    data: bytes
    lfs: bool

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def blob_id(self) -> str:
        return git_blob_id(lfs_pointer(self.data) if self.lfs else self.data)

    @property
    def xet_hash(self) -> str:
        return xet_hash(self.data)


@dataclass
class Repo:
    """A repo: ``commits`` (sha → {path: Entry}) and ``refs`` (branch → sha)."""

    repo_id: str
    commits: dict[str, dict[str, Entry]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)

    def commit(self, files: dict[str, bytes], branch: str = "main") -> str:
        """Add a commit with exactly ``files`` on ``branch``; return its sha."""
        parent = self.refs.get(branch, "")
        entries = {p: Entry(d, p.endswith(LFS_SUFFIXES)) for p, d in sorted(files.items())}
        h = hashlib.sha1(f"commit {self.repo_id}\nparent {parent}\n".encode())
        for p, e in entries.items():
            h.update(f"{p} {e.blob_id}\n".encode())
        sha = h.hexdigest()
        self.commits[sha] = entries
        self.refs[branch] = sha
        return sha

    def resolve(self, rev: str) -> str | None:
        """Branch or full commit sha → commit sha (None when unknown)."""
        if rev in self.refs:
            return self.refs[rev]
        return rev if rev in self.commits else None


@dataclass
class Fault:
    kind: str  # cut | stall | corrupt
    after: int = 0
    times: int = 1


class Hub:
    """The repos and the test controls; thread-safe. ``token`` None = public hub."""

    def __init__(self, root: Path, token: str | None = None):
        self.root = Path(root)
        self.token = token
        self.lock = threading.RLock()
        self.repos: dict[str, Repo] = {}
        self.faults: dict[tuple[str, str], Fault] = {}
        self.released = threading.Event()
        self.log: list[dict] = []
        self.inflight = 0  # requests parsed and not yet answered and recorded (Handler.parse_request … handle_one_request)
        self.idle = threading.Condition(self.lock)
        self.load()

    def load(self) -> None:
        """(Re)read every repo under ``root``: one commit each, on ``main``."""
        with self.lock:
            self.repos = {}
            for owner in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")):
                for rdir in sorted(p for p in owner.iterdir() if p.is_dir()):
                    repo = Repo(f"{owner.name}/{rdir.name}")
                    files = {f.relative_to(rdir).as_posix(): f.read_bytes() for f in rdir.rglob("*") if f.is_file()}
                    repo.commit(files)
                    self.repos[repo.repo_id] = repo

    # --- controls -------------------------------------------------------------------------
    def fault(self, repo: str, path: str, kind: str, after: int = 0, times: int = 1) -> None:
        with self.lock:
            self.faults[(repo, path)] = Fault(kind, after, times)
            self.released.clear()

    def release(self) -> None:
        self.released.set()

    def remove(self, repo: str, path: str) -> None:
        """``path`` disappears from every commit of ``repo`` (a rewritten history)."""
        with self.lock:
            for entries in self.repos[repo].commits.values():
                entries.pop(path, None)

    def push(self, repo: str, changes: dict[str, bytes | None], branch: str = "main") -> str:
        """A new commit on ``branch``: ``changes`` maps path → bytes (None deletes)."""
        with self.lock:
            r = self.repos[repo]
            files = {p: e.data for p, e in r.commits[r.refs[branch]].items()}
            for p, d in changes.items():
                if d is None:
                    files.pop(p, None)
                else:
                    files[p] = d
            return r.commit(files, branch)

    def reset(self, drain_s: float = 10.0, caller_in_flight: int = 0) -> None:
        """Forget faults, the log, pushes and removals — after the requests in flight have answered and been
        recorded (at most ``drain_s`` s; stalls released first): a handler records its request after the body's
        last byte, which its client may read, return on and reset the hub before — under load that record then
        landed in the next test's log (tests/models/test_fetch.py's cut property saw an extra ``200``).
        ``caller_in_flight``: 1 when a request (the ``reset`` control) asks, which is itself in flight."""
        self.released.set()
        with self.idle:
            self.idle.wait_for(lambda: self.inflight <= caller_in_flight, timeout=drain_s)
            self.faults.clear()
            self.log.clear()
            self.load()

    def take_fault(self, repo: str, path: str) -> Fault | None:
        with self.lock:
            f = self.faults.get((repo, path))
            if f is None or f.times <= 0:
                return None
            f.times -= 1
            return Fault(f.kind, f.after, 1)

    def clear_log(self, drain_s: float = 10.0) -> None:
        """Forget the logged requests — after those in flight have answered and been recorded (at most
        ``drain_s`` s), as :meth:`requests` and :meth:`reset` wait: cleared at once, the record of a request
        whose client had already read its answer landed after the clear (CI: test_xet_path's token-route test
        cleared the log, then its own 401 request's record failed the fixture's "no Xet request" teardown)."""
        with self.idle:
            self.idle.wait_for(lambda: self.inflight <= 0, timeout=drain_s)
            self.log.clear()

    def requests(self, method: str | None = None, contains: str = "", drain_s: float = 10.0,
                 caller_in_flight: int = 0) -> list[dict]:
        """Logged requests, optionally filtered by method and a substring of the path — read after the requests
        in flight have answered and been recorded (at most ``drain_s`` s), as :meth:`reset` waits: a client
        that read the body's last byte can return before its handler records the request (CI saw
        test_url_model_is_fetched_and_verified_without_the_token read an empty log). A stalled request stays
        in flight until released, so a read during a stall waits ``drain_s``.
        ``caller_in_flight``: 1 when a request (the ``log`` control) asks."""
        with self.idle:
            self.idle.wait_for(lambda: self.inflight <= caller_in_flight, timeout=drain_s)
            return [r for r in self.log if (method is None or r["method"] == method) and contains in r["path"]]


def _cas_path(path: str) -> bool:
    """A request on the CDN origin that is not the bridge's or a plain URL's: the CAS's
    (``/cas/v1|v2/reconstructions/…``) or hf_xet's telemetry (``POST /v1/telemetry`` on the CAS's
    host, seen from hf_xet 1.8.0)."""
    return not path.startswith(("/xet-bridge-us/", "/lfs/"))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "rigkit-test-hub/1"
    hub: Hub
    role: str  # "hub" or "cdn"
    cdn_base: str

    def log_message(self, fmt, *args):  # quiet; the hub keeps its own log
        pass

    # --- in flight (Hub.reset waits for these) ---------------------------------------------
    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok:
            with self.hub.idle:
                self.hub.inflight += 1
            self._counted = True
        return ok

    def handle_one_request(self) -> None:
        self._counted = False
        try:
            super().handle_one_request()
        finally:
            if self._counted:
                with self.hub.idle:
                    self.hub.inflight -= 1
                    self.hub.idle.notify_all()

    # --- plumbing ------------------------------------------------------------------------
    def _auth(self) -> str:
        header = self.headers.get("Authorization")
        if not header:
            return "none"
        value = header.split(" ", 1)[1] if " " in header else header
        return "ok" if self.hub.token is not None and value == self.hub.token else "bad"

    def _record(self, status: int, auth: str) -> None:
        with self.hub.lock:
            path = urlsplit(self.path).path
            role = "cas" if self.role == "cdn" and _cas_path(path) else self.role
            self.hub.log.append({"method": self.command, "path": path, "role": role,
                                 "range": self.headers.get("Range"), "status": status, "auth": auth})

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, ctype="application/json") -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, obj, headers: dict | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), headers)

    def _error(self, status: int, code: str | None, message: str, extra: dict | None = None) -> None:
        headers = dict(extra or {})
        if code:
            headers["X-Error-Code"] = code
        headers["X-Error-Message"] = message
        self._json(status, {"error": message}, headers)

    def do_HEAD(self):  # noqa: N802
        self._dispatch()

    def do_GET(self):  # noqa: N802
        self._dispatch()

    def do_POST(self):  # noqa: N802
        self._dispatch()

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        path = url.path
        query = parse_qs(url.query)
        # the CDN checks no token; it records whether one was sent (the client must drop it there)
        auth = self._auth() if self.role == "hub" else ("sent" if self.headers.get("Authorization") else "none")
        status = 500
        try:
            if self.role == "cdn" and _cas_path(path):
                status = 404  # no CAS in the sandbox (module doc): seen in the log, then refused
                self._send(404, b'{"error": "no Xet CAS here: the sandbox hub serves the LFS bridge only"}')
            elif self.role == "cdn":
                status = self._cdn(path)
            elif path.startswith("/_control/"):
                status = self._control(path[len("/_control/"):])
            elif auth == "bad" or (auth == "none" and self.hub.token is not None):
                status = 401
                if auth == "bad":
                    self._error(401, None, BAD_CREDENTIALS)
                else:
                    self._error(401, "RepoNotFound", "Repository not found")
            elif path.startswith("/api/models/"):
                status = self._api(path[len("/api/models/"):], query)
            elif "/resolve/" in path:
                status = self._resolve(path)
            else:
                status = 404
                self._error(404, None, "Not found")
        except (BrokenPipeError, ConnectionResetError):
            status = -1
        finally:
            if not path.startswith("/_control/"):
                self._record(status, auth)

    # --- API ----------------------------------------------------------------------------
    def _repo_and_rest(self, rest: str) -> tuple[Repo | None, list[str]]:
        parts = rest.split("/")
        repo_id = "/".join(parts[:2])
        with self.hub.lock:
            return self.hub.repos.get(repo_id), parts[2:]

    def _api(self, rest: str, query: dict) -> int:
        repo, tail = self._repo_and_rest(rest)
        if repo is None:
            self._error(401 if self.hub.token is None else 404, "RepoNotFound", "Repository not found")
            return 401 if self.hub.token is None else 404
        kind = tail[0] if tail else "revision"
        rev = unquote(tail[1]) if len(tail) > 1 else "main"
        with self.hub.lock:
            sha = repo.resolve(rev)
            entries = dict(repo.commits[sha]) if sha else {}
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return 404
        if kind == "revision":
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            siblings = []
            for p, e in sorted(entries.items()):
                s: dict = {"rfilename": p}
                if blobs:
                    s.update(blobId=e.blob_id, size=e.size)
                    if e.lfs:
                        s["lfs"] = {"sha256": e.sha256, "size": e.size, "pointerSize": len(lfs_pointer(e.data))}
                siblings.append(s)
            self._json(200, {"_id": repo_object_id(repo.repo_id), "id": repo.repo_id,
                             "modelId": repo.repo_id, "author": repo.repo_id.split("/")[0], "sha": sha,
                             "private": self.hub.token is not None, "disabled": False, "gated": False,
                             "lastModified": "2026-01-01T00:00:00.000Z", "createdAt": "2026-01-01T00:00:00.000Z",
                             "downloads": 0, "likes": 0, "tags": [], "siblings": siblings},
                       {"X-Repo-Commit": sha})
            return 200
        if kind == "xet-read-token":
            token = "xet_" + hashlib.sha256(f"{repo.repo_id}@{sha}:{time.time_ns()}".encode()).hexdigest()[:32]
            exp = int(time.time()) + XET_TOKEN_TTL
            cas = f"{self.cdn_base}/cas"
            self._json(200, {"casUrl": cas, "exp": exp, "accessToken": token},
                       {"X-Xet-Cas-Url": cas, "X-Xet-Access-Token": token, "X-Xet-Token-Expiration": exp})
            return 200
        if kind == "tree":
            prefix = "/".join(unquote(t) for t in tail[2:]).strip("/")
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            out, dirs = [], set()
            for p, e in sorted(entries.items()):
                if prefix and not p.startswith(prefix + "/"):
                    continue
                rel = p[len(prefix) + 1:] if prefix else p
                if "/" in rel and not recursive:
                    dirs.add((prefix + "/" if prefix else "") + rel.split("/")[0])
                    continue
                if recursive:
                    parts = rel.split("/")[:-1]
                    for i in range(1, len(parts) + 1):
                        dirs.add((prefix + "/" if prefix else "") + "/".join(parts[:i]))
                item = {"type": "file", "oid": e.blob_id, "size": e.size, "path": p}
                if e.lfs:
                    item["lfs"] = {"oid": e.sha256, "size": e.size, "pointerSize": len(lfs_pointer(e.data))}
                out.append(item)
            out += [{"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                    for d in sorted(dirs)]
            self._json(200, out)
            return 200
        self._error(404, None, "Not found")
        return 404

    # --- files --------------------------------------------------------------------------
    def _resolve(self, path: str) -> int:
        head, _, file_part = path.partition("/resolve/")
        repo, _ = self._repo_and_rest(head.lstrip("/"))
        if repo is None:
            self._error(401 if self.hub.token is None else 404, "RepoNotFound", "Repository not found")
            return 401 if self.hub.token is None else 404
        rev, _, rel = file_part.partition("/")
        rev, rel = unquote(rev), unquote(rel)
        with self.hub.lock:
            sha = repo.resolve(rev)
            entry = repo.commits[sha].get(rel) if sha else None
        if sha is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return 404
        if entry is None:
            self._error(404, "EntryNotFound", f"{rel} does not exist at {sha}", {"X-Repo-Commit": sha})
            return 404
        headers = {"X-Repo-Commit": sha, "ETag": f'"{entry.blob_id}"', "Accept-Ranges": "bytes"}
        if entry.lfs:
            name = quote(rel.rsplit("/", 1)[-1])
            disposition = quote(f"inline; filename*=UTF-8''{name}; filename=\"{name}\";", safe="")
            location = (f"{self.cdn_base}/xet-bridge-us/{repo_object_id(repo.repo_id)}/{entry.xet_hash}"
                        f"?X-Xet-Cas-Uid=public&response-content-disposition={disposition}")
            endpoint = f"http://{self.headers.get('Host')}"
            headers.update({"X-Linked-Etag": f'"{entry.sha256}"', "X-Linked-Size": entry.size, "Location": location,
                            "X-Xet-Hash": entry.xet_hash,
                            "Link": f'<{endpoint}/api/models/{repo.repo_id}/xet-read-token/{sha}>; rel="xet-auth", '
                                    f'<{self.cdn_base}/cas/v1/reconstructions/{entry.xet_hash}>; '
                                    'rel="xet-reconstruction-info"'})
            self._send(302, b"", headers, ctype="text/plain; charset=utf-8")
            return 302
        return self._serve_bytes(repo.repo_id, rel, entry.data, headers)

    def _cdn(self, path: str) -> int:
        parts = path.split("/")
        if len(parts) == 4 and parts[1] == "xet-bridge-us":
            return self._bridge(parts[2], parts[3])
        # /lfs/<owner>/<name>/<sha256>/<path>: a plain URL to the bytes (a `url` model's source)
        if len(parts) < 6 or parts[1] != "lfs":
            self._send(404, b"not found", ctype="text/plain")
            return 404
        repo_id, oid, rel = unquote(parts[2]) + "/" + unquote(parts[3]), parts[4], unquote("/".join(parts[5:]))
        with self.hub.lock:
            data = next((e.data for r in self.hub.repos.values() for c in r.commits.values() for e in c.values()
                         if e.lfs and e.sha256 == oid), None)
        if data is None:
            self._send(404, b"not found", ctype="text/plain")
            return 404
        return self._serve_bytes(repo_id, rel, data, {"ETag": f'"{oid}"', "Accept-Ranges": "bytes"})

    def _bridge(self, object_id: str, xet: str) -> int:
        """``/xet-bridge-us/<repo object id>/<xet hash>``: the LFS bridge, one URL serving the
        whole file with ``Range`` (faults apply by the repo and the first path holding it)."""
        with self.hub.lock:
            found = next(((r.repo_id, p, e.data) for r in self.hub.repos.values() if repo_object_id(r.repo_id) == object_id
                          for c in r.commits.values() for p, e in c.items() if e.lfs and e.xet_hash == xet), None)
        if found is None:
            self._send(404, b"not found", ctype="text/plain")
            return 404
        repo_id, rel, data = found
        return self._serve_bytes(repo_id, rel, data, {"ETag": f'"{hashlib.sha256(data).hexdigest()}"',
                                                      "Accept-Ranges": "bytes"})

    def _serve_bytes(self, repo_id: str, rel: str, data: bytes, headers: dict) -> int:
        start, end = 0, len(data) - 1
        status = 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[len("bytes="):].partition("-")
            start = int(a) if a else 0
            end = min(int(b), len(data) - 1) if b else len(data) - 1
            if start >= len(data):
                self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"}, ctype="text/plain")
                return 416
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}"}
        body = data[start:end + 1]
        fault = self.hub.take_fault(repo_id, rel) if self.command == "GET" else None
        if fault and fault.kind == "corrupt":
            i = len(body) // 2
            body = body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1:]
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, str(v))
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return status
        if fault and fault.kind in ("cut", "stall"):
            self.wfile.write(body[:fault.after])
            self.wfile.flush()
            if fault.kind == "stall":
                with self.hub.lock:
                    self.hub.log.append({"method": "STALL", "path": rel, "role": self.role, "range": None,
                                         "status": 0, "auth": "", "sent": fault.after})
                self.hub.released.wait(30)
            self.close_connection = True
            return -2  # cut
        self.wfile.write(body)
        return status

    # --- controls -----------------------------------------------------------------------
    def _control(self, name: str) -> int:
        if name == "log":
            self._json(200, self.hub.requests(caller_in_flight=1))
            return 200
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if name == "fault":
            self.hub.fault(body["repo"], body["path"], body["kind"], int(body.get("after", 0)), int(body.get("times", 1)))
        elif name == "release":
            self.hub.release()
        elif name == "remove":
            self.hub.remove(body["repo"], body["path"])
        elif name == "push":
            changes = {p: (base64.b64decode(v) if v is not None else None) for p, v in body["files"].items()}
            self._json(200, {"commit": self.hub.push(body["repo"], changes)})
            return 200
        elif name == "reset":
            self.hub.reset(caller_in_flight=1)
        else:
            self._json(404, {"error": f"no control {name}"})
            return 404
        self._json(200, {"ok": True})
        return 200


class HubServer:
    """The hub (``endpoint``) and its CDN origin, each a threaded HTTP server on ``host``."""

    def __init__(self, root: Path, host: str = "127.0.0.1", port: int = 0, cdn_port: int = 0,
                 token: str | None = None):
        root = Path(root)
        if not root.is_dir() or not any(root.iterdir()):
            from tests.hub.repos import write_repos  # the checkout is on sys.path (module run or conftest)

            write_repos(root)
        self.hub = Hub(root, token)
        self.cdn = ThreadingHTTPServer((host, cdn_port), type("CdnHandler", (Handler,), {"hub": self.hub, "role": "cdn"}))
        self.cdn.daemon_threads = True
        cdn_base = f"http://{host}:{self.cdn.server_address[1]}"
        self.http = ThreadingHTTPServer((host, port), type("HubHandler", (Handler,), {
            "hub": self.hub, "role": "hub", "cdn_base": cdn_base}))
        self.http.daemon_threads = True
        self.endpoint = f"http://{host}:{self.http.server_address[1]}"
        self._threads: list[threading.Thread] = []

    def start(self) -> HubServer:
        for srv in (self.http, self.cdn):
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self.hub.release()
        for srv in (self.http, self.cdn):
            srv.shutdown()
            srv.server_close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.hub.server", description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, type=Path, help="repos folder (written when empty)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cdn-port", type=int, default=0)
    parser.add_argument("--token-file", type=Path, help="file holding the token the hub accepts (HF_TOKEN=... or bare)")
    args = parser.parse_args(argv)
    token = None
    if args.token_file:
        raw = args.token_file.read_text().strip()
        token = raw.split("=", 1)[1].strip() if raw.startswith("HF_TOKEN=") else raw
    server = HubServer(args.root, args.host, args.port, args.cdn_port, token).start()
    print(f"HF_ENDPOINT={server.endpoint}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
