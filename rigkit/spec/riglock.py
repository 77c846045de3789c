"""One lock for everything the rig fetches: ``rigkit lock`` resolves the pins, the images and the
llama-swap release (and the models, :mod:`rigkit.spec.modellock`) into ``<inventory>.lock.json``; the
deploy applies only what the lock names (:func:`resolved`).

What the spec declares (the intent) and what the lock records (the resolution):

- ``pins.<package>``: the spec's series (``nvidia_driver_version`` for the driver flavour,
  ``nvidia-utils`` and ``opencl-nvidia``; ``cuda_version`` for ``cuda``), or ``pacman_pins`` when the
  operator gives exact versions → the full version in the Arch Linux Archive, the package file's URL, its
  sha256 from the dated repository database, its ``.sig`` (:mod:`rigkit.resolve.archive`). The driver
  packages are one driver: the newest version of the series that *every* driver package has.
- ``images.<hyperqwen|strata|gguf_baseline>``: ``<section>.image`` repository and ref (a tag, or a digest
  to verify) → the digest (:mod:`rigkit.resolve.registry`).
- ``llama_swap``: ``llama_swap.version`` and ``release_url`` → the tarball's sha256
  (:mod:`rigkit.resolve.release`); ``release_sha256`` given in the spec must equal it.

A lock entry records what it was resolved from (``want``, ``ref``, ``url``); when the spec declares
something else, the entry is stale and :func:`lock_problems` says "re-lock". ``rigkit lock`` keeps every
entry that still matches (a second lock changes nothing); ``--update`` re-resolves the named ones.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from rigkit import hints, paths
from rigkit.common import versions
from rigkit.spec.compat import DRIVER_PACKAGES
from rigkit.spec.modellock import relock

#: The lock sections this module owns (``models`` is :mod:`rigkit.spec.modellock`'s).
SECTIONS = ("pins", "images", "llama_swap")
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


def _image_source(image: Any) -> dict[str, Any]:
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
    fix = relock(whole=True)
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
        elif {k: entry.get(k) for k in ("repository", "ref", "registry")} != _image_source(image):
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


# --------------------------------------------------------------------------------------------
# resolving


class Resolver:
    """The three sources, each through one ``requests.Session``; the archive's dated databases are read
    once per run. ``session`` is for tests; a CA bundle per image registry (``image.registry_ca``) is
    passed to that image's look-ups."""

    def __init__(self, session: Any = None):
        import requests

        from rigkit.resolve.archive import Archive

        self.http = session or requests.Session()
        self._archives: dict[str, Archive] = {}

    def _get(self, url: str) -> tuple[int, bytes]:
        import requests

        from rigkit.resolve import SourceUnreachable

        try:
            resp = self.http.get(url, timeout=60)
        except requests.RequestException as exc:
            raise SourceUnreachable(f"{url}: unreachable ({type(exc).__name__})") from None
        return resp.status_code, resp.content

    def archive(self, url: str) -> Any:
        from rigkit.resolve.archive import Archive

        return self._archives.setdefault(url, Archive(url, self._get))

    def pins(self, spec: Any, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """Resolve the declared pins (only ``names`` when given). Driver packages declared by one series
        resolve to the newest version all of them have. Raises :class:`~rigkit.resolve.ResolveError`."""
        from rigkit.common import versions
        from rigkit.resolve import ResolveError

        archive = self.archive(spec.arch_archive_url)
        wanted = declared_pins(spec)
        chosen = set(wanted if names is None else names) & set(wanted)
        out = {p: archive.resolve(f"pins.{p}", p, want, key) for p, (want, key) in wanted.items() if p in chosen}
        driver = [p for p in (spec.driver_flavour, *DRIVER_PACKAGES) if p in out and "-" not in wanted[p][0]]
        if len(driver) > 1:
            common = set.intersection(*({versions.release(v) for v in out[p]["available"]} for p in driver))
            if not common:
                raise ResolveError("pins: " + ", ".join(driver) + f" have no version of {spec.nvidia_driver_version} "
                                   "in common in the archive: " + "; ".join(
                                       f"{p}: {', '.join(out[p]['available'])}" for p in driver))
            from rigkit.resolve.archive import newest

            best = newest(sorted(common))
            for p in driver:
                if versions.release(out[p]["version"]) != best:
                    pick = [v for v in out[p]["available"] if versions.release(v) == best][-1]
                    out[p] = archive.resolve(f"pins.{p}", p, pick, wanted[p][1]) | {"want": wanted[p][0]}
        for entry in out.values():
            entry.pop("available", None)
        return out

    def image(self, name: str, image: Any) -> dict[str, Any]:
        """Resolve one image (:meth:`rigkit.resolve.registry.Registry.resolve`)."""
        from rigkit.resolve.registry import Registry

        registry = Registry(self.http, verify=image.registry_ca or True)
        entry = registry.resolve(f"images.{name}", image.repository, image.ref, image.registry)
        return entry | {"registry": image.registry}

    def release(self, spec: Any) -> dict[str, Any]:
        """Resolve the llama-swap release; the spec's ``release_sha256``, when given, must agree."""
        from rigkit.resolve import ResolveError, release

        ls = spec.llama_swap
        entry = release.resolve("llama_swap", ls.version, ls.release_url, self.http)
        if ls.release_sha256 is not None and ls.release_sha256 != entry["sha256"]:
            raise ResolveError(f"llama_swap.release_sha256: {ls.release_sha256} does not match {entry['from']} "
                               f"({entry['sha256']}): the tarball is not the one the spec names")
        return entry


def lock_sections(spec: Any, current: dict[str, Any], update: Iterable[str] | None = None,
                  resolver: Resolver | None = None) -> dict[str, Any]:
    """The pins, images and llama_swap sections for ``spec``: every entry of ``current`` that still
    matches the spec kept as it is, the others resolved; with ``update`` (entry names: ``cuda``,
    ``nvidia-utils``, ``hyperqwen``, ``llama_swap``; an empty list = all) those re-resolved too.
    Returns a new dict ``{"pins", "images", "llama_swap"}``. Raises :class:`~rigkit.resolve.ResolveError`."""
    resolver = resolver or Resolver()
    update = None if update is None else set(update)
    everything = update is not None and not update
    stale = {p.split(":", 1)[0].split(".", 1)[-1] for p in lock_problems(spec, current)}

    def redo(name: str) -> bool:
        return everything or name in stale or (update is not None and name in update)

    pins = {p: copy.deepcopy(e) for p, e in (current.get("pins") or {}).items() if p in declared_pins(spec)}
    todo = [p for p in declared_pins(spec) if redo(p) or p not in pins]
    if todo:
        # the driver packages move together: one of them re-resolved re-resolves all of them
        driver = {spec.driver_flavour, *DRIVER_PACKAGES}
        if driver & set(todo):
            todo = sorted(set(todo) | (driver & set(declared_pins(spec))))
        pins.update(resolver.pins(spec, todo))
    images = {}
    for name, image in declared_images(spec).items():
        have = (current.get("images") or {}).get(name)
        if image.ref is None:
            continue
        images[name] = resolver.image(name, image) if have is None or redo(name) else copy.deepcopy(have)
    have = current.get("llama_swap")
    release = resolver.release(spec) if have is None or redo("llama_swap") or redo("release_sha256") else copy.deepcopy(have)
    return {"pins": dict(sorted(pins.items())), "images": images, "llama_swap": release}


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: the server asked, without a path, a query or credentials
    (a URL of the spec may carry a secret: ``hf_endpoint``)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "") if parts.scheme else url


