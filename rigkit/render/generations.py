"""Generations, the control side: the manifest a deploy hands the host to record
(:func:`manifest`, recorded by :mod:`rigkit.host.generations`), a generation turned back into what
the roles deploy (:func:`source_from_bundle`, for ``rigkit rollback`` and a held host), and what
differs between two (:func:`diff`). Nothing here touches a host.

A generation's ``key`` is the sha256 of what the deploy declares for the host — every rendered
file (sha256, mode, owner), the model lock, the pins, the units, llama-swap's members and release,
daemon.json's keys — so two deploys that leave a host alike have one key and the second records
nothing. The rigkit build (:func:`rigkit.build.rigkit_build`), the spec hash, the time and the operator are
recorded, not keyed;
secret files are recorded by hash on the host and are not keyed either (a token rotation alone
records no generation).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rigkit import paths
from rigkit.build import rigkit_build
from rigkit.render import declared_state
from rigkit.render.declared_state import DAEMON_JSON_KEYS, PREPARED_MODELS
from rigkit.render.files import RenderedFile, render_host_config
from rigkit.spec.model import RigSpec

#: Spec keys that say how this run goes, not what the host holds: taken from the run, never
#: from a generation, and not part of a generation's spec.
RUN_KEYS = ("reboot", "force")
#: The spec key naming the lock file on the control machine, and its name in generations recorded before its
#: rename: no part of what the host is declared to be (:func:`spec_hash`).
LOCKFILE_KEYS = ("lockfile", "models_lock")


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def spec_snapshot(spec: RigSpec) -> dict[str, Any]:
    """The spec as JSON data (pydantic ``model_dump(mode="json")``), without :data:`RUN_KEYS`. The
    spec never holds a secret (they are refused on input and live in ``/etc/rigkit/secrets``)."""
    data = spec.model_dump(mode="json")
    for key in RUN_KEYS:
        data.pop(key, None)
    return data


def spec_hash(spec: RigSpec) -> str:
    """sha256 of the canonical JSON of :func:`spec_snapshot` without ``lockfile`` (``models_lock`` in a
    generation recorded before its rename): where the control machine keeps the lock is no part of what the host is declared to be (a rollback deploys a
    generation's lock from a temporary file), and the lock's content is keyed (the manifest's
    ``files``) and checked by its own sha256 (:func:`rigkit.deploy.converged.stamp_reasons`)."""
    data = spec_snapshot(spec)
    for key in LOCKFILE_KEYS:
        data.pop(key, None)
    return hashlib.sha256(_canonical(data).encode()).hexdigest()


def declared_units(spec: RigSpec) -> dict[str, list[str]]:
    """``{"enabled": [unit], "disabled": [unit]}``: what the deploy enables
    (:func:`rigkit.render.declared_state.enabled_units`) and leaves disabled
    (the legacy units, HyperQwen's unit, started on demand)."""
    enabled = set(declared_state.enabled_units(spec))
    disabled = set(spec.legacy_units) | {"hyperqwen.service"}
    return {"enabled": sorted(enabled), "disabled": sorted(disabled)}


def manifest(spec: RigSpec, rendered: dict[str, RenderedFile], lock_text: str | None, reason: str = "deploy",
             hold: dict[str, Any] | None = None, bisect: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``rigkit-agent generation record`` records for this deploy (shape: :mod:`rigkit.host.generations`).

    + rendered: ``{path: RenderedFile}`` the roles installed; lock_text: the model lock installed as
      ``/var/lib/rigkit/models.lock.json`` (or None)
    + reason: ``"deploy"``, ``"rollback to 3"``...; hold: recorded with the generation (a rollback's)
    + bisect: a ``rigkit bisect`` step's ``{"id", "step", "entries": [suspect name]}`` (its record and index
      entry say it was one; not keyed), None for every other deploy
    """
    files = {p: {"sha256": f.sha256, "mode": f.mode, "owner": f.owner} for p, f in sorted(rendered.items())}
    models: dict[str, Any] = {}
    if lock_text is not None:
        files[paths.MODELS_LOCK] = {"sha256": hashlib.sha256(lock_text.encode()).hexdigest(), "mode": "0644",
                                    "owner": "root:root"}
        try:
            lock = json.loads(lock_text)
            models = {name: {"commit": e.get("commit"), "repo": (e.get("source") or {}).get("repo"),
                             "files": len(e.get("files") or [])} for name, e in sorted(lock.get("models", {}).items())}
        except (ValueError, AttributeError):
            models = {}
    ls = spec.llama_swap
    live = [mid for mid, m in ls.members.items() if not m.staged]
    keyed = {
        "files": files, "pins": dict(sorted((spec.pacman_pins or {}).items())),
        "driver": {"version": spec.nvidia_driver_version, "flavour": spec.driver_flavour}, "cuda": spec.cuda_version,
        "units": declared_units(spec),
        "llama_swap": {"live": live, "staged": [m for m in ls.members if m not in live],
                       "release": {"url": ls.release_url, "sha256": ls.release_sha256}, "binary": paths.LLAMA_SWAP_BIN},
        "models": models, "daemon_json": DAEMON_JSON_KEYS,
    }
    return {
        **keyed,
        "key": hashlib.sha256(_canonical(keyed).encode()).hexdigest(),
        "reason": reason, "hold": hold,
        "secrets": [paths.HF_TOKEN_FILE, paths.HYPERQWEN_SECRET_FILE],
        "models_lock_path": paths.MODELS_LOCK if lock_text is not None else None,
        "prepared": sorted(PREPARED_MODELS & set(models)),
        "rigkit_version": rigkit_build(), "spec_hash": spec_hash(spec), "spec": spec_snapshot(spec),
        "keep": spec.generations_keep,
        **({"bisect": bisect} if bisect else {}),
    }


def manifest_of_record(record: dict[str, Any], reason: str) -> dict[str, Any]:
    """The manifest that would record generation ``record`` again (``rigkit-agent generation show N``'s
    record): its declared files (``declared_sha256`` where the record found another), secret paths,
    keyed fields and spec, with ``reason`` and no hold — what a failed attempt to bring it back
    declared (:mod:`rigkit.deploy.transaction`)."""
    files = {p: {"sha256": m.get("declared_sha256") or m.get("sha256"), "mode": m.get("mode"), "owner": m.get("owner")}
             for p, m in (record.get("files") or {}).items()}
    observed = ("n", "time", "operator", "warnings", "installed", "unit_state", "llama_swap_binary",
                "models_verified", "previous", "changed", "failed", "hold")
    return {**{k: v for k, v in record.items() if k not in observed}, "files": files,
            "secrets": sorted(record.get("secrets") or {}), "reason": reason, "hold": None}


def lock_text(spec: RigSpec) -> str | None:
    """The lock file the deploy installs for ``spec`` (its text, read on the control machine at
    :func:`rigkit.lockfile.path.lock_file_path` of the command's inventory, :func:`rigkit.hints.inventory`),
    None when missing (the models role then refuses)."""
    from rigkit import hints
    from rigkit.lockfile.path import lock_file_path

    path = lock_file_path(spec, hints.inventory())
    return path.read_text() if path.is_file() else None


@dataclass
class Source:
    """What a deploy applies: the ``spec`` and its ``rendered`` files, from the inventory
    (``generation`` None) or from a recorded generation; ``lock_text`` the model lock it installs;
    ``bisect`` what the run is to a ``rigkit bisect`` (a step, or the way back to its start: recorded
    with the generation, :func:`manifest`), None for every other deploy."""

    spec: RigSpec
    rendered: dict[str, RenderedFile]
    generation: int | None = None
    lock_text: str | None = None
    bisect: dict[str, Any] | None = None


def source_from_bundle(bundle: dict[str, Any], run_spec: RigSpec, lock_dir: Path) -> Source:
    """Generation ``bundle`` (``rigkit-agent generation show N --files``) as a :class:`Source`: its spec
    (with this run's :data:`RUN_KEYS`), its stored files as they were (the host config rendered again
    for this rigkit's host agent), its model lock written under ``lock_dir`` for the models role.
    Raises ``rigkit.spec.problems.SpecError`` when the stored spec is no longer valid for this rigkit."""
    from rigkit.spec.validate import spec_from_dict

    rec, contents = bundle["record"], bundle.get("contents") or {}
    data = dict(rec["spec"])
    for key in RUN_KEYS:
        data[key] = getattr(run_spec, key)
    lock_text = contents.get(paths.MODELS_LOCK)
    if lock_text is not None:
        lock_dir.mkdir(parents=True, exist_ok=True)
        lock_file = lock_dir / f"generation-{rec['n']}.lock.json"
        lock_file.write_text(lock_text)
        data["lockfile"] = str(lock_file)
        data.pop("models_lock", None)  # a record from before the key's rename
    spec = spec_from_dict(data, source=f"generation {rec['n']}'s spec")
    rendered = {p: RenderedFile(contents[p], meta["mode"], meta["owner"])
                for p, meta in rec["files"].items() if p != paths.MODELS_LOCK}
    rendered[paths.HOST_CONFIG] = RenderedFile(render_host_config(spec), "0644", "root:root")
    if paths.LEGACY_PINS_CONF in rendered:  # recorded before issue 57 moved rigkit's pins file
        rendered[paths.PINS_CONF] = rendered.pop(paths.LEGACY_PINS_CONF)
    return Source(spec, rendered, int(rec["n"]), lock_text)


def flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """``data`` (nested dicts) as ``{"dotted.key": leaf}``; an empty dict and every non-dict (a list
    included) is a leaf. The one flattening of a spec snapshot (:func:`diff`, :mod:`rigkit.deploy.bisect`)."""
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: data}


def _declared_as(member: dict[str, Any] | None) -> str | None:
    """``"live"``, ``"staged"`` or None (not declared): how a generation declares a member."""
    if member is None:
        return None
    return "staged" if member.get("staged") else "live"


def diff(a: dict[str, Any], b: dict[str, Any], mask: Callable[[str], str] = lambda text: text) -> dict[str, Any]:
    """What differs from generation bundle ``a`` to ``b`` (both with contents):
    ``{"a", "b", "files": [{"path", "diff"}], "secrets": [path], "pins": {pkg: [a, b]},
    "units": {"enabled"/"disabled": [a, b]}, "members": {"<id>.<key>": [a, b], "<id>": [a, b]}, "llama_swap_release": [a, b],
    "daemon_json": [a, b], "models": {name: [a, b]}, "spec": {"<dotted key>": [a, b]}}`` — empty
    sections dropped; file diffs are unified diffs passed through ``mask`` (the caller's secret
    masking, :func:`rigkit.drift.masking.mask`). A member in one generation only is one entry
    ``"<id>": [a, b]`` (``"live"``/``"staged"``, None where it is absent: ``["live", None]`` is a
    removal), in ``members`` and as ``llama_swap.members.<id>`` in ``spec``, never key by key."""
    ra, rb = a["record"], b["record"]
    ca, cb = a.get("contents") or {}, b.get("contents") or {}
    out: dict[str, Any] = {"a": ra["n"], "b": rb["n"]}
    files = []
    for path in sorted(set(ra["files"]) | set(rb["files"])):
        fa, fb = ra["files"].get(path), rb["files"].get(path)
        if (fa or {}).get("sha256") == (fb or {}).get("sha256") and (fa or {}).get("mode") == (fb or {}).get("mode") \
                and (fa or {}).get("owner") == (fb or {}).get("owner"):
            continue
        text = "".join(difflib.unified_diff(
            (ca.get(path) or "").splitlines(keepends=True), (cb.get(path) or "").splitlines(keepends=True),
            fromfile=f"{ra['n']}:{path}" if fa else "/dev/null", tofile=f"{rb['n']}:{path}" if fb else "/dev/null"))
        meta = [f"{k} {fa.get(k)} -> {fb.get(k)}" for k in ("mode", "owner") if fa and fb and fa.get(k) != fb.get(k)]
        files.append({"path": path, "diff": mask(text) or "", "meta": meta})
    out["files"] = files
    out["secrets"] = sorted(p for p in set(ra.get("secrets", {})) | set(rb.get("secrets", {}))
                            if (ra.get("secrets", {}).get(p) or {}).get("sha256") != (rb.get("secrets", {}).get(p) or {}).get("sha256"))
    pa, pb = ra.get("pins") or {}, rb.get("pins") or {}
    out["pins"] = {p: [pa.get(p), pb.get(p)] for p in sorted(set(pa) | set(pb)) if pa.get(p) != pb.get(p)}
    ua, ub = ra.get("units") or {}, rb.get("units") or {}
    out["units"] = {k: [ua.get(k), ub.get(k)] for k in ("enabled", "disabled") if ua.get(k) != ub.get(k)}
    ida = (ra.get("spec") or {}).get("llama_swap", {}).get("members", {})
    idb = (rb.get("spec") or {}).get("llama_swap", {}).get("members", {})
    whole = {m: [_declared_as(ida.get(m)), _declared_as(idb.get(m))] for m in sorted(set(ida) ^ set(idb))}
    ma = flat({m: v for m, v in ida.items() if m in idb})
    mb = flat({m: v for m, v in idb.items() if m in ida})
    out["members"] = {**whole, **{k: [ma.get(k), mb.get(k)] for k in sorted(set(ma) | set(mb)) if ma.get(k) != mb.get(k)}}
    la, lb = (ra.get("llama_swap") or {}).get("release"), (rb.get("llama_swap") or {}).get("release")
    out["llama_swap_release"] = [la, lb] if la != lb else None
    out["daemon_json"] = [ra.get("daemon_json"), rb.get("daemon_json")] if ra.get("daemon_json") != rb.get("daemon_json") else None
    moa, mob = ra.get("models") or {}, rb.get("models") or {}
    out["models"] = {m: [moa.get(m), mob.get(m)] for m in sorted(set(moa) | set(mob)) if moa.get(m) != mob.get(m)}
    sa, sb = flat(ra.get("spec") or {}), flat(rb.get("spec") or {})
    gone = tuple(f"llama_swap.members.{m}." for m in whole)  # said once, as the member's, not key by key
    out["spec"] = {k: [sa.get(k), sb.get(k)] for k in sorted(set(sa) | set(sb))
                   if sa.get(k) != sb.get(k) and not k.startswith(LOCKFILE_KEYS) and not k.startswith(gone)}
    out["spec"].update({f"llama_swap.members.{m}": v for m, v in whole.items()})
    return {k: v for k, v in out.items() if v or k in ("a", "b")}


def _is_whole(section: str, key: str) -> bool:
    """Whether ``key`` of a :func:`diff` section is a whole member (added or removed)."""
    return (section == "members" and "." not in key) or (section == "spec" and key.count(".") == 2
                                                         and key.startswith("llama_swap.members."))


def _whole(v: list[Any]) -> str:
    return f"removed (was {v[0]})" if v[1] is None else f"added ({v[1]})" if v[0] is None else f"{v[0]} -> {v[1]}"


def diff_text(d: dict[str, Any]) -> str:
    """:func:`diff`'s result as text for a terminal: one section per kind of change."""
    lines = [f"generation {d['a']} -> generation {d['b']}"]
    if len(d) == 2:
        return lines[0] + ": no difference\n"
    for key, label in (("spec", "spec"), ("pins", "pins"), ("members", "llama-swap members"), ("units", "units"),
                       ("models", "models"), ("secrets", "secret files (by hash; never shown)")):
        if key in d:
            lines.append(f"{label}:")
            if isinstance(d[key], dict):
                lines += [f"  {k}: " + (_whole(v) if _is_whole(key, k) else f"{json.dumps(v[0])} -> {json.dumps(v[1])}")
                          for k, v in d[key].items()]
            else:
                lines += [f"  {p}: changed" for p in d[key]]
    for key, label in (("llama_swap_release", "llama-swap release"), ("daemon_json", "daemon.json keys")):
        if key in d:
            lines.append(f"{label}: {json.dumps(d[key][0])} -> {json.dumps(d[key][1])}")
    if "files" in d:
        lines.append("files:")
        for f in d["files"]:
            lines.append(f"  {f['path']}" + (f" ({'; '.join(f['meta'])})" if f["meta"] else ""))
            lines += ["    " + ln for ln in f["diff"].splitlines()]
    return "\n".join(lines) + "\n"
