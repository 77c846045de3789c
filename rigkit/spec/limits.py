"""What the rig can give and one truth per thing (issue #59): values each of a valid type that the rig
still cannot use, checked before any host is touched.

- **Users**: llama-swap's service user is neither root nor the operator's own user (DESIGN.md: its own
  ``llama-swap`` user in the ``docker`` group; a root proxy runs every member's ``cmd`` as root).
- **Ports**: llama-swap's listen port is ≥ 1024 — its user is unprivileged, and Linux lets only
  ``CAP_NET_BIND_SERVICE`` bind below ``net.ipv4.ip_unprivileged_port_start`` (1024 by default;
  capabilities(7), ip-sysctl.rst); the ports llama-swap hands out as ``${PORT}`` (``startPort`` + one per
  member that uses it, v250 ``internal/config/config.go``) end at 65535.
- **Quantities in the wrong unit**: a figure outside any plausible range for its field, the ranges tied to
  the spec's own ``gpu_vram_gib``: a cold boot (or stop, unload, health-check timeout) longer than reading
  the card's whole memory at 10 MiB/s plus 15 minutes of compiling — a value in milliseconds lands far
  above it; a card above :data:`CARD_GIB_MAX` (GiB; a MiB figure lands far above it).
- **Two truths about one thing**: a model with both ``repo_id`` and ``url``; llama-swap's ``version``
  beside a ``release_url`` of another version or architecture (its release assets are
  ``llama-swap_<n>_linux_<arch>.tar.gz`` under ``/download/v<n>/``; the rig is x86_64: amd64); a model
  file of the wrong kind for llama.cpp (``.safetensors``: llama.cpp reads GGUF; a split GGUF's shard
  other than the first: llama.cpp's loader opens ``-00001-of-N.gguf`` and finds the others by
  ``llama_split_path``'s ``%s-%05d-of-%05d.gguf``).
"""

from __future__ import annotations

import re

from rigkit.spec import members as members_mod
from rigkit.spec.model import RigSpec
from rigkit.spec.problems import SpecProblem

#: The lowest port an unprivileged user may bind (Linux ``net.ipv4.ip_unprivileged_port_start`` default).
UNPRIVILEGED_PORT_START = 1024
PORT_MAX = 65535
#: The most memory one accelerator card has today (GiB; AMD Instinct MI355X, 288 GB HBM3E): a
#: ``gpu_vram_gib`` above it is a figure in another unit.
CARD_GIB_MAX = 288
#: The slowest plausible read of the card's memory from disk (MiB/s) and the longest plausible compile
#: (s) before a server answers: together, the longest plausible cold boot for a card of ``gpu_vram_gib``.
SLOWEST_LOAD_MIB_S = 10
LONGEST_COMPILE_S = 900
_SPLIT = re.compile(r"-([0-9]{5})-of-([0-9]{5})\.gguf$")
_RELEASE = re.compile(r"/llama-swap_([0-9]+)_([a-z]+)_([a-z0-9]+)\.tar\.gz$")
_RELEASE_DIR = re.compile(r"/download/(v[0-9]+)/[^/]+$")


def longest_boot_s(spec: RigSpec) -> float:
    """Seconds: the longest plausible cold boot for the spec's card (:data:`SLOWEST_LOAD_MIB_S`,
    :data:`LONGEST_COMPILE_S`, ``gpu_vram_gib``)."""
    return spec.gpu_vram_gib * 1024 / SLOWEST_LOAD_MIB_S + LONGEST_COMPILE_S


def _users(spec: RigSpec) -> list[SpecProblem]:
    user = spec.llama_swap.user
    if user == "root" or user == spec.operator_user:
        return [SpecProblem(key="llama_swap.user", value=repr(user),
                            allowed=f"{'root' if user == 'root' else 'the operator_user'} would run every member's cmd with "
                                    "its rights; llama-swap runs as its own unprivileged user (default llama-swap) in the "
                                    "docker group")]
    return []


def _ports(spec: RigSpec) -> list[SpecProblem]:
    out = []
    ls = spec.llama_swap
    if ls.port < UNPRIVILEGED_PORT_START:
        out.append(SpecProblem(key="llama_swap.port", value=repr(ls.port),
                               allowed=f"below {UNPRIVILEGED_PORT_START}: llama-swap runs as the unprivileged "
                                       f"{ls.user!r}, and only CAP_NET_BIND_SERVICE may bind there "
                                       "(net.ipv4.ip_unprivileged_port_start, capabilities(7)); use 1024–65535"))
    dynamic = [mid for mid, m in members_mod.resolve_members(spec).items() if m.cmd and "${PORT}" in m.cmd]
    last = ls.start_port + len(dynamic) - 1
    if dynamic and last > PORT_MAX:
        out.append(SpecProblem(key="llama_swap.start_port", value=repr(ls.start_port),
                               allowed=f"llama-swap hands {len(dynamic)} members a ${{PORT}} from it, up to {last} > "
                                       f"{PORT_MAX}; start at most at {PORT_MAX - len(dynamic) + 1}"))
    return out


