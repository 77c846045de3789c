"""llama-swap members resolved from the spec: the exact ``cmd``/``cmdStop``/``proxy`` each runs.

One place derives the commands for the rig's own services (Strata and the GGUF baseline as
``docker run --rm --init --name <id>`` of the llama.cpp server image; HyperQwen as its compose
service ``single`` alone; an operator's llama.cpp member declared with ``llamacpp`` like Strata), so
the validators, the renderer and drift all see the same strings. Other operator-defined members
(``service: null``) keep what they declare.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from rigkit import paths
from rigkit.spec.cmdline import container_name, split_command
from rigkit.spec.model import LlamaCppSpec, MemberSpec, RigSpec


@dataclass(frozen=True)
class Member:
    """A member as llama-swap will run it.

    ``cmd``/``cmd_stop`` are single strings (llama-swap splits them with shlex, no shell);
    ``port`` is the fixed port the server listens on (None when ``cmd`` uses ``${PORT}``);
    ``vram_gib`` GiB while loaded; ``cold_boot_s`` seconds; ``container`` the docker container or
    compose project the member runs in (None for a plain process).
    """

    id: str
    spec: MemberSpec
    cmd: str | None
    cmd_stop: str | None
    proxy: str | None
    port: int | None
    vram_gib: float | None
    unload_timeout_s: int | None
    use_model_name: str | None
    container: str | None = None
    argv: list[str] = field(default_factory=list)


def compose_base(spec: RigSpec | None = None) -> list[str]:
    """``docker compose`` with HyperQwen's project name and file (argv list)."""
    return ["docker", "compose", "--project-name", paths.HYPERQWEN_COMPOSE_PROJECT,
            "--file", paths.HYPERQWEN_COMPOSE]


def hyperqwen_start_argv(spec: RigSpec) -> list[str]:
    """Start HyperQwen's ``single`` service alone, in the foreground, exiting with its engine.

    ``--no-deps``: ``prepare`` has already run (the deploy runs it once); ``up`` attached returns
    when the container exits, so llama-swap and ``hyperqwen.service`` see a dead engine at once.
    """
    return [*compose_base(spec), "up", "--no-deps", "--no-log-prefix", "single"]


def hyperqwen_stop_argv(spec: RigSpec) -> list[str]:
    """Stop HyperQwen's ``single`` service within ``hyperqwen.stop_timeout_s`` seconds."""
    return [*compose_base(spec), "stop", "--timeout", str(spec.hyperqwen.stop_timeout_s), "single"]


def llamacpp_start_argv(member_id: str, server: LlamaCppSpec, spec: RigSpec) -> list[str]:
    """``docker run`` of the llama.cpp server image in the foreground for one GGUF member.

    The container carries ``--label rigkit.member=<id>`` (:data:`rigkit.paths.MEMBER_LABEL`), by which
    llama-swap's unit clears an orphan before it starts. The model directory ``/srv/models/<path>`` is mounted read-only at ``/models``; the server
    listens on 0.0.0.0 inside the container, published on 127.0.0.1:``port`` only.
    """
    source = spec.models.get(server.model)
    model_dir = f"{paths.MODELS_ROOT}/{source.path if source else server.model}"
    model_file = server.model_file or paths.placeholder(f"{member_id} model file")
    argv = [
        "docker", "run", "--rm", "--init", "--name", member_id, "--label", f"{paths.MEMBER_LABEL}={member_id}",
        "--gpus", "all",
        "--publish", f"127.0.0.1:{server.port}:{server.port}",
        "--volume", f"{model_dir}:/models:ro",
        server.image.reference(),
        "--model", f"/models/{model_file}",
        "--host", "0.0.0.0",
        "--port", str(server.port),
        "--ctx-size", str(server.ctx_size),
        "--alias", member_id,
    ]
    if server.args is None:
        argv.append(paths.placeholder(f"{member_id} args"))
    else:
        argv.extend(server.args)
    return argv


def _join(argv: list[str]) -> str:
    return shlex.join(argv)


def hyperqwen_vram_gib(spec: RigSpec) -> float:
    """HyperQwen's VRAM while loaded: ``gpu_memory_utilization`` x ``gpu_vram_gib`` (GiB)."""
    return round(spec.hyperqwen.gpu_memory_utilization * spec.gpu_vram_gib, 2)


