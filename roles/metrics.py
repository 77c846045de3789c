"""node_exporter, part of the rig when ``metrics_textfile_dir`` is set (issue 66): the textfile folder the
agent writes rigkit's ``*.prom`` files into, node_exporter's arguments in the file Arch's unit reads
(``/etc/conf.d/prometheus-node-exporter``: the folder and the listen address), its unit enabled and
running. The package itself is a pin (``rigkit lock``: ``node_exporter.version``), installed by the
pins role with the driver and CUDA. Without ``metrics_textfile_dir`` this role adds no operation."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import files, systemd

from rigkit import paths
from rigkit.render.declared_state import directories
from rigkit.render.files import RenderedFile
from rigkit.spec.model import RigSpec
from roles import put_rendered


@deploy("Metrics")
def metrics(spec: RigSpec, rendered: dict[str, RenderedFile]):
    """Create the textfile folder, install node_exporter's arguments, enable and start its unit (restarted
    when its arguments changed). Nothing when ``metrics_textfile_dir`` is unset."""
    if not spec.metrics_textfile_dir:
        return
    files.directory(name="Create the metrics textfile folder", path=spec.metrics_textfile_dir,
                    **directories(spec)[spec.metrics_textfile_dir])
    conf = put_rendered(rendered, paths.NODE_EXPORTER_CONF, name="Install node_exporter's arguments")
    systemd.service(name="Enable and start prometheus-node-exporter", service=paths.NODE_EXPORTER_UNIT,
                    running=True, enabled=True)
    systemd.service(name="Restart prometheus-node-exporter for its new arguments", service=paths.NODE_EXPORTER_UNIT,
                    restarted=True, _if=conf.did_change)
