"""The model lock: each model of the spec resolved to an exact commit and exact files.

``rigkit models lock -i INVENTORY`` writes ``<inventory>.lock.json`` beside the inventory
(``inventory/sandbox.py`` → ``inventory/sandbox.lock.json``), like a package lock. The deploy
fetches only what the lock names (:mod:`rigkit.host.fetch`, on the host); :func:`check_lock` refuses
a spec that no longer matches its lock ("re-lock").

A hub model (``repo_id`` + ``revision``) is resolved with huggingface-hub's
``HfApi.model_info(repo_id, revision=..., files_metadata=True)`` (``GET
/api/models/{repo_id}/revision/{rev}?blobs=true``: the commit in ``sha``, each sibling's
``size``, ``blobId`` and, for LFS files, ``lfs.sha256``), filtered by the spec's
``include``/``exclude`` globs exactly as ``hf download --include/--exclude`` filters them
(``huggingface_hub.utils.filter_repo_objects``: fnmatch, ``*`` crosses ``/``; no include = every
file). A ``url`` + ``sha256`` model is sized with an HTTP HEAD (redirects followed).

Lock format (JSON, keys sorted, 2-space indent, trailing newline; no timestamps, no endpoint,
never a token, so the same hub state gives the same bytes)::

    {"version": 1,
     "models": {
       "<name>": {"source": {"repo_id", "revision", "include", "exclude", "path"}   # as in the spec
                  "commit": "<40 hex>",
                  "files": [{"path": "config.json", "size": 273, "git_blob": "<40 hex>"},
                            {"path": "model-00001-of-00002.safetensors", "size": 540920,
                             "sha256": "<64 hex>"}],           # sorted by path; sizes in bytes
                  "total_bytes": 1082318,
                  "config": {...},            # optional: config.json summarized (rigkit.spec.vram.hf_config_summary)
                  "gguf": {"<file>.gguf": {...}},   # optional: each GGUF header (rigkit.spec.gguf_header.summarize)
                  "header_bytes_fetched": N},       # optional: bytes read of the GGUF files (range requests)
       "<url model>": {"source": {"url", "sha256", "path"},
                       "files": [{"path": "<url basename>", "size": N, "sha256": "<64 hex>", "url": "..."}],
                       "total_bytes": N}}}

Models whose source is unset (operator-supplied, ``repo_id`` and ``url`` both None) are left out
of the lock and named by :func:`lock_models`'s ``skipped``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rigkit import hints
from rigkit.spec.types import PACMAN_VERSION_RE, SHA256_RE

#: Every hub request of the lock — a model's info, its ``config.json``, each range of a GGUF header —
#: and a url model's HEAD: seconds to connect, and seconds the server may then send nothing (httpx's
#: and requests' read timeout: each wait for the next bytes). Past either the lock fails naming the
#: host and the timeout (huggingface-hub's own client has none: ``default_client_factory``, ``timeout=None``).
HUB_CONNECT_TIMEOUT_S = 10.0
HUB_READ_TIMEOUT_S = 30.0

LOCK_VERSION = 2
#: Lock versions still read: 1 is the models-only lock; it lacks the sections rigkit lock adds.
READ_VERSIONS = (1, 2)
_SHA256 = SHA256_RE.pattern
_GIT_SHA1 = r"^[0-9a-f]{40}$"


class LockError(RuntimeError):
    """The hub (or a URL) could not resolve a model: the message names the model, repo and
    revision, and the cause (HTTP status, network); never a token. Exit code 1."""


class ModelSourceUnreachable(LockError):
    """The hub or a model's URL did not answer at all (no network, a name that does not resolve): the
    lock's other sources are likely unreachable too (``rigkit lock`` says which, and how to lock elsewhere)."""


class LockFormatError(ValueError):
    """A lock file that is not a valid rigkit model lock: ``problems`` lists ``"<file>: <entry>:
    <what is wrong>"`` lines (the file and the entry named, e.g. ``models.strata.files[0].path``).
    Exit code 2."""

    def __init__(self, path: str | os.PathLike, problems: list[str]):
        self.path = str(path)
        self.problems = [f"{path}: {p}" for p in problems]
        super().__init__("\n".join(self.problems))


