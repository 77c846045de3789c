"""Power limit: ``gpu-power-limit.service`` enabled for every boot, the limit applied now and read back."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import systemd

from rigkit import paths
from rigkit.operations.gpu import gpu_power_limit
from rigkit.render.files import RenderedFile
from rigkit.spec.model import RigSpec
from roles import put_rendered

UNIT = f"{paths.UNIT_DIR}/gpu-power-limit.service"


@deploy("Power limit")
def power(spec: RigSpec, rendered: dict[str, RenderedFile]):
    """Install and enable the unit; set ``gpu_power_limit_w`` W now and read back the enforced limit."""
    unit = put_rendered(rendered, UNIT, name="Install gpu-power-limit.service")
    systemd.daemon_reload(name="Reload systemd for gpu-power-limit.service", _if=unit.did_change)
    systemd.service(name="Enable gpu-power-limit.service", service="gpu-power-limit.service", enabled=True)
    gpu_power_limit(name=f"Set the GPU power limit to {spec.gpu_power_limit_w} W", watts=spec.gpu_power_limit_w)
