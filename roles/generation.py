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
from rigkit.operations.generations import BISECT_END_OP, INDEX, RECORD_OP, bisect_ended, plan_line, recorded_generation


@deploy("Generation")
def generation(source: Source, hold: dict[str, Any] | None) -> None:
    """Record what this deploy left: ``rollback to N`` with a hold when ``rigkit rollback`` runs it
    (``$RIGKIT_DEPLOY_REASON``), a bisect's step or its way back with what it was (``source.bisect``; no
    hold: the way back then ends the bisect's journal), else ``deploy`` (``deploy, held`` under a hold: the
    held generation)."""
    reason = os.environ.get(REASON_ENV)
    new_hold = None
    if source.bisect:
        reason = source.bisect.get("reason") or "bisect"
    elif reason:
        new_hold = {"rolled_back_to": source.generation, "by": None, "reason": reason}
    else:
        reason = "deploy" if hold is None else f"deploy, held at generation {hold.get('generation')}"
    wanted = manifest(source.spec, source.rendered, source.lock_text, reason, new_hold, bisect=source.bisect)
    # said before anything runs (and by --dry): which generation this deploy replaces
    logger.info(f"{host.print_prefix}{plan_line(host.get_fact(JsonFile, path=INDEX), wanted)[1]}")
    recorded_generation(name=RECORD_OP, manifest=wanted)
    if source.bisect and source.bisect.get("back_to") is not None:
        bisect_ended(name=BISECT_END_OP)
