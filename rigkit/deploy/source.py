"""Glue between pyinfra's ``host`` and the spec, for ``deploy.py`` (``rigkit deploy`` itself,
which runs pyinfra and then the smoke, lives in :mod:`rigkit.cli.main`).

What a deploy applies (:func:`source_for`) is the inventory's spec rendered — or a recorded
generation: the one ``rigkit rollback`` names (``$RIGKIT_DEPLOY_GENERATION``, set by it for its
pyinfra run), else the one a rollback's hold keeps the host at (``holds.json``'s ``generation``):
then the spec is *not* applied, and the deploy says so.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from pyinfra import logger
from pyinfra.api import DeployError

from rigkit import hints
from rigkit.render.generations import Source, lock_text, source_from_bundle
from rigkit.spec.inventory import data_layers
from rigkit.spec.model import RigSpec
from rigkit.spec.problems import SpecError
from rigkit.spec.validate import spec_from_layers

#: Set by ``rigkit rollback`` for its pyinfra run: the generation to deploy.
GENERATION_ENV = "RIGKIT_DEPLOY_GENERATION"
#: Set by ``rigkit rollback``: the reason recorded with the generation (``rollback to 1``).
REASON_ENV = "RIGKIT_DEPLOY_REASON"


def spec_for(host: Any) -> RigSpec:
    """The validated RigSpec of a pyinfra ``host`` (its data layers, deep-merged), as its lock resolves it
    (:func:`rigkit.lockfile.view.with_lock`: the locked pins, image digests and release sha256). Raises
    ``DeployError`` listing every problem — of the spec, or an entry the lock lacks or records for
    something else — so pyinfra stops before any operation."""
    from rigkit import hints
    from rigkit.lockfile.view import with_lock

    try:
        spec = spec_from_layers(data_layers(host), source=f"spec of host {host.name}")
    except SpecError as exc:
        raise DeployError(str(exc)) from None
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
    from rigkit.operations.facts.rig import Holds
    from rigkit.common.holds import GENERATION
    from rigkit.render.files import render

    spec = spec_for(host)
    holds = host.get_fact(Holds, path=paths.HOLDS_FILE)
    if holds["error"]:  # a hold is a safety record: an unreadable one is no "no hold"
        raise DeployError(f"{host.name}: {holds['error']}")
    hold = holds["data"].get(GENERATION)
    wanted = os.environ.get(GENERATION_ENV)
    n = int(wanted) if wanted else (int(hold["generation"]) if isinstance(hold, dict) and hold.get("generation") else None)
    if n is None:
        return Source(spec, render(spec), None, lock_text(spec)), hold
    bundle = host.get_fact(GenerationBundle, agent=paths.AGENT_BIN, n=n)
    if "error" in bundle:
        raise DeployError(f"{host.name}: generation {n}: {bundle['error']}")
    try:
        source = source_from_bundle(bundle, spec, Path(tempfile.mkdtemp(prefix="rigkit-generation-")))
    except SpecError as exc:
        raise DeployError(f"{host.name}: {exc}") from None
    if not wanted:
        logger.warning(f"{host.print_prefix}held at generation {n} (rollback to {hold.get('rolled_back_to')} by "
                       f"{hold.get('by')} at {hold.get('since')}): deploying generation {n}, NOT the spec; "
                       f"`{hints.command('rollback', '--release', host=host.name)}` releases the hold")
    return source, hold
