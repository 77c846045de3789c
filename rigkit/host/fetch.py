"""The model fetch that runs on the host (``rigkit-agent fetch``): the locked files of one model,
verified, into ``/srv/models/<path>/``, resumable, with a record of what was verified.

Imports only the standard library, ``requests`` and ``huggingface_hub`` (the agent's
wheelhouse), never pydantic or pyinfra. Input is the lock written by ``rigkit models lock``
(:mod:`rigkit.lockfile.document`: ``{"models": {name: {"source", "commit", "files": [{"path", "size",
"sha256" | "git_blob"}]}}}``).

One run of :func:`fetch_model`, in order:

1. Every locked file already at the target is classified, without any network: unchanged since
   the record (same size and ``st_mtime_ns`` as recorded, recorded hash = the lock's) — not read;
   otherwise hashed (in parallel across cores) and *adopted* when size and hash match the lock
   (sha256 for LFS files, the git blob id ``sha1("blob <size>\\0" + bytes)`` for the others),
   else *bad*.
2. Free space at the target (``shutil.disk_usage``; injectable) is checked against the bytes
   still to download — partial downloads kept from an earlier run and bad files about to be
   replaced count in favour — before any download; the error gives both figures and what is
   already in place.
3. Each missing or bad file is downloaded at the locked commit with huggingface-hub's own calls
   (``hf_hub_url`` + ``get_hf_file_metadata``: the HEAD that resolves the CDN location and
   checks the etag and size against the lock; ``http_get``: the streamed GET with ``Range``
   resume and its retries) into ``<target>/.rigkit-partial/<hash>.part``, verified, and only
   then renamed over the target path: a partial or corrupt file is never in place of a good
   one. ``hf_hub_download`` is not used because 2.4.0 downloads into a process-unique temp file
   that it deletes on failure (``file_download._download_to_tmp_and_move``, upstream PR #4228),
   so a killed fetch would start over; the stable ``.part`` name resumes across runs. A file
   whose bytes fail verification is removed and fetched once more; a second failure is an error
   and nothing is left in place.
4. The record ``/var/lib/rigkit/models/<name>.json`` (injectable) gets each verified file's
   size, mtime (ns) and hash, so a converged run reads no file and makes no request.

The path the bytes take: the Hub's LFS bridge, never Xet. The Hub stores large files in Xet and
answers ``resolve`` for one with both a ``Location`` (its LFS bridge, one URL serving the whole
file with ``Range``) and the Xet headers (``X-Xet-Hash``, ``Link: rel="xet-auth"``); the fetch
downloads ``Location`` with ``http_get`` and never reads ``xet_file_data`` (``xet_get`` and its
``hf_xet`` chunk transfer are what ``hf_hub_download`` would call). The agent's process also runs
with ``HF_HUB_DISABLE_XET=1`` (:data:`HUB_ENV`, set by :func:`main` before huggingface-hub is
imported, whose constants are read at import), so nothing in the client takes the Xet path and
``hf_xet`` — in the wheelhouse only because huggingface-hub 2.4.0 requires it on x86_64 — is never
loaded: no Xet cache or log under ``$HF_HOME/xet``. Why and what it costs (no chunk deduplication;
no single file above 50 GB, the bridge's limit): ``notes/hub-xet.md``.

Files not in the lock are never deleted. The HF token is read from
``/etc/rigkit/secrets/hf.env`` (``HF_TOKEN=...``; injectable), sent only to the hub (the client
drops it for a CDN redirect to another origin, and a ``url`` model never gets it), and never
printed: every message is scrubbed of it.

HyperQwen (``prepared=True``): its ``prepare`` rewrites base files in place. :func:`record`
taken after ``prepare`` rebases the reference to the files as they are then (``"reference":
"prepare"``); later runs compare against it (never re-fetching over prepared files), and a base
file that must be fetched again sets ``prepare_needed``. Without a record (adopting a box that
was prepared by hand), a present file that differs from the lock is kept, reported, and
``prepare_needed`` is set: run ``prepare`` (``NO_DOWNLOAD=1``), then :func:`record`.

Errors: :class:`FetchError` (exit 1): token refused (401), file or commit gone upstream (404),
too little disk, a transfer that failed after the client's retries (the ``.part`` is kept for
the next run), bytes that fail verification twice. :class:`LockInputError` (exit 2): the lock
is unreadable or does not name the model.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rigkit.common import atomic
from rigkit.host.modelrecords import (
    PARTIAL_DIR,
    RECORD_VERSION,
    FetchError,
    LockInputError,
    free_bytes,
    hash_file,
    hash_files,
    load_record,
    lock_digest,
    record,
    record_path,
    same_stat,
    stat_entry,
    status,
    write_record,
)
from rigkit.common.envfile import parse_env_text



#: The environment huggingface-hub runs under in the agent's fetch: Xet off (see the module doc).
#: huggingface-hub reads it at import (``constants.HF_HUB_DISABLE_XET``), so :func:`main` sets it
#: before the first import.
HUB_ENV = {"HF_HUB_DISABLE_XET": "1"}


def human(n: float) -> str:
    """Bytes as ``"1.50 GiB"`` (binary units)."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return f"{int(n)} B"