def _relative_path(value: str) -> str:
    """A path inside the model folder: relative, POSIX, no ``..``, no empty or ``.`` part."""
    parts = value.split("/")
    if not value or value.startswith("/") or "\\" in value or any(p in ("", ".", "..") for p in parts) \
            or PurePosixPath(value).is_absolute() or re.match(r"^[A-Za-z]:", value):
        raise ValueError("a relative path inside the model folder (no '..', no leading '/', no empty part)")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise ValueError("a path without control characters")
    return value


class _LockModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class LockedFile(_LockModel):
    """One file of a locked model: ``path`` inside the model folder, ``size`` in bytes, and its
    hash: ``sha256`` (LFS files, url models) or ``git_blob`` (small files: the git blob id).
    ``url`` for a url model's file."""

    path: str
    size: int = Field(ge=0)
    sha256: str | None = Field(default=None, pattern=_SHA256)
    git_blob: str | None = Field(default=None, pattern=_GIT_SHA1)
    url: str | None = None

    _path = field_validator("path")(classmethod(lambda cls, v: _relative_path(v)))

    @model_validator(mode="after")
    def _one_hash(self) -> LockedFile:
        if (self.sha256 is None) == (self.git_blob is None):
            raise ValueError("each file needs exactly one of sha256 (64 hex) or git_blob (40 hex)")
        if self.url is not None and self.sha256 is None:
            raise ValueError("a file fetched by url needs its sha256")
        return self


class LockedSource(_LockModel):
    """The spec source a lock entry was made from (:func:`source_of`): a hub repo (``repo_id``,
    ``revision``, ``include``, ``exclude``, ``path``) or a url model (``url``, ``sha256``, ``path``)."""

    repo_id: str | None = Field(default=None, min_length=1)
    revision: str | None = Field(default=None, min_length=1)
    include: list[str] | None = None
    exclude: list[str] | None = None
    url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    sha256: str | None = Field(default=None, pattern=_SHA256)
    path: str

    _path = field_validator("path")(classmethod(lambda cls, v: _relative_path(v)))

    @model_validator(mode="after")
    def _hub_or_url(self) -> LockedSource:
        hub = [self.repo_id, self.revision, self.include, self.exclude]
        if self.url is None and all(v is not None for v in hub) and self.sha256 is None:
            return self
        if self.url is not None and self.sha256 is not None and all(v is None for v in hub):
            return self
        raise ValueError("a hub source (repo_id, revision, include, exclude, path) or a url source "
                         "(url, sha256, path), not a mix")


def over_bridge_limit(files: Iterable[tuple[str, int]]) -> list[str]:
    """One message per hub file (``(path, size in bytes)``) larger than the largest file the Hub's
    LFS bridge serves: huggingface-hub's ``constants.MAX_HTTP_DOWNLOAD_SIZE`` (50 GB, 50 000 000 000
    bytes; ``file_download.http_get`` refuses a larger one, as the bridge does, huggingface/
    xet-core#592). rigkit's fetch takes the bridge, never Xet (``notes/hub-xet.md``)."""
    from huggingface_hub.constants import MAX_HTTP_DOWNLOAD_SIZE as limit

    return [f"{path}: {size} bytes is over the {limit // 10**9} GB ({limit} bytes) the Hub's LFS bridge serves in one "
            "file, the path rigkit's fetch takes (notes/hub-xet.md); choose a file split into parts of at most that"
            for path, size in files if size > limit]


class LockEntry(_LockModel):
    """One locked model: its ``source``, the ``commit`` (40 hex, hub models), the ``files`` (at
    least one, unique paths) and ``total_bytes`` (their sizes summed). Optional, for the VRAM
    estimate (:mod:`rigkit.spec.vram`): ``gguf`` (each GGUF file's header summary, by path,
    :func:`rigkit.spec.gguf_header.summarize`), ``config`` (``config.json`` summarized by
    :func:`rigkit.spec.vram.hf_config_summary`), ``header_bytes_fetched`` (bytes ``models lock``
    read of the GGUF files)."""

    source: LockedSource
    commit: str | None = Field(default=None, pattern=_GIT_SHA1)
    files: list[LockedFile] = Field(min_length=1)
    total_bytes: int = Field(ge=0)
    gguf: dict[str, dict[str, Any]] | None = None
    config: dict[str, Any] | None = None
    header_bytes_fetched: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _consistent(self) -> LockEntry:
        if self.source.repo_id is not None and self.commit is None:
            raise ValueError(f"a hub model needs its commit (40 hex), what `{hints.command('models lock')}` resolved")
        if self.source.repo_id is not None and (too_big := over_bridge_limit((f.path, f.size) for f in self.files)):
            raise ValueError("; ".join(too_big))
        paths = [f.path for f in self.files]
        if len(set(paths)) != len(paths):
            raise ValueError("a file is listed twice")
        if self.total_bytes != sum(f.size for f in self.files):
            raise ValueError(f"total_bytes {self.total_bytes} is not the sum of the file sizes "
                             f"({sum(f.size for f in self.files)})")
        return self


