"""llama-swap's live config activated ON THE HOST by the host agent (DESIGN.md "Staged vs live",
:mod:`rigkit.host.activate`), unless a hold recorded by a manual rollback keeps it back."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import OperationError, StringCommand, operation
from pyinfra.facts.files import Sha256File

from rigkit import hints, paths
from rigkit.operations.facts.rig import Holds
from rigkit.agentcmd import activate_command
from rigkit.common import swapconfig
from rigkit.common.holds import LLAMA_SWAP


#: The agent's log lines the deploy's output repeats as warnings (the rest stays in the activation log):
#: what it backed up (a live config edited by hand is replaced, its copy named), what it restored, and
#: a failure or refusal.
SURFACED = ("backed up ", "restored the previous config", "rolled back:", "FAILED", "FIRST ACTIVATION FAILED",
            "held:", "error:")


def surfaced_lines(output: list[str]) -> list[str]:
    """The lines of the agent's log (``[HH:MM:SS] message``) that the deploy prints (:data:`SURFACED`),
    without their time stamps; a ``backed up A to B`` line is reworded to say the replaced live config
    (edits by hand included) is kept as B."""
    out = []
    for line in output:
        msg = line.split("] ", 1)[1] if line.startswith("[") and "] " in line else line
        if not msg.startswith(SURFACED) and "FAILED" not in msg:
            continue
        if msg.startswith("backed up ") and " to " in msg:
            live, _, backup = msg[len("backed up "):].partition(" to ")
            msg = (f"replaced the live {live} (any edits by hand included); the previous config is kept as "
                   f"{backup}")
        out.append(msg)
    return out


class AgentCommand(StringCommand):
    """The agent's activation command; once it has run and succeeded, the log lines that matter
    (:func:`surfaced_lines`) are printed as warnings in the deploy's output, so the operator reads
    there what was backed up to where, not only in ``/var/lib/rigkit/activate.log`` on the host. A
    failed one's log is printed whole by pyinfra itself (pyinfra 3.10 ``api/operations.py``: a failed
    ``StringCommand``'s output goes through ``print_host_combined_output``), so it is not said twice."""

    def execute(self, state, host, connector_arguments):  # noqa: D102 - pyinfra's own signature
        status, output = super().execute(state, host, connector_arguments)
        if status is not False:
            for msg in surfaced_lines(output.output_lines if output else []):
                logger.warning(f"{host.print_prefix}llama-swap: {msg}")
        return status, output


@operation()
def activated_config(live: str, staging: str, text: str, holds: str = paths.HOLDS_FILE):
    """Activate ``text`` (already uploaded to ``staging``) as llama-swap's live config, on the host.

    + live: the live config (``/etc/llama-swap/config.yaml``)
    + staging: where the same text was uploaded (the agent reads it there)
    + text: the wanted live config, to compare with the live file's sha256
    + holds: ``/var/lib/rigkit/holds.json``; a ``llama-swap`` hold there is reported (a warning) and
      the activation skipped

    No change when the live file's sha256 equals ``text``'s. The command runs
    :func:`rigkit.agentcmd.activate_command` as an :class:`AgentCommand`: the deploy's output names the
    backup of the replaced live config (a warning); a failed activation fails the operation with the
    agent's log (what was restored, or that llama-swap was left stopped on a first activation).

    **Example:**

    .. code:: python

        from rigkit.operations.llama_swap import activated_config
        activated_config(
            name="Activate the declared live llama-swap config (on the host)",
            live="/etc/llama-swap/config.yaml",
            staging="/var/lib/rigkit/llama-swap/config.next.yaml",
            text="healthCheckTimeout: 300\\nlogLevel: info\\nstartPort: 5800\\nmodels:\\n  ...",
            holds="/var/lib/rigkit/holds.json",
        )
    """
    if swapconfig.holds_text(host.get_fact(Sha256File, path=live), text):
        host.noop(f"{live} is the declared config")
        return
    held = host.get_fact(Holds, path=holds)
    if held["error"]:
        raise OperationError(held["error"])
    record = held["data"].get(LLAMA_SWAP)
    if isinstance(record, dict):
        logger.warning(f"{host.print_prefix}llama-swap: HELD since {record.get('since')} "
                       f"(by {record.get('by')}, restored {record.get('restored_from')}): the declared config "
                       f"differs from the live one and is NOT activated; "
                       f"`{hints.command('wire-in', '--release', host=host.name)}` releases the hold")
        host.noop(f"llama-swap's live config is held ({holds}); not activating")
        return
    yield AgentCommand(activate_command(["--config", staging, "--live", live, "--by", "rigkit deploy"]))
