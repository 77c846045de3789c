"""Resolvers for ``rigkit lock``: each turns what the spec declares (a pin's series, an image's tag, the
llama-swap release's version) into the exact artefact and its hash, from the source the deploy itself
fetches from — the Arch Linux Archive (:mod:`.archive`), an OCI registry (:mod:`.registry`), a release
server (:mod:`.release`). Control side only; every failure is a :class:`ResolveError` naming the lock
entry, the URL and the cause."""

from __future__ import annotations


class ResolveError(RuntimeError):
    """A source could not resolve one lock entry: the message names the entry (``pins.cuda``,
    ``images.hyperqwen``, ``llama_swap``), the URL asked and the cause (HTTP status, a missing
    series, a digest the registry does not have). ``rigkit lock`` exits 1 and writes nothing."""


class SourceUnreachable(ResolveError):
    """No answer from the source at all (``requests``' connection error or timeout: no network, a name
    that does not resolve, a refused connection), as against an answer that refuses. ``rigkit lock``
    then says every source the lock needs and how to lock on a machine that reaches them."""
