"""The host agent in ``/opt/rigkit/``: its own venv, installed from a wheelhouse built on the
control machine for the host's Python (no package index on the host), and the host config it reads;
installed right after the pins so that every later disruptive step (a reboot, a docker restart, an
activation) runs under the host lock it keeps. Its timers (keeper, watchdog, power-limit healer) are enabled last,
once llama-swap serves (:func:`agent_timers`)."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import DeployError, deploy
from pyinfra.facts.server import Command
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from rigkit import paths
from rigkit.render import wheelhouse
from rigkit.operations.facts.server import PYTHON_VERSION_COMMAND
from rigkit.operations.shell import argv, script
from rigkit.operations.wheels import wheelhouse_synced
from rigkit.render.declared_state import directories
from rigkit.render.files import AGENT_TIMERS, RenderedFile
from rigkit.spec.model import RigSpec
from roles import put_rendered

WHEELS = f"{paths.AGENT_DIR}/wheels"
TIMERS = tuple(AGENT_TIMERS)


@deploy("Host agent")
def agent(spec: RigSpec, rendered: dict[str, RenderedFile]):
    """Build the wheelhouse for the host's ``python3``, sync it, (re)install the venv when it
    changed, and install the host config every agent command reads."""
    version = host.get_fact(Command, command=PYTHON_VERSION_COMMAND)
    if not version:
        raise DeployError("the host has no python3 for the host agent (install the python package)")
    try:
        house = wheelhouse.build(version.strip())
    except wheelhouse.WheelhouseError as exc:
        raise DeployError(f"building the agent wheelhouse for Python {version.strip()} failed: {exc}") from None
    files.directory(name="Create /opt/rigkit", path=paths.AGENT_DIR, **directories(spec)[paths.AGENT_DIR])
    put_rendered(rendered, paths.HOST_CONFIG, name="Install the host config (/etc/rigkit/host.json)")
    synced = wheelhouse_synced(name="Sync the agent wheelhouse", src=str(house), dest=WHEELS)
    venv = server.shell(name="Create the agent venv", commands=[argv("python3", "-m", "venv", paths.AGENT_VENV)],
                        _if=lambda: not host.get_fact(Command, command=f"test -x {paths.AGENT_VENV}/bin/python && echo y || true"))
    pip = f"{paths.AGENT_VENV}/bin/pip"
    server.shell(
        name="Install the agent from the wheelhouse (no index)",
        commands=[script("{pip} uninstall --quiet --yes rigkit 2>/dev/null || true", pip=pip),  # the old whole-package wheel
                  script("{pip} install --quiet --no-index --find-links {wheels} --force-reinstall --no-deps "
                         "{wheels}/rigkit_host-*.whl", pip=pip, wheels=WHEELS),
                  argv(pip, "install", "--quiet", "--no-index", "--find-links", WHEELS, *wheelhouse.AGENT_REQUIREMENTS),
                  argv(paths.AGENT_BIN, "version")],
        _if=any_changed(synced, venv),
    )


@deploy("Host agent timers")
def agent_timers(spec: RigSpec, rendered: dict[str, RenderedFile]):
    """Install the units of the agent's timers (:data:`rigkit.render.files.AGENT_TIMERS`: keeper, watchdog,
    power-limit healer) and enable the timers."""
    units = [put_rendered(rendered, f"{paths.UNIT_DIR}/{stem}.{kind}",
                          name=f"Install {stem}.{kind}") for stem in TIMERS for kind in ("service", "timer")]
    systemd.daemon_reload(name="Reload systemd for the agent's units", _if=any_changed(*units))
    for stem in TIMERS:
        systemd.service(name=f"Enable and start {stem}.timer", service=f"{stem}.timer", running=True, enabled=True)