class LockedPin(_LockModel):
    """``pins.<package>``: resolved from ``want`` (a series, or the operator's exact version) to the
    archive's ``version``, its package ``file`` at ``url`` with its ``sha256`` (and compressed size
    ``csize``, bytes) from the dated database ``repo_db``, and its signature ``sig_url`` (None when the
    archive has none) — :mod:`rigkit.resolve.archive`."""

    want: str = Field(min_length=1)
    version: str = Field(pattern=PACMAN_VERSION_RE.pattern)
    file: str = Field(pattern=r"^[^/]+\.pkg\.tar\.(?:zst|xz|gz)$")
    url: str = Field(pattern=r"^(?:https?|file)://\S+$")
    sha256: str = Field(pattern=_SHA256)
    csize: int = Field(ge=0)
    sig_url: str | None = None
    repo_db: str


class LockedImage(_LockModel):
    """``images.<name>``: ``repository`` at ``ref`` (the spec's tag or digest; ``registry`` its URL
    override) resolved to ``digest``, an ``index`` or a ``manifest`` (``media_type``); ``amd64`` the
    linux/amd64 manifest's digest of an index — :mod:`rigkit.resolve.registry`."""

    repository: str
    ref: str
    registry: str | None = None
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    kind: Literal["index", "manifest"]
    media_type: str
    amd64: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")


class LockedRelease(_LockModel):
    """``llama_swap``: the release ``version``, its tarball ``url`` and ``sha256``, read ``from`` the
    release's checksums file (or the tarball hashed) — :mod:`rigkit.resolve.release`."""

    version: str
    url: str = Field(pattern=r"^(?:https?|file)://\S+$")
    sha256: str = Field(pattern=_SHA256)
    from_: str = Field(alias="from")


class LockDocument(_LockModel):
    """The whole lock file: ``version`` 2 (1: a models-only lock of ``rigkit models lock`` before
    ``rigkit lock``, still read; its other sections are missing, which ``rigkit check`` and the deploy
    report as unresolved), ``models`` by name, and ``pins``, ``images``, ``llama_swap``
    (:mod:`rigkit.spec.riglock`)."""

    version: Literal[1, 2]
    models: dict[str, LockEntry]
    pins: dict[str, LockedPin] | None = None
    images: dict[str, LockedImage] | None = None
    llama_swap: LockedRelease | None = None


_TYPE_WORDS = {"model_type": "expected a mapping", "dict_type": "expected a mapping", "list_type": "expected a list",
               "int_type": "expected an integer", "string_type": "expected a string",
               "literal_error": f"expected {' or '.join(map(str, READ_VERSIONS))}"}