def resolve_member(member_id: str, spec: RigSpec) -> Member:
    """Resolve one member of ``spec.llama_swap.members``; raises KeyError for an unknown id."""
    m = spec.llama_swap.members[member_id]
    if m.service == "hyperqwen":
        hq = spec.hyperqwen
        argv = hyperqwen_start_argv(spec)
        return Member(
            id=member_id, spec=m,
            cmd=m.cmd or _join(argv),
            cmd_stop=m.cmd_stop or _join(hyperqwen_stop_argv(spec)),
            proxy=m.proxy or f"http://127.0.0.1:{hq.port}",
            port=hq.port,
            vram_gib=m.vram_gib or hyperqwen_vram_gib(spec),
            unload_timeout_s=m.unload_timeout_s or hq.stop_timeout_s + 10,
            use_model_name=m.use_model_name or hq.served_model_name,
            container=paths.HYPERQWEN_COMPOSE_PROJECT,
            argv=argv,
        )
    server: LlamaCppSpec | None = None
    if m.service in ("strata", "gguf_baseline"):
        server = getattr(spec, m.service)
    elif m.llamacpp is not None and not m.cmd:  # a member of the operator's own, as the docs show
        server = own_server(member_id, spec)
    if server is not None:
        argv = llamacpp_start_argv(member_id, server, spec)
        return Member(
            id=member_id, spec=m,
            cmd=m.cmd or _join(argv),
            cmd_stop=m.cmd_stop or _join(["docker", "stop", "--time", str(server.stop_timeout_s), member_id]),
            proxy=m.proxy or f"http://127.0.0.1:{server.port}",
            port=server.port,
            vram_gib=m.vram_gib,
            unload_timeout_s=m.unload_timeout_s or server.stop_timeout_s + 10,
            use_model_name=m.use_model_name,
            container=member_id,
            argv=argv,
        )
    port = port_of(m.proxy) if m.proxy else None
    if m.cmd and "${PORT}" in m.cmd:
        port = None
    return Member(
        id=member_id, spec=m, cmd=m.cmd, cmd_stop=m.cmd_stop, proxy=m.proxy, port=port,
        vram_gib=m.vram_gib, unload_timeout_s=m.unload_timeout_s, use_model_name=m.use_model_name,
        container=container_name(expand_model_id(m.cmd, member_id)) if m.cmd else None,
        argv=split_command(m.cmd) if m.cmd else [],
    )


def expand_model_id(cmd: str, member_id: str) -> str:
    """``cmd`` with ``${MODEL_ID}`` as llama-swap 250 expands it before it runs the command: the
    member's id (macros.go ``resolveConfigMacros``: ``MODEL_ID`` first among a model's macros;
    ``rigkit.spec.llama_swap_load.expand_macros`` emulates it whole). Upstream's own Docker example
    names its container ``--name ${MODEL_ID}`` (config.example.yaml, ``docker-llama``), so the
    container is the expanded name, never the literal macro (issue 63)."""
    return cmd.replace("${MODEL_ID}", member_id)


def own_server(member_id: str, spec: RigSpec) -> LlamaCppSpec:
    """The llama.cpp server of a member of the operator's own declared with ``llamacpp``
    (:class:`rigkit.spec.model.MemberServer`) as rigkit's own servers are: the rig's llama.cpp image
    (``strata.image``), and its ``model_file`` or else the file Strata or the GGUF baseline serves from
    the same model (None when neither does: the member checks name it). Raises KeyError for an unknown
    id, ValueError for a member without ``llamacpp``."""
    own = spec.llama_swap.members[member_id].llamacpp
    if own is None:
        raise ValueError(f"llama_swap.members.{member_id} has no llamacpp section")
    model_file = own.model_file or next((s.model_file for s in (spec.strata, spec.gguf_baseline)
                                         if s.model == own.model and s.model_file), None)
    return LlamaCppSpec.model_construct(
        port=own.port, image=spec.strata.image, model=own.model, model_file=model_file, ctx_size=own.ctx_size,
        args=list(own.args), stop_timeout_s=own.stop_timeout_s)


def resolve_members(spec: RigSpec) -> dict[str, Member]:
    """Every member of ``spec.llama_swap.members`` (live and staged), by id."""
    return {mid: resolve_member(mid, spec) for mid in spec.llama_swap.members}


def vram_by_member(spec: RigSpec, estimates: Mapping[str, float] | None = None) -> dict[str, float]:
    """GiB each member holds while loaded, by id: the larger of its declared figure
    (:attr:`Member.vram_gib`: declared, or HyperQwen's ``gpu_memory_utilization`` x ``gpu_vram_gib``;
    0 when undeclared, which the member checks name) and ``estimates[member]`` (GiB, from the model
    files and arguments: :func:`rigkit.spec.vram.member_fits`) when given. The one per-member figure
    the co-load check reads."""
    est = estimates or {}
    return {mid: max(m.vram_gib or 0.0, est.get(mid, 0.0)) for mid, m in resolve_members(spec).items()}


def live_member_ids(spec: RigSpec) -> list[str]:
    """Ids of members in the live config (``staged: false``), in declaration order."""
    return [mid for mid, m in spec.llama_swap.members.items() if not m.staged]


def port_of(url: str) -> int | None:
    """The explicit port of ``http://host:port/...``; None when absent or ``${PORT}``."""
    from urllib.parse import urlsplit

    try:
        return urlsplit(url).port
    except ValueError:
        return None
