"""llama-swap: the pinned release, its unit, the live and staged configs; a changed live config
is installed with a backup kept, llama-swap restarted and checked to answer.

(The full activation path — a real completion to each changed member, rollback on failure —
comes with the wire-in and replaces the restart-and-check here.)
"""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from rigkit import paths
from rigkit.operations import config_file, http_ready, release_binary
from rigkit.render import RenderedFile
from rigkit.spec import RigSpec
from roles import put_rendered

UNIT = f"{paths.UNIT_DIR}/llama-swap.service"
MARKER = "/usr/local/lib/rigkit/llama-swap.sha256"


@deploy("llama-swap")
def llama_swap(spec: RigSpec, rendered: dict[str, RenderedFile]):
    """Install, configure, enable and (re)start llama-swap on 127.0.0.1:``llama_swap.port``."""
    ls = spec.llama_swap
    assert ls.release_sha256 is not None  # preflight refuses an unset value
    binary = release_binary(name=f"Install llama-swap {ls.version} from its pinned release tarball", url=ls.release_url,
                            sha256=ls.release_sha256, dest=paths.LLAMA_SWAP_BIN, member="llama-swap", marker=MARKER)
    files.directory(name="Create /etc/llama-swap", path=paths.LLAMA_SWAP_DIR, user="root", group=ls.user, mode="750")
    live_file = rendered[paths.LLAMA_SWAP_CONFIG]
    live = config_file(name="Install the live llama-swap config (the replaced one is backed up)",
                       path=paths.LLAMA_SWAP_CONFIG, text=live_file.text, user="root", group=ls.user, mode="640")
    put_rendered(paths.LLAMA_SWAP_STAGED, rendered[paths.LLAMA_SWAP_STAGED],
                 name="Install the staged llama-swap config for review")
    unit = put_rendered(UNIT, rendered[UNIT], name="Install llama-swap.service")
    systemd.daemon_reload(name="Reload systemd for llama-swap.service", _if=any_changed(unit))
    systemd.service(name="Enable and start llama-swap", service="llama-swap.service", running=True, enabled=True)
    systemd.service(name="Restart llama-swap for its new config, unit or binary", service="llama-swap.service",
                    restarted=True, _if=any_changed(live, unit, binary))
    http_ready(name="Check that llama-swap answers /health", url=f"http://127.0.0.1:{ls.port}/health",
               _if=any_changed(live, unit, binary))
