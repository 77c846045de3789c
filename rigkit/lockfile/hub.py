"""The models' resolver: each model of the spec resolved, on the hub or at its URL, to an exact commit and
exact files — the ``models`` section of the lock (:mod:`rigkit.lockfile.document`). ``rigkit lock`` and
``rigkit models lock`` call :func:`lock_models`; the deploy fetches only what the lock names
(:mod:`rigkit.host.fetch`, on the host). This module asks the network (the hub's API, range requests of
GGUF headers, a url model's HEAD); :mod:`rigkit.spec` never imports it.

A hub model (``repo_id`` + ``revision``) is resolved with huggingface-hub's
``HfApi.model_info(repo_id, revision=..., files_metadata=True)`` (``GET
/api/models/{repo_id}/revision/{rev}?blobs=true``: the commit in ``sha``, each sibling's
``size``, ``blobId`` and, for LFS files, ``lfs.sha256``), filtered by the spec's
``include``/``exclude`` globs exactly as ``hf download --include/--exclude`` filters them
(``huggingface_hub.utils.filter_repo_objects``: fnmatch, ``*`` crosses ``/``; no include = every
file). A ``url`` + ``sha256`` model is sized with an HTTP HEAD (redirects followed).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from rigkit.lockfile.document import LOCK_VERSION, over_bridge_limit, source_of
from rigkit.lockfile.errors import LockError, ModelSourceUnreachable

#: Every hub request of the lock — a model's info, its ``config.json``, each range of a GGUF header —
#: and a url model's HEAD: seconds to connect, and seconds the server may then send nothing (httpx's
#: and requests' read timeout: each wait for the next bytes). Past either the lock fails naming the
#: host and the timeout (huggingface-hub's own client has none: ``default_client_factory``, ``timeout=None``).
HUB_CONNECT_TIMEOUT_S = 10.0
HUB_READ_TIMEOUT_S = 30.0


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


