"""What is on disk for a model, against its lock and its record, on the host: hashing (sha256 for LFS
files, the git blob id for the others; in parallel across cores), the record
``/var/lib/rigkit/models/<name>.json`` (each verified file's size, ``st_mtime_ns`` and hash), and the
checks built on them: :func:`compare` and :func:`status` (the deploy's convergence check and drift's,
:mod:`rigkit.host.modelcheck`). The fetch (:mod:`rigkit.host.fetch`) writes the record. Standard
library only.

Errors: :class:`FetchError` (a model directory or a locked file missing), :class:`LockInputError`
(the lock does not name the model)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rigkit.common.jsonfile import write_atomic

PARTIAL_DIR = ".rigkit-partial"
RECORD_VERSION = 1
CHUNK = 8 << 20  # bytes per read when hashing; hashlib releases the GIL on large updates


class FetchError(RuntimeError):
    """The fetch failed; the message names the model, file and cause (never the token). Exit 1."""


class LockInputError(ValueError):
    """The lock cannot be read or does not name the model. Exit 2."""


# --------------------------------------------------------------------------------------------
# Hashing


def hash_file(path: str | os.PathLike, git_blob: bool = False, chunk: int = CHUNK) -> dict[str, Any]:
    """Hash ``path`` in one pass: ``{"size": bytes, "sha256": hex}`` plus ``"git_blob"`` (git's
    blob id, sha1 over ``b"blob <size>\\0"`` and the bytes) when asked. Raises ``OSError``."""
    import hashlib  # here: OpenSSL's load would cost every agent start, the deploy's probe's too (issue 67)

    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        sha = hashlib.sha256()
        blob = hashlib.sha1(b"blob %d\0" % size) if git_blob else None
        buf = bytearray(chunk)
        view = memoryview(buf)
        while n := fh.readinto(buf):
            sha.update(view[:n])
            if blob is not None:
                blob.update(view[:n])
    out: dict[str, Any] = {"size": size, "sha256": sha.hexdigest()}
    if blob is not None:
        out["git_blob"] = blob.hexdigest()
    return out


def hash_files(paths: list[Path], git_blob: list[bool] | None = None, workers: int | None = None) -> list[dict]:
    """:func:`hash_file` for each path, ``workers`` threads at a time (default: CPU count)."""
    flags = git_blob or [False] * len(paths)
    workers = max(1, min(workers or os.cpu_count() or 1, len(paths) or 1))
    if workers == 1:
        return [hash_file(p, g) for p, g in zip(paths, flags, strict=True)]
    from concurrent.futures import ThreadPoolExecutor  # here: drift's probe imports this module, never hashes

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(hash_file, paths, flags))


def lock_digest(f: dict[str, Any]) -> tuple[str, str]:
    """A lock file entry's hash: ``("sha256", hex)`` for LFS files, ``("git_blob", hex)`` else."""
    return ("sha256", f["sha256"]) if f.get("sha256") else ("git_blob", f["git_blob"])


def free_bytes(path: str | os.PathLike) -> int:
    """Free bytes (``shutil.disk_usage(p).free``, what root may use) on the filesystem of the
    nearest existing ancestor of ``path``."""
    import shutil  # here: it loads bz2 and lzma, which every agent start paid (issue 67)

    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


# --------------------------------------------------------------------------------------------
# Records


def record_path(state_dir: str | os.PathLike, name: str) -> Path:
    """``<state_dir>/models/<name>.json``."""
    return Path(state_dir) / "models" / f"{name}.json"


def load_record(state_dir: str | os.PathLike, name: str) -> dict[str, Any] | None:
    """The record of ``name`` or None (missing, unreadable or another version: treated as none,
    so every file is hashed again)."""
    try:
        rec = json.loads(record_path(state_dir, name).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("version") != RECORD_VERSION or not isinstance(rec.get("files"), dict):
        return None
    return rec


def write_record(state_dir: str | os.PathLike, name: str, rec: dict[str, Any]) -> Path:
    """Write the record atomically (temp file + rename), keys sorted. Shape::

        {"version": 1, "model": name, "dir": "/srv/models/...", "commit": "<locked commit>",
         "reference": "lock" | "prepare", "prepare_needed": bool,
         "files": {path: {"size": bytes, "mtime_ns": int, "sha256": hex[, "git_blob": hex]}},
         "locked": {path: "<the lock's hash of the base file this entry stands for>"}}
    """
    return write_atomic(record_path(state_dir, name), rec)


def stat_entry(path: Path, digest: dict[str, Any]) -> dict[str, Any]:
    """A record entry for ``path`` as it is now: ``{"size", "mtime_ns", "sha256" | "git_blob"}`` (from
    ``os.stat`` and ``digest``, a :func:`hash_file` result)."""
    st = path.stat()
    out = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest["sha256"]}
    if "git_blob" in digest:
        out["git_blob"] = digest["git_blob"]
    return out


def same_stat(path: Path, entry: dict[str, Any]) -> bool:
    """True when ``path`` has the size and ``st_mtime_ns`` a record ``entry`` holds (unchanged since
    it was verified, so it need not be read)."""
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_size == entry.get("size") and st.st_mtime_ns == entry.get("mtime_ns")