# --------------------------------------------------------------------------------------------
# Secrets


def read_token(token_file: str | os.PathLike) -> str | None:
    """The ``HF_TOKEN=...`` value of ``token_file`` (an env file; quotes stripped), or None
    when the file does not exist (public repos need none). Raises :class:`FetchError` naming
    the file, never its content, when it exists but cannot be read."""
    path = Path(token_file)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FetchError(f"HF token file {path}: cannot read it ({exc.strerror})") from None
    return parse_env_text(text).get("HF_TOKEN") or None


class _Scrub:
    """Replaces the token in any text with ``<HF_TOKEN>`` before it is shown."""

    def __init__(self, token: str | None):
        self.token = token

    def __call__(self, text: str) -> str:
        return text.replace(self.token, "<HF_TOKEN>") if self.token else text


# --------------------------------------------------------------------------------------------
# Progress


class LineProgress:
    """A tqdm stand-in for ``http_get(tqdm_class=...)`` that prints a plain line at most every
    ``interval`` seconds and at the end (a log, not a bar: the agent runs without a TTY)."""

    interval = 5.0
    stream = sys.stderr

    def __init__(self, total: int | None = None, initial: int = 0, desc: str = "", **_: Any):
        self.total, self.n, self.desc = total, initial, desc
        self.start_n, self.t0 = initial, time.monotonic()
        self.last = self.t0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self._line()

    def _line(self) -> None:
        dt = max(time.monotonic() - self.t0, 1e-9)
        pct = f" {100 * self.n / self.total:.0f}%" if self.total else ""
        print(f"  {self.desc}: {human(self.n)}/{human(self.total or 0)}{pct}, "
              f"{(self.n - self.start_n) / dt / (1 << 20):.1f} MiB/s", file=self.stream, flush=True)

    def close(self) -> None:
        self._line()


# --------------------------------------------------------------------------------------------
# The fetch


@dataclass
class FetchResult:
    """What one run did, per locked file path: ``unchanged`` (record matched, not read),
    ``adopted`` (present, hashed, matches), ``fetched`` (downloaded and verified), ``kept``
    (prepared model: present, differs from the lock, left for ``prepare``); ``bytes_downloaded``
    in bytes; ``prepare_needed`` for a prepared model whose base files changed."""

    model: str
    target: str
    unchanged: list[str] = field(default_factory=list)
    adopted: list[str] = field(default_factory=list)
    fetched: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    bytes_downloaded: int = 0
    prepare_needed: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _origin(url: str) -> tuple[str, str, int | None]:
    u = urlsplit(url)
    return (u.scheme, (u.hostname or "").lower(), u.port)


def _hub_failure(name: str, repo: str, commit: str, rel: str, exc: Exception, token_file: Path,
                 token: str | None, endpoint: str) -> FetchError:
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{name}: {repo}@{commit}: {rel}"
    tok = f"the HF token from {token_file}" if token else f"no HF token ({token_file} absent)"
    if isinstance(exc, RemoteEntryNotFoundError):
        return FetchError(f"{where}: gone upstream (HTTP 404) although the lock names it — the repo's history was "
                          "rewritten or the file deleted; nothing fetched for it. Review upstream, then re-lock with "
                          "`rigkit models lock`")
    if isinstance(exc, RevisionNotFoundError):
        return FetchError(f"{where}: the locked commit is gone upstream (HTTP 404); re-lock with `rigkit models lock`")
    if isinstance(exc, GatedRepoError):
        return FetchError(f"{where}: gated repo; {tok} has not been granted access")
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status == 401 or isinstance(exc, RepositoryNotFoundError):
        return FetchError(f"{where}: the hub refused {tok} (HTTP {status or 401}): check HF_TOKEN in {token_file} "
                          "(value not shown) and its access to the repo")
    if isinstance(exc, HfHubHTTPError) and status is not None:
        return FetchError(f"{where}: hub answered HTTP {status}")
    return FetchError(f"{where}: hub at {endpoint} unreachable or the transfer failed ({type(exc).__name__})")


