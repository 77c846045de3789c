"""llama-swap's live config activated ON THE HOST by the host agent (DESIGN.md "Staged vs live",
:mod:`rigkit.host.activate`), unless a hold recorded by a manual rollback keeps it back."""

from __future__ import annotations

import hashlib

from pyinfra import host, logger
from pyinfra.api import OperationError, operation
from pyinfra.facts.files import Sha256File

from rigkit import paths
from rigkit.facts import JsonFile
from rigkit.agentcmd import activate_command
from rigkit.host import activate


@operation()
def activated_config(live: str, staging: str, text: str, holds: str = paths.HOLDS_FILE):
    """Activate ``text`` (already uploaded to ``staging``) as llama-swap's live config, on the host.

    + live: the live config (``/etc/llama-swap/config.yaml``)
    + staging: where the same text was uploaded (the agent reads it there)
    + text: the wanted live config, to compare with the live file's sha256
    + holds: ``/var/lib/rigkit/holds.json``; a ``llama-swap`` hold there is reported (a warning) and
      the activation skipped

    No change when the live file's sha256 equals ``text``'s. The command runs
    :func:`rigkit.agentcmd.activate_command`; a failed activation fails the operation with the agent's
    log (what was restored, or that llama-swap was left stopped on a first activation).
    """
    wanted = hashlib.sha256(text.encode()).hexdigest()
    if host.get_fact(Sha256File, path=live) == wanted:
        host.noop(f"{live} is the declared config")
        return
    held = host.get_fact(JsonFile, path=holds)
    if held["error"]:
        raise OperationError(f"{holds}: {held['error']}; fix or remove it (it records rollbacks by hand)")
    record = (held["data"] or {}).get(activate.HOLD_KEY)
    if isinstance(record, dict):
        logger.warning(f"{host.print_prefix}llama-swap: HELD since {record.get('since')} "
                       f"(`{record.get('by')}`, restored {record.get('restored_from')}): the declared config "
                       f"differs from the live one and is NOT activated; `rigkit wire-in --release` releases the hold")
        host.noop("llama-swap's live config is held (holds.json); not activating")
        return
    yield activate_command(["--config", staging, "--live", live, "--by", "rigkit deploy"])
