"""llama-swap: the pinned release, its unit, the staged review copy, and the live config changed only
through the one activation path (DESIGN.md "Staged vs live", :mod:`rigkit.host.activate`).

The new live config is uploaded to a staging path (``/var/lib/rigkit/llama-swap/config.next.yaml``,
root 0600); when it differs from the live one, the host agent activates it ON THE HOST
(``rigkit-agent activate`` in the transient unit ``rigkit-activate``): backup, install, restart, a real
completion through llama-swap to each changed member and then to the resident, restore on failure.
A hold recorded by ``rigkit wire-in --rollback`` is reported and respected: no activation. A converged
run changes nothing.
"""

from __future__ import annotations

from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files, server, systemd

from rigkit import paths
from rigkit.agentcmd import activate_command
from rigkit.operations.llama_swap import activated_config
from rigkit.operations.release import release_binary
from rigkit.render.declared_state import STAGING_OWNER_MODE, directories
from rigkit.render.files import RenderedFile
from rigkit.spec.model import RigSpec
from roles import put_rendered

UNIT = f"{paths.UNIT_DIR}/llama-swap.service"
MARKER = paths.LLAMA_SWAP_MARKER
STAGING = paths.LLAMA_SWAP_NEXT


@deploy("llama-swap")
def llama_swap(spec: RigSpec, rendered: dict[str, RenderedFile], docker_restart=None, model_files=()):
    """Install, configure and enable llama-swap on 127.0.0.1:``llama_swap.port``; activate a changed
    live config (or restart for a changed unit or binary, after ``docker_restart`` — the docker
    role's restart operation — ran: the engine's restart took every member's container down and
    llama-swap would stay up with nothing loaded —, or when one of ``model_files`` — the models role's
    operations, :func:`roles.models.models` — replaced weights a running member still serves the old
    copy of) through the activation path, which brings the resident back and proves it answers."""
    ls = spec.llama_swap
    assert ls.release_sha256 is not None  # preflight refuses an unset value
    binary = release_binary(name=f"Install llama-swap {ls.version} from its pinned release tarball", url=ls.release_url,
                            sha256=ls.release_sha256, dest=paths.LLAMA_SWAP_BIN, member="llama-swap", marker=MARKER)
    files.directory(name="Create /etc/llama-swap", path=paths.LLAMA_SWAP_DIR, **directories(spec)[paths.LLAMA_SWAP_DIR])
    put_rendered(rendered, paths.LLAMA_SWAP_STAGED,
                 name="Install the staged llama-swap config for review")
    live_text = rendered[paths.LLAMA_SWAP_CONFIG].text
    # rigkit's own scratch copy (the wire-in writes it too): no backup of what it replaces
    owner, mode = STAGING_OWNER_MODE
    files.put(name="Upload the declared live llama-swap config for activation", src=StringIO(live_text), dest=STAGING,
              user=owner.split(":")[0], group=owner.split(":")[1], mode=mode.lstrip("0"), create_remote_dir=True)
    unit = put_rendered(rendered, UNIT, name="Install llama-swap.service")
    systemd.daemon_reload(name="Reload systemd for llama-swap.service", _if=lambda: unit.did_change())
    # enabled only: the activation path starts it once the live config is there (pyinfra's default
    # running=True started it first, and a fresh rig's journal began with llama-swap failing to load
    # a config that did not exist yet)
    systemd.service(name="Enable llama-swap", service="llama-swap.service", enabled=True, running=None)
    activation = activated_config(name="Activate the declared live llama-swap config (on the host)",
                                  live=paths.LLAMA_SWAP_CONFIG, staging=STAGING, text=live_text)
    server.shell(name="Restart llama-swap for its new unit or binary, a docker restart or new model files, through the activation path",
                 commands=[activate_command(["--config", paths.LLAMA_SWAP_CONFIG, "--live",
                                             paths.LLAMA_SWAP_CONFIG, "--restart", "--by", "rigkit deploy"])],
                 _if=lambda: (unit.did_change() or binary.did_change()
                              or (docker_restart is not None and docker_restart.did_change())
                              or any(op.did_change() for op in model_files)) and not activation.did_change())
    systemd.service(name="llama-swap is running", service="llama-swap.service", running=True)
