"""HyperQwen: compose file, ``.env`` and ``hyperqwen.service`` (installed, never enabled)."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from rigkit import paths
from rigkit.render.declared_state import directories
from rigkit.render.files import RenderedFile
from rigkit.spec.model import RigSpec
from roles import put_rendered

UNIT = f"{paths.UNIT_DIR}/hyperqwen.service"


@deploy("HyperQwen")
def hyperqwen(spec: RigSpec, rendered: dict[str, RenderedFile]):
    """Install the compose project and the window unit; the models directory exists."""
    files.directory(name="Create HyperQwen's compose directory", path=paths.HYPERQWEN_DIR,
                    **directories(spec)[paths.HYPERQWEN_DIR])
    files.directory(name="Create HyperQwen's MODELS_DIR", path=spec.hyperqwen.models_dir,
                    **directories(spec)[spec.hyperqwen.models_dir])
    put_rendered(rendered, paths.HYPERQWEN_COMPOSE, name="Install HyperQwen's compose.yaml")
    put_rendered(rendered, paths.HYPERQWEN_ENV, name="Install HyperQwen's .env")
    unit = put_rendered(rendered, UNIT, name="Install hyperqwen.service (for windows, never enabled)")
    systemd.daemon_reload(name="Reload systemd for hyperqwen.service", _if=any_changed(unit))
