"""Glue between pyinfra's ``host`` and the spec, for ``deploy.py`` (``rigkit deploy`` itself,
which runs pyinfra and then the smoke, lives in :mod:`rigkit.cli.main`).

What a deploy applies (:func:`source_for`) is the inventory's spec rendered — or, first that applies:

- a ``rigkit bisect`` step's combination (``$RIGKIT_DEPLOY_COMBINATION``: a file on the control machine
  holding a spec snapshot and the lock beside it, :func:`rigkit.deploy.bisect.combine`), rendered by the
  one renderer;
- a recorded generation: the one ``rigkit rollback`` (or a bisect going back) names
  (``$RIGKIT_DEPLOY_GENERATION``, set by it for its pyinfra run), else the start of an interrupted bisect
  whose journal stands on the host (the deploy puts the host back there and ends the journal:
  :data:`rigkit.paths.BISECT_JOURNAL`), else the one a rollback's hold keeps the host at (``holds.json``'s
  ``generation``): then the spec is *not* applied, and the deploy says so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pyinfra import logger
from pyinfra.api import DeployError

from rigkit import hints
from rigkit.common import scratch
from rigkit.render.generations import Source, lock_text, source_from_bundle
from rigkit.spec.inventory import data_layers
from rigkit.spec.model import RigSpec
from rigkit.spec.problems import SpecError
from rigkit.spec.validate import spec_from_layers

#: Set by ``rigkit rollback`` for its pyinfra run: the generation to deploy.
GENERATION_ENV = "RIGKIT_DEPLOY_GENERATION"
#: Set by ``rigkit rollback``: the reason recorded with the generation (``rollback to 1``).
REASON_ENV = "RIGKIT_DEPLOY_REASON"
#: Set by ``rigkit bisect`` for a step's pyinfra run: the JSON file of the combination to deploy
#: (``{"spec": snapshot, "lock_text": str, "bisect": {"id", "step", "entries", "reason"}}``).
COMBINATION_ENV = "RIGKIT_DEPLOY_COMBINATION"
#: Set by ``rigkit bisect`` when it deploys its start generation back: ``{"id", "back_to": n, "reason"}`` as JSON.
BISECT_ENV = "RIGKIT_DEPLOY_BISECT"


def bisect_of_run() -> dict[str, Any] | None:
    """What this generation's pyinfra run is to a ``rigkit bisect`` (:data:`BISECT_ENV`: the way back,
    ``{"id", "back_to", "reason"}``), or None. Raises ``DeployError`` when it is not JSON."""
    if os.environ.get(BISECT_ENV):
        try:
            return json.loads(os.environ[BISECT_ENV])
        except ValueError as exc:
            raise DeployError(f"${BISECT_ENV}: not JSON ({exc})") from None
    return None


def _combination() -> dict[str, Any]:
    """The combination file :data:`COMBINATION_ENV` names, read. Raises ``DeployError``."""
    path = os.environ[COMBINATION_ENV]
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise DeployError(f"${COMBINATION_ENV} {path}: unreadable ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("spec"), dict) or not isinstance(data.get("bisect"), dict):
        raise DeployError(f"${COMBINATION_ENV} {path}: not a bisect combination (spec, lock_text, bisect)")
    return data


def _declared(host: Any) -> RigSpec:
    """The validated RigSpec of a pyinfra ``host`` as its data layers declare it (deep-merged), before any lock.
    Raises ``DeployError`` listing every problem."""
    try:
        return spec_from_layers(data_layers(host), source=f"spec of host {host.name}")
    except SpecError as exc:
        raise DeployError(str(exc)) from None


def spec_for(host: Any, declared: RigSpec | None = None) -> RigSpec:
    """The validated RigSpec of a pyinfra ``host`` (its data layers, deep-merged; ``declared`` when already
    read), as its lock resolves it (:func:`rigkit.lockfile.view.with_lock`: the locked pins, image digests and
    release sha256). Raises ``DeployError`` listing every problem — of the spec, or an entry the lock lacks or
    records for something else — so pyinfra stops before any operation."""
    from rigkit import hints
    from rigkit.lockfile.view import with_lock

    spec = declared if declared is not None else _declared(host)
    spec, _lock, problems = with_lock(spec, hints.inventory())
    if problems:  # the deploy uses only the lock: pins, images and the release all resolved there
        raise DeployError("the lock does not resolve what the spec declares:\n  " + "\n  ".join(problems))
    return spec


def source_for(host: Any) -> tuple[Source, dict[str, Any] | None]:
    """What this deploy applies to ``host`` and the generation hold in force (or None): the spec
    of its inventory rendered (:func:`spec_for`, :func:`rigkit.render.files.render`), or a recorded
    generation (module docstring) read from the host (``GenerationBundle``). Raises ``DeployError``
    for an invalid spec, a generation the host cannot show, or a stored spec no longer valid."""
    from rigkit import paths
    from rigkit.operations.facts.agent import GenerationBundle
    from rigkit.operations.facts.files import JsonFile
    from rigkit.operations.facts.rig import Holds
    from rigkit.common.holds import GENERATION
    from rigkit.render.files import render

    # a recorded generation or a bisect's combination carries its own resolved spec and lock: of the
    # inventory only this run's switches count (RUN_KEYS), so its lock need not resolve the inventory's spec
    # (an operator's `rigkit lock --data …` had left it resolving another: every step and the way back failed)
    spec = _declared(host)
    if os.environ.get(COMBINATION_ENV):
        return _combined(_combination(), spec), None
    holds = host.get_fact(Holds, path=paths.HOLDS_FILE)
    if holds["error"]:  # a hold is a safety record: an unreadable one is no "no hold"
        raise DeployError(f"{host.name}: {holds['error']}")
    hold = holds["data"].get(GENERATION)
    wanted = os.environ.get(GENERATION_ENV)
    journal = None if wanted else host.get_fact(JsonFile, path=paths.BISECT_JOURNAL)["data"]
    n = int(wanted) if wanted else int(journal["start"]) if journal and journal.get("start") else (
        int(hold["generation"]) if isinstance(hold, dict) and hold.get("generation") else None)
    if n is None:
        spec = spec_for(host, spec)
        return Source(spec, render(spec), None, lock_text(spec)), hold
    bundle = host.get_fact(GenerationBundle, agent=paths.AGENT_BIN, n=n)
    if "error" in bundle:
        raise DeployError(f"{host.name}: generation {n}: {bundle['error']}")
    try:
        source = source_from_bundle(bundle, spec, scratch.folder("rigkit-generation-"))
    except SpecError as exc:
        raise DeployError(f"{host.name}: {exc}") from None
    if journal and journal.get("start"):
        logger.warning(f"{host.print_prefix}an interrupted bisect ({journal.get('id')}, {journal.get('since')}) left "
                       f"this host at one of its steps: deploying generation {n}, where it started, NOT the spec, "
                       "and ending the bisect's journal; deploy again to apply the spec")
        source.bisect = {"id": journal.get("id"), "back_to": n, "reason": f"bisect {journal.get('id')} put back "
                         f"to generation {n} by the next deploy"}
    elif wanted:
        source.bisect = bisect_of_run()
    else:
        logger.warning(f"{host.print_prefix}held at generation {n} (rollback to {hold.get('rolled_back_to')} by "
                       f"{hold.get('by')} at {hold.get('since')}): deploying generation {n}, NOT the spec; "
                       f"`{hints.command('rollback', '--release', host=host.name)}` releases the hold")
    return source, hold


def _combined(data: dict[str, Any], run_spec: RigSpec) -> Source:
    """A bisect combination (:func:`_combination`) as a :class:`Source`: its spec snapshot validated as a
    generation's is (``spec_from_dict``, this run's :data:`rigkit.render.generations.RUN_KEYS`), its lock
    written to a temporary file the spec names, its files rendered by the one renderer. Raises
    ``DeployError`` when the spec is not valid (the bisect checks that before deploying)."""
    from rigkit.render.files import render
    from rigkit.render.generations import RUN_KEYS
    from rigkit.spec.validate import spec_from_dict

    spec_data = dict(data["spec"])
    for key in RUN_KEYS:
        spec_data[key] = getattr(run_spec, key)
    lock_text = data.get("lock_text")
    if lock_text is not None:
        lock_file = scratch.folder("rigkit-bisect-") / "combination.lock.json"
        lock_file.write_text(lock_text)
        spec_data["lockfile"] = str(lock_file)
        spec_data.pop("models_lock", None)
    try:
        spec = spec_from_dict(spec_data, source=f"bisect step {data['bisect'].get('step')}'s combination")
    except SpecError as exc:
        raise DeployError(str(exc)) from None
    return Source(spec, render(spec), None, lock_text, bisect=data["bisect"])
