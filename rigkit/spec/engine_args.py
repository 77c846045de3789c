"""What each member's engine will do, read from its command line by the engine's own grammar (issue #59).

- **llama-server** (Strata, the GGUF baseline, an operator's ``llama-server`` or ``docker run`` of the
  llama.cpp image): its arguments are read by :mod:`rigkit.spec.llama_server` over the table generated
  from llama.cpp's own parser (``rigkit/spec/llama_server_args.py``). A refusal of that parser is a
  refusal here, with its message. An option rigkit renders from a spec field given again in ``args``
  (llama.cpp keeps the last one: ``common/arg.cpp`` ``parse_cli_args`` logs ``DEPRECATED: argument …
  specified multiple times … (only last value will be used)``), an option given twice, and an option
  that chooses other weights than the locked model are refused.
- **An option the table does not know** is refused when the image's tag names a llama.cpp build
  (``…-bNNNN``, llama.cpp's release tags) no newer than the table's (the table *is* that parser: the
  server would exit 1 ``error: invalid argument``); it is a warning when the tag is floating
  (``server-cuda``) or newer, because the image is locked by digest to whatever that tag held and may
  know options the wheel's build does not — refusing would block an option the real server accepts,
  while a wrong guess is caught on the host anyway (the server exits 1 at once, llama-swap reports the
  member failed and the activation puts the old config back).
- **Listen addresses**: a ``docker run`` publish without an address binds every interface (docker's
  ``-p [ip:][hostPort:]containerPort[/proto]``, docs.docker.com/reference/cli/docker/container/run/#publish:
  "If you don't specify an IP address … on all interfaces"), as does ``-P``/``--publish-all``; a
  llama-server on the host's network with ``--host`` off loopback listens beyond it.
- **Words a shell would have expanded** in a command llama-swap runs without one (v250
  ``internal/config/commands.go``: ``shlex.Posix.Split``, no expansion): a leading ``~``, ``$NAME``.
- **The stop command** stops the container the start command runs.
- **The health path** llama-swap polls (``check_endpoint``) is one the engine serves without the API
  key: llama-server's public routes (tools/server/server.cpp: ``/health``, ``/v1/health``, ``/models``,
  ``/v1/models``, ``/api/tags``, "public endpoint (no API key check)"); vLLM's routes outside its
  ``/v1`` API-key middleware (vllm/entrypoints/openai/api_server.py: ``/health``, ``/ping``,
  ``/version``) — HyperQwen runs with ``VLLM_API_KEY``. ``none`` turns the check off (llama-swap).
- **The served name**: vLLM answers 404 ("The model … does not exist", ``serving_engine._check_model``)
  to a model name other than its ``--served-model-name``, so HyperQwen's member asks for that one.
- **HyperQwen's ``EXTRA_ARGS``** (``hyperqwen.extra_env``): vLLM's options reach the engine only
  through it (no vLLM table: the image is vLLM plus HyperQwen's patches). Read as the entrypoint's
  unquoted ``$EXTRA_ARGS`` expands (POSIX field splitting on blanks, no quote removal) and as vLLM's
  ``FlexibleArgumentParser`` reads names (``--a_b`` is ``--a-b``, ``--opt=value`` too): an option that a
  spec field renders is a warning naming the field (which one wins is the entrypoint's order), a
  speculative config above the DFlash guard is a warning, and ``--api-key`` is refused (a secret in
  the ``.env``, which holds none).
- **Environment names given twice** in a member's ``env``: llama-swap appends them to its own
  environment (``internal/process/process_command.go``: ``cmd.Env = append(cmd.Environ(), …)``) and
  Go's os/exec keeps the last value of a duplicate key, so the first one is dead text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rigkit.paths import PLACEHOLDER_PREFIX
from rigkit.spec import cmdline
from rigkit.spec import llama_server as reader
from rigkit.spec import members as members_mod
from rigkit.spec.claims import listen_ports
from rigkit.spec.llama_server_args import XLLAMACPP_VERSION
from rigkit.spec.model import SAFE_DFLASH_TOKENS, UNSAFE_SPEC_CONTEXT, LlamaCppSpec, RigSpec
from rigkit.spec.problems import SpecProblem, SpecWarning
from rigkit.spec.secrets import SECRET_ADVICE, SECRET_SHOWN
from rigkit.spec.types import loopback_host

#: The llama.cpp build the table was generated from (the xllamacpp wheel's version names it: 2026.10.B).
TABLE_BUILD = int(XLLAMACPP_VERSION.split(".")[2])
#: Options rigkit renders for a llama.cpp service member (:func:`rigkit.spec.members.llamacpp_start_argv`),
#: by the parser's key, with the field that sets each (``--port`` is the claims table's: one listen option).
RENDERED = {"--model": "model_file", "--host": None, "--ctx-size": "ctx_size", "--alias": None}
#: Options that choose the weights llama-server serves: only ``model``/``model_file`` (the lock's) may.
MODEL_SOURCES = frozenset({"--model", "--model-url", "--hf-repo", "--hf-file", "--docker-repo"})
#: llama.cpp's server image; a ``docker run`` of it runs llama-server with the words after the image.
LLAMACPP_IMAGE = "ghcr.io/ggml-org/llama.cpp"
_BUILD_TAG = re.compile(r"(?:^|-)b([0-9]+)$")
_OWNER = "llama.cpp common/arg.cpp, the options of build b{build} (rigkit/spec/llama_server_args.py)"


@dataclass(frozen=True)
class Findings:
    """What :func:`check_engine_args` found: ``problems`` (refusals) and ``warnings``."""

    problems: list[SpecProblem]
    warnings: list[SpecWarning]


def image_build(ref: str | None) -> int | None:
    """The llama.cpp build a ``ghcr.io/ggml-org/llama.cpp`` tag names (``server-cuda-b6000`` → 6000), or
    None for a floating tag (``server-cuda``), a digest or none."""
    if not ref or ref.startswith("sha256:"):
        return None
    m = _BUILD_TAG.search(ref)
    return int(m.group(1)) if m else None


def _shown(g: reader.Given) -> str:
    return " ".join([g.written, *g.words])


def _read(key: str, words: list[str], build: int | None, out: Findings, shown: list[str] | None = None
          ) -> list[reader.Given] | None:
    """``words`` (llama-server's arguments) read by llama.cpp's table, refusals and warnings added to
    ``out`` under ``key`` (``shown``: the words the operator wrote, for the message); None when
    llama-server would stop instead of serving."""
    strict = build is not None and build <= TABLE_BUILD
    try:
        given = reader.read(words, unknown="refuse" if strict else "skip")
    except reader.Exit as e:
        why = e.stderr.strip().split("\n\nusage:", 1)[0].strip().replace("\n", " ") or "prints and exits"
        out.problems.append(SpecProblem(
            key=key, value=repr(" ".join(words if shown is None else shown)),
            allowed=f"llama-server would exit {e.code} instead of serving: {why} ({_OWNER.format(build=TABLE_BUILD)})"))
        return None
    for g in given:
        if g.key is None and "=" in g.written and g.written.split("=", 1)[0] in reader.ARGS:
            out.problems.append(SpecProblem(
                key=key, value=repr(g.written),
                allowed=f"llama-server has no --option=value form: it looks the whole word up and exits 1 (error: invalid "
                        f"argument: {g.written}; {_OWNER.format(build=TABLE_BUILD)}); write "
                        f"{g.written.split('=', 1)[0]!r} and its value as two words"))
        elif g.key is None:
            out.warnings.append(SpecWarning(
                key=key, message=(f"{g.written!r} is not an option of llama-server build b{TABLE_BUILD} (the table rigkit "
                                  f"reads, {_OWNER.format(build=TABLE_BUILD)}); the image's tag "
                                  f"{'names build b%d' % build if build else 'names no build'}, so it may be newer and "
                                  "know it — if not, the server exits 1 (error: invalid argument) and the activation "
                                  "puts the old config back")))
    return given


def _repeated(key: str, given: list[reader.Given], out: Findings, first_at: int = 0) -> None:
    """An option given twice (any spelling; rigkit's rendered ones before ``first_at`` are named elsewhere)."""
    seen: dict[str, reader.Given] = {}
    for g in given:
        if g.key is None or g.key in reader.REPEATABLE:
            continue
        before = seen.get(g.key)
        if before is not None and before.index >= first_at:
            out.problems.append(SpecProblem(
                key=key, value=repr(_shown(g)),
                allowed=f"{g.key} is given twice ({_shown(before)!r} before it): llama-server keeps only the last "
                        "(common/arg.cpp: \"specified multiple times … only last value will be used\"); give it once"))
        seen[g.key] = g


def _service_args(section: str, server: LlamaCppSpec, argv: list[str], out: Findings) -> None:
    """A llama.cpp service member: rigkit's rendered options and ``args`` read together, as the server
    reads them (everything after the image in ``argv``)."""
    if server.args is None or any(PLACEHOLDER_PREFIX in a for a in server.args):
        return  # unset: spec_warnings names it
    image_at = argv.index(server.image.reference())
    words = argv[image_at + 1:]
    rendered = len(words) - len(server.args)
    given = _read(f"{section}.args", words, image_build(server.image.ref), out, shown=list(server.args))
    if given is None:
        return
    for g in given:
        if g.index < rendered or g.key is None:
            continue
        at = f"{section}.args[{g.index - rendered}]"
        if g.key in RENDERED:
            field = RENDERED[g.key]
            source = (f"{section}.{field}" if field else
                      "the member id (rigkit renders --alias <member id>; add names with the member's aliases)"
                      if g.key == "--alias" else
                      "rigkit (the server listens on 0.0.0.0 inside its container, published on 127.0.0.1 only)")
            out.problems.append(SpecProblem(
                key=at, value=repr(_shown(g)),
                allowed=f"{g.key} is rendered from {source}; llama-server keeps the last one given, so this would "
                        f"silently replace it{' — set ' + section + '.' + field + ' instead' if field else ''}"))
        elif g.key in MODEL_SOURCES:
            out.problems.append(SpecProblem(
                key=at, value=repr(_shown(g)),
                allowed=f"{g.key} chooses other weights than the locked {section}.model / {section}.model_file "
                        "(the file rigkit fetches, verifies and mounts at /models); set those instead"))
    _repeated(f"{section}.args", given, out, first_at=rendered)


def llama_server_words(words: list[str]) -> tuple[list[str], bool] | None:
    """``(llama-server's arguments, in a container)`` when ``words`` run llama-server: the program
    ``llama-server`` itself, or a ``docker run`` of llama.cpp's image (the words after the image, its
    ENTRYPOINT being ``/app/llama-server``); None otherwise."""
    if words and words[0].rsplit("/", 1)[-1] == "llama-server":
        return words[1:], False
    cc = cmdline.container_command(words)
    if cc is not None and cc.verb in ("run", "create") and cc.image and \
            cc.image.split("@", 1)[0].rsplit(":", 1)[0] == LLAMACPP_IMAGE:
        after = words[words.index(cc.image) + 1:]
        return after, True
    return None


def unexpanded_words(cmd: str) -> list[str]:
    """Words of ``cmd`` that a shell would expand and llama-swap passes as written (it splits POSIX
    words, no shell): a leading unquoted ``~``, a ``$NAME`` outside single quotes (``${…}`` is
    llama-swap's own macro syntax, checked by its loader). The script of a ``sh -c`` is left to its shell."""
    text = cmdline.sanitized(cmd)
    words: list[tuple[str, bool]] = []  # (raw word, expands)
    raw, expands, single, double, i = "", False, False, False, 0
    while i < len(text):
        c = text[i]
        if not single and not double and c in " \t\n":
            if raw:
                words.append((raw, expands))
            raw, expands = "", False
        elif c == "\\" and not single and i + 1 < len(text):
            raw += text[i:i + 2]
            i += 1
        elif c == "'" and not double:
            single = not single
            raw += c
        elif c == '"' and not single:
            double = not double
            raw += c
        else:
            if c == "~" and not raw and not single and not double:
                expands = True
            if c == "$" and not single and i + 1 < len(text) and (text[i + 1].isalpha() or text[i + 1] == "_"):
                expands = True
            raw += c
        i += 1
    if raw:
        words.append((raw, expands))
    out, shell = [], False
    for n, (word, exp) in enumerate(words):
        plain = word.strip("'\"")
        if plain.rsplit("/", 1)[-1] in cmdline.SHELLS:
            shell = True
        if shell and n and re.fullmatch(r"-[a-z]*c[a-z]*", words[n - 1][0].strip("'\"")):
            continue  # the script: its shell expands it
        if exp:
            out.append(word)
    return out


def _stop_targets(cmd_stop: str) -> list[str] | None:
    """The containers a ``docker stop|kill|rm`` (or compose project a compose command) in ``cmd_stop``
    names, or None when it names none rigkit can read."""
    for words in cmdline.unwrap(cmdline.split_command(cmd_stop)).commands:
        cc = cmdline.container_command(words)
        if cc is None:
            continue
        if cc.verb.startswith("compose"):
            name = cmdline.container_name(cmd_stop)
            return [name] if name else None
        if cc.verb in ("stop", "kill", "rm"):
            rest = words[words.index(cc.verb) + 1:] if cc.verb in words else []
            names, skip = [], False
            for w in rest:
                if skip:
                    skip = False
                elif w in ("-t", "--time", "--timeout", "-s", "--signal"):
                    skip = True
                elif not w.startswith("-"):
                    names.append(w)
            return names or None
    return None


def _member_command(spec: RigSpec, mid: str, m: members_mod.Member, out: Findings) -> None:
    key = f"llama_swap.members.{mid}"
    if not m.cmd:
        return
    for word in unexpanded_words(m.cmd):
        out.problems.append(SpecProblem(
            key=f"{key}.cmd", value=repr(word),
            allowed="llama-swap runs cmd without a shell (POSIX words, no expansion: v250 internal/config/commands.go "
                    "shlex.Posix.Split), so ~ and $NAME reach the program as written; write the path out, quote it "
                    "in single quotes if it is meant literally, or run the command under sh -c '…'"))
    if m.cmd_stop and m.container and m.spec.service is None:
        targets = _stop_targets(members_mod.expand_model_id(m.cmd_stop, mid))  # as llama-swap runs it
        if targets is not None and m.container not in targets:
            out.problems.append(SpecProblem(
                key=f"{key}.cmd_stop", value=repr(m.cmd_stop),
                allowed=f"stops {', '.join(targets)}, but cmd runs container {m.container!r}: cmdStop must stop the "
                        "container cmd starts, or the member keeps its VRAM after llama-swap unloads it"))
    if m.spec.service is not None:
        return
    listens: list[int] = []
    for words in cmdline.unwrap(cmdline.split_command(m.cmd)).commands:
        listens += [int(p.host_port) for p in cmdline.publishes(words) if p.host_port and p.host_port.isdigit()]
        if cmdline.container_command(words) is None:
            listens += [int(v) for _, v in listen_ports(words) if v.isdigit()]
        for pub in cmdline.publishes(words):
            address = pub.address
            if (address is None or not loopback_host(address)) and not spec.allow_non_loopback:
                out.problems.append(SpecProblem(
                    key=f"{key}.cmd", value=repr(pub.written),
                    allowed=f"publishes on {'every interface' if address is None else address} (docker run "
                            "-p [ip:][hostPort:]containerPort: without an ip docker binds all interfaces); everything on "
                            "the rig listens on loopback: -p 127.0.0.1:<host port>:<container port>, or set "
                            "allow_non_loopback: true"))
        found = llama_server_words(words)
        if found is None:
            continue
        args, contained = found
        # llama-swap expands its macros before it runs cmd (v250 config.go): ${PORT} is a port it hands out,
        # ${MODEL_ID} the member's id; a word with another macro is left unread (the loader's check names it)
        args = [a.replace("${PORT}", str(spec.llama_swap.start_port)).replace("${MODEL_ID}", mid) for a in args]
        if any("${" in a for a in args):
            continue
        given = _read(f"{key}.cmd", args, None, out)
        if given is None:
            continue
        _repeated(f"{key}.cmd", given, out)
        for g in given:
            if g.key == "--host" and not contained and not loopback_host(str(g.value)) and not spec.allow_non_loopback:
                out.problems.append(SpecProblem(
                    key=f"{key}.cmd", value=repr(_shown(g)),
                    allowed="llama-server listens on every interface of the host with --host " + str(g.value) +
                            "; everything on the rig listens on loopback (127.0.0.0/8, ::1), or set allow_non_loopback: true"))
    _listens_where_proxied(key, m, listens, out)


#: GET paths each engine serves without the API key (the module's list); llama-swap's ``none`` skips the check.
HEALTH_PATHS = {"llama.cpp": frozenset({"/health", "/v1/health", "/models", "/v1/models", "/api/tags", "none"}),
                "vLLM": frozenset({"/health", "/ping", "/version", "none"})}


def _served(spec: RigSpec, mid: str, m: members_mod.Member, out: Findings) -> None:
    """The health path and the served name of a service member, against what its engine serves."""
    key = f"llama_swap.members.{mid}"
    engine = {"strata": "llama.cpp", "gguf_baseline": "llama.cpp", "hyperqwen": "vLLM"}.get(m.spec.service or "")
    if engine is None:
        return
    path = m.spec.check_endpoint.split("?", 1)[0]
    if path not in HEALTH_PATHS[engine]:
        out.problems.append(SpecProblem(
            key=f"{key}.check_endpoint", value=repr(m.spec.check_endpoint),
            allowed=f"{engine} does not serve it without the API key, so llama-swap's health check would fail; "
                    f"{engine} serves {', '.join(sorted(HEALTH_PATHS[engine] - {'none'}))} (or none: no check)"))
    hq = spec.hyperqwen
    if m.spec.service == "hyperqwen" and m.spec.use_model_name and m.spec.use_model_name != hq.served_model_name:
        out.problems.append(SpecProblem(
            key=f"{key}.use_model_name", value=repr(m.spec.use_model_name),
            allowed=f"llama-swap would ask vLLM for {m.spec.use_model_name!r}, but it serves hyperqwen.served_model_name "
                    f"{hq.served_model_name!r} and answers 404 to any other name; leave use_model_name unset or equal"))


def _listens_where_proxied(key: str, m: members_mod.Member, listens: list[int], out: Findings) -> None:
    """A fixed-port member's proxy port is one its command listens on (when the command says any)."""
    if m.port is not None and listens and m.port not in listens:
        out.problems.append(SpecProblem(
            key=f"{key}.proxy", value=repr(m.proxy),
            allowed=f"llama-swap sends requests to port {m.port}, but cmd listens on {', '.join(map(str, sorted(set(listens))))} "
                    "(its --port / docker -p host port); name the port cmd listens on"))


#: vLLM options a spec field renders for HyperQwen (through its .env), by option name.
VLLM_RENDERED = {"--port": "hyperqwen.port", "--host": "hyperqwen.bind", "--served-model-name": "hyperqwen.served_model_name",
                 "--max-model-len": "hyperqwen.max_model_len", "--gpu-memory-utilization": "hyperqwen.gpu_memory_utilization",
                 "--max-num-seqs": "hyperqwen.max_seqs", "--enable-prefix-caching": "hyperqwen.prefix_cache",
                 "--no-enable-prefix-caching": "hyperqwen.prefix_cache", "--speculative-config": "hyperqwen.spec",
                 "--model": "hyperqwen's model (models.hyperqwen)"}


def _extra_args(spec: RigSpec, out: Findings) -> None:
    """HyperQwen's ``EXTRA_ARGS`` against the spec's fields and the DFlash guard (the module's list)."""
    value = spec.hyperqwen.extra_env.get("EXTRA_ARGS")
    if not value:
        return
    key = "hyperqwen.extra_env.EXTRA_ARGS"
    words = value.split()
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, eq, inline = word.partition("=")
        name = name.replace("_", "-")
        if name == "--api-key":
            out.problems.append(SpecProblem(key=key, value=SECRET_SHOWN, allowed=SECRET_ADVICE))
        elif name in VLLM_RENDERED:
            out.warnings.append(SpecWarning(key=key, message=(
                f"{name} is rendered from {VLLM_RENDERED[name]}; vLLM keeps the last one it reads, so one of the two is "
                f"dead text — set {VLLM_RENDERED[name]} instead")))
        if name == "--speculative-config":
            text = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
            m = re.search(r'"num_speculative_tokens"\s*:\s*([0-9]+)', text)
            hq = spec.hyperqwen
            if m and int(m.group(1)) > SAFE_DFLASH_TOKENS and hq.max_model_len >= UNSAFE_SPEC_CONTEXT:
                out.warnings.append(SpecWarning(key=key, message=(
                    f"--speculative-config asks {m.group(1)} speculative tokens at max_model_len {hq.max_model_len}: above "
                    f"the DFlash guard ({SAFE_DFLASH_TOKENS}; DFLASH_TOKENS=15 crashed the engine at 20k context)")))


def _env_twice(mid: str, env: list[str], out: Findings) -> None:
    seen: dict[str, int] = {}
    for i, item in enumerate(env):
        name = item.partition("=")[0]
        if name in seen:
            out.problems.append(SpecProblem(
                key=f"llama_swap.members.{mid}.env[{i}]", value=repr(name),
                allowed=f"{name} is set twice (env[{seen[name]}] too): llama-swap appends env to its own environment and "
                        "Go's os/exec keeps the last value of a key, so the first is dead text; set it once"))
        seen.setdefault(name, i)


def check_engine_args(spec: RigSpec) -> Findings:
    """Every member's command line read by its engine's grammar (the module's list). Pure: reads the spec."""
    out = Findings([], [])
    _extra_args(spec, out)
    resolved = members_mod.resolve_members(spec)
    done: set[str] = set()
    for mid, m in resolved.items():
        section = m.spec.service
        if section in ("strata", "gguf_baseline") and section not in done and not m.spec.cmd:
            done.add(section)
            _service_args(section, getattr(spec, section), m.argv, out)
        _member_command(spec, mid, m, out)
        _served(spec, mid, m, out)
        _env_twice(mid, m.spec.env, out)
    return out