def _quantities(spec: RigSpec) -> list[SpecProblem]:
    out = []
    if spec.gpu_vram_gib > CARD_GIB_MAX:
        out.append(SpecProblem(key="gpu_vram_gib", value=repr(spec.gpu_vram_gib),
                               allowed=f"GiB; no card has more than {CARD_GIB_MAX} GiB (a MiB figure? "
                                       f"{spec.gpu_vram_gib:g} MiB is {spec.gpu_vram_gib / 1024:g} GiB)"))
        return out
    most = longest_boot_s(spec)
    why = (f"s; longer than any plausible cold boot of a {spec.gpu_vram_gib:g} GiB card ({most:g} s: its memory read "
           f"at {SLOWEST_LOAD_MIB_S} MiB/s + {LONGEST_COMPILE_S} s of compiling) — milliseconds?")
    timed = [(f"llama_swap.members.{mid}.cold_boot_s", m.cold_boot_s, most) for mid, m in spec.llama_swap.members.items()]
    timed += [(f"llama_swap.members.{mid}.unload_timeout_s", m.unload_timeout_s, most)
              for mid, m in spec.llama_swap.members.items() if m.unload_timeout_s is not None]
    timed += [("llama_swap.health_check_timeout_s", spec.llama_swap.health_check_timeout_s, most * 1.5)]
    timed += [(f"{s}.stop_timeout_s", getattr(spec, s).stop_timeout_s, most) for s in ("hyperqwen", "strata", "gguf_baseline")]
    for key, value, bound in timed:
        if value > bound:
            out.append(SpecProblem(key=key, value=repr(value), allowed=why.replace(f"({most:g} s", f"({bound:g} s")))
    return out


def _one_truth(spec: RigSpec) -> list[SpecProblem]:
    out = []
    for name, src in spec.models.items():
        if src.repo_id and src.url:
            out.append(SpecProblem(key=f"models.{name}.url", value=repr(src.url),
                                   allowed=f"models.{name} also names repo_id {src.repo_id!r}: one source per model — "
                                           "the hub repo or the URL, not both"))
    ls = spec.llama_swap
    path = ls.release_url.split("?", 1)[0]
    m, d = _RELEASE.search(path), _RELEASE_DIR.search(path)
    want = f"llama-swap_{ls.version.lstrip('v')}_linux_amd64.tar.gz"
    if m is None:
        out.append(SpecProblem(key="llama_swap.release_url", value=repr(ls.release_url),
                               allowed=f"not a llama-swap release asset (llama-swap_<n>_<os>_<arch>.tar.gz); for "
                                       f"llama_swap.version {ls.version!r} on the rig (x86_64 Linux): {want}"))
    elif (m.group(1), m.group(2), m.group(3)) != (ls.version.lstrip("v"), "linux", "amd64") or \
            (d is not None and d.group(1) != ls.version):
        out.append(SpecProblem(key="llama_swap.release_url", value=repr(ls.release_url),
                               allowed=f"names release {d.group(1) if d else 'v' + m.group(1)} for {m.group(2)}_{m.group(3)} "
                                       f"beside llama_swap.version {ls.version!r}; the rig is x86_64 Linux: "
                                       f"…/download/{ls.version}/{want}"))
    for section in ("strata", "gguf_baseline"):
        f = getattr(spec, section).model_file
        if not f:
            continue
        split = _SPLIT.search(f)
        if not f.endswith(".gguf"):
            out.append(SpecProblem(key=f"{section}.model_file", value=repr(f),
                                   allowed="llama.cpp serves GGUF files (.gguf); safetensors are vLLM's (convert with "
                                           "convert_hf_to_gguf.py, or serve it through HyperQwen)"))
        elif split and split.group(1) != "00001":
            first = f[:split.start()] + f"-00001-of-{split.group(2)}.gguf"
            out.append(SpecProblem(key=f"{section}.model_file", value=repr(f),
                                   allowed=f"shard {int(split.group(1))} of a split GGUF: llama.cpp opens the first shard "
                                           f"and finds the others by name; name {first!r}"))
    return out


def limit_problems(spec: RigSpec) -> list[SpecProblem]:
    """Every problem of the module's list, in its order. Pure: reads nothing but the spec."""
    return _users(spec) + _ports(spec) + _quantities(spec) + _one_truth(spec)
