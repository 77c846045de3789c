"""Whether each of the deploy's conditional operations would run in a dry run's plan.

pyinfra lists every operation gated on ``_if`` (a restart after a changed file, a reload after a new
unit) as a "Conditional Change" on every dry run, converged or not: it evaluates ``_if`` only while it
executes (pyinfra 3.10 ``api/operation.py``: ``command_generator`` checks ``_if`` only when
``state.is_executing``), and its plan JSON (``pyinfra_cli/prints.py`` ``build_plan_json``:
``hosts_with_conditional_change``) does not say what the operation waits on. The deploy's ``_if`` are
functions of the operations before it (``op.did_change()``, ``any_changed(...)``, a fact), so at the
end of the deploy file, in a dry run, each can be evaluated against the plan itself:
:func:`would_run`. ``deploy.py`` calls :func:`record` last; ``rigkit deploy --dry`` reads what it wrote
(:func:`read`) and says of each conditional row whether it will run (:func:`rigkit.cli.deployout.print_plan`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: A folder ``rigkit deploy --dry`` gives the pyinfra run: ``deploy.py`` writes ``<host>.json`` there.
PLAN_ENV = "RIGKIT_PLAN_CONDITIONS"


def _conditions(ifs: Any) -> list:
    return list(ifs) if isinstance(ifs, (list, tuple)) else [ifs]


def would_run(state: Any, host: Any) -> dict[str, bool]:
    """``{operation name: whether it would run}`` for every ``_if``-gated operation of ``host`` whose own
    body would change something (pyinfra's ``OperationMeta._maybe_is_change``, computed in a dry run
    from the facts). Operations are taken in the deploy's order; while they are, each earlier one reads
    as done (``did_change()`` true exactly when it would change in this plan: its body would, and, for a
    gated one, its own ``_if`` holds), so each ``_if`` — bound methods and ``any_changed`` closures alike
    — is evaluated as it would be when the plan runs. Every operation's state is put back after.
    Names are pyinfra's ``Role | Operation`` (its plan JSON's ``names``, joined by `` | ``).

    ``state``/``host``: pyinfra's :class:`pyinfra.api.State` and :class:`pyinfra.api.Host` (the deploy
    file's ``host``); ``state.ops[host]`` maps op hash → ``StateOperationHostData``. Raises what an
    ``_if`` raises (a fact that cannot be read)."""
    ops = state.ops.get(host, {})
    out: dict[str, bool] = {}
    saved = []
    try:
        for op_hash in state.get_op_order():
            data = ops.get(op_hash)
            if data is None:
                continue
            meta = data.operation_meta
            change = bool(meta._maybe_is_change)
            ifs = data.global_arguments.get("_if")
            if ifs and change:
                change = all(bool(f()) for f in _conditions(ifs))
                out[" | ".join(sorted(state.op_meta[op_hash].names))] = change
            saved.append((meta, meta._success, meta._commands))
            meta._success, meta._commands = True, (["planned"] if change else [])
    finally:
        for meta, success, commands in reversed(saved):
            meta._success, meta._commands = success, commands
    return out


def record(state: Any, host: Any, env: dict[str, str] | None = None) -> None:
    """On a dry run that ``rigkit deploy --dry`` started (``$RIGKIT_PLAN_CONDITIONS`` a folder), write
    :func:`would_run` for ``host`` as ``<folder>/<host name>.json``; otherwise nothing. ``state``/``host``:
    the deploy file's own (``pyinfra.context.ctx_state.get()``, ``ctx_host.get()``)."""
    folder = (os.environ if env is None else env).get(PLAN_ENV)
    if folder:
        (Path(folder) / f"{host.name}.json").write_text(json.dumps(would_run(state, host), sort_keys=True))


def read(folder: str | Path, hosts: list[str]) -> dict[str, dict[str, bool]]:
    """``{host: {operation name: would run}}`` from what :func:`record` wrote in ``folder`` (a host without a
    file, as when the pyinfra run failed before the deploy file's end: absent)."""
    out = {}
    for name in hosts:
        path = Path(folder) / f"{name}.json"
        if path.is_file():
            out[name] = json.loads(path.read_text())
    return out
