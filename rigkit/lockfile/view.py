"""The spec as its lock file resolves it, and what the lock lacks for it — read only, nothing asked of the
network (the resolvers are :mod:`rigkit.lockfile.resolve` and :mod:`rigkit.lockfile.hub`).

What the spec declares (the intent) and what the lock records (the resolution):

- ``pins.<package>``: the spec's series (``nvidia_driver_version`` for the driver flavour,
  ``nvidia-utils`` and ``opencl-nvidia``; ``cuda_version`` for ``cuda``), or ``pacman_pins`` when the
  operator gives exact versions → the full version in the Arch Linux Archive, the package file's URL, its
  sha256 from the dated repository database, its ``.sig`` (:mod:`rigkit.lockfile.archive`). The driver
  packages are one driver: the newest version of the series that *every* driver package has.
- ``images.<hyperqwen|strata|gguf_baseline>``: ``<section>.image`` repository and ref (a tag, or a digest
  to verify) → the digest (:mod:`rigkit.lockfile.registry`).
- ``llama_swap``: ``llama_swap.version`` and ``release_url`` → the tarball's sha256
  (:mod:`rigkit.lockfile.release`); ``release_sha256`` given in the spec must equal it.
- ``models.<name>``: the spec's ``models.<name>`` source → a commit and files (:mod:`rigkit.lockfile.hub`).

A lock entry records what it was resolved from (``want``, ``ref``, ``url``, ``source``); when the spec
declares something else, the entry is stale and :func:`lock_problems` (pins, images, release) or
:func:`check_lock` (models) says "re-lock". :func:`with_lock` gives the spec with the lock's resolution
in place of the intent (:func:`resolved`); :func:`locked_hosts` does it for every host of an inventory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from rigkit import hints, paths
from rigkit.common import versions
from rigkit.lockfile.document import load_lock, relock_hint, source_of
from rigkit.lockfile.errors import LockFormatError
from rigkit.lockfile.path import lock_file_path
from rigkit.spec.compat import DRIVER_PACKAGES

#: The lock entries of the images the rig pulls: the spec sections whose ``image`` each is.
IMAGE_KEYS = ("hyperqwen", "strata", "gguf_baseline")


def declared_pins(spec: Any) -> dict[str, tuple[str, str]]:
    """``{package: (what is wanted, the spec key declaring it)}``: each driver package at
    ``nvidia_driver_version``, ``cuda`` at ``cuda_version`` and, when ``metrics_textfile_dir`` is set,
    ``prometheus-node-exporter`` at ``node_exporter.version``, except where ``pacman_pins`` names a
    package's exact version (the operator's value wins; a package it adds is pinned too)."""
    out = {p: (spec.nvidia_driver_version, "nvidia_driver_version") for p in (spec.driver_flavour, *DRIVER_PACKAGES)}
    out["cuda"] = (spec.cuda_version, "cuda_version")
    if spec.metrics_textfile_dir:  # node_exporter is part of the rig only when metrics are asked for (issue 66)
        out[paths.NODE_EXPORTER_PACKAGE] = (spec.node_exporter.version, "node_exporter.version")
    out.update({p: (v, f"pacman_pins.{p}") for p, v in (spec.pacman_pins or {}).items()})
    return dict(sorted(out.items()))


def declared_images(spec: Any) -> dict[str, Any]:
    """``{lock name: ImageSpec}`` of the images the rig pulls."""
    return {k: getattr(spec, k).image for k in IMAGE_KEYS}


def image_source(image: Any) -> dict[str, Any]:
    """Where the spec says an image comes from, as the lock's ``images.<name>`` entry records it:
    ``{"repository": str, "ref": str (a tag or digest), "registry": str | None}``."""
    return {"repository": image.repository, "ref": image.ref, "registry": image.registry}


def _in_series(want: str, key: str, version: Any) -> bool:
    """Whether a locked pin ``version`` satisfies what the spec declares: exactly the version an
    operator's ``pacman_pins`` names, else a version of the declared series (:func:`versions.agrees`)."""
    if not isinstance(version, str):
        return False
    return version == want if key.startswith("pacman_pins.") else versions.agrees(want, version)


def lock_problems(spec: Any, lock: dict[str, Any], lock_file: str = "the lock") -> list[str]:
    """What the lock lacks for ``spec``, records for something else, or holds outside what the spec
    declares (a pin's version outside its series): one line per entry, naming it (``pins.cuda``), what
    the spec declares and what to run. Empty = the deploy can use the lock."""
    out = []
    fix = relock_hint(whole=True)
    pins = lock.get("pins") or {}
    for pkg, (want, key) in declared_pins(spec).items():
        entry = pins.get(pkg)
        if entry is None:
            out.append(f"pins.{pkg}: not in {lock_file} ({key} {want!r} unresolved); {fix}")
        elif entry.get("want") != want:
            out.append(f"pins.{pkg}: locked for {entry.get('want')!r}, the spec declares {want!r} ({key}); {fix}")
        elif not _in_series(want, key, entry.get("version")):
            out.append(f"pins.{pkg}: the locked version {entry.get('version')!r} is not "
                       f"{'the version' if key.startswith('pacman_pins.') else 'in the series'} {want!r} the spec declares "
                       f"({key}; versions compared as pacman's vercmp components, epoch and pkgrel aside); {fix}")
    for pkg in sorted(set(pins) - set(declared_pins(spec))):
        out.append(f"pins.{pkg}: in {lock_file} but no longer a pin of the spec; {fix}")
    images = lock.get("images") or {}
    for name, image in declared_images(spec).items():
        entry = images.get(name)
        if image.ref is None:
            continue  # an unset tag is the operator's to give: rigkit check warns about it
        if entry is None:
            out.append(f"images.{name}: not in {lock_file} ({image.repository}:{image.ref} unresolved); {fix}")
        elif {k: entry.get(k) for k in ("repository", "ref", "registry")} != image_source(image):
            out.append(f"images.{name}: locked for {entry.get('repository')}:{entry.get('ref')}, the spec declares "
                       f"{image.repository}:{image.ref} ({name}.image); {fix}")
    ls = spec.llama_swap
    entry = lock.get("llama_swap")
    if entry is None:
        out.append(f"llama_swap: not in {lock_file} (release {ls.version} at {ls.release_url} unresolved); {fix}")
    elif (entry.get("version"), entry.get("url")) != (ls.version, ls.release_url):
        out.append(f"llama_swap: locked for {entry.get('version')} at {entry.get('url')}, the spec declares "
                   f"{ls.version} at {ls.release_url}; {fix}")
    elif ls.release_sha256 is not None and ls.release_sha256 != entry.get("sha256"):
        out.append(f"llama_swap.release_sha256: {ls.release_sha256} is not the locked tarball's sha256 "
                   f"{entry.get('sha256')} ({entry.get('from')}); fix the spec's value, or {fix}")
    return out


