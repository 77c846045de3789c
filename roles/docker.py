"""Docker: the engine, compose, buildx and the NVIDIA container toolkit; ``daemon.json`` owned
by one step that merges its keys as JSON; docker restarted only when that step changed it."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.files import File
from pyinfra.operations import server, systemd

from rigkit import paths
from rigkit.agentcmd import locked_command
from rigkit.render.declared_state import CDI_REFRESH, CDI_REFRESH_FILE, DAEMON_JSON_KEYS, accounts
from rigkit.operations.config import json_keys
from rigkit.operations.images import image_pulled
from rigkit.lockfile.view import declared_images
from rigkit.spec.model import RigSpec



@deploy("Docker")
def docker(spec: RigSpec):
    """Install and start docker with the nvidia runtime; restart it only when daemon.json changed.

    Returns the restart's operation: a docker restart takes every container down (no live-restore),
    Strata's included, so the llama-swap role restarts llama-swap through the activation path when
    it ran (found against the real engine, issue 13; tests/harness/test_deploy.py)."""
    daemon_json = json_keys(name="Merge the nvidia runtime and the cgroup mitigation into daemon.json",
                            path=paths.DOCKER_DAEMON_JSON, keys=DAEMON_JSON_KEYS)
    systemd.service(name="Enable and start docker", service="docker.service", running=True, enabled=True)
    restart = server.shell(name="Restart docker for the new daemon.json (under the host lock)",
                 commands=[locked_command("deploy: restart docker for daemon.json",
                                          ["systemctl", "restart", "docker.service"])],
                 _if=daemon_json.did_change)
    if spec.operator_user:
        account = accounts(spec)[spec.operator_user]
        server.user(name=f"Put {spec.operator_user} in the docker group", user=spec.operator_user,
                    groups=account["groups"], append=not account["exact"], create_home=False, ensure_home=False)
    systemd.service(name="Enable and start nvidia-persistenced", service="nvidia-persistenced.service",
                    running=True, enabled=True)
    if host.get_fact(File, path=CDI_REFRESH_FILE):
        systemd.service(name="Enable the CDI refresh the toolkit ships", service=CDI_REFRESH,
                        running=True, enabled=True)
    seen = set()
    for name, image in declared_images(spec).items():  # by the locked digest (the spec is the lock's, source_for)
        if image.reference() not in seen:
            seen.add(image.reference())
            image_pulled(name=f"Pull the {name} image by its locked digest", entry=f"images.{name}",
                         reference=image.reference())
    return restart
