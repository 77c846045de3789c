"""What goes wrong with the lock file, one class per kind and its exit code: a file that is no valid lock
(:class:`LockFormatError`, exit 2), a model the hub or its URL could not resolve (:class:`LockError`, exit
1), a pin, image or release a source could not resolve (:class:`ResolveError`, exit 1), and a source that
did not answer at all (:class:`ModelSourceUnreachable`, :class:`SourceUnreachable`: ``rigkit lock`` then
says every source it needs and how to lock on a machine that reaches them). Messages name the lock entry
(``models.strata``, ``pins.cuda``), the URL or file, and the cause; never a token."""

from __future__ import annotations

import os


class LockError(RuntimeError):
    """The hub (or a URL) could not resolve a model: the message names the model, repo and
    revision, and the cause (HTTP status, network); never a token. Exit code 1."""


class ModelSourceUnreachable(LockError):
    """The hub or a model's URL did not answer at all (no network, a name that does not resolve): the
    lock's other sources are likely unreachable too (``rigkit lock`` says which, and how to lock elsewhere)."""


class LockFormatError(ValueError):
    """A lock file that is not a valid rigkit model lock: ``problems`` lists ``"<file>: <entry>:
    <what is wrong>"`` lines (the file and the entry named, e.g. ``models.strata.files[0].path``).
    Exit code 2."""

    def __init__(self, path: str | os.PathLike, problems: list[str]):
        self.path = str(path)
        self.problems = [f"{path}: {p}" for p in problems]
        super().__init__("\n".join(self.problems))



class ResolveError(RuntimeError):
    """A source could not resolve one lock entry: the message names the entry (``pins.cuda``,
    ``images.hyperqwen``, ``llama_swap``), the URL asked and the cause (HTTP status, a missing
    series, a digest the registry does not have). ``rigkit lock`` exits 1 and writes nothing."""


class SourceUnreachable(ResolveError):
    """No answer from the source at all (``requests``' connection error or timeout: no network, a name
    that does not resolve, a refused connection), as against an answer that refuses. ``rigkit lock``
    then says every source the lock needs and how to lock on a machine that reaches them."""
