"""Who is talking to a local port: one client-connection counter for "is the rig busy"
(:mod:`rigkit.host.busy`: the deploy's preflight, the reboot gate, the window's preflight;
DESIGN.md "One host lock": rigkit's own requests never count as client traffic).

Sources: ``/proc/net/tcp`` and ``/proc/net/tcp6`` (``proc(5)``: ``local_address rem_address st
... inode``, addresses as little-endian hex words, state ``01`` ESTABLISHED) and, to tell rigkit's
own requests apart, ``/proc/<pid>/cgroup`` (the systemd unit a process runs in) and
``/proc/<pid>/fd`` (``socket:[inode]`` links).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import Iterable

ESTABLISHED = "01"


def _hex_ip(h: str) -> str:
    raw = bytes.fromhex(h)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return str(ip.ipv4_mapped)
    return str(ip)


def parse_tcp_table(text: str) -> list[dict]:
    """Established sockets of a ``/proc/net/tcp{,6}`` table: ``[{"local": (ip, port), "remote": (ip,
    port), "inode": int}]`` (the header line and other states skipped)."""
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 10 or f[3] != ESTABLISHED or ":" not in f[1]:
            continue
        try:
            lip, lport = f[1].rsplit(":", 1)
            rip, rport = f[2].rsplit(":", 1)
            out.append({"local": (_hex_ip(lip), int(lport, 16)), "remote": (_hex_ip(rip), int(rport, 16)),
                        "inode": int(f[9])})
        except ValueError:
            continue
    return out


def clients(tables: Iterable[str], port: int, own_inodes: Iterable[int] = ()) -> list[str]:
    """Client connections to local ``port``, as ``"IP:PORT"`` of each peer, leaving out the ones
    whose client end is a socket in ``own_inodes`` (rigkit's own requests, on this host).

    + tables: texts of ``/proc/net/tcp`` and ``/proc/net/tcp6``
    + own_inodes: socket inodes held by rigkit's own processes (:func:`own_socket_inodes`)
    """
    socks = [s for t in tables for s in parse_tcp_table(t)]
    by_local = {s["local"]: s for s in socks}
    own = set(own_inodes)
    out = []
    for s in socks:
        if s["local"][1] != port:
            continue
        peer = by_local.get(s["remote"])  # the client end, when the client runs on this host
        if peer is not None and peer["remote"] == s["local"] and peer["inode"] in own:
            continue
        out.append(f"{s['remote'][0]}:{s['remote'][1]}")
    return sorted(out)


def parse_cgroup_units(text: str) -> set[str]:
    """The unit names in a ``/proc/<pid>/cgroup`` text (the last path element of each line that
    ends in ``.service``/``.scope``)."""
    units = set()
    for line in text.splitlines():
        path = line.rsplit(":", 1)[-1]
        for part in path.split("/"):
            if part.endswith((".service", ".scope")):
                units.add(part)
    return units


def is_own_unit(unit: str, own: Iterable[str]) -> bool:
    """True when ``unit`` is one of ``own`` or an instance of one (``rigkit-activate-<id>.service``
    for ``rigkit-activate.service``)."""
    return any(unit == u or unit.startswith(u.removesuffix(".service") + "-") for u in own)


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
