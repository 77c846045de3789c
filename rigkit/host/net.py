"""This host's ``/proc`` read for :mod:`rigkit.common.net` (the TCP tables, the socket inodes of
rigkit's own units) and whether a local port answers."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Iterable

from rigkit.common.net import clients, is_own_unit, parse_cgroup_units


def own_socket_inodes(units: Iterable[str], proc: str | os.PathLike = "/proc") -> set[int]:
    """Inodes of the sockets held by processes running in one of ``units`` (rigkit's own:
    the keeper, the watchdog, an activation, a window; instances ``<stem>-<id>`` included)."""
    wanted = list(units)
    out: set[int] = set()
    root = Path(proc)
    for pid_dir in root.iterdir() if root.is_dir() else []:
        if not pid_dir.name.isdigit():
            continue
        try:
            if not any(is_own_unit(u, wanted) for u in parse_cgroup_units((pid_dir / "cgroup").read_text())):
                continue
            for fd in (pid_dir / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    out.add(int(link[8:-1]))
        except (OSError, ValueError):
            continue
    return out


def read_tables(proc: str | os.PathLike = "/proc") -> list[str]:
    """The texts of ``/proc/net/tcp`` and ``/proc/net/tcp6`` (one that cannot be read left out)."""
    tables = []
    for name in ("tcp", "tcp6"):
        try:
            tables.append((Path(proc) / "net" / name).read_text())
        except OSError:
            continue
    return tables


def client_connections(port: int, own_units: Iterable[str] = (), proc: str | os.PathLike = "/proc") -> list[str]:
    """Client connections to local ``port`` on this host, rigkit's own (processes in ``own_units``)
    left out: ``["IP:PORT", ...]``."""
    return clients(read_tables(proc), port, own_socket_inodes(own_units, proc) if own_units else ())


def port_open(port: int, host: str = "127.0.0.1", timeout_s: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
