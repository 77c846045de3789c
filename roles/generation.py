"""The generation this deploy leaves (DESIGN.md "Generations"): recorded on the host last, when it
differs from the current one (:mod:`rigkit.operations.generations`)."""

from __future__ import annotations

import os
from typing import Any

from pyinfra import host, logger
from pyinfra.api import deploy

from rigkit.deploy.source import REASON_ENV
from rigkit.render.generations import Source, manifest
from rigkit.operations.facts.files import JsonFile
from rigkit.operations.generations import INDEX, RECORD_OP, plan_line, recorded_generation


@deploy("Generation")
def generation(source: Source, hold: dict[str, Any] | None) -> None:
    """Record what this deploy left: ``rollback to N`` with a hold when ``rigkit rollback`` runs it
    (``$RIGKIT_DEPLOY_REASON``), else ``deploy`` (``deploy, held`` under a hold: the held generation)."""
    reason = os.environ.get(REASON_ENV)
    new_hold = None
    if reason:
        new_hold = {"rolled_back_to": source.generation, "by": None, "reason": reason}
    else:
        reason = "deploy" if hold is None else f"deploy, held at generation {hold.get('generation')}"
    wanted = manifest(source.spec, source.rendered, source.lock_text, reason, new_hold)
    # said before anything runs (and by --dry): which generation this deploy replaces
    logger.info(f"{host.print_prefix}{plan_line(host.get_fact(JsonFile, path=INDEX), wanted)[1]}")
    recorded_generation(name=RECORD_OP, manifest=wanted)
