"""The host agent's wheelhouse on the host: pyinfra's ``files.sync``, asked for only when the host's
folder differs (one command, :class:`~rigkit.operations.facts.files.FolderFiles`, instead of two per wheel)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pyinfra import host
from pyinfra.api import operation
from pyinfra.operations import files

from rigkit.operations.facts.files import FolderFiles
from rigkit.render import declared_state

# the owner and modes of the synced wheels and what differs: one definition with drift's
OWNER, MODE, DIR_MODE = declared_state.WHEEL_OWNER, declared_state.WHEEL_MODE, declared_state.WHEEL_DIR_MODE


def local_sums(folder: str | Path) -> dict[str, str]:
    """``{file name: sha256}`` of the plain files directly in ``folder`` (dot files too)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).iterdir()) if p.is_file()}


@operation()
def wheelhouse_synced(src: str, dest: str):
    """Make ``dest`` hold exactly the files of the local folder ``src`` (root, 0644; the folder 0755),
    through pyinfra's ``files.sync`` (``delete=True``), only when they differ.

    + src: the local wheelhouse (:func:`rigkit.render.wheelhouse.build`)
    + dest: the host's folder (``/opt/rigkit/wheels``)

    **Example:**

    .. code:: python

        from rigkit.operations.wheels import wheelhouse_synced
        wheelhouse_synced(name="Sync the agent wheelhouse", src="/root/.cache/rigkit/wheelhouse/cp313-<digest>",
                          dest="/opt/rigkit/wheels")
    """
    got = host.get_fact(FolderFiles, path=dest)
    if got is not None and not any(declared_state.wheel_differences(local_sums(src), got).values()):
        host.noop(f"{dest} holds the wheelhouse")
        return
    yield from files.sync._inner(src=src, dest=dest, user=OWNER[0], group=OWNER[1], mode=MODE, dir_mode=DIR_MODE,
                                 delete=True)
