"""The one rendering path: :func:`render` turns a RigSpec into every file rigkit writes.

``rigkit render`` writes the result to a staging folder for review and the roles upload the
same strings, so what the operator reviews is byte for byte what gets deployed. Secret files
are never rendered (DESIGN.md "Secrets"); ``/etc/docker/daemon.json`` is merged as JSON by its
own operation, not rendered.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2
import yaml

from rigkit.spec import members as members_mod
from rigkit import paths
from rigkit.common.envfile import dotenv_value
from rigkit.render.declared_state import AGENT_TIMERS
from rigkit.common import powerlimit
from rigkit.common.pacman import pins_conf
from rigkit.spec.model import RigSpec

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "templates"


@dataclass(frozen=True)
class RenderedFile:
    """One rendered file: ``text`` (UTF-8), ``mode`` as an octal string (``"0640"``), ``owner``
    as ``user:group``. Unpacks as ``(text, mode, owner)``."""

    text: str
    mode: str
    owner: str

    def __iter__(self):
        return iter((self.text, self.mode, self.owner))

    @property
    def sha256(self) -> str:
        """Hex sha256 of the UTF-8 text."""
        return hashlib.sha256(self.text.encode()).hexdigest()


def _yaml(value: object, style: str | None = None) -> str:
    """``value`` as one YAML scalar written by PyYAML's emitter (``allow_unicode``: characters
    outside the BMP stay characters, which libyaml reads, rather than escapes; no line width), in
    ``style`` (``'"'`` double-quoted, ``"|"`` literal block) or the emitter's own choice (plain
    when that reads back the same). The emitter falls back to a quoted style whenever the asked
    one could not hold the value."""
    text = yaml.dump(value, Dumper=yaml.SafeDumper, default_style=style, allow_unicode=True, width=float("inf"))
    if text.endswith("\n...\n"):  # the end marker of a bare plain scalar
        text = text[: -len("...\n")]
    return text[:-1] if text.endswith("\n") else text


def yaml_scalar(value: object) -> str:
    """The ``y`` filter: a YAML scalar on one line (plain when safe, quoted otherwise)."""
    text = _yaml(value)
    if "\n" in text:  # a multi-line value: double-quoted keeps it on one line
        text = _yaml(value, '"')
    return text


def yaml_quoted(value: object) -> str:
    """The ``q`` filter: a double-quoted YAML scalar (``"strata"``) on one line."""
    return _yaml(str(value), '"')


def yaml_block(value: str, indent: int) -> str:
    """The ``block`` filter: ``value`` as a literal block scalar (``|`` and its lines indented
    ``indent`` spaces, for review) when the emitter can write it so, else a double-quoted scalar;
    to follow ``key: `` in a template, the block's lines already indented."""
    text = _yaml(value, "|")
    if not text.startswith("|"):
        return text
    header, *lines = text.split("\n")
    return "\n".join([header] + [(" " * indent + ln[2:]) if ln else ln for ln in lines])


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    """The one jinja2 environment of this process: its templates are compiled once (jinja2's own
    cache, reloaded when a template file's mtime changes), not once per host and render."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=False,
        autoescape=False,
    )
    env.filters["q"] = yaml_quoted
    env.filters["y"] = yaml_scalar
    env.filters["block"] = yaml_block
    env.filters["dotenv"] = dotenv_value
    return env


def _cmd_lines(argv: list[str], cmd: str) -> list[str]:
    """A member command split over lines for review: a new line before each ``--option`` and
    before the first word after an option's value (the image), continuation lines indented and
    joined by trailing backslashes (llama-swap strips them before splitting)."""
    if not argv or shlex.join(argv) != cmd:
        return cmd.splitlines() or [cmd]
    lines: list[list[str]] = [[]]
    for i, tok in enumerate(argv):
        after_value = i >= 2 and argv[i - 2].startswith("--") and not argv[i - 1].startswith("-")
        if i > 3 and lines[-1] and (tok.startswith("--") or (after_value and not tok.startswith("-"))):
            lines.append([])
        lines[-1].append(tok)
    text = [("  " if n else "") + shlex.join(part) for n, part in enumerate(lines)]
    return [t + " \\" for t in text[:-1]] + [text[-1]]


def hyperqwen_files(spec: RigSpec) -> dict[str, RenderedFile]:
    """HyperQwen's compose project as rendered: ``{paths.HYPERQWEN_COMPOSE: compose.yaml, paths.HYPERQWEN_ENV:
    .env}`` (the image by its locked digest in the first, the engine's knobs in the second)."""
    env = _env()
    hq = spec.hyperqwen
    resolved = members_mod.resolve_members(spec)
    hq_member = next((mid for mid, m in resolved.items() if m.spec.service == "hyperqwen"), "hyperqwen")
    return {
        paths.HYPERQWEN_COMPOSE: RenderedFile(env.get_template("hyperqwen/compose.yaml.j2").render(
            project=paths.HYPERQWEN_COMPOSE_PROJECT, image=hq.image.reference(), secret_file=paths.HYPERQWEN_SECRET_FILE,
            stop_timeout_s=hq.stop_timeout_s, member_id=hq_member), "0644", "root:root"),
        paths.HYPERQWEN_ENV: RenderedFile(env.get_template("hyperqwen/env.j2").render(
            hq=hq, secret_file=paths.HYPERQWEN_SECRET_FILE), "0640", f"root:{spec.llama_swap.user}"),
    }


def hyperqwen_starts_from(files: dict[str, RenderedFile]) -> str:
    """The sha256 (hex) of what HyperQwen's container is created from — its compose.yaml and .env as
    :func:`hyperqwen_files` renders them (``files``) (the image's digest, the engine's knobs such as ``DFLASH_TOKENS``;
    not the API key's file, a secret) — carried in its member's ``metadata`` in llama-swap's config.

    llama-swap starts HyperQwen with ``docker compose up single``, a command that names neither: without
    it a deploy that changed only the image or ``.env`` left the live config as it was, so nothing restarted
    the running container and the rig went on serving the old engine (found by ``rigkit bisect``'s planted
    pair, issue 68). With it such a change is a changed member: the one activation path restarts
    llama-swap (compose then recreates the container from the new files: ``docker compose up`` recreates a
    service whose configuration changed) and asks the member a real completion, restoring on failure."""
    h = hashlib.sha256()
    for f in files.values():
        h.update(f.text.encode() + b"\0")
    return h.hexdigest()


def render_llama_swap(spec: RigSpec, staged: bool, hq_files: dict[str, RenderedFile] | None = None) -> str:
    """The llama-swap v250 config: live (``staged=False``: members with ``staged: false``) or
    the review copy with every member (``staged=True``). Groups drop members not present. HyperQwen's
    member carries :func:`hyperqwen_starts_from` in its ``metadata`` (``starts_from_sha256``), of ``hq_files``
    (:func:`hyperqwen_files`, rendered here when not given)."""
    resolved = members_mod.resolve_members(spec)
    ids = list(resolved) if staged else members_mod.live_member_ids(spec)
    hq_ids = [mid for mid in ids if resolved[mid].spec.service == "hyperqwen" and not resolved[mid].spec.cmd]
    starts_from = hyperqwen_starts_from(hq_files or hyperqwen_files(spec)) if hq_ids else None
    view = []
    for mid in ids:
        m = resolved[mid]
        view.append({
            "id": mid, "spec": m.spec, "staged": m.spec.staged, "cmd_stop": m.cmd_stop or "",
            "proxy": m.proxy or "", "unload_timeout_s": m.unload_timeout_s, "use_model_name": m.use_model_name,
            "vram_gib": m.vram_gib, "cmd_text": "\n".join(_cmd_lines(m.argv, m.cmd or "")) + "\n",
            "starts_from": starts_from if mid in hq_ids else None,
        })
    groups = []
    for name, g in spec.llama_swap.groups.items():
        present = [mid for mid in g.members if mid in ids]
        if present:
            groups.append((name, {"swap": g.swap, "exclusive": g.exclusive, "persistent": g.persistent, "members": present}))
    preload = [p for p in spec.llama_swap.preload if p in ids]
    return _env().get_template("llama-swap/config.yaml.j2").render(
        ls=spec.llama_swap, members=view, groups=groups, preload=preload, staged=staged)


#: systemd's default ``PATH`` for services on the rig (systemd.exec(5), "Environment Variables in Spawned
#: Processes": "$PATH … compiled in"; Arch's systemd is built with the merged bin directory).
SERVICE_PATH = "/usr/local/bin:/usr/bin"


def llama_swap_environment(spec: RigSpec) -> dict[str, str]:
    """The process environment ``llama-swap.service`` gives llama-swap on the rig — what its ``${env.X}``
    macros can read (``substituteEnvMacros`` looks them up with ``os.LookupEnv``). The unit sets no
    ``Environment=``, so it is what systemd sets for every service with ``User=`` (systemd.exec(5),
    "Environment Variables in Spawned Processes"): ``PATH``, ``USER``, ``LOGNAME``, ``HOME``, ``SHELL``
    (from the account the deploy creates, :func:`rigkit.render.declared_state.accounts`),
    ``INVOCATION_ID``, ``JOURNAL_STREAM`` and ``SYSTEMD_EXEC_PID`` (their values differ on each start:
    stand-ins of the same shape here). ``LANG`` is left out: systemd passes it only when a locale is
    configured. Shape: ``{name: value}``."""
    from rigkit.render.declared_state import accounts

    user = spec.llama_swap.user
    account = accounts(spec)[user]
    return {"PATH": SERVICE_PATH, "USER": user, "LOGNAME": user, "HOME": account["home"], "SHELL": account["shell"],
            "INVOCATION_ID": "0" * 32, "JOURNAL_STREAM": "8:12345", "SYSTEMD_EXEC_PID": "1"}


#: The transient units the host agent runs in (besides the timers' services): their requests to
#: llama-swap are rigkit's own, never client traffic.
AGENT_TRANSIENT_UNITS = ("rigkit-activate.service", "rigkit-window.service", "rigkit-lock.service")


def render_host_config(spec: RigSpec) -> str:
    """``/etc/rigkit/host.json``: what the host side reads instead of naming ports and paths
    (:mod:`rigkit.host.config` documents the shape). JSON, sorted keys, no secret (the API key
    file's path only)."""
    ls = spec.llama_swap
    hq = spec.hyperqwen
    resolved = members_mod.resolve_members(spec)
    live = members_mod.live_member_ids(spec)
    resident = next((p for p in ls.preload if p in live), None)
    watched = [mid for mid, m in resolved.items() if m.spec.service == "hyperqwen"]
    hq_member = next(iter(watched), "hyperqwen")
    data = {
        "version": 1,
        "llama_swap": {"url": f"http://127.0.0.1:{ls.port}", "port": ls.port, "unit": "llama-swap.service",
                       "config": paths.LLAMA_SWAP_CONFIG, "staging": paths.LLAMA_SWAP_NEXT,
                       "health_timeout_s": 60},
        "resident": resident,
        "members": {mid: {"role": "resident" if mid == resident else "on-demand", "proxy": m.proxy,
                          "use_model_name": m.use_model_name, "container": m.container,
                          "watched": mid in watched, "staged": m.spec.staged}
                    for mid, m in resolved.items()},
        "tenants": {"hyperqwen": {"unit": "hyperqwen.service", "port": hq.port, "model": hq.served_model_name,
                                  "member": hq_member, "env": paths.HYPERQWEN_ENV}},
        "watchdog": {"members": watched, "failures": 3, "backoff_after": 2, "backoff_s": 900.0,
                     "backoff_max_s": 86400.0, "timeout_s": 60.0},
        "keeper": {"timeout_s": float(ls.health_check_timeout_s) + 30},
        "power": {"limit_w": spec.gpu_power_limit_w, "index": powerlimit.GPU_INDEX},  # the card the unit sets
        "vram": {"idle_mib": spec.vram_idle_mib, "release_timeout_s": spec.vram_release_timeout_s,
                 "index": powerlimit.GPU_INDEX},
        "metrics": {"textfile_dir": spec.metrics_textfile_dir},
        "paused_timers": list(spec.paused_timers or []),
        "lock_files": list(spec.lock_files or []),
        "own_units": sorted([f"{stem}.service" for stem in AGENT_TIMERS] + list(AGENT_TRANSIENT_UNITS)),
        "paths": {"state_dir": paths.STATE_DIR, "lock": paths.RIG_LOCK, "window_journal": paths.WINDOW_JOURNAL,
                  "windows_dir": paths.WINDOWS_DIR, "holds": paths.HOLDS_FILE, "activate_log": paths.ACTIVATE_LOG,
                  "watchdog_state": paths.WATCHDOG_STATE, "power_state": paths.POWER_STATE, "models_root": paths.MODELS_ROOT,
                  "generations": paths.GENERATIONS_DIR,
                  "hf_token_file": paths.HF_TOKEN_FILE, "api_key_file": paths.HYPERQWEN_SECRET_FILE,
                  "agent_bin": paths.AGENT_BIN},
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def own_units(files: dict[str, RenderedFile]) -> list[str]:
    """rigkit's own units on the host, from the rendered host config: their requests to llama-swap
    are not client traffic."""
    return list(json.loads(files[paths.HOST_CONFIG].text)["own_units"])


def render(spec: RigSpec) -> dict[str, RenderedFile]:
    """Render every file of the rig: ``{remote path: RenderedFile(text, mode, owner)}``.

    Paths per DESIGN.md "Host paths and units"; the operator's own ``operator_units`` are
    included as they are (read from the control machine). Unset operator values appear as visible
    ``RIGKIT-UNSET-…`` placeholders that the validators accept; ``rigkit deploy`` refuses
    before rendering any. Reads only the spec, the templates and the operator's unit files. Raises
    ``jinja2.TemplateError`` only for a broken template (a bug, not bad input).
    """
    env = _env()
    hq = spec.hyperqwen
    ls = spec.llama_swap
    swap_group = f"root:{ls.user}"
    hq_files = hyperqwen_files(spec)
    out: dict[str, RenderedFile] = dict(hq_files)
    out[paths.LLAMA_SWAP_CONFIG] = RenderedFile(render_llama_swap(spec, False, hq_files), "0640", swap_group)
    out[paths.LLAMA_SWAP_STAGED] = RenderedFile(render_llama_swap(spec, True, hq_files), "0640", swap_group)

    stop_post = [shlex.join(members_mod.hyperqwen_stop_argv(spec)).replace("docker ", f"{paths.DOCKER_BIN} ", 1)]
    unit = paths.UNIT_DIR
    out[f"{unit}/llama-swap.service"] = RenderedFile(env.get_template("systemd/llama-swap.service.j2").render(
        ls=ls, docker=paths.DOCKER_BIN, sh=paths.SH_BIN, label=paths.MEMBER_LABEL, bin=paths.LLAMA_SWAP_BIN,
        config=paths.LLAMA_SWAP_CONFIG, stop_post=stop_post, timeout_stop_s=ls.stop_timeout_s), "0644", "root:root")
    start = shlex.join(members_mod.hyperqwen_start_argv(spec)).replace("docker ", f"{paths.DOCKER_BIN} ", 1)
    stop = shlex.join(members_mod.hyperqwen_stop_argv(spec)).replace("docker ", f"{paths.DOCKER_BIN} ", 1)
    out[f"{unit}/hyperqwen.service"] = RenderedFile(env.get_template("systemd/hyperqwen.service.j2").render(
        hq=hq, workdir=paths.HYPERQWEN_DIR, start=start, stop=stop), "0644", "root:root")
    out[paths.NOUVEAU_BLACKLIST] = RenderedFile(env.get_template("boot/blacklist-nouveau.conf.j2").render(
        flavour=spec.driver_flavour, driver=spec.nvidia_driver_version), "0644", "root:root")
    out[f"{unit}/gpu-power-limit.service"] = RenderedFile(env.get_template("systemd/gpu-power-limit.service.j2").render(
        power_w=spec.gpu_power_limit_w,
        exec_start=shlex.join(powerlimit.set_argv(powerlimit.GPU_INDEX, spec.gpu_power_limit_w, paths.NVIDIA_SMI_BIN))),
        "0644", "root:root")
    for stem, (description, command, every_s) in AGENT_TIMERS.items():
        out[f"{unit}/{stem}.service"] = RenderedFile(env.get_template("systemd/agent.service.j2").render(
            description=description, agent=paths.AGENT_BIN, command=command), "0644", "root:root")
        out[f"{unit}/{stem}.timer"] = RenderedFile(env.get_template("systemd/agent.timer.j2").render(
            description=description, every_s=every_s), "0644", "root:root")
    out[paths.HOST_CONFIG] = RenderedFile(render_host_config(spec), "0644", "root:root")
    # the pins' hold is part of what a generation records: a rollback or a revert puts it back with the rest
    out[paths.PINS_CONF] = RenderedFile(pins_conf(list(spec.pacman_pins or {})), "0644", "root:root")
    if spec.metrics_textfile_dir:  # node_exporter is part of the rig only when metrics are asked for (issue 66)
        out[paths.NODE_EXPORTER_CONF] = RenderedFile(env.get_template("node-exporter/prometheus-node-exporter.conf.j2").render(
            textfile_dir=spec.metrics_textfile_dir, listen=spec.node_exporter.listen), "0644", "root:root")
    for path in spec.operator_units:
        out[f"{unit}/{Path(path).name}"] = RenderedFile(Path(path).read_text(), "0644", "root:root")
    return out


def manifest(files: dict[str, RenderedFile]) -> list[dict[str, str]]:
    """The review manifest: one ``{path, mode, owner, sha256}`` per file, sorted by path."""
    return [{"path": p, "mode": f.mode, "owner": f.owner, "sha256": f.sha256} for p, f in sorted(files.items())]


def write_tree(files: dict[str, RenderedFile], out_dir: Path) -> Path:
    """Write each file under ``out_dir`` at its remote path and ``out_dir/manifest.json``.

    Returns the manifest path. Modes are applied to the staged copies; owners are recorded in
    the manifest only (the staging folder belongs to whoever runs ``rigkit render``).
    """
    out_dir = Path(out_dir)
    for path, f in files.items():
        dest = out_dir / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(f.text)
        dest.chmod(int(f.mode, 8))
    man = out_dir / "manifest.json"
    man.write_text(json.dumps(manifest(files), indent=2) + "\n")
    return man
