"""Is the rig busy: one answer for the deploy's preflight, the reboot gate and the window's
preflight (DESIGN.md "Disruption and reboots"). A step that interrupts service is refused while a
declared lock file exists (a session holds the GPU) or llama-swap has client connections (rigkit's
own requests left out, :mod:`rigkit.common.net`), unless ``--force``.

:func:`facts` computes the facts from what was read (on the host by :func:`rigkit.host.busy.read`; from
the control side by the ``RigBusy`` fact's command); :func:`reasons` and :func:`refusal` word them.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable

from rigkit.common import net

#: How many peers a refusal names (the count is always whole).
PEERS_SHOWN = 5


def facts(port: int, tables: Iterable[str], own_inodes: Iterable[int] = (), lock_files: Iterable[str] = (),
          exists: Callable[[str], bool] = os.path.exists) -> dict:
    """``{"port": PORT, "clients": ["IP:PORT", ...], "locks": [present lock file, ...]}``.

    + tables: texts of ``/proc/net/tcp`` and ``/proc/net/tcp6``
    + own_inodes: socket inodes of rigkit's own processes (:func:`rigkit.host.net.own_socket_inodes`)
    + lock_files: the declared lock files; ``exists`` tells which are present
    """
    return {"port": int(port), "clients": net.clients(tables, int(port), own_inodes),
            "locks": [f for f in lock_files or () if exists(f)]}


def reasons(busy: dict) -> list[str]:
    """Why the rig is busy, one phrase each (empty: idle)."""
    out = []
    if busy.get("locks"):
        out.append(f"lock file(s) present: {', '.join(busy['locks'])} (a session holds the GPU)")
    clients = sorted(busy.get("clients") or [])
    if clients:
        peers = ", ".join(clients[:PEERS_SHOWN])
        if len(clients) > PEERS_SHOWN:
            peers += f" and {len(clients) - PEERS_SHOWN} more"
        out.append(f"llama-swap (:{busy['port']}) has {len(clients)} established client connection(s), "
                   f"from {peers}")
    return out


def refusal(busy: dict, what: str = "") -> str | None:
    """The refusal an operator reads while the rig is busy, or None when it is idle: ``WHAT but
    REASONS; run again when the rig is idle, or pass --force`` (``what``: the step refused)."""
    why = reasons(busy)
    if not why:
        return None
    return (f"{what} but " if what else "") + "; ".join(why) + "; run again when the rig is idle, or pass --force"
