"""The host agent's wheelhouse on the host: pyinfra's ``files.sync``, asked for only when the host's
folder differs (one command, :class:`~rigkit.operations.facts.FolderFiles`, instead of two per wheel)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pyinfra import host
from pyinfra.api import operation
from pyinfra.operations import files

from rigkit.operations.facts import FolderFiles

#: Owner and mode of each synced wheel (and of the folder: 0755).
OWNER, MODE, DIR_MODE = ("root", "root"), "644", "755"


def local_sums(folder: str | Path) -> dict[str, str]:
    """``{file name: sha256}`` of the plain files directly in ``folder`` (dot files too)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(folder).iterdir()) if p.is_file()}


def differences(want: dict[str, str], got: dict[str, dict[str, Any]] | None) -> dict[str, list[str]]:
    """What keeps the host's folder (``got``: :class:`~rigkit.operations.facts.FolderFiles`) from
    being ``want`` (:func:`local_sums`) as ``files.sync(..., delete=True)`` leaves it: ``{"missing"
    (absent or other content), "extra" (not in ``want``), "wrong" (not root 0644)}`` of file names;
    all empty when they agree. ``got`` None (no folder): every wanted file is missing."""
    got = got or {}
    return {"missing": sorted(n for n in want if n not in got or got[n]["sha256"] != want[n]),
            "extra": sorted(n for n in got if n not in want),
            "wrong": sorted(n for n in got if n in want and (got[n]["mode"], (got[n]["user"], got[n]["group"])) != (MODE, OWNER))}


@operation()
def wheelhouse_synced(src: str, dest: str):
    """Make ``dest`` hold exactly the files of the local folder ``src`` (root, 0644; the folder 0755),
    through pyinfra's ``files.sync`` (``delete=True``), only when they differ.

    + src: the local wheelhouse (:func:`rigkit.deploy.wheelhouse.build`)
    + dest: the host's folder (``/opt/rigkit/wheels``)

    **Example:**

    .. code:: python

        from rigkit.operations.wheels import wheelhouse_synced
        wheelhouse_synced(name="Sync the agent wheelhouse", src="/root/.cache/rigkit/wheelhouse/cp313-<digest>",
                          dest="/opt/rigkit/wheels")
    """
    got = host.get_fact(FolderFiles, path=dest)
    if got is not None and not any(differences(local_sums(src), got).values()):
        host.noop(f"{dest} holds the wheelhouse")
        return
    yield from files.sync._inner(src=src, dest=dest, user=OWNER[0], group=OWNER[1], mode=MODE, dir_mode=DIR_MODE,
                                 delete=True)