class _Fetcher:
    """One model's fetch; see :func:`fetch_model`."""

    def __init__(self, lock: dict[str, Any], name: str, models_root: Path, state_dir: Path, token_file: Path,
                 endpoint: str | None, prepared: bool, free_space: Callable[[Path], int],
                 log: Callable[[str], None], workers: int | None, progress: str):
        models = lock.get("models") if isinstance(lock, dict) else None
        if not isinstance(models, dict) or name not in models:
            known = ", ".join(sorted(models or {})) or "none"
            raise LockInputError(f"model {name!r} is not in the lock (locked: {known}); re-lock with `rigkit models lock`")
        self.name, self.entry = name, models[name]
        self.source = self.entry["source"]
        self.target = Path(models_root) / self.source["path"]
        self.partial = self.target / PARTIAL_DIR
        self.state_dir, self.token_file = Path(state_dir), Path(token_file)
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
        self.prepared, self.free_space, self.workers = prepared, free_space, workers
        self.progress = progress
        self.token: str | None = None
        self.scrub = _Scrub(None)
        self._log = log

    def log(self, msg: str) -> None:
        self._log(self.scrub(msg))

    # --- classification (no network) ---------------------------------------------------
    def classify(self, rec: dict[str, Any] | None, result: FetchResult):
        files = self.entry["files"]
        rec_files = (rec or {}).get("files", {})
        rec_locked = (rec or {}).get("locked", {})
        entries: dict[str, dict] = {}
        to_hash, missing = [], []
        for f in files:
            rel, path, want = f["path"], self.target / f["path"], lock_digest(f)[1]
            r = rec_files.get(rel)
            if r is not None and rec_locked.get(rel) == want and same_stat(path, r):
                result.unchanged.append(rel)
                entries[rel] = r
            elif path.is_file():
                to_hash.append(f)
            else:
                missing.append(f)
        digests = hash_files([self.target / f["path"] for f in to_hash],
                             [lock_digest(f)[0] == "git_blob" for f in to_hash], self.workers) if to_hash else []
        bad = []
        for f, d in zip(to_hash, digests, strict=True):
            rel, (kind, want) = f["path"], lock_digest(f)
            r = rec_files.get(rel)
            if d["size"] == f["size"] and d.get(kind) == want:
                result.adopted.append(rel)
                entries[rel] = stat_entry(self.target / rel, d)
                self.log(f"{self.name}: {rel}: present, {kind} matches the lock; adopted")
            elif r is not None and rec_locked.get(rel) == want and d["sha256"] == r.get("sha256"):
                result.unchanged.append(rel)  # prepared content, only its mtime moved
                entries[rel] = stat_entry(self.target / rel, d)
            elif self.prepared and (rec is None or rec.get("reference") != "prepare"):
                result.kept.append(rel)
                result.prepare_needed = True
                self.log(f"{self.name}: {rel}: differs from the lock; kept (prepare's output?) — run prepare, then record")
            else:
                bad.append(f)
                self.log(f"{self.name}: {rel}: {kind} or size does not match the lock "
                         f"({d['size']} bytes, lock {f['size']}); it will be replaced")
        return entries, missing, bad

    # --- downloads --------------------------------------------------------------------
    def _part(self, f: dict[str, Any]) -> Path:
        return self.partial / f"{lock_digest(f)[1]}.part"

    def _download(self, f: dict[str, Any], part: Path) -> None:
        if "url" in self.source:
            self._download_url(f, part)
        else:
            self._download_hub(f, part)

    def _progress_cls(self):
        if self.progress == "bar":
            return None  # huggingface-hub's own tqdm bar
        if self.progress == "off":
            return type("Quiet", (LineProgress,), {"_line": lambda self: None})
        return LineProgress

    def _download_hub(self, f: dict[str, Any], part: Path) -> None:
        from huggingface_hub.file_download import get_hf_file_metadata, hf_hub_url, http_get
        from huggingface_hub.utils import build_hf_headers

        repo, commit, rel = self.source["repo_id"], self.entry["commit"], f["path"]
        token: str | bool = self.token or False
        url = hf_hub_url(repo, rel, revision=commit, endpoint=self.endpoint)
        try:
            meta = get_hf_file_metadata(url, token=token, endpoint=self.endpoint, library_name="rigkit")
        except Exception as exc:
            raise _hub_failure(self.name, repo, commit, rel, exc, self.token_file, self.token, self.endpoint) from None
        kind, want = lock_digest(f)
        if (meta.etag or "") != want or (meta.size is not None and meta.size != f["size"]):
            raise FetchError(f"{self.name}: {repo}@{commit}: {rel}: the hub serves etag {meta.etag} / {meta.size} bytes "
                             f"but the lock says {kind} {want} / {f['size']} bytes; re-lock and review")
        headers = build_hf_headers(token=token, library_name="rigkit")
        if _origin(meta.location) != _origin(url):
            headers.pop("authorization", None)  # a CDN: the token stays on the hub (as the client does)
        resume = part.stat().st_size if part.exists() else 0
        if resume:
            self.log(f"{self.name}: {rel}: resuming at {human(resume)} of {human(f['size'])}")
        with open(part, "ab") as fh:
            try:
                http_get(meta.location, fh, resume_size=resume, headers=headers, expected_size=f["size"],
                         displayed_filename=rel, tqdm_class=self._progress_cls())
            except Exception as exc:
                fh.flush()
                raise FetchError(self.scrub(
                    f"{self.name}: {rel}: transfer failed after the client's retries ({type(exc).__name__}); "
                    f"{human(part.stat().st_size)} kept in {part} — the next run resumes from there")) from None

    def _download_url(self, f: dict[str, Any], part: Path) -> None:
        import requests

        resume = part.stat().st_size if part.exists() else 0
        headers = {"Range": f"bytes={resume}-"} if resume else {}
        try:
            with requests.get(f["url"], headers=headers, stream=True, timeout=60) as resp:
                if resp.status_code == 404:
                    raise FetchError(f"{self.name}: {f['url']}: gone (HTTP 404) although the lock names it")
                resp.raise_for_status()
                mode = "ab" if resume and resp.status_code == 206 else "wb"
                with open(part, mode) as fh, LineProgress(total=f["size"], initial=resume if mode == "ab" else 0,
                                                          desc=f["path"]) as bar:
                    for chunk in resp.iter_content(1 << 20):
                        fh.write(chunk)
                        bar.update(len(chunk))
        except requests.RequestException as exc:
            raise FetchError(f"{self.name}: {f['url']}: transfer failed ({type(exc).__name__}); "
                             f"partial kept in {part} for the next run") from None

    def fetch_one(self, f: dict[str, Any]) -> dict[str, Any]:
        """Download ``f`` into its ``.part``, verify, rename into place; return its record entry."""
        rel, (kind, want) = f["path"], lock_digest(f)
        dest, part = self.target / rel, self._part(f)
        part.parent.mkdir(parents=True, exist_ok=True)
        if part.exists() and part.stat().st_size > f["size"]:
            part.unlink()
        for attempt in (1, 2):
            self.log(f"{self.name}: fetching {rel} ({human(f['size'])})")
            self._download(f, part)
            d = hash_file(part, git_blob=kind == "git_blob")
            if d["size"] == f["size"] and d.get(kind) == want:
                break
            part.unlink()
            msg = (f"{self.name}: {rel}: downloaded bytes fail verification ({kind} {d.get(kind)}, {d['size']} bytes; "
                   f"lock {want}, {f['size']} bytes); removed")
            if attempt == 2:
                raise FetchError(msg + " — failed twice, nothing left in place; check the hub or mirror")
            self.log(msg + "; fetching it again")
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(part, 0o644)
        atomic.move(part, dest)
        self.log(f"{self.name}: {rel}: {kind} verified")
        return stat_entry(dest, d)

    # --- the run ------------------------------------------------------------------------
    def run(self) -> FetchResult:
        result = FetchResult(self.name, str(self.target))
        rec = load_record(self.state_dir, self.name)
        if rec is not None and rec.get("prepare_needed"):
            result.prepare_needed = True
        entries, missing, bad = self.classify(rec, result)
        todo = sorted(missing + bad, key=lambda f: f["path"])
        if rec is not None and rec.get("reference") == "prepare" and todo:
            result.prepare_needed = True
        if todo:
            need = sum(f["size"] for f in todo)
            partial = sum(min(self._part(f).stat().st_size, f["size"]) for f in todo if self._part(f).exists())
            in_place = sum(f["size"] for f in self.entry["files"]) - need
            free = self.free_space(self.target)
            # a bad file stays in place until its verified successor replaces it (a failed transfer
            # leaves the host as it was), so its bytes are not free while the successor downloads
            if need - partial > free:
                raise FetchError(
                    f"{self.name}: not enough disk at {self.target}: {need - partial} bytes ({human(need - partial)}) "
                    f"still to download for {len(todo)} file(s), {free} bytes ({human(free)}) free"
                    + (f" ({len(bad)} file(s) to replace stay in place until their successors verify)" if bad else "")
                    + f"; {human(in_place)} already in place, {human(partial)} partially downloaded. "
                    "Nothing was downloaded; free space or move the models root")
            self.token = read_token(self.token_file) if "repo_id" in self.source else None
            self.scrub = _Scrub(self.token)
            self.target.mkdir(parents=True, exist_ok=True)
            self.log(f"{self.name}: {len(todo)} file(s), {human(need - partial)} to download into {self.target} "
                     f"({human(in_place)} already in place)")
        for f in todo:
            before = self._part(f).stat().st_size if self._part(f).exists() else 0
            entries[f["path"]] = self.fetch_one(f)
            result.fetched.append(f["path"])
            result.bytes_downloaded += f["size"] - before
            self._save(rec, entries, result)
        self._save(rec, entries, result)
        try:
            self.partial.rmdir()
        except OSError:
            pass
        if not todo:
            self.log(f"{self.name}: {len(self.entry['files'])} file(s) in place "
                     f"({len(result.unchanged)} unchanged since the record, {len(result.adopted)} verified now"
                     + (f", {len(result.kept)} kept for prepare" if result.kept else "") + ")")
        return result

    def _save(self, rec: dict[str, Any] | None, entries: dict[str, dict], result: FetchResult) -> None:
        locked = {f["path"]: lock_digest(f)[1] for f in self.entry["files"]}
        if rec is not None and rec.get("reference") == "prepare":
            files = {**rec["files"], **entries}  # files prepare added stay in the reference
            reference = "prepare"
        else:
            files, reference = dict(entries), "lock"
        write_record(self.state_dir, self.name, {
            "version": RECORD_VERSION, "model": self.name, "dir": str(self.target), "commit": self.entry.get("commit"),
            "reference": reference, "prepare_needed": result.prepare_needed,
            "files": dict(sorted(files.items())), "locked": locked})


