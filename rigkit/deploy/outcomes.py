"""The control side's record of each host's last deploy outcome, per inventory (issue 67), and what
``rigkit deploy --retry-failed`` takes from it.

One JSON file per inventory under the control side's state folder (:func:`state_dir`):
``<state>/outcomes/<inventory file stem>-<sha256 of its absolute path, 12 hex>.json``::

    {"inventory": "/abs/inventory/lab.py",
     "hosts": {"rig-a": {"outcome": "ok", "why": "...", "at": "2026-12-06T07:30:00Z", "run": "3f2a..."}}}

A host's entry is replaced (the file rewritten atomically, :func:`rigkit.common.jsonfile.write_atomic`)
the moment that host's part of a run ends, so an interrupted run (Ctrl-C) keeps what finished; hosts a
run did not name keep their entries. ``why`` is rigkit's own line about the host (never a secret: the
deploy's lines are masked where they are made). Outcomes (:data:`OUTCOMES`):

- ``ok`` — the full run changed and confirmed it (or it only staged); ``converged`` — the probe path
  (nothing to change);
- ``failed`` — its change or confirmation failed (put back, unless ``--no-revert``), or its smoke failed;
- ``refused`` — its lock was held or a window open (nothing touched); ``unreachable`` — not reached
  (nothing touched);
- ``not-reached`` — the rollout stopped at an earlier batch (:mod:`rigkit.deploy.fleet`): never begun.

:data:`RETRY` are the outcomes ``--retry-failed`` takes again.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from rigkit.common.jsonfile import iso_utc, read_object, write_atomic

OUTCOMES = ("ok", "converged", "failed", "refused", "unreachable", "not-reached")
#: What ``--retry-failed`` deploys again: every host the last run did not bring to the declared state.
RETRY = ("failed", "refused", "unreachable", "not-reached")
#: Environment variable naming the control side's state folder (tests, a second operator account).
STATE_ENV = "RIGKIT_STATE"


def state_dir() -> Path:
    """The control side's state folder: ``$RIGKIT_STATE``, else ``$XDG_STATE_HOME/rigkit``, else
    ``~/.local/state/rigkit`` (the XDG Base Directory specification's default for state data)."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base).expanduser() / "rigkit"


def record_path(inventory: str) -> Path:
    """The record file of ``inventory`` (a path: made absolute, so two inventories named alike in two
    folders never share one)."""
    full = os.path.abspath(inventory)
    digest = hashlib.sha256(full.encode()).hexdigest()[:12]
    return state_dir() / "outcomes" / f"{Path(full).stem}-{digest}.json"


class Record:
    """The outcome record of one inventory: :meth:`ended` writes one host's outcome at once; :meth:`read`
    returns ``{host: {"outcome", "why", "at", "run"}}``. Thread-safe (hosts of a batch may end from
    several threads). Raises ValueError (naming the file) when the file exists but is not a record, and
    OSError when it cannot be written."""

    def __init__(self, inventory: str, run: str = "") -> None:
        self.inventory = os.path.abspath(inventory)
        self.path = record_path(inventory)
        self.run = run
        self._lock = threading.Lock()

    def read(self) -> dict[str, dict[str, Any]]:
        """Every host's last outcome (``{}``: no run recorded yet)."""
        data = read_object(self.path) or {}
        hosts = data.get("hosts", {})
        if not isinstance(hosts, dict) or not all(isinstance(v, dict) for v in hosts.values()):
            raise ValueError(f"{self.path}: not an outcome record (its 'hosts' is not an object of objects)")
        return hosts

    def ended(self, host: str, outcome: str, why: str = "") -> None:
        """Record that ``host``'s part of this run ended with ``outcome`` (one of :data:`OUTCOMES`;
        ValueError otherwise) and ``why`` (one line)."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
        with self._lock:
            hosts = self.read()
            hosts[host] = {"outcome": outcome, "why": " ".join(why.split()), "at": iso_utc(), "run": self.run}
            write_atomic(self.path, {"inventory": self.inventory, "hosts": hosts}, mode=0o600)


def to_retry(last: dict[str, dict[str, Any]], names: list[str]) -> tuple[list[str], list[str]]:
    """From ``last`` (:meth:`Record.read`) and the inventory's host ``names`` (in order): ``(the hosts to
    deploy again, in inventory order — those whose last outcome is in :data:`RETRY`; the lines saying
    which and why, one per host taken, then one per recorded host the inventory no longer names)``."""
    take = [n for n in names if (last.get(n) or {}).get("outcome") in RETRY]
    said = [f"{n}: last run {last[n]['outcome']} ({last[n].get('at', '?')}): {last[n].get('why') or 'no reason recorded'}"
            for n in take]
    said += [f"{n}: recorded as {v.get('outcome')} but not in the inventory now; left out"
             for n, v in last.items() if n not in names and v.get("outcome") in RETRY]
    return take, said
