"""One table of claims (issue #45): everything the spec makes into a host resource — a port, a path,
a container, a unit, a model name a client asks for, a member's place in a group, the one ``--port``
a server reads — with the owner that claims it, and one check that no resource has two owners.

Resources are compared as their consumer compares them (:data:`COMPARED`): ports as integers, paths
normalised as the kernel resolves them (``/srv/models/a/`` is ``/srv/models/a``), unit, container
and model names exactly (systemd, docker's name registry and llama-swap's model map are
case-sensitive). rigkit's own folders and units are claimed by ``rigkit`` (a folder of rigkit's
claims everything under it).

Ports inside commands are read as the servers read them (:func:`listen_ports`): llama-server
(``common/arg.cpp``) and vLLM (argparse) both take ``--port N`` and ``--port=N``; the last one wins,
so a second ``--port`` beside the one rigkit renders moves the server away from its proxy. A server in
a ``docker run`` container listens in the container's network: its host port is the one ``-p`` publishes
(:func:`published_ports`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rigkit import paths
from rigkit.spec import cmdline
from rigkit.spec import members as members_mod
from rigkit.spec.model import RigSpec
from rigkit.spec.problems import SpecProblem
from rigkit.spec.types import folder_key

#: How each kind of resource is compared (the consumer's rule), for messages and the note.
COMPARED = {
    "port": "as an integer (the kernel's bind)",
    "path": "normalised (trailing /, //, . removed), case-sensitive (ext4); rigkit's folders cover their subtree",
    "container": "exactly (docker's name registry)",
    "unit": "exactly (systemd)",
    "model name": "exactly (llama-swap's model and alias maps, config.go RealModelName)",
    "group membership": "by member id: a member belongs to one group",
    "service": "by spec section: one member runs a service",
    "listen option": "per server command: llama-server and vLLM keep the last --port",
}

#: Units rigkit renders and owns on the host.
OWN_UNITS = frozenset({
    "llama-swap.service", "hyperqwen.service", "gpu-power-limit.service", "hyperqwen-watchdog.service",
    "hyperqwen-watchdog.timer", "rigkit-keeper.service", "rigkit-keeper.timer", "rigkit-power.service",
    "rigkit-power.timer",
})
#: Folders rigkit owns on the host (each with everything under it).
OWN_FOLDERS = (paths.AGENT_DIR, paths.STATE_DIR, paths.SECRETS_DIR, paths.LLAMA_SWAP_DIR, "/etc/rigkit")

_PORT_FLAG = "--port"


@dataclass(frozen=True)
class Claim:
    """One claim: ``kind`` (a key of :data:`COMPARED`), ``resource`` (compared form: an int port, a
    normalised path, a name), ``shown`` (as the spec wrote it), ``key`` (the dotted field that states
    it) and ``owner`` (who holds it: two claims of one resource by one owner are one use, not a clash)."""

    kind: str
    resource: object
    shown: object
    key: str
    owner: str
    subtree: bool = False


def listen_ports(words: list[str]) -> list[tuple[int, str]]:
    """``(word index, value)`` of each ``--port N`` / ``--port=N`` in one server's argv, in order
    (llama-server's ``common/arg.cpp`` and vLLM's argparse both read both forms; the last one wins)."""
    out = []
    for i, w in enumerate(words):
        if w == _PORT_FLAG and i + 1 < len(words):
            out.append((i, words[i + 1]))
        elif w.startswith(_PORT_FLAG + "="):
            out.append((i, w.split("=", 1)[1]))
    return out


def _port(value: str) -> int | None:
    """A port as the servers parse it (``std::stoi``, Python ``int``): decimal digits; None for
    ``${PORT}`` or anything else (the member's other checks name it)."""
    return int(value) if re.fullmatch(r"[0-9]{1,5}", value.strip()) else None


def spec_claims(spec: RigSpec) -> list[Claim]:
    """Every claim the spec makes, in declaration order (rigkit's own first)."""
    out: list[Claim] = []
    add = out.append
    for folder in OWN_FOLDERS:
        add(Claim("path", folder, folder, f"rigkit ({folder})", "rigkit", subtree=True))
    for unit in sorted(OWN_UNITS):
        add(Claim("unit", unit, unit, f"rigkit ({unit})", "rigkit"))
    add(Claim("port", spec.llama_swap.port, spec.llama_swap.port, "llama_swap.port", "llama_swap"))
    for section in ("hyperqwen", "strata", "gguf_baseline"):
        port = getattr(spec, section).port
        add(Claim("port", port, port, f"{section}.port", section))
    if spec.metrics_textfile_dir:  # node_exporter, part of the rig when metrics are asked for (issue 66)
        ne = spec.node_exporter
        add(Claim("port", ne.port, ne.port, "node_exporter.port", "node_exporter"))
        add(Claim("unit", paths.NODE_EXPORTER_UNIT, paths.NODE_EXPORTER_UNIT, "metrics_textfile_dir", "node_exporter"))
    add(Claim("path", folder_key(spec.hyperqwen.models_dir), spec.hyperqwen.models_dir, "hyperqwen.models_dir", "hyperqwen"))
    for name, src in spec.models.items():
        where = f"{paths.MODELS_ROOT}/{src.path}"
        add(Claim("path", folder_key(where), where, f"models.{name}.path", f"models.{name}"))
    for i, path in enumerate(spec.lock_files or []):
        add(Claim("path", folder_key(path), path, f"lock_files[{i}]", f"lock_files[{i}]"))
    for i, unit in enumerate(spec.legacy_units):
        add(Claim("unit", unit, unit, f"legacy_units[{i}]", f"legacy_units[{i}]"))
    for i, path in enumerate(spec.operator_units):
        unit = path.rsplit("/", 1)[-1]
        add(Claim("unit", unit, path, f"operator_units[{i}]", f"operator_units[{i}]"))
    ls = spec.llama_swap
    for gname, group in ls.groups.items():
        for i, mid in enumerate(group.members):
            at = f"llama_swap.groups.{gname}.members[{i}]"
            add(Claim("group membership", mid, mid, at, at))
    resolved = members_mod.resolve_members(spec)
    for mid, m in resolved.items():
        key = f"llama_swap.members.{mid}"
        add(Claim("model name", mid, mid, key, key))
        for i, alias in enumerate(m.spec.aliases):
            add(Claim("model name", alias, alias, f"{key}.aliases[{i}]", f"{key}.aliases[{i}]"))
        if m.container:
            add(Claim("container", m.container, m.container, key if m.spec.service or m.spec.llamacpp else f"{key}.cmd", key))
        if m.spec.service is not None:
            add(Claim("service", m.spec.service, m.spec.service, f"{key}.service", key))
            out += _service_port_claims(spec, mid, m)
        elif m.spec.llamacpp is not None and not m.spec.cmd:
            add(Claim("port", m.spec.llamacpp.port, m.spec.llamacpp.port, f"{key}.llamacpp.port", key))
        else:
            out += _member_port_claims(key, m)
    return out


def _service_port_claims(spec: RigSpec, mid: str, m: members_mod.Member) -> list[Claim]:
    """The ``--port`` options of a service member's rendered argv: the one rigkit renders from the
    section's ``port`` and any in the section's ``args`` (each a port claim of the section, and the
    server's one listen option)."""
    section = m.spec.service
    if section not in ("strata", "gguf_baseline"):
        return []
    server = getattr(spec, section)
    rendered = len(m.argv) - len(server.args or [])
    out = []
    for i, value in listen_ports(m.argv):
        key = f"{section}.port" if i < rendered else f"{section}.args[{i - rendered}]"
        port = _port(value)
        if port is not None and i >= rendered:
            out.append(Claim("port", port, value, key, section))
        out.append(Claim("listen option", section, f"{m.argv[i]} {value}" if m.argv[i] == _PORT_FLAG else m.argv[i],
                         key, key))
    return out


def published_ports(words: list[str]) -> list[str]:
    """The host side of each ``-p``/``--publish`` of a ``docker run`` (:func:`rigkit.spec.cmdline.publishes`,
    docker's grammar): the host port as written, or nothing for a port docker picks (``-p 8080``)."""
    return [p.host_port for p in cmdline.publishes(words) if p.host_port is not None]


def _in_container(words: list[str]) -> bool:
    """Whether ``words`` run a server in a container with its own network (its ``--port`` is the
    container's, not the host's: docker run's default bridge network)."""
    cc = cmdline.container_command(words)
    if cc is None or cc.verb not in ("run", "create"):
        return False
    return not any(w in ("--network=host", "--net=host") or (w in ("--network", "--net") and i + 1 < len(words)
                                                             and words[i + 1] == "host") for i, w in enumerate(words))


def _member_port_claims(key: str, m: members_mod.Member) -> list[Claim]:
    """An operator member's host ports: its proxy's, each ``-p`` a ``docker run`` publishes, and each
    ``--port`` of a command that runs on the host's network (one ``--port`` per server)."""
    out = []
    if m.port is not None:
        out.append(Claim("port", m.port, m.port, f"{key}.proxy", key))
    if not m.cmd:
        return out
    for n, words in enumerate(cmdline.unwrap(cmdline.split_command(m.cmd)).commands):
        for value in published_ports(words):
            if (port := _port(value)) is not None:
                out.append(Claim("port", port, value, f"{key}.cmd", key))
        contained = _in_container(words)
        for i, value in listen_ports(words):
            port = _port(value)
            if port is not None and not contained:
                out.append(Claim("port", port, value, f"{key}.cmd", key))
            out.append(Claim("listen option", f"{key} command {n}", value, f"{key}.cmd (word {i + 1})",
                             f"{key}.cmd (word {i + 1})"))
    return out


def _covers(a: Claim, b: Claim) -> bool:
    if a.kind != b.kind:
        return False
    if a.resource == b.resource:
        return True
    if a.kind == "path":
        return (a.subtree and str(b.resource).startswith(str(a.resource).rstrip("/") + "/")) or \
               (b.subtree and str(a.resource).startswith(str(b.resource).rstrip("/") + "/"))
    return False


def claim_problems(claims: list[Claim]) -> list[SpecProblem]:
    """One problem per resource with a second owner, naming both: the later claim's key and value, and
    the first owner's key. Linear in the claims for every kind but paths (rigkit's few subtrees)."""
    out: list[SpecProblem] = []
    first: dict[tuple[str, object], Claim] = {}
    subtrees = [c for c in claims if c.subtree]
    for claim in claims:
        holder = first.get((claim.kind, claim.resource))
        if holder is None and claim.kind == "path" and not claim.subtree:
            holder = next((s for s in subtrees if _covers(s, claim)), None)
        if holder is None:
            first[(claim.kind, claim.resource)] = claim
            continue
        if holder.owner == claim.owner:
            continue
        out.append(SpecProblem(
            key=claim.key, value=repr(claim.shown),
            allowed=f"{claim.kind} {claim.shown!r} already belongs to {holder.key}"
                    f"{' (rigkit owns everything under it)' if holder.subtree and holder.resource != claim.resource else ''}; "
                    f"a {claim.kind} has one owner (compared {COMPARED[claim.kind]})"))
    return out


def check_claims(spec: RigSpec) -> list[SpecProblem]:
    """Every resource of ``spec`` claimed by two owners (:func:`spec_claims`, :func:`claim_problems`)."""
    return claim_problems(spec_claims(spec))