def resolved(spec: Any, lock: dict[str, Any]) -> Any:
    """``spec`` with what the lock resolved in place of the intent: ``pacman_pins`` the locked full
    versions, each image's ``ref`` its locked digest, ``llama_swap.release_sha256`` the locked sha256 —
    what renders, deploys, records generations and drift compares. Entries the lock lacks or that are
    stale (:func:`lock_problems`) are left as declared; the deploy refuses those first."""
    stale = {p.split(":", 1)[0] for p in lock_problems(spec, lock)}
    update: dict[str, Any] = {}
    pins = lock.get("pins") or {}
    wanted = declared_pins(spec)
    if all(f"pins.{p}" not in stale for p in wanted):
        update["pacman_pins"] = {p: pins[p]["version"] for p in wanted}
    for name, image in declared_images(spec).items():
        entry = (lock.get("images") or {}).get(name)
        if entry is not None and f"images.{name}" not in stale:
            section = update.get(name, getattr(spec, name))
            update[name] = section.model_copy(update={"image": image.model_copy(update={"ref": entry["digest"]})})
    entry = lock.get("llama_swap")
    if entry is not None and not stale & {"llama_swap", "llama_swap.release_sha256"}:
        update["llama_swap"] = spec.llama_swap.model_copy(update={"release_sha256": entry["sha256"]})
    return spec.model_copy(update=update)


def model_problems(spec: Any, inventory: str | os.PathLike) -> tuple[str | None, list[str]]:
    """What ``rigkit check`` says about the models of one host's lock file: ``(lock path or None,
    problems)``. The lock is :func:`~rigkit.lockfile.path.lock_file_path`'s; when it does not exist there is
    nothing to say here (``rigkit deploy`` refuses without one). Problems: each bad entry
    (:func:`~rigkit.lockfile.document.load_lock`), then each model that no longer matches its lock
    (:func:`check_lock`) and each served GGUF file it does not list (:func:`served_file_problems`)."""
    path = lock_file_path(spec, inventory)
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
                       f"{server.model!r} (its GGUF files: {shown}); name one of them, or {relock_hint()}")
    return out


def check_lock(models: dict[str, Any], lock: dict[str, Any], lock_file: str = "the lock") -> list[str]:
    """Compare the spec's models (name → ``ModelSource``) with a lock. Returns one message per
    problem (empty = the lock matches): a model set in the spec but not locked, locked with a
    different source (repo, revision, include/exclude, path, url, sha256), or locked but no
    longer in the spec. Every message ends with what to do: "re-lock with `rigkit models lock`"."""
    problems = []
    locked = lock.get("models", {})
    fix = relock_hint()
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


def with_lock(spec: Any, inventory: str) -> tuple[Any, dict[str, Any] | None, list[str]]:
    """``(spec resolved by its lock, the lock or None, problems)``: the lock at
    :func:`~rigkit.lockfile.path.lock_file_path` read (:func:`~rigkit.lockfile.document.load_lock`),
    :func:`resolved` applied, :func:`lock_problems` listed. No lock file: the spec as declared, and one
    problem saying to run ``rigkit lock``. A malformed lock: its problems. Never raises for the file."""
    path = str(lock_file_path(spec, inventory))
    try:
        lock = load_lock(path)
    except FileNotFoundError:
        return spec, None, [f"{path}: no lock yet; run `{hints.command('lock')}`"]
    except LockFormatError as exc:
        return spec, None, list(exc.problems)
    except OSError as exc:
        return spec, None, [f"{path}: unreadable ({exc.strerror})"]
    return resolved(spec, lock), lock, lock_problems(spec, lock, path)


def locked_hosts(host_specs: Sequence[Any], inventory: str | None) -> list[Any]:
    """Each :class:`rigkit.spec.inventory.HostSpec` of ``host_specs`` (as
    :func:`rigkit.spec.inventory.load_hosts` declares them) with its ``spec`` as its lock resolves it and
    ``lock_problems`` what the lock lacks or records for something else (:func:`with_lock`); ``inventory``
    None is :func:`rigkit.spec.inventory.default_inventory`. New objects; the given ones are unchanged."""
    import dataclasses

    from rigkit.spec.inventory import default_inventory

    inv = inventory or default_inventory()
    out = []
    for hs in host_specs:
        spec, _lock, problems = with_lock(hs.spec, inv)
        out.append(dataclasses.replace(hs, spec=spec, lock_problems=problems))
    return out
