"""Drift's model-files check on the host: every model of a lock against its verified record, by
:func:`rigkit.host.modelrecords.status` (the deploy's own convergence check; ``--deep`` also hashes every
recorded file). Paths come from the host config (``models_root``, ``state_dir``).

Run by drift's probe as ``rigkit-agent probe LOCK_B64 DEEP PREPARED`` (:func:`probe`: the agent's
version line first, in the same process), or alone as ``<agent venv>/bin/python -m
rigkit.host.modelcheck LOCK_B64 DEEP PREPARED``:

+ LOCK_B64: the model lock, JSON, base64
+ DEEP: ``1`` to hash every recorded file, ``0`` for size and mtime only
+ PREPARED: the models that must have been recorded after ``prepare``, comma-separated (may be empty)

Prints one JSON object ``{model: [reason, ...]}`` (empty list: as locked and recorded); a model
that cannot be checked gets one ``"<model>: cannot check: <error>"`` reason; when the check cannot run
at all (the host config unreadable, the arguments wrong), :func:`probe` prints ``{"*": ["model check
failed: <error>"]}`` instead, so that the agent's own exit status stays its health.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any, Iterable

from rigkit.host import modelrecords
from rigkit.host.config import load


def check(lock: dict[str, Any], models_root: str | Path, state_dir: str | Path, deep: bool = False,
          prepared: Iterable[str] = ()) -> dict[str, list[str]]:
    """``{model: reasons}`` for every model of ``lock`` (:func:`rigkit.host.modelrecords.status`)."""
    prepared = set(prepared)
    out = {}
    for name in sorted(lock.get("models", {})):
        try:
            out[name] = modelrecords.status(lock, name, models_root, state_dir, prepared=name in prepared, deep=deep)
        except Exception as exc:  # one model's failure must not hide the others'
            out[name] = [f"{name}: cannot check: {type(exc).__name__}: {exc}"]
    return out


def probe(argv: list[str]) -> int:
    """:func:`main`, a failure of the check as a whole printed as the one JSON line ``{"*": ["model
    check failed: <type>: <message>"]}``; returns 0 (drift's probe reads the agent's health from
    its exit status, the models from the line)."""
    try:
        return main(argv)
    except Exception as exc:  # noqa: BLE001 - reported as the models' finding, never a crash of the agent
        print(json.dumps({"*": [f"model check failed: {type(exc).__name__}: {exc}"]}))
        return 0


def main(argv: list[str]) -> int:
    """``LOCK_B64 DEEP PREPARED`` (module doc) → prints :func:`check`'s JSON; returns 0. Raises
    ValueError for the wrong number of arguments or a lock that is not base64 JSON, and
    :class:`rigkit.host.config.ConfigError` when the host config cannot be read."""
    if len(argv) != 3:
        raise ValueError(f"expected LOCK_B64 DEEP PREPARED, got {len(argv)} argument(s)")
    lock_b64, deep, prepared = argv
    cfg = load()
    lock = json.loads(base64.b64decode(lock_b64))
    print(json.dumps(check(lock, cfg.path("models_root"), cfg.path("state_dir"), deep == "1",
                           filter(None, prepared.split(",")))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
