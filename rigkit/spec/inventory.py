"""Inventory -> one :class:`HostSpec` per host, through pyinfra's own loader.

The inventory file and ``group_data/`` are loaded exactly as ``pyinfra INVENTORY deploy.py``
loads them (``pyinfra_cli.inventory.make_inventory``), so precedence is pyinfra's; then each
host's data layers are deep-merged and validated (:func:`rigkit.spec.validate.spec_from_layers`).
Nothing connects to a host.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rigkit.spec.layers import split_pyinfra_keys
from rigkit.spec.model import RigSpec
from rigkit.spec.problems import SpecError, SpecProblem
from rigkit.spec.validate import spec_from_layers

DEFAULT_INVENTORY = "inventory/rig.py"


class InventoryError(ValueError):
    """The inventory cannot be loaded or names no such host (exit code 2)."""


@dataclass
class HostSpec:
    """One host of the inventory: ``name``, its validated ``spec``, and ``connection``, the
    pyinfra-owned data (``ssh_hostname``, ``ssh_port``, ``ssh_user``, ``ssh_key``, ``_sudo`` ...)
    used to reach it the way pyinfra does. ``groups`` lists its pyinfra groups."""

    name: str
    spec: RigSpec
    connection: dict[str, Any] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)
    #: What the lock file lacks or records for something else (:func:`rigkit.lockfile.view.lock_problems`),
    #: once :func:`rigkit.lockfile.view.locked_hosts` has resolved ``spec`` by it: the deploy refuses while any
    #: is left. Empty as :func:`load_hosts` declares the host.
    lock_problems: list[str] = field(default_factory=list)


def default_inventory() -> str:
    """``$RIGKIT_INVENTORY`` or ``inventory/rig.py``."""
    return os.environ.get("RIGKIT_INVENTORY") or DEFAULT_INVENTORY


def _describe(exc: BaseException) -> str:
    """A one-line account of an error raised while pyinfra exec'd an inventory or group_data file
    (pyinfra wraps it as ``UnexpectedExternalError(exception, filename)``, whose ``str()`` fails)."""
    inner = getattr(exc, "exception", None)
    where = getattr(exc, "filename", None)
    if inner is not None:
        return f"{where}: {type(inner).__name__}: {inner}" if where else f"{type(inner).__name__}: {inner}"
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # an exception type whose __str__ itself fails
        return type(exc).__name__


def layer_labels(host: Any, inventory: Any, path: str) -> list[str]:
    """A source label per data layer of :func:`data_layers` (same order, lowest first):
    ``group_data/all.py``, ``group_data/<group>.py``, ``<inventory> (host NAME)``, ``--data``."""
    from pyinfra.api.host import extract_callable_datas

    named = [(inventory.get_override_data(), "--data"), (inventory.get_host_data(host.name), f"{path} (host {host.name})"),
             (inventory.get_data(), "group_data/all.py")]
    named += [(inventory.get_group_data(g), f"group_data/{g}.py (group {g})") for g in getattr(host, "groups", [])]
    out = []
    for layer in extract_callable_datas(list(host.data.datas)):
        out.append(next((label for data, label in named if data is layer), "deploy defaults"))
    out.reverse()
    return out


def data_layers(host: Any) -> list[dict[str, Any]]:
    """The host's data layers, lowest precedence first (pyinfra's ``HostData.datas`` is
    highest first: overrides, ``--data``, host, groups (last group wins), ``all``, deploy defaults)."""
    from pyinfra.api.host import extract_callable_datas

    layers = [dict(d) for d in extract_callable_datas(list(host.data.datas))]
    layers.reverse()
    return layers


def inventory_shape_problems(path: str) -> list[str]:
    """What pyinfra's loader would drop or fail on in the inventory file's groups, one line each,
    naming the group and the host: a host declared twice with its own data (pyinfra keeps the last and
    drops the other silently) or twice in one group, host data that is not a mapping, a group that
    is neither a list of hosts nor ``(hosts, data)``. The groups are read as pyinfra's CLI reads
    them (``pyinfra_cli.inventory._get_groups_from_filename`` of pyinfra 3.10, pinned: every
    top-level list or tuple of names and ``(name, data)`` tuples)."""
    from collections.abc import Mapping

    from pyinfra_cli.inventory import _get_groups_from_filename

    from pyinfra.api.state import State
    from pyinfra.context import ctx_state

    with ctx_state.use(State()):  # pyinfra's loader execs the file with a State in context
        groups = _get_groups_from_filename(path)
    out: list[str] = []
    with_data: dict[str, str] = {}
    for group, value in groups.items():
        hosts, data = (value if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], Mapping)
                       else (value, None))
        if not isinstance(hosts, (list, tuple)):
            out.append(f"group {group!r} is neither a list of hosts nor (hosts, data)")
            continue
        seen: set[str] = set()
        for entry in hosts:
            if isinstance(entry, tuple):
                if len(entry) != 2 or not isinstance(entry[0], str):
                    out.append(f"group {group!r}: {str(entry)[:60]!r} is not (name, data)")
                    continue
                name, host_data = entry
                if not isinstance(host_data, Mapping):
                    out.append(f"host {name!r} in group {group!r}: its data is a {type(host_data).__name__}, "
                               "not a mapping of keys to values")
                    continue
                if name in with_data and with_data[name] != group:
                    out.append(f"host {name!r} is declared with its own data twice (groups {with_data[name]!r} and "
                               f"{group!r}); pyinfra would keep one and drop the other silently: give each host a "
                               "unique name")
                with_data.setdefault(name, group)
            else:  # pyinfra counts a list as a group only when it holds names and (name, data) tuples
                name = str(entry)
            if name in seen:
                out.append(f"host {name!r} appears twice in group {group!r}: give each host a unique name")
            seen.add(name)
    return out


def same_machine_problems(hosts: list[Any]) -> list[SpecProblem]:
    """One problem per inventory host that reaches the same machine as an earlier one: the same
    ``ssh_hostname`` (pyinfra's ssh connector connects to it, else to the host's name) and ``ssh_port``
    (default 22), compared as DNS compares names (case-insensitive, a trailing dot dropped). Two names for
    one machine would deploy it twice under two specs and report it twice. Hosts of another connector
    (``@local``, ``@docker/…``) are left out."""
    seen: dict[tuple[str, int], str] = {}
    out: list[SpecProblem] = []
    for host in hosts:
        if str(host.name).startswith("@"):
            continue
        connection: dict[str, Any] = {}
        for layer in data_layers(host):
            connection.update(split_pyinfra_keys(layer)[1])
        target = str(connection.get("ssh_hostname") or host.name).lower().rstrip(".")
        try:
            port = int(connection.get("ssh_port") or 22)
        except (TypeError, ValueError):
            continue  # pyinfra names a bad port itself
        first = seen.setdefault((target, port), host.name)
        if first != host.name:
            out.append(SpecProblem(key=f"{host.name}: ssh_hostname", value=repr(connection.get("ssh_hostname") or host.name),
                                   allowed=f"host {first!r} already reaches {target}:{port}; one inventory host per "
                                           "machine (two would deploy it twice under two specs)"))
    return out


def load_hosts(inventory_path: str | None = None, host_names: list[str] | None = None,
               override_data: dict[str, Any] | None = None, cwd: str | None = None) -> list[HostSpec]:
    """Load ``inventory_path`` (default :func:`default_inventory`) with pyinfra's loader and
    return a :class:`HostSpec` per host, narrowed to ``host_names`` when given.

    ``override_data`` plays ``pyinfra --data``. Each spec is as the host's data declare it, the lock file
    unread (:func:`rigkit.lockfile.view.locked_hosts` resolves them by it). Raises :class:`InventoryError` for a missing
    file or an unknown host name and :class:`~rigkit.spec.problems.SpecError` (every invalid host's
    problems, each key prefixed by the host name) for bad data.
    """
    from pyinfra_cli.inventory import make_inventory

    path = inventory_path or default_inventory()
    if not Path(path).is_file():
        raise InventoryError(f"inventory {path!r}: no such file (give -i PATH or set RIGKIT_INVENTORY)")
    from pyinfra.api.state import State
    from pyinfra.context import ctx_state

    try:
        # pyinfra's loader execs the files with a State in context (as its CLI does).
        shape = inventory_shape_problems(path)
        if shape:
            raise InventoryError(f"inventory {path!r}: " + "; ".join(shape))
        with ctx_state.use(State()):
            inventory = make_inventory(path, override_data=override_data, cwd=cwd or os.getcwd())
    except InventoryError:
        raise
    except Exception as exc:  # pyinfra raises CliError/TypeError/SyntaxError for a broken file
        raise InventoryError(f"inventory {path!r} could not be loaded: {_describe(exc)}") from exc
    hosts = list(inventory)
    names = [h.name for h in hosts]
    problems: list[SpecProblem] = same_machine_problems(hosts)
    if host_names:
        unknown = [n for n in host_names if n not in names]
        if unknown:
            raise InventoryError(f"--host {', '.join(unknown)}: not in {path} (hosts: {', '.join(names) or 'none'})")
        hosts = [h for h in hosts if h.name in host_names]
    if not hosts:
        raise InventoryError(f"inventory {path!r} has no hosts")
    out: list[HostSpec] = []
    for host in hosts:
        layers = data_layers(host)
        connection: dict[str, Any] = {}
        for layer in layers:
            connection.update(split_pyinfra_keys(layer)[1])
        try:
            spec = spec_from_layers(layers, source=f"spec of host {host.name}",
                                    labels=layer_labels(host, inventory, path))
        except SpecError as exc:
            problems += [p.model_copy(update={"key": f"{host.name}: {p.key}"}) for p in exc.problems]
            continue
        out.append(HostSpec(name=host.name, spec=spec, connection=connection,
                            groups=[str(g) for g in getattr(host, "groups", [])]))
    if problems:
        raise SpecError(problems, source=f"inventory {path}")
    return out
