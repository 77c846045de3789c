"""pyinfra roles: one ``@deploy`` per concern, thin orchestration over ``rigkit`` facts and
operations, reading only the :class:`~rigkit.spec.model.RigSpec` (never raw ``host.data``).
``deploy.py`` applies them in DESIGN.md's order."""

from __future__ import annotations

from rigkit.operations.config import rendered_file
from rigkit.render.files import RenderedFile


def put_rendered(path: str, rendered: RenderedFile, name: str):
    """Install one file from :func:`rigkit.render.files.render` (the same string ``rigkit render`` shows)
    with its mode and owner, keeping a backup of a replaced file rigkit did not write
    (:func:`rigkit.operations.config.rendered_file`); returns pyinfra's ``OperationMeta``."""
    user, group = rendered.owner.split(":")
    return rendered_file(name=name, path=path, text=rendered.text, user=user, group=group,
                         mode=rendered.mode.lstrip("0") or "0")