def fetch_model(lock: dict[str, Any], name: str, *, models_root: str | os.PathLike,
                state_dir: str | os.PathLike, token_file: str | os.PathLike,
                endpoint: str | None = None, prepared: bool = False,
                free_space: Callable[[Path], int] = free_bytes, log: Callable[[str], None] | None = None,
                workers: int | None = None, progress: str = "lines") -> FetchResult:
    """Fetch model ``name`` of ``lock`` into ``models_root/<source path>/`` (see the module doc).

    + endpoint: the hub (default ``$HF_ENDPOINT``, else https://huggingface.co).
    + prepared: the model is rewritten in place by a preparer (HyperQwen); see the module doc.
    + free_space: bytes free at a path (injectable for tests).
    + log: one line per event (default: print to stderr); never gets the token.
    + progress: ``"lines"`` (a line every 5 s), ``"bar"`` (huggingface-hub's tqdm), ``"off"``.

    Returns a :class:`FetchResult`. Raises :class:`FetchError` (exit 1) and
    :class:`LockInputError` (exit 2).
    """
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    return _Fetcher(lock, name, Path(models_root), Path(state_dir), Path(token_file), endpoint, prepared,
                    free_space, log, workers, progress).run()


def load_lock_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a lock (JSON); raises :class:`LockInputError` when missing or malformed."""
    try:
        lock = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise LockInputError(f"{path}: no such lock file") from None
    except ValueError as exc:
        raise LockInputError(f"{path}: not JSON ({exc})") from None
    if not isinstance(lock, dict) or not isinstance(lock.get("models"), dict):
        raise LockInputError(f"{path}: not a rigkit model lock")
    return lock


def main(argv: list[str]) -> int:
    """``rigkit-agent fetch --lock FILE --model NAME [--models-root DIR] [--state-dir DIR]
    [--token-file FILE] [--prepared] [--progress lines|bar|off]`` and ``rigkit-agent record
    --lock FILE --model NAME [--models-root DIR] [--state-dir DIR]``.

    Progress and messages go to stderr; the last stdout line is the :class:`FetchResult` (or
    the record summary) as JSON. Returns 0 done, 1 :class:`FetchError`, 2 :class:`LockInputError`
    or bad arguments.
    """
    import argparse

    os.environ.update(HUB_ENV)
    parser = argparse.ArgumentParser(prog=f"rigkit-agent {argv[0]}",
                                     description="fetch and verify one locked model" if argv[0] == "fetch"
                                     else "record a model's files after prepare as its reference")
    parser.add_argument("--lock", required=True, type=Path, help="the lock file (rigkit models lock)")
    parser.add_argument("--model", required=True, help="model name in the lock")
    parser.add_argument("--models-root", type=Path, default=None, help="default: the host config's paths.models_root")
    parser.add_argument("--state-dir", type=Path, default=None, help="default: the host config's paths.state_dir")
    if argv[0] == "status":
        parser.description = "say whether a locked model is converged (size and mtime against the record)"
        parser.add_argument("--prepared", action="store_true", help="the model must be recorded after prepare")
    if argv[0] == "fetch":
        parser.add_argument("--token-file", type=Path, default=None, help="default: the host config's paths.hf_token_file")
        parser.add_argument("--endpoint", default=None, help="hub endpoint (default $HF_ENDPOINT)")
        parser.add_argument("--prepared", action="store_true", help="the model is rewritten in place by prepare")
        parser.add_argument("--progress", choices=["lines", "bar", "off"], default="lines")
    try:
        args = parser.parse_args(argv[1:])
    except SystemExit as exc:
        return 2 if exc.code else 0
    if args.models_root is None or args.state_dir is None or getattr(args, "token_file", "") is None:
        from rigkit.host.config import ConfigError
        from rigkit.host.config import load as load_config

        try:
            cfg = load_config()
        except ConfigError as exc:
            print(f"{argv[0]}: error: {exc}", file=sys.stderr)
            return 1
        args.models_root = args.models_root or cfg.path("models_root")
        args.state_dir = args.state_dir or cfg.path("state_dir")
        if getattr(args, "token_file", "") is None:
            args.token_file = cfg.path("hf_token_file")
    try:
        lock = load_lock_file(args.lock)
        if argv[0] == "status":
            reasons = status(lock, args.model, args.models_root, args.state_dir, prepared=args.prepared)
            print(json.dumps({"model": args.model, "converged": not reasons, "reasons": reasons}), flush=True)
        elif argv[0] == "fetch":
            result = fetch_model(lock, args.model, models_root=args.models_root, state_dir=args.state_dir,
                                 token_file=args.token_file, endpoint=args.endpoint, prepared=args.prepared,
                                 progress=args.progress)
            print(result.to_json(), flush=True)
        else:
            if args.model not in lock["models"]:
                raise LockInputError(f"model {args.model!r} is not in {args.lock}")
            directory = args.models_root / lock["models"][args.model]["source"]["path"]
            rec = record(args.model, directory, lock, args.state_dir)
            print(json.dumps({"model": args.model, "dir": str(directory), "files": len(rec["files"]),
                              "record": str(record_path(args.state_dir, args.model))}), flush=True)
    except LockInputError as exc:
        print(f"{argv[0]}: error: {exc}", file=sys.stderr)
        return 2
    except FetchError as exc:
        print(f"{argv[0]}: error: {exc}", file=sys.stderr)
        return 1
    return 0
