"""Is this host busy: :func:`read` reads ``/proc`` and the declared lock files here and hands them
to :func:`rigkit.common.busy.facts` (the one answer, which the deploy's ``RigBusy`` fact computes too)."""

from __future__ import annotations

import os
from typing import Iterable

from rigkit.host import net

from rigkit.common.busy import facts


def read(port: int, own_units: Iterable[str] = (), lock_files: Iterable[str] = (),
         proc: str | os.PathLike = "/proc") -> dict:
    """:func:`facts` of this host right now (processes in ``own_units`` are rigkit's own)."""
    own = list(own_units)
    return facts(port, net.read_tables(proc), net.own_socket_inodes(own, proc) if own else (), lock_files)
