"""pyinfra roles: one ``@deploy`` per concern, thin orchestration over ``rigkit`` facts and
operations, reading only the :class:`~rigkit.spec.RigSpec` (never raw ``host.data``).
``deploy.py`` applies them in DESIGN.md's order."""

from __future__ import annotations

from io import StringIO

from pyinfra.operations import files

from rigkit.render import RenderedFile


def put_rendered(path: str, rendered: RenderedFile, name: str):
    """Upload one file from :func:`rigkit.render.render` (the same string ``rigkit render``
    shows) with its mode and owner; returns pyinfra's ``OperationMeta``."""
    user, group = rendered.owner.split(":")
    return files.put(name=name, src=StringIO(rendered.text), dest=path, user=user, group=group,
                     mode=rendered.mode.lstrip("0") or "0", create_remote_dir=True)
