"""Boot: nouveau kept out, and the GPU steps stopped (or a reboot) while the running kernel or
the loaded module is not what was installed."""

from __future__ import annotations

from pyinfra.api import deploy

from rigkit import paths
from rigkit.operations.boot import mkinitcpio_without_kms, reboot_gate
from rigkit.render.declared_state import pinned_driver
from rigkit.render.files import RenderedFile, own_units
from rigkit.spec.model import RigSpec
from roles import put_rendered


@deploy("Boot")
def boot(spec: RigSpec, rendered: dict[str, RenderedFile]):
    """Blacklist nouveau, drop the kms hook, then gate on a pending reboot."""
    put_rendered(rendered, paths.NOUVEAU_BLACKLIST, name="Blacklist nouveau")
    mkinitcpio_without_kms(name="Keep the kms hook out of mkinitcpio's HOOKS (rigkit's drop-in)")
    reboot_gate(name="Reboot gate: the running kernel and driver are the installed ones",
                driver_version=pinned_driver(spec), flavour=spec.driver_flavour, allow_reboot=spec.reboot,
                lock_files=spec.lock_files or [], proxy_port=spec.llama_swap.port, force=spec.force,
                own_units=own_units(rendered))
