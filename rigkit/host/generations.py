"""Generations (DESIGN.md "Generations"): what each deploy that changed something left on this host,
recorded so that ``rigkit generations`` can list and compare them and ``rigkit rollback`` can bring
one back.

On the host, under the host config's ``paths.generations`` (``/var/lib/rigkit/generations``, root
0700: the rendered files include root-only configs)::

    index.json          {"current": n, "previous": m, "generations": [{n, time, operator, reason, key, changed,
                                                                       rigkit_version, spec_hash}]}
    <n>.json            the record of generation n (below)
    objects/<sha256>    the content of every rendered file a kept generation holds (0600), stored once

A record is the control side's manifest (:func:`record`'s ``manifest``: the rendered files by
sha256/mode/owner, the secret files by path, the pins, the units, llama-swap's members and release,
the model lock's entries, daemon.json's keys, the rigkit version, the spec and its hash, the
``key`` — the sha256 of what the deploy declared for the host, equal for two deploys that leave the
host alike) plus what this host observed when it was recorded: ``n``, ``time`` (UTC ISO 8601),
``operator`` (the SSH user behind sudo), each file's sha256 on disk (a file that differs from the
declared one is recorded as found, with a warning), each secret file's sha256 (its content is
never copied), ``installed`` (``pacman -Q`` of the pinned packages), ``unit_state`` (``systemctl
is-enabled``), ``llama_swap_binary`` (``llama-swap -version``) and ``models`` (whether each locked
model is verified, :func:`rigkit.host.modelrecords.status`). Model weights are referenced, never copied.

Old generations are pruned to the manifest's ``keep`` (the spec's ``generations_keep``), never the
current one or the one before it; objects no kept generation names are removed with them.

A rollback records its generation with a *hold* (``holds.json``'s ``generation`` key): the deploy
keeps the host at the held generation instead of the spec until ``rigkit rollback --release``.

A change that failed its confirmation and was put back (:mod:`rigkit.deploy.transaction`) stays in the
list as *failed* (``"failed": why`` in its entry and record): it has a number, it never becomes
current, ``rigkit rollback --to`` it is refused, and pruning counts it like any other.

Sub-commands (``rigkit-agent generation ...``): ``record [--failed WHY]`` (manifest JSON on stdin,
under the host lock), ``fail N --why WHY`` (the current generation failed: the one before it is
current again; under the host lock), ``hold N --why WHY`` (a revert failed: hold the host there), ``list``,
``current`` (the index with the current generation's record and the live llama-swap config's sha256, :func:`live_sha256`), ``bisect-begin`` / ``bisect-show`` /
``bisect-end`` (the journal of a ``rigkit bisect``, below), ``restamp`` (the current generation
stamped with the manifest on stdin's build and spec hash; under the host lock), ``show N [--files]``, ``check N`` (models generation
N needs that this host lacks), ``release`` (under the host lock). Output JSON on stdout; exit 0 done, 1 failed or refused, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import grp
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from rigkit.common import atomic
from rigkit.host import pacman
from rigkit.common.holds import GENERATION as HOLD_KEY
from rigkit.common.holds import read_holds, write_holds
from rigkit.common.confirm import describe as describe_members, member_changes
from rigkit.common.jsonfile import iso_utc, read_object, write_atomic

DEFAULT_KEEP = 10
#: The journal of a ``rigkit bisect`` (:mod:`rigkit.deploy.bisect`), in the generations folder: written before
#: its first step (``{"id", "start", "good", "bad", "since", "by", "command"}``), removed once the host is back at
#: ``start``. While it stands, ``start`` is never pruned, and the next deploy deploys ``start`` (not the spec) and
#: ends it (:func:`rigkit.deploy.source.source_for`) — the window's journal is the model (DESIGN.md "Lifecycle").
BISECT_JOURNAL = "bisect.json"


class GenerationError(RuntimeError):
    """A generation cannot be recorded or read; the message says which file or number and why."""


def _root(cfg: Any) -> Path:
    return cfg.path("generations")


def live_sha256(cfg: Any) -> str | None:
    """The sha256 (hex) of the live llama-swap config llama-swap serves from (the host config's
    ``llama_swap.config``), None when there is none or it cannot be read: what serves, which may differ
    from the current generation's record (``rigkit wire-in --activate`` records no generation). Read
    with where the host starts (``generation current``, ``lock hold/run --current``); the deploy judges
    "staged only" by it (:func:`rigkit.deploy.transaction.staged_only`)."""
    from rigkit.common.swapconfig import sha256_text
    from rigkit.host.config import ConfigError

    try:
        return sha256_text(Path(cfg.get("llama_swap", "config")).read_text())
    except (OSError, ValueError, ConfigError):
        return None


#: What a generation's index entry and record say about how it was made, beside its ``key``: the
#: rigkit build that recorded it and the hash of the spec it was deployed from
#: (:func:`rigkit.render.generations.manifest`). A deploy whose stamps differ while its key is the
#: current one's stamps the current generation again (:func:`restamp`, asked by the deploy after it).
STAMP = ("rigkit_version", "spec_hash")


def read_index(root: Path) -> dict[str, Any]:
    """``index.json`` (``{"current", "previous", "generations": [...]}``), an empty index when absent.
    Raises ValueError for an unreadable file."""
    data = read_object(root / "index.json") or {}
    data.setdefault("current", None)
    data.setdefault("previous", None)
    data.setdefault("generations", [])
    return data


def read_record(root: Path, n: int) -> dict[str, Any]:
    """The record of generation ``n``. Raises GenerationError when there is none."""
    try:
        data = read_object(root / f"{int(n)}.json")
    except ValueError as exc:
        raise GenerationError(str(exc)) from None
    if data is None:
        known = [g["n"] for g in read_index(root)["generations"]]
        raise GenerationError(f"no generation {n} on this host (kept: {', '.join(map(str, known)) or 'none'})")
    return data


def _sha256(data: bytes) -> str:
    import hashlib  # here: OpenSSL's load costs every agent start, the lock's too (issue 67)

    return hashlib.sha256(data).hexdigest()


def owner_of(st: os.stat_result) -> str:
    """``user:group`` of a stat result (numeric ids where a name is unknown)."""
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group}"


def _run(argv: list[str], timeout: float = 30) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def unit_states(units: list[str]) -> dict[str, str]:
    """``{unit: systemctl is-enabled's word}`` (``enabled``, ``disabled``, ``not-found``...)."""
    out = {}
    for unit in units:
        try:
            proc = subprocess.run(["systemctl", "is-enabled", unit], capture_output=True, text=True, timeout=30)
            out[unit] = proc.stdout.strip().split("\n")[0] or "not-found"
        except (OSError, subprocess.TimeoutExpired):
            out[unit] = "unknown"
    return out


def models_verified(cfg: Any, lock_path: str | None, prepared: list[str]) -> dict[str, Any]:
    """``{model: {"verified": bool, "reasons": [...]}}`` for each model of the lock at ``lock_path``
    (:func:`rigkit.host.modelrecords.status`: size and mtime against the fetch's record), ``{}`` without one."""
    from rigkit.host.fetch import load_lock_file
    from rigkit.host.modelrecords import status

    if not lock_path or not Path(lock_path).is_file():
        return {}
    try:
        lock = load_lock_file(Path(lock_path))
    except Exception as exc:  # noqa: BLE001 - an unreadable lock is recorded, not a failed record
        return {"error": str(exc)}
    out = {}
    for name in sorted(lock.get("models", {})):
        reasons = status(lock, name, cfg.path("models_root"), cfg.path("state_dir"), prepared=name in prepared)
        out[name] = {"verified": not reasons, "reasons": reasons}
    return out


def changed(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """What differs from ``old`` to ``new``, one short phrase each (``"files: /opt/rigkit/hyperqwen/.env"``,
    ``"pins: cuda 13.3.1-1 -> 13.3.2-1"``, ``"members: added hyperqwen; removed strata-8k"``:
    :func:`rigkit.common.confirm.member_changes` in its words); ``["first generation"]`` without ``old``."""
    if old is None:
        return ["first generation"]
    out = []
    files = sorted(p for p in set(old.get("files", {})) | set(new.get("files", {}))
                   if (old.get("files", {}).get(p) or {}).get("sha256") != (new.get("files", {}).get(p) or {}).get("sha256"))
    if files:
        out.append("files: " + ", ".join(files))
    secrets = sorted(p for p in set(old.get("secrets", {})) | set(new.get("secrets", {}))
                     if (old.get("secrets", {}).get(p) or {}).get("sha256") != (new.get("secrets", {}).get(p) or {}).get("sha256"))
    if secrets:
        out.append("secrets: " + ", ".join(secrets))
    op, np_ = old.get("pins") or {}, new.get("pins") or {}
    pins = [f"{p} {op.get(p) or '-'} -> {np_.get(p) or '-'}" for p in sorted(set(op) | set(np_)) if op.get(p) != np_.get(p)]
    if pins:
        out.append("pins: " + ", ".join(pins))
    members = describe_members(member_changes(old.get("spec") or {}, new.get("spec") or {}))
    if members:
        out.append("members: " + members)
    if old.get("units") != new.get("units"):
        out.append("units")
    if (old.get("llama_swap") or {}).get("release") != (new.get("llama_swap") or {}).get("release"):
        out.append("llama-swap release")
    if old.get("daemon_json") != new.get("daemon_json"):
        out.append("daemon.json keys")
    if old.get("models") != new.get("models"):
        out.append("models")
    return out or ["nothing rigkit renders (the spec only)"]


def record(cfg: Any, manifest: dict[str, Any], operator: str, log: Callable[[str], None] = print,
           now: Callable[[], float] = time.time, failed: str | None = None) -> dict[str, Any]:
    """Record ``manifest`` as a new generation (the caller holds the host lock); returns its index
    entry. Nothing is recorded when the current generation has the same ``key`` (returns that
    entry, ``"recorded": False``). Every declared file is copied into ``objects/`` as found on disk;
    secret files only hashed. Then prunes to ``manifest["keep"]`` and, with ``manifest["hold"]``,
    records the hold. Raises GenerationError for a manifest without files or a declared file missing.

    With ``failed`` (why: ``"deploy failed at: …"``) the manifest is a change that failed and was put
    back (:mod:`rigkit.deploy.transaction`): it gets a number and a record (``"failed"`` in both), is
    recorded whatever the current key, never becomes current and records no hold; a declared file
    the failed change never wrote is recorded as missing (``"sha256": None``)."""
    root = _root(cfg)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    objects = root / "objects"
    objects.mkdir(exist_ok=True, mode=0o700)
    index = read_index(root)
    if not manifest.get("files") or not manifest.get("key"):
        raise GenerationError("the manifest names no files or no key (a bug of the control side)")
    current = index["current"]
    if current is not None:
        cur_entry = next((g for g in index["generations"] if g["n"] == current), None)
        if cur_entry and cur_entry.get("key") == manifest["key"] and not manifest.get("hold") and not failed:
            log(f"generation {current} is current and this deploy left the host alike: nothing recorded")
            return {**cur_entry, "recorded": False}
    n = max([g["n"] for g in index["generations"]] + [0]) + 1
    files: dict[str, Any] = {}
    warnings: list[str] = []
    for path, meta in sorted(manifest["files"].items()):
        try:
            data = Path(path).read_bytes()
            st = os.stat(path)
        except FileNotFoundError:
            if failed:
                files[path] = {"sha256": None, "declared_sha256": meta.get("sha256"), "missing": True}
                continue
            raise GenerationError(f"{path}: declared by the deploy but not on the host") from None
        sha = _sha256(data)
        obj = objects / sha
        if not obj.exists():
            atomic.write_bytes(obj, data, 0o600)
        entry = {"sha256": sha, "mode": f"0{st.st_mode & 0o7777:o}", "owner": owner_of(st)}
        if sha != meta.get("sha256"):
            entry["declared_sha256"] = meta.get("sha256")
            warnings.append(f"{path}: on disk {sha[:12]}, the deploy declared {str(meta.get('sha256'))[:12]} "
                            "(recorded as found)")
        files[path] = entry
    secrets = {}
    for path in sorted(manifest.get("secrets") or []):
        try:
            st = os.stat(path)
            secrets[path] = {"sha256": _sha256(Path(path).read_bytes()), "mode": f"0{st.st_mode & 0o7777:o}",
                             "owner": owner_of(st)}
        except FileNotFoundError:
            secrets[path] = {"sha256": None}
    units = manifest.get("units") or {}
    rec = {
        **{k: v for k, v in manifest.items() if k not in ("files", "secrets", "hold")},
        "n": n, "time": iso_utc(now()), "operator": operator,
        "files": files, "secrets": secrets, "warnings": warnings,
        "installed": pacman.installed_versions(sorted(manifest.get("pins") or {})),
        "unit_state": unit_states(sorted(set(units.get("enabled", [])) | set(units.get("disabled", [])))),
        "llama_swap_binary": (_run([manifest["llama_swap"]["binary"], "-version"]) or "").strip() or None
        if (manifest.get("llama_swap") or {}).get("binary") else None,
        "models_verified": models_verified(cfg, manifest.get("models_lock_path"), manifest.get("prepared") or []),
        "previous": current,
        **({"failed": failed} if failed else {}),
    }
    prev = read_record(root, current) if current is not None and (root / f"{current}.json").exists() else None
    rec["changed"] = changed(prev, rec)
    write_atomic(root / f"{n}.json", rec, mode=0o600)
    entry = {"n": n, "time": rec["time"], "operator": operator, "reason": rec.get("reason", "deploy"),
             "key": manifest["key"], "changed": rec["changed"], **{k: manifest.get(k) for k in STAMP},
             **({"failed": failed} if failed else {}), **({"bisect": manifest["bisect"]} if manifest.get("bisect") else {})}
    index["generations"].append(entry)
    if not failed:
        index["previous"], index["current"] = current, n
    write_atomic(root / "index.json", index, mode=0o600)
    if failed:
        log(f"recorded generation {n} as FAILED ({failed}); generation {current} stays current")
        return {**entry, "recorded": True}
    for w in warnings:
        log(f"warning: {w}")
    log(f"recorded generation {n} ({entry['reason']}; {'; '.join(rec['changed'])})")
    pruned = prune(root, int(manifest.get("keep") or DEFAULT_KEEP))
    if pruned:
        log(f"pruned generation(s) {', '.join(map(str, pruned))} (keeping {manifest.get('keep') or DEFAULT_KEEP})")
    hold = manifest.get("hold")
    if hold:
        holds_path = cfg.path("holds")
        holds = read_holds(holds_path)
        holds[HOLD_KEY] = {**hold, "generation": n, "since": rec["time"], "by": hold.get("by") or operator}
        write_holds(holds_path, holds)
        log(f"hold recorded in {holds_path}: the deploy keeps this host at generation {n} "
            f"(= generation {hold.get('rolled_back_to')}) until `rigkit rollback --release`")
    return {**entry, "recorded": True}


def restamp(cfg: Any, manifest: dict[str, Any], log: Callable[[str], None] = print) -> dict[str, Any]:
    """Stamp the current generation again with ``manifest``'s :data:`STAMP` (and its spec snapshot) when
    it has ``manifest``'s key and other stamps (the caller holds the host lock): a deploy by another
    rigkit build, or from a spec that differs only where nothing on the host depends on it, left the
    host alike, so it recorded no generation, but the current one now says it was this build from this
    spec — what ``rigkit deploy``'s probe path asks (:mod:`rigkit.deploy.converged`; the deploy asks this
    after a confirmed pyinfra run, outside pyinfra's operations, whose counts stay the deploy's own).
    Its record keeps the stamps it replaced under ``restamped`` (``[{"time", "rigkit_version",
    "spec_hash"}]``). Returns the entry with ``"restamped": True``, or ``{"restamped": False, "why"}``
    (no current generation, another key, a hold in the manifest, or the stamps already these)."""
    root = _root(cfg)
    index = read_index(root)
    current = index["current"]
    entry = next((g for g in index["generations"] if g["n"] == current), None) if current is not None else None
    if entry is None or entry.get("key") != manifest.get("key") or manifest.get("hold"):
        return {"restamped": False, "why": "the current generation is not what this deploy declared"}
    if all(entry.get(k) == manifest.get(k) for k in STAMP):
        return {"restamped": False, "why": "already stamped so", "n": current}
    n = entry["n"]
    rec = read_record(root, n)
    before = {k: rec.get(k) for k in STAMP}
    rec.setdefault("restamped", []).append({"time": iso_utc(time.time()), **before})
    rec.update({k: manifest.get(k) for k in STAMP}, spec=manifest.get("spec", rec.get("spec")))
    write_atomic(root / f"{n}.json", rec, mode=0o600)
    entry.update({k: manifest.get(k) for k in STAMP})
    write_atomic(root / "index.json", index, mode=0o600)
    log(f"generation {n} is current and this deploy left the host alike: nothing recorded; stamped as made by "
        f"rigkit {manifest.get('rigkit_version')} from spec {str(manifest.get('spec_hash'))[:12]} "
        f"(was rigkit {before.get('rigkit_version')}, spec {str(before.get('spec_hash'))[:12]})")
    return {**entry, "restamped": True}


def fail(cfg: Any, n: int, why: str, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Mark generation ``n`` — the current one, recorded by a change whose confirmation failed — as
    failed (the caller holds the host lock): its index entry and record get ``"failed": why``, the
    generation it was recorded over (its ``previous``) is current again, and a generation hold on
    ``n`` (a failed rollback's) is removed. Returns the index entry. Raises GenerationError when
    ``n`` is not the current generation."""
    root = _root(cfg)
    index = read_index(root)
    if index["current"] != n:
        raise GenerationError(f"generation {n} is not the current one ({index['current']}): only the "
                              "generation a change just recorded can be marked failed")
    rec = read_record(root, n)
    rec["failed"] = why
    write_atomic(root / f"{n}.json", rec, mode=0o600)
    back = rec.get("previous")
    entry = next(g for g in index["generations"] if g["n"] == n)
    entry["failed"] = why
    before = None
    if back is not None and (root / f"{back}.json").exists():
        before = read_record(root, back).get("previous")
    index["current"], index["previous"] = back, before
    write_atomic(root / "index.json", index, mode=0o600)
    holds_path = cfg.path("holds")
    holds = read_holds(holds_path)
    if (holds.get(HOLD_KEY) or {}).get("generation") == n:
        holds.pop(HOLD_KEY)
        write_holds(holds_path, holds)
        log(f"removed the hold at generation {n} (it failed)")
    log(f"generation {n} marked FAILED ({why}); generation {back} is current again")
    return entry


def prune(root: Path, keep: int) -> list[int]:
    """Remove the oldest generations beyond ``keep`` (at least 2: never the current one or the one
    before it, nor — while a bisect's journal stands — its start, good and bad generations) and the objects no
    kept generation names; a bisect's steps (trial mixes nobody declared) go before any other generation, so a
    walk's steps do not push out the generations an operator may roll back or bisect to again (an operator's
    second walk pruned the good generation of the first: the same bisect could not be run again). Returns the
    numbers removed."""
    index = read_index(root)
    keep = max(2, keep)
    journal = read_object(root / BISECT_JOURNAL) or {}
    protected = {index["current"], index["previous"], journal.get("start"), journal.get("good"), journal.get("bad")}
    steps = {g["n"] for g in index["generations"] if (g.get("bisect") or {}).get("step")}
    gens = sorted(g["n"] for g in index["generations"])
    removable = sorted((n for n in gens if n not in protected), key=lambda n: (n not in steps, n))
    excess = len(gens) - keep
    drop = removable[:max(0, excess)]
    if not drop:
        return []
    for n in drop:
        (root / f"{n}.json").unlink(missing_ok=True)
    index["generations"] = [g for g in index["generations"] if g["n"] not in drop]
    write_atomic(root / "index.json", index, mode=0o600)
    referenced = set()
    for g in index["generations"]:
        try:
            rec = read_record(root, g["n"])
        except GenerationError:
            continue
        referenced |= {f["sha256"] for f in rec.get("files", {}).values()}
    for obj in (root / "objects").iterdir():
        if not obj.name.startswith(".") and obj.name not in referenced:
            obj.unlink()
    return drop


def current(root: Path) -> dict[str, Any]:
    """``{"index": read_index(root), "current": n | None, "record": its record | None, "bisect": the journal of
    an interrupted bisect | None}``: what a deploy reads before it changes anything
    (:func:`rigkit.deploy.transaction.begin`, :func:`rigkit.deploy.converged.choose_paths`: a standing journal
    sends the host to the full run, which puts it back), in one agent call instead of ``list`` then ``show``.
    Raises ValueError for an unreadable index or record."""
    index = read_index(root)
    n = index.get("current")
    return {"index": index, "current": n, "record": read_record(root, n) if n is not None else None,
            "bisect": read_object(root / BISECT_JOURNAL) or None}


def show(root: Path, n: int, with_files: bool = False) -> dict[str, Any]:
    """``{"record": ..., "contents": {path: text}}`` of generation ``n`` (contents only with
    ``with_files``; UTF-8 text, which every rendered file is). Raises GenerationError."""
    rec = read_record(root, n)
    out: dict[str, Any] = {"record": rec}
    if with_files:
        contents = {}
        for path, meta in rec.get("files", {}).items():
            try:
                contents[path] = (root / "objects" / meta["sha256"]).read_text()
            except FileNotFoundError:
                raise GenerationError(f"generation {n}: the stored copy of {path} is missing "
                                      f"({root / 'objects' / meta['sha256']})") from None
        out["contents"] = contents
    return out


def check(cfg: Any, n: int) -> list[str]:
    """Why this host cannot go back to generation ``n`` without fetching (empty: it can): each
    model of generation ``n``'s lock not verified here, named."""
    root = _root(cfg)
    rec = read_record(root, n)
    lock_path = rec.get("models_lock_path")
    meta = rec.get("files", {}).get(lock_path or "")
    if not meta:
        return []
    tmp = root / f".check-lock-{os.getpid()}.json"
    import shutil  # here: it loads bz2 and lzma, which every agent start paid (issue 67)

    shutil.copyfile(root / "objects" / meta["sha256"], tmp)
    try:
        verified = models_verified(cfg, str(tmp), rec.get("prepared") or [])
    finally:
        tmp.unlink(missing_ok=True)
    if "error" in verified:
        return [f"generation {n}'s model lock is unreadable: {verified['error']}"]
    return [f"model {name}: {'; '.join(v['reasons'])}" for name, v in sorted(verified.items()) if not v["verified"]]


def hold(cfg: Any, n: int, why: str, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Hold the host at generation ``n`` (the caller holds the host lock): a change and its revert both
    failed (:mod:`rigkit.deploy.transaction`), so the next deploy must not apply the spec that broke it but
    generation ``n`` until ``rigkit rollback --release``. Returns the hold. Raises GenerationError
    when there is no generation ``n``."""
    read_record(_root(cfg), n)
    holds_path = cfg.path("holds")
    holds = read_holds(holds_path)
    holds[HOLD_KEY] = {"generation": n, "rolled_back_to": n, "since": iso_utc(time.time()),
                       "by": "a failed revert", "reason": why}
    write_holds(holds_path, holds)
    log(f"hold recorded in {holds_path}: the deploy keeps this host at generation {n} until "
        "`rigkit rollback --release`")
    return holds[HOLD_KEY]


def bisect_begin(cfg: Any, journal: dict[str, Any], log: Callable[[str], None] = print) -> dict[str, Any]:
    """Write the journal of a bisect (the caller holds the host lock): ``journal`` is ``{"id", "good", "bad",
    ...}``; ``start`` (the current generation) and ``since`` are set here. Returns it. Raises GenerationError
    when a journal already stands (an interrupted bisect: ``rigkit bisect --abort`` first) or nothing is current."""
    root = _root(cfg)
    old = read_object(root / BISECT_JOURNAL)
    if old:
        raise GenerationError(f"an interrupted bisect ({old.get('id')}, from generation {old.get('start')}, "
                              f"{old.get('since')}) has not been put back: `rigkit bisect --abort` first")
    start = read_index(root)["current"]
    if start is None:
        raise GenerationError("no current generation: a bisect needs one to come back to")
    data = {**journal, "start": start, "since": iso_utc(time.time())}
    write_atomic(root / BISECT_JOURNAL, data, mode=0o600)
    log(f"bisect {data.get('id')} begins at generation {start} (journal {root / BISECT_JOURNAL})")
    return data


def bisect_end(cfg: Any, log: Callable[[str], None] = print) -> dict[str, Any]:
    """End the bisect whose journal stands (the caller holds the host lock), once the host is back at its
    ``start``: the current generation has ``start``'s key (a deploy of ``start`` left it so), so ``start``
    is made current again (the steps' generations stay listed) and the journal is removed. Returns
    ``{"ended": bool, "start": n | None, "current": n}``; with no journal ``ended`` is False. Raises
    GenerationError when the host does not declare ``start``'s key (it is not back: nothing changed)."""
    root = _root(cfg)
    journal = read_object(root / BISECT_JOURNAL)
    index = read_index(root)
    if not journal:
        return {"ended": False, "start": None, "current": index["current"]}
    start = journal.get("start")
    keys = {g["n"]: g.get("key") for g in index["generations"]}
    if start not in keys:
        raise GenerationError(f"the bisect's start generation {start} is not kept")
    if keys.get(index["current"]) != keys[start]:
        raise GenerationError(f"the host is at generation {index['current']}, not back at generation {start} "
                              f"(another key): deploy generation {start} first")
    if index["current"] != start:
        index["previous"], index["current"] = index["current"], start
        write_atomic(root / "index.json", index, mode=0o600)
    (root / BISECT_JOURNAL).unlink(missing_ok=True)
    log(f"bisect {journal.get('id')} ended: generation {start} is current again")
    return {"ended": True, "start": start, "current": start}


def release(cfg: Any, log: Callable[[str], None] = print) -> int:
    """Remove the generation hold (the caller holds the host lock); 0, also when there was none."""
    holds_path = cfg.path("holds")
    holds = read_holds(holds_path)
    hold = holds.pop(HOLD_KEY, None)
    if hold is None:
        log(f"no generation hold recorded in {holds_path}")
        return 0
    write_holds(holds_path, holds)
    log(f"released the hold at generation {hold.get('generation')} (rollback to {hold.get('rolled_back_to')}, "
        f"{hold.get('since')}); the next deploy applies the spec")
    return 0


def main(argv: list[str]) -> int:
    """``rigkit-agent generation {record,restamp,list,current,show,check,release}`` (module docstring)."""
    from rigkit.host import lock as host_lock
    from rigkit.host import standdown
    from rigkit.host.config import load as load_config

    ap = argparse.ArgumentParser(prog="rigkit-agent generation", description="the generations of this host")
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record", help="record the manifest on stdin as a new generation (under the host lock)")
    rec.add_argument("--by", default=None, help="the operator (default: $SUDO_USER)")
    rec.add_argument("--failed", metavar="WHY", default=None,
                     help="record it as a failed change that was put back (never current)")
    fl = sub.add_parser("fail", help="mark the current generation N failed: the one before it is current again")
    fl.add_argument("n", type=int)
    fl.add_argument("--why", required=True)
    sub.add_parser("list", help="the index as JSON")
    sub.add_parser("current", help="the index, the current generation and its record as JSON (one read for a deploy)")
    sub.add_parser("restamp", help="stamp the current generation with the manifest on stdin's build and spec hash "
                                   "when it has its key (under the host lock)")
    sh = sub.add_parser("show", help="one generation as JSON")
    sh.add_argument("n", type=int)
    sh.add_argument("--files", action="store_true", help="with the stored file contents")
    ck = sub.add_parser("check", help="models generation N needs that this host has not verified")
    ck.add_argument("n", type=int)
    sub.add_parser("release", help="remove the generation hold (under the host lock)")
    sub.add_parser("bisect-begin", help="write a bisect's journal (JSON on stdin) at the current generation "
                                        "(under the host lock)")
    sub.add_parser("bisect-show", help="the journal of a bisect, or {} when none stands")
    sub.add_parser("bisect-end", help="the host back at the bisect's start: make it current, remove the journal "
                                      "(under the host lock)")
    hd = sub.add_parser("hold", help="hold the host at generation N: the next deploy applies it, not the spec")
    hd.add_argument("n", type=int)
    hd.add_argument("--why", required=True)
    try:
        a = ap.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    cfg = load_config()
    root = _root(cfg)

    def log(msg: str) -> None:
        print(f"generation: {msg}", file=sys.stderr, flush=True)

    try:
        if a.cmd == "list":
            print(json.dumps(read_index(root), sort_keys=True))
            return 0
        if a.cmd == "show":
            print(json.dumps(show(root, a.n, a.files), sort_keys=True))
            return 0
        if a.cmd == "current":
            print(json.dumps({**current(root), "live_sha256": live_sha256(cfg)}, sort_keys=True))
            return 0
        if a.cmd == "bisect-show":
            print(json.dumps(read_object(root / BISECT_JOURNAL) or {}, sort_keys=True))
            return 0
        if a.cmd == "check":
            problems = check(cfg, a.n)
            print(json.dumps({"generation": a.n, "missing": problems}))
            return 0
        what = {"record": "deploy: record a generation", "restamp": "deploy: stamp the current generation",
                "fail": "confirmation: mark a failed generation",
                "hold": "revert: hold the host at a generation", "bisect-begin": "bisect: begin",
                "bisect-end": "bisect: end"}.get(
            a.cmd, "rollback: release the generation hold")
        try:
            lock = standdown.lock_for_change(cfg, what, log)
        except (host_lock.LockHeld, standdown.WindowOpen) as exc:
            log(f"error: {exc}")
            return 1
        try:
            if a.cmd == "release":
                return release(cfg, log)
            if a.cmd == "bisect-end":
                print(json.dumps(bisect_end(cfg, log), sort_keys=True))
                return 0
            if a.cmd == "hold":
                print(json.dumps(hold(cfg, a.n, a.why, log), sort_keys=True))
                return 0
            if a.cmd == "fail":
                print(json.dumps(fail(cfg, a.n, a.why, log), sort_keys=True))
                return 0
            try:
                manifest = json.loads(sys.stdin.read())
            except ValueError as exc:
                log(f"error: the manifest on stdin is not JSON ({exc})")
                return 2
            if a.cmd == "bisect-begin":
                print(json.dumps(bisect_begin(cfg, manifest, log), sort_keys=True))
                return 0
            if a.cmd == "restamp":
                print(json.dumps(restamp(cfg, manifest, log), sort_keys=True))
                return 0
            operator = a.by or os.environ.get("SUDO_USER") or pwd.getpwuid(os.getuid()).pw_name
            print(json.dumps(record(cfg, manifest, operator, log, failed=a.failed), sort_keys=True))
            return 0
        finally:
            lock.release()
    except GenerationError as exc:
        log(f"error: {exc}")
        return 1
    except ValueError as exc:  # an unreadable index, record or holds file
        log(f"error: {exc}")
        return 1
