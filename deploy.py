"""The rig, rebuilt: ``pyinfra INVENTORY deploy.py`` (or ``rigkit deploy``).

Thin: the host's data layers become one validated RigSpec, the renderer produces every file —
or, for ``rigkit rollback`` and a host a rollback holds, a recorded generation gives both
(:func:`rigkit.deploy.source.source_for`) — and the roles apply in DESIGN.md's order, except the host
agent, installed right after the pins so that every disruptive step runs under its host lock (its
timers come last). Last, the generation it leaves is recorded when it differs from the current
one. A second run changes nothing.
"""

from pyinfra import host
from pyinfra.context import ctx_host, ctx_state

from rigkit.deploy import planned
from rigkit.deploy.source import source_for
from roles.agent import agent, agent_timers
from roles.boot import boot
from roles.docker import docker
from roles.generation import generation
from roles.hyperqwen import hyperqwen
from roles.legacy import legacy
from roles.llama_swap import llama_swap
from roles.metrics import metrics
from roles.models import models
from roles.pins import pins
from roles.power import power
from roles.preflight import preflight
from roles.secrets import secrets

source, hold = source_for(host)
spec, rendered = source.spec, source.rendered

preflight(spec, rendered, source.lock_text)
pins(spec, rendered)
agent(spec, rendered)  # first: the later disruptive steps run under the host lock it keeps
boot(spec, rendered)
docker_restart = docker(spec)
power(spec, rendered)
secrets(spec)
hyperqwen(spec, rendered)
model_files = models(spec)
legacy(spec, rendered)
llama_swap(spec, rendered, docker_restart, model_files)
agent_timers(spec, rendered)
metrics(spec, rendered)  # node_exporter, when metrics_textfile_dir is set (its package is a pin)
generation(source, hold)
# `rigkit deploy --dry`: whether each conditional operation above would run in this plan (rigkit.deploy.planned)
planned.record(ctx_state.get(), ctx_host.get())