def _local_files(directory: Path) -> list[str]:
    """Every regular file under ``directory`` (relative, sorted), minus rigkit's partial folder
    and huggingface-hub's ``.cache``."""
    out = []
    for p in directory.rglob("*"):
        rel = p.relative_to(directory).as_posix()
        if rel.split("/", 1)[0] in (PARTIAL_DIR, ".cache") or not p.is_file():
            continue
        out.append(rel)
    return sorted(out)


def record(name: str, directory: str | os.PathLike, lock: dict[str, Any] | None,
           state_dir: str | os.PathLike, workers: int | None = None) -> dict[str, Any]:
    """Record after ``prepare``: hash every file now in ``directory`` and make that the
    reference for ``name`` (``"reference": "prepare"``), so converged runs and drift compare
    against the prepared files instead of the lock. ``lock`` (the whole lock) ties each locked
    base file to the entry, so a re-lock to other bytes invalidates it. Returns the record.
    Raises :class:`FetchError` when ``directory`` is missing or a locked file is absent."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FetchError(f"record {name}: {directory} does not exist")
    entry = (lock or {}).get("models", {}).get(name)
    locked = {f["path"]: lock_digest(f)[1] for f in entry["files"]} if entry else {}
    missing = [p for p in locked if not (directory / p).is_file()]
    if missing:
        raise FetchError(f"record {name}: locked file(s) missing in {directory}: {', '.join(missing)}; "
                         "run the fetch first")
    rels = _local_files(directory)
    digests = hash_files([directory / r for r in rels], workers=workers)
    rec = {"version": RECORD_VERSION, "model": name, "dir": str(directory), "commit": entry.get("commit") if entry else None,
           "reference": "prepare", "prepare_needed": False,
           "files": {r: stat_entry(directory / r, d) for r, d in zip(rels, digests, strict=True)},
           "locked": locked}
    write_record(state_dir, name, rec)
    return rec


def compare(name: str, directory: str | os.PathLike, state_dir: str | os.PathLike,
            deep: bool = False, workers: int | None = None) -> list[str]:
    """What differs between ``directory`` and the record of ``name``: one line per recorded file
    missing, or whose size or mtime changed; with ``deep`` every recorded file present is also
    hashed (``workers`` threads) and reported when its bytes differ from the recorded sha256, even
    with the same size and mtime (drift's ``--deep``). Files not in the record are not reported. No
    record → one line saying so. The one model-files comparison: :func:`status` (the deploy) and
    :mod:`rigkit.host.modelcheck` (drift) use it."""
    rec = load_record(state_dir, name)
    directory = Path(directory)
    if rec is None:
        return [f"{name}: no record in {record_path(state_dir, name)}; run the fetch"]
    out = []
    present = []
    for rel, entry in sorted(rec["files"].items()):
        path = directory / rel
        if not path.is_file():
            out.append(f"{name}: {rel}: missing")
            continue
        present.append(rel)
        if not same_stat(path, entry):
            out.append(f"{name}: {rel}: size or mtime differs from the record")
    if rec.get("prepare_needed"):
        out.append(f"{name}: a base file was fetched again; prepare must run (then record)")
    if deep and present:
        digests = hash_files([directory / r for r in present], workers=workers)
        out += [f"{name}: {rel}: content differs from the record (sha256)"
                for rel, d in zip(present, digests, strict=True) if d["sha256"] != rec["files"][rel]["sha256"]]
    return out


def status(lock: dict[str, Any], name: str, models_root: str | os.PathLike,
           state_dir: str | os.PathLike, prepared: bool = False, deep: bool = False) -> list[str]:
    """Why model ``name`` of ``lock`` is not converged on this host (empty: converged), without
    reading any file's bytes unless ``deep``: its record must exist for the locked commit, cover every locked
    file with the lock's hash (for a prepared model: the locked hashes it was recorded against),
    and every recorded file must keep its recorded size and mtime; a ``prepared`` model must have
    been recorded after ``prepare``. What a converged deploy checks
    before deciding not to run the fetch; ``deep`` (drift's ``--deep``) also hashes every recorded
    file present (:func:`compare`). Raises :class:`LockInputError` for an unknown model."""
    entry = lock.get("models", {}).get(name)
    if entry is None:
        raise LockInputError(f"model {name!r} is not in the lock")
    directory = Path(models_root) / entry["source"]["path"]
    rec = load_record(state_dir, name)
    if rec is None:
        return [f"{name}: no record yet"]
    reasons = []
    if prepared and rec.get("reference") != "prepare":
        reasons.append(f"{name}: not prepared yet (its record is the lock's, not prepare's)")
    if rec.get("commit") != entry.get("commit"):
        reasons.append(f"{name}: recorded commit {rec.get('commit')} is not the locked {entry.get('commit')}")
    wanted = {f["path"]: lock_digest(f)[1] for f in entry["files"]}
    if rec.get("reference") == "prepare":
        if rec.get("locked") != wanted:
            reasons.append(f"{name}: recorded against other locked files; fetch again")
    else:
        for path, digest in wanted.items():
            got = rec["files"].get(path)
            if got is None or digest not in (got.get("sha256"), got.get("git_blob")):
                reasons.append(f"{name}: {path}: not recorded with the locked hash")
    return reasons + compare(name, directory, state_dir, deep=deep)
