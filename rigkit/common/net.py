"""Who is talking to a local port, from what was read: the parsers of ``/proc/net/tcp{,6}`` and of a
process's cgroup, and the one client-connection counter for "is the rig busy" (:mod:`rigkit.common.busy`;
DESIGN.md "One host lock": rigkit's own requests never count as client traffic). Reading ``/proc`` on the
host: :mod:`rigkit.host.net`.

Sources: ``/proc/net/tcp`` and ``/proc/net/tcp6`` (``proc(5)``: ``local_address rem_address st
... inode``, addresses as little-endian hex words, state ``01`` ESTABLISHED) and, to tell rigkit's
own requests apart, ``/proc/<pid>/cgroup`` (the systemd unit a process runs in) and
``/proc/<pid>/fd`` (``socket:[inode]`` links).
"""

from __future__ import annotations

import ipaddress
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