def _lock_problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors(include_url=False):
        loc = ""
        for part in err["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else (("." if loc else "") + str(part))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "missing":
            msg = "required"
        elif err["type"] in _TYPE_WORDS:
            msg = _TYPE_WORDS[err["type"]]
        elif err["type"] == "string_pattern_mismatch":
            want = {_SHA256: "64 lower-case hex digits", _GIT_SHA1: "40 lower-case hex digits"}
            msg = want.get(err["ctx"]["pattern"], msg)
        value = err.get("input")
        shown = "" if err["type"] in ("missing", "extra_forbidden") or isinstance(value, (dict, list)) \
            else f" ({value!r})"[:90]
        out.append(f"{loc or '(root)'}: {msg}{shown}")
    return out


def lock_path_for(inventory: str | os.PathLike) -> Path:
    """``inventory/sandbox.py`` → ``inventory/sandbox.lock.json`` (beside the inventory)."""
    p = Path(inventory)
    return p.with_name(p.stem + ".lock.json")


def source_of(model: Any) -> dict[str, Any] | None:
    """The part of a spec :class:`~rigkit.spec.model.ModelSource` the lock is a function of, as a
    plain dict (``None`` when the source is unset). A lock entry whose ``source`` differs from
    this is stale."""
    if model.repo_id:
        return {"repo_id": model.repo_id, "revision": model.revision, "include": list(model.include),
                "exclude": list(model.exclude), "path": model.path}
    if model.url:
        return {"url": model.url, "sha256": model.sha256, "path": model.path}
    return None


def select_files(paths: Iterable[str], include: list[str], exclude: list[str]) -> list[str]:
    """The repo paths kept by ``include`` / ``exclude`` globs, sorted, using huggingface-hub's
    own ``filter_repo_objects`` (what ``snapshot_download(allow_patterns=, ignore_patterns=)``
    and ``hf download --include/--exclude`` use)."""
    from huggingface_hub.utils import filter_repo_objects

    return sorted(filter_repo_objects(list(paths), allow_patterns=include or None, ignore_patterns=exclude or None))


def hub_timeout(connect: float = HUB_CONNECT_TIMEOUT_S, read: float = HUB_READ_TIMEOUT_S) -> Any:
    """The ``httpx2.Timeout`` (huggingface-hub's HTTP client) of every hub request of the lock:
    ``connect`` seconds to connect (and to get a pooled connection), ``read`` seconds without a byte
    (and to send one)."""
    import httpx2

    return httpx2.Timeout(connect=connect, read=read, write=read, pool=connect)


def network_words(url: str, exc: Exception, timeout: Any) -> str:
    """What failed on the way to ``url`` (``exc``: the HTTP client's error; ``timeout``: the
    :func:`hub_timeout` it ran under), naming the host: ``"huggingface.co sent nothing for 30 s (read
    timeout)"``, ``"… did not connect within 10 s (connect timeout)"``, else the error's class."""
    import httpx2

    host = urlsplit(str(url)).netloc or str(url)
    if isinstance(exc, (httpx2.ConnectTimeout, httpx2.PoolTimeout)):
        return f"{host} did not connect within {timeout.connect:g} s (connect timeout)"
    if isinstance(exc, (httpx2.ReadTimeout, httpx2.WriteTimeout)):
        return f"{host} sent nothing for {timeout.read:g} s (read timeout)"
    return f"{host}: {type(exc).__name__}"


def _hub_error(name: str, repo: str, revision: str, exc: Exception, timeout: Any = None,
               endpoint: str | None = None) -> LockError:
    import httpx2
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"models.{name}: {repo}@{revision}"
    if isinstance(exc, RevisionNotFoundError):
        return LockError(f"{where}: revision not found on the hub; check models.{name}.revision")
    if isinstance(exc, GatedRepoError):
        return LockError(f"{where}: gated repo; accept its terms on the hub with the account of HF_TOKEN")
    if isinstance(exc, RepositoryNotFoundError):
        return LockError(f"{where}: repository not found, or private and the HF token (HF_TOKEN or hf's token "
                         "file; value not shown) has no access")
    if isinstance(exc, HfHubHTTPError) and exc.response is not None and exc.response.status_code == 401:
        return LockError(f"{where}: the hub refused the HF token (HTTP 401; from HF_TOKEN or hf's token file, "
                         "value not shown); renew it")
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        return LockError(f"{where}: hub answered HTTP {exc.response.status_code}")
    endpoint = endpoint or os.environ.get('HF_ENDPOINT', 'https://huggingface.co')
    if timeout is not None and isinstance(exc, httpx2.TimeoutException):
        return ModelSourceUnreachable(f"{where}: hub unreachable: {network_words(endpoint, exc, timeout)}; "
                                      f"HF_ENDPOINT={endpoint}")
    return ModelSourceUnreachable(f"{where}: hub unreachable ({type(exc).__name__}); HF_ENDPOINT={endpoint}")


def lock_hub_model(name: str, source: dict[str, Any], api: Any, timeout: Any = None) -> dict[str, Any]:
    """Resolve one hub model: ``api.model_info(repo_id, revision, files_metadata=True)`` →
    ``{"source", "commit", "files", "total_bytes"}`` (see the module doc), under ``timeout``
    (default :func:`hub_timeout`). Raises :class:`LockError` for an HTTP or network failure (a
    timeout names the host and its seconds), and when the globs select no file."""
    timeout = timeout or hub_timeout()
    try:
        info = api.model_info(source["repo_id"], revision=source["revision"], files_metadata=True, timeout=timeout)
    except Exception as exc:  # huggingface_hub errors and httpx2 network errors
        raise _hub_error(name, source["repo_id"], source["revision"], exc, timeout,
                         getattr(api, "endpoint", None)) from None
    siblings = {s.rfilename: s for s in info.siblings or []}
    files = []
    for path in select_files(siblings, source["include"], source["exclude"]):
        s = siblings[path]
        if s.lfs is not None:
            files.append({"path": path, "size": int(s.lfs.size), "sha256": s.lfs.sha256})
        else:
            files.append({"path": path, "size": int(s.size), "git_blob": s.blob_id})
    if not files:
        raise LockError(f"models.{name}: {source['repo_id']}@{source['revision']}: include {source['include']} / "
                        f"exclude {source['exclude']} select none of its {len(siblings)} files")
    if too_big := over_bridge_limit((f["path"], f["size"]) for f in files):
        raise LockError(f"models.{name}: {source['repo_id']}@{source['revision']}: " + "; ".join(too_big))
    return {"source": source, "commit": info.sha, "files": files, "total_bytes": sum(f["size"] for f in files)}


def header_fetch(url: str, headers: dict[str, str], timeout: Any, session: Any = None) -> Callable[[int, int], bytes]:
    """A ``fetch(start, end)`` for :func:`rigkit.spec.gguf_header.parse` of a file on the hub
    (``url``: its ``resolve`` URL at the locked commit): each range a ``GET`` with ``Range:
    bytes=start-end`` under ``timeout`` (:func:`hub_timeout`), redirects followed (the hub answers an
    LFS file with a 302 to its CDN; the client drops ``Authorization`` on the way to another origin),
    through huggingface-hub's client (``session``: another ``httpx2.Client``). A server that ignores
    ``Range`` (200 instead of 206) is read only as far as asked, then closed. Raises the HTTP
    client's error."""
    from huggingface_hub.utils import get_session

    http = session or get_session()

    def fetch(start: int, end: int) -> bytes:
        with http.stream("GET", url, headers={**headers, "Range": f"bytes={start}-{end}"}, follow_redirects=True,
                         timeout=timeout) as resp:
            resp.raise_for_status()
            skip = start if resp.status_code == 200 else 0
            want = end - start + 1
            buf = bytearray()
            for chunk in resp.iter_bytes():
                buf += chunk
                if len(buf) >= skip + want:
                    break
            return bytes(buf[skip:skip + want])

    return fetch


def model_metadata(name: str, repo_id: str, commit: str, files: list[dict[str, Any]], api: Any,
                   timeout: Any = None) -> dict[str, Any]:
    """What the VRAM estimate needs of a hub model, read at ``commit``: each GGUF file's header
    (:func:`rigkit.spec.gguf_header.read_header` through :func:`header_fetch`: range requests of the
    header's bytes only) and ``config.json`` summarized (:func:`rigkit.spec.vram.hf_config_summary`; a
    config the summary cannot read is left out: the estimate then says it has nothing to go on), each
    request under ``timeout`` (default :func:`hub_timeout`). Returns the optional :class:`LockEntry`
    keys. Raises :class:`LockError` when a GGUF header cannot be read (its fault, offset and field),
    or a request fails (a timeout names the host and its seconds)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    from rigkit.spec.gguf_header import HeaderError, RangeReadError, read_header
    from rigkit.spec.vram import hf_config_summary

    timeout = timeout or hub_timeout()
    endpoint = getattr(api, "endpoint", None)
    headers = build_hf_headers(token=getattr(api, "token", None), library_name="rigkit")
    out: dict[str, Any] = {}
    fetched = 0
    for f in files:
        url = hf_hub_url(repo_id, f["path"], revision=commit, endpoint=endpoint)
        where = f"models.{name}: {repo_id}@{commit}: {f['path']}"
        if f["path"].endswith(".gguf"):
            try:
                summary, n = read_header(header_fetch(url, headers, timeout), f["size"])
            except (HeaderError, RangeReadError) as exc:
                raise LockError(f"{where}: {exc}") from None
            except Exception as exc:  # the HTTP client's errors
                raise LockError(f"{where}: header not readable: {network_words(url, exc, timeout)}") from None
            out.setdefault("gguf", {})[f["path"]] = summary
            fetched += n
        elif f["path"] == "config.json":
            try:
                resp = get_session().get(url, headers=headers, follow_redirects=True, timeout=timeout)
                resp.raise_for_status()
            except Exception as exc:  # the HTTP client's errors
                raise LockError(f"{where}: {network_words(url, exc, timeout)}") from None
            try:
                out["config"] = hf_config_summary(resp.json())
            except ValueError:
                pass  # not a config the estimate reads; rigkit check says so
    if "gguf" in out:
        out["header_bytes_fetched"] = fetched
    return out


def lock_url_model(name: str, source: dict[str, Any], session: Any = None) -> dict[str, Any]:
    """Size a ``url`` + ``sha256`` model with an HTTP HEAD (redirects followed; no HF token is
    ever sent to a URL). Raises :class:`LockError` when the URL fails or reports no size."""
    import requests

    http = session or requests
    try:
        resp = http.head(source["url"], allow_redirects=True, timeout=(HUB_CONNECT_TIMEOUT_S, HUB_READ_TIMEOUT_S))
    except requests.Timeout as exc:
        host = urlsplit(source["url"]).netloc
        words = (f"did not connect within {HUB_CONNECT_TIMEOUT_S:g} s (connect timeout)"
                 if isinstance(exc, requests.ConnectTimeout) else f"sent nothing for {HUB_READ_TIMEOUT_S:g} s (read timeout)")
        raise ModelSourceUnreachable(f"models.{name}: {source['url']}: unreachable: {host} {words}") from None
    except requests.RequestException as exc:
        raise ModelSourceUnreachable(f"models.{name}: {source['url']}: unreachable ({type(exc).__name__})") from None
    if resp.status_code >= 400:
        raise LockError(f"models.{name}: {source['url']}: HTTP {resp.status_code}")
    size = resp.headers.get("Content-Length")
    if size is None:
        raise LockError(f"models.{name}: {source['url']}: the server reports no Content-Length; cannot lock its size")
    if not source.get("sha256"):
        raise LockError(f"models.{name}: url given without sha256; set models.{name}.sha256")
    fname = source["url"].rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
    files = [{"path": fname, "size": int(size), "sha256": source["sha256"], "url": source["url"]}]
    return {"source": source, "files": files, "total_bytes": int(size)}


def lock_models(models: dict[str, Any], endpoint: str | None = None, token: str | None = None,
                api: Any = None, timeout: Any = None) -> tuple[dict[str, Any], list[str]]:
    """Lock every model of ``models`` (name → spec ``ModelSource``). Returns ``(lock, skipped)``
    where ``skipped`` names models whose source is unset.

    ``endpoint`` defaults to ``$HF_ENDPOINT`` (read now, not at import); ``token`` None lets
    huggingface-hub find it (``HF_TOKEN`` or its token file); ``timeout`` of each hub request
    defaults to :func:`hub_timeout`. Raises :class:`LockError`.
    """
    from huggingface_hub import HfApi

    api = api or HfApi(endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None, token=token,
                       library_name="rigkit")
    out: dict[str, Any] = {}
    skipped = []
    for name in sorted(models):
        source = source_of(models[name])
        if source is None:
            skipped.append(name)
        elif "repo_id" in source:
            entry = lock_hub_model(name, source, api, timeout)
            entry.update(model_metadata(name, source["repo_id"], entry["commit"], entry["files"], api, timeout))
            out[name] = entry
        else:
            out[name] = lock_url_model(name, source)
    return {"version": LOCK_VERSION, "models": out}, skipped


def dumps_lock(lock: dict[str, Any]) -> str:
    """The lock's canonical text: JSON, keys sorted, 2-space indent, trailing newline."""
    return json.dumps(lock, indent=2, sort_keys=True) + "\n"


def write_lock(lock: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write :func:`dumps_lock` to ``path`` atomically (:func:`rigkit.common.atomic.write_text`); return the path."""
    from rigkit.common import atomic

    return atomic.write_text(path, dumps_lock(lock), make_parents=False)


def relock(whole: bool = False) -> str:
    """What every lock problem ends with: re-lock, as a complete command (:mod:`rigkit.hints`):
    ``rigkit models lock`` for the models, ``rigkit lock`` (``whole``) for the pins, images and release."""
    return f"re-lock with `{hints.command('lock') if whole else hints.command('models lock')}`"


def load_lock(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a lock file (:class:`LockDocument`, as strictly as the spec: every entry's
    source, a 40-hex commit for hub models, each file's path inside the model folder, its size and
    exactly one hash). Returns the plain dict. Raises ``FileNotFoundError`` (no lock yet: run
    ``rigkit models lock``) or :class:`LockFormatError` (a ``ValueError``) naming the file and each
    bad entry."""
    try:
        lock = json.loads(Path(path).read_text())
    except UnicodeDecodeError as exc:
        raise LockFormatError(path, [f"not UTF-8 text ({exc.reason}); {relock()}"]) from None
    except json.JSONDecodeError as exc:
        raise LockFormatError(path, [f"not JSON (line {exc.lineno} column {exc.colno}: {exc.msg}); " + relock()]) from None
    if not isinstance(lock, dict) or lock.get("version") not in READ_VERSIONS:
        raise LockFormatError(path, [f"not a rigkit lock (version {LOCK_VERSION}, or 1: models only); {relock()}"])
    try:
        LockDocument.model_validate(lock)
    except ValidationError as exc:
        raise LockFormatError(path, _lock_problems(exc)) from None
    return lock


def lock_problems_for(spec: Any, inventory: str | os.PathLike) -> tuple[str | None, list[str]]:
    """What ``rigkit check`` says about the model lock of one host: ``(lock path or None, problems)``.

    The lock is ``spec.models_lock`` when set, else the file ``rigkit models lock`` writes beside
    the inventory; when it does not exist there is nothing to say (``rigkit deploy`` refuses
    without one). Problems: each bad entry (:func:`load_lock`), then each model that no longer
    matches its lock (:func:`check_lock`)."""
    path = Path(getattr(spec, "models_lock", None) or lock_path_for(inventory))
    if not path.is_file():
        return None, []
    try:
        lock = load_lock(path)
    except LockFormatError as exc:
        return str(path), list(exc.problems)
    except OSError as exc:
        return str(path), [f"{path}: unreadable ({exc.strerror})"]
    return str(path), check_lock(spec.models, lock, str(path)) + served_file_problems(spec, lock, str(path))


def served_file_problems(spec: Any, lock: dict[str, Any], lock_file: str = "the lock") -> list[str]:
    """The GGUF file each llama.cpp server serves (``strata.model_file``, ``gguf_baseline.model_file``, an
    operator's ``llama_swap.members.<id>.llamacpp``'s)
    must be one of the files the lock lists for its model: a file the lock does not list is never
    fetched or verified, so the server would start on whatever is there, or on nothing."""
    from rigkit.spec.members import own_server

    out = []
    servers = [(key, getattr(spec, key)) for key in ("strata", "gguf_baseline")]
    servers += [(f"llama_swap.members.{mid}.llamacpp", own_server(mid, spec))
                for mid, m in spec.llama_swap.members.items() if m.llamacpp is not None and m.llamacpp.model in spec.models]
    for key, server in servers:
        entry = lock.get("models", {}).get(server.model)
        if server.model_file is None or entry is None:
            continue
        files = [f.get("path") for f in entry.get("files", [])]
        if server.model_file not in files:
            shown = ", ".join(f for f in files if str(f).endswith(".gguf")) or "none"
            out.append(f"{key}.model_file: {server.model_file!r} is not a file {lock_file} lists for model "
                       f"{server.model!r} (its GGUF files: {shown}); name one of them, or {relock()}")
    return out


def check_lock(models: dict[str, Any], lock: dict[str, Any], lock_file: str = "the lock") -> list[str]:
    """Compare the spec's models (name → ``ModelSource``) with a lock. Returns one message per
    problem (empty = the lock matches): a model set in the spec but not locked, locked with a
    different source (repo, revision, include/exclude, path, url, sha256), or locked but no
    longer in the spec. Every message ends with what to do: "re-lock with `rigkit models lock`"."""
    problems = []
    locked = lock.get("models", {})
    fix = relock()
    for name in sorted(models):
        want = source_of(models[name])
        if want is None:
            if name in locked:
                problems.append(f"models.{name}: unset in the spec but locked in {lock_file}; {fix}")
            continue
        entry = locked.get(name)
        if entry is None:
            problems.append(f"models.{name}: not in {lock_file}; {fix}")
            continue
        have = entry.get("source", {})
        diffs = [f"{k} {have.get(k)!r} → {want.get(k)!r}" for k in sorted(set(want) | set(have)) if want.get(k) != have.get(k)]
        if diffs:
            problems.append(f"models.{name}: spec changed since {lock_file} was written ({'; '.join(diffs)}); {fix}")
    for name in sorted(set(locked) - set(models)):
        problems.append(f"models.{name}: in {lock_file} but not in the spec; {fix}")
    return problems
