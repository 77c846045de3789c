"""The lock file's format: one JSON document (:class:`LockDocument`) for everything the rig fetches —
``models`` (each model of the spec at an exact commit with its exact files, :mod:`rigkit.lockfile.hub`),
``pins``, ``images`` and ``llama_swap`` (:mod:`rigkit.lockfile.resolve`) — read (:func:`load_lock`, as
strictly as the spec), written (:func:`write_lock`) and compared (:func:`diff`) here. Where it lives is
:func:`rigkit.lockfile.path.lock_file_path`; what it means for a spec, :mod:`rigkit.lockfile.view`.

Format (JSON, keys sorted, 2-space indent, trailing newline; no timestamps, no endpoint, never a token,
so the same sources give the same bytes)::

    {"version": 2,                    # 1: a models-only lock, still read
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
                       "total_bytes": N}},
     "pins": {"<package>": LockedPin}, "images": {"<name>": LockedImage}, "llama_swap": LockedRelease}

Models whose source is unset (operator-supplied, ``repo_id`` and ``url`` both None) are left out
of the lock (:func:`rigkit.lockfile.hub.lock_models` names them). Nothing here asks the network.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rigkit import hints
from rigkit.lockfile.errors import LockFormatError
from rigkit.spec.types import PACMAN_VERSION_RE, SHA256_RE

LOCK_VERSION = 2
#: Lock versions still read: 1 is the models-only lock; it lacks the sections rigkit lock adds.
READ_VERSIONS = (1, 2)
_SHA256 = SHA256_RE.pattern
_GIT_SHA1 = r"^[0-9a-f]{40}$"


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
    archive has none) — :mod:`rigkit.lockfile.archive`."""

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
    linux/amd64 manifest's digest of an index — :mod:`rigkit.lockfile.registry`."""

    repository: str
    ref: str
    registry: str | None = None
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    kind: Literal["index", "manifest"]
    media_type: str
    amd64: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")


class LockedRelease(_LockModel):
    """``llama_swap``: the release ``version``, its tarball ``url`` and ``sha256``, read ``from`` the
    release's checksums file (or the tarball hashed) — :mod:`rigkit.lockfile.release`."""

    version: str
    url: str = Field(pattern=r"^(?:https?|file)://\S+$")
    sha256: str = Field(pattern=_SHA256)
    from_: str = Field(alias="from")


class LockDocument(_LockModel):
    """The whole lock file: ``version`` 2 (1: a models-only lock of ``rigkit models lock`` before
    ``rigkit lock``, still read; its other sections are missing, which ``rigkit check`` and the deploy
    report as unresolved), ``models`` by name, and ``pins``, ``images``, ``llama_swap``
    (:mod:`rigkit.lockfile.resolve`)."""

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


def dumps_lock(lock: dict[str, Any]) -> str:
    """The lock's canonical text: JSON, keys sorted, 2-space indent, trailing newline."""
    return json.dumps(lock, indent=2, sort_keys=True) + "\n"


def write_lock(lock: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write :func:`dumps_lock` to ``path`` atomically (:func:`rigkit.common.atomic.write_text`); return the path."""
    from rigkit.common import atomic

    return atomic.write_text(path, dumps_lock(lock), make_parents=False)


def relock_hint(whole: bool = False) -> str:
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
        raise LockFormatError(path, [f"not UTF-8 text ({exc.reason}); {relock_hint()}"]) from None
    except json.JSONDecodeError as exc:
        raise LockFormatError(path, [f"not JSON (line {exc.lineno} column {exc.colno}: {exc.msg}); " + relock_hint()]) from None
    if not isinstance(lock, dict) or lock.get("version") not in READ_VERSIONS:
        raise LockFormatError(path, [f"not a rigkit lock (version {LOCK_VERSION}, or 1: models only); {relock_hint()}"])
    try:
        LockDocument.model_validate(lock)
    except ValidationError as exc:
        raise LockFormatError(path, _lock_problems(exc)) from None
    return lock


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per entry that differs between two locks' sections, ``old → new`` in what the operator
    reads (a pin's version, an image's digest, the release's sha256); entries added or dropped too."""
    out = []
    show = {"pins": lambda e: e.get("version"), "images": lambda e: f"{e.get('ref')} {e.get('digest')}"}
    for section in ("pins", "images"):
        a, b = old.get(section) or {}, new.get(section) or {}
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                before = show[section](a[name]) if name in a else "(none)"
                after = show[section](b[name]) if name in b else "(none)"
                if before == after:  # the same version elsewhere, or another file under its name: say what moved
                    moved = [f"{k} {a[name].get(k)} → {b[name].get(k)}" for k in sorted(set(a[name]) | set(b[name]))
                             if a[name].get(k) != b[name].get(k)]
                    out.append(f"{section}.{name}: {before}: " + "; ".join(moved))
                else:
                    out.append(f"{section}.{name}: {before} → {after}")
    a, b = old.get("llama_swap"), new.get("llama_swap")
    if a != b:
        fmt = (lambda e: f"{e.get('version')} {e.get('sha256')}" if e else "(none)")
        out.append(f"llama_swap: {fmt(a)} → {fmt(b)}")
    return out


