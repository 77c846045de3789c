"""The resolvers of the pins, the images and the llama-swap release: what ``rigkit lock`` asks of the Arch
Linux Archive (:mod:`rigkit.lockfile.archive`), the image registries (:mod:`rigkit.lockfile.registry`) and
the release server (:mod:`rigkit.lockfile.release`) — the source the deploy itself fetches from — to turn
what the spec declares (:mod:`rigkit.lockfile.view`) into the exact artefact and its hash. The models are
:mod:`rigkit.lockfile.hub`'s. Control side only; this module and those it names ask the network, and
:mod:`rigkit.spec` imports none of them. Every failure is a :class:`~rigkit.lockfile.errors.ResolveError`
naming the lock entry, the URL and the cause.

``rigkit lock`` keeps every entry that still matches (a second lock changes nothing); ``--update``
re-resolves the named ones (:func:`lock_sections`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from rigkit.lockfile.view import declared_images, declared_pins, lock_problems
from rigkit.spec.compat import DRIVER_PACKAGES


class Resolver:
    """The three sources, each through one ``requests.Session``; the archive's dated databases are read
    once per run. ``session`` is for tests; a CA bundle per image registry (``image.registry_ca``) is
    passed to that image's look-ups."""

    def __init__(self, session: Any = None):
        import requests

        from rigkit.lockfile.archive import Archive

        self.http = session or requests.Session()
        self._archives: dict[str, Archive] = {}

    def _get(self, url: str) -> tuple[int, bytes]:
        import requests

        from rigkit.lockfile.errors import SourceUnreachable

        try:
            resp = self.http.get(url, timeout=60)
        except requests.RequestException as exc:
            raise SourceUnreachable(f"{url}: unreachable ({type(exc).__name__})") from None
        return resp.status_code, resp.content

    def archive(self, url: str) -> Any:
        from rigkit.lockfile.archive import Archive

        return self._archives.setdefault(url, Archive(url, self._get))

    def pins(self, spec: Any, names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """Resolve the declared pins (only ``names`` when given). Driver packages declared by one series
        resolve to the newest version all of them have. Raises :class:`~rigkit.lockfile.errors.ResolveError`."""
        from rigkit.common import versions
        from rigkit.lockfile.errors import ResolveError

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
            from rigkit.lockfile.archive import newest

            best = newest(sorted(common))
            for p in driver:
                if versions.release(out[p]["version"]) != best:
                    pick = [v for v in out[p]["available"] if versions.release(v) == best][-1]
                    out[p] = archive.resolve(f"pins.{p}", p, pick, wanted[p][1]) | {"want": wanted[p][0]}
        for entry in out.values():
            entry.pop("available", None)
        return out

    def image(self, name: str, image: Any) -> dict[str, Any]:
        """Resolve one image (:meth:`rigkit.lockfile.registry.Registry.resolve`)."""
        from rigkit.lockfile.registry import Registry

        registry = Registry(self.http, verify=image.registry_ca or True)
        entry = registry.resolve(f"images.{name}", image.repository, image.ref, image.registry)
        return entry | {"registry": image.registry}

    def release(self, spec: Any) -> dict[str, Any]:
        """Resolve the llama-swap release; the spec's ``release_sha256``, when given, must agree."""
        from rigkit.lockfile import release
        from rigkit.lockfile.errors import ResolveError

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
    Returns a new dict ``{"pins", "images", "llama_swap"}``. Raises :class:`~rigkit.lockfile.errors.ResolveError`."""
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
        from rigkit.lockfile.registry import split_repository

        self.asked.append((f"images.{name}", origin(image.registry) if image.registry
                           else "https://" + split_repository(image.repository)[0]))
        return {}

    def release(self, spec: Any) -> dict[str, Any]:
        self.asked.append(("llama_swap", origin(spec.llama_swap.release_url)))
        return {}


def sources_asked(spec: Any, current: dict[str, Any], update: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """``[(lock entry, server)]``: every entry that :func:`lock_sections` with these arguments resolves
    from a source, and the server (:func:`origin`) it asks — what ``rigkit lock`` needs the network for
    (the models are the caller's: :func:`rigkit.lockfile.view.check_lock`). Asks nothing."""
    asking = _Asking()
    lock_sections(spec, current, update, resolver=asking)  # type: ignore[arg-type]
    return asking.asked


