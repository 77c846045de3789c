"""The generation a deploy leaves: recorded on the host when it differs from the current one
(:mod:`rigkit.host.generations`), nothing otherwise — a converged re-run records nothing."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

from pyinfra import host
from pyinfra.api import operation
from pyinfra.operations import files

from rigkit import paths
from rigkit.agentcmd import bisect_end_command, record_command
from rigkit.operations.facts.files import JsonFile

#: Where the manifest waits for ``rigkit-agent generation record`` (root 0600; removed after).
MANIFEST_PATH = f"{paths.STATE_DIR}/generation.next.json"
INDEX = f"{paths.GENERATIONS_DIR}/index.json"
#: The deploy's name of the record (in roles/generation.py's ``Generation`` deploy); drift's plan skips it.
RECORD_OP = "Record the generation this deploy leaves"
#: The deploy's name of the end of an interrupted bisect's journal (:func:`bisect_ended`).
BISECT_END_OP = "End the interrupted bisect: the host is back at its start"


def plan_line(index: dict[str, Any], manifest: dict[str, Any]) -> tuple[bool, str]:
    """``(records, what it says)`` for the ``JsonFile`` fact of the generations index: whether this
    deploy records a generation, and which one it replaces — ``generation 2 (time, operator,
    reason) is replaced by generation 3 (deploy)``, or ``generation 2 (…) stays current``."""
    data = index.get("data") or {}
    current = data.get("current")
    entry = next((g for g in data.get("generations", []) if g.get("n") == current), None)
    if entry and entry.get("key") == manifest["key"] and not manifest.get("hold"):
        return False, (f"generation {current} ({entry.get('time')}, {entry.get('operator')}, {entry.get('reason')}) "
                       "stays current: this deploy leaves the host as it recorded")
    nxt = max([g.get("n", 0) for g in data.get("generations", [])] + [0]) + 1
    if entry is None:
        return True, f"no generation recorded yet: this deploy records generation {nxt} ({manifest['reason']})"
    return True, (f"generation {current} ({entry.get('time')}, {entry.get('operator')}, {entry.get('reason')}) "
                  f"is replaced by generation {nxt} ({manifest['reason']})")


@operation()
def recorded_generation(manifest: dict[str, Any]):
    """Record ``manifest`` (:func:`rigkit.render.generations.manifest`) as the host's next generation
    unless the current generation has its ``key`` (and no hold comes with it): :func:`plan_line`,
    read again when the operation runs. Runs last: pyinfra stops a host at its first failed
    operation, so only a deploy that succeeded is recorded.

    **Example:**

    .. code:: python

        from rigkit.operations.generations import recorded_generation
        # wanted = rigkit.render.generations.manifest(spec, rendered, lock_text(spec)): a dict of ~15 keys
        recorded_generation(
            name="Record the generation this deploy leaves",
            manifest=wanted,
        )
    """
    records, line = plan_line(host.get_fact(JsonFile, path=INDEX), manifest)
    if not records:
        host.noop(line)
        return
    yield from files.put._inner(src=StringIO(json.dumps(manifest, sort_keys=True)), dest=MANIFEST_PATH,
                                user="root", group="root", mode="600")
    yield record_command(MANIFEST_PATH)


@operation()
def bisect_ended():
    """End the journal of an interrupted ``rigkit bisect`` once this deploy put the host back at its start
    (:func:`rigkit.host.generations.bisect_end`: that generation current again, the journal removed). Runs
    after :func:`recorded_generation`, only when the deploy applied a bisect's start
    (:func:`rigkit.deploy.source.source_for`).

    **Example:**

    .. code:: python

        from rigkit.operations.generations import bisect_ended
        bisect_ended(name="End the interrupted bisect: the host is back at its start")
    """
    yield bisect_end_command()
