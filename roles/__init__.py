"""pyinfra roles: one ``@deploy`` per concern, thin orchestration over ``rigkit`` facts and
operations, reading only the :class:`~rigkit.spec.model.RigSpec` (never raw ``host.data``).
``deploy.py`` applies them in DESIGN.md's order."""

from __future__ import annotations

from rigkit.operations.config import rendered_file
from rigkit.render.files import RenderedFile


def put_rendered(rendered: dict[str, RenderedFile], path: str, name: str):
    """Install ``rendered[path]`` (:func:`rigkit.render.files.render`: the same string ``rigkit render``
    shows) with its mode and owner, keeping a backup of a replaced file rigkit did not write
    (:func:`rigkit.operations.config.rendered_file`; the state of every rendered file is read once,
    in one command); returns pyinfra's ``OperationMeta``."""
    file = rendered[path]
    user, group = file.owner.split(":")
    return rendered_file(name=name, path=path, text=file.text, user=user, group=group,
                         mode=file.mode.lstrip("0") or "0", batch=tuple(sorted(rendered)))