class _Asking:
    """A :class:`Resolver` that asks nothing: it records which lock entry :func:`lock_sections` would
    resolve and the server each would ask (:func:`origin`)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def pins(self, spec: Any, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        names = list(declared_pins(spec) if names is None else names)
        self.asked += [(f"pins.{p}", origin(spec.arch_archive_url)) for p in names]
        return {p: {} for p in names}

    def image(self, name: str, image: Any) -> dict[str, Any]:
        from rigkit.resolve.registry import split_repository

        self.asked.append((f"images.{name}", origin(image.registry) if image.registry
                           else "https://" + split_repository(image.repository)[0]))
        return {}

    def release(self, spec: Any) -> dict[str, Any]:
        self.asked.append(("llama_swap", origin(spec.llama_swap.release_url)))
        return {}


def sources_asked(spec: Any, current: dict[str, Any], update: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """``[(lock entry, server)]``: every entry that :func:`lock_sections` with these arguments resolves
    from a source, and the server (:func:`origin`) it asks — what ``rigkit lock`` needs the network for
    (the models are the caller's: :func:`rigkit.spec.modellock.check_lock`). Asks nothing."""
    asking = _Asking()
    lock_sections(spec, current, update, resolver=asking)  # type: ignore[arg-type]
    return asking.asked


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


def lock_file_for(spec: Any, inventory: str) -> str:
    """The lock of ``spec``: ``models_lock`` when set, else ``<inventory>.lock.json`` beside the inventory."""
    from rigkit.spec.modellock import lock_path_for

    return str(spec.models_lock or lock_path_for(inventory))


def with_lock(spec: Any, inventory: str) -> tuple[Any, dict[str, Any] | None, list[str]]:
    """``(spec resolved by its lock, the lock or None, problems)``: the lock read (:func:`rigkit.spec.
    modellock.load_lock`), :func:`resolved` applied, :func:`lock_problems` listed. No lock file: the spec
    as declared, and one problem saying to run ``rigkit lock``. A malformed lock: its problems."""
    from rigkit.spec.modellock import LockFormatError, load_lock

    path = lock_file_for(spec, inventory)
    try:
        lock = load_lock(path)
    except FileNotFoundError:
        return spec, None, [f"{path}: no lock yet; run `{hints.command('lock')}`"]
    except LockFormatError as exc:
        return spec, None, list(exc.problems)
    except OSError as exc:
        return spec, None, [f"{path}: unreadable ({exc.strerror})"]
    return resolved(spec, lock), lock, lock_problems(spec, lock, path)
