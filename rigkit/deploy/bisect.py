"""``rigkit bisect``: name the change that made the rig slower (issue 68).

The suspects are not commits of one repository but what differs between two recorded generations of a
host (:func:`suspects`): each image digest, each model's commit, each pin (the driver packages and
their series as one — a reboot), the llama-swap release, each member's changed key (a whole member when
only one side has it), and every other spec value (``hyperqwen.env.DFLASH_TOKENS``...). Each suspect
moves *together* its spec keys and its lock entries (a digest is ``<member>.image.ref`` in the spec and
``images.<member>`` in the lock), so a combination — the good generation with some suspects of the bad
one (:func:`combine`) — is one whole spec with the lock beside it. That is how a combination is made valid:
the deploy's "the lock does not resolve the spec" refusal compares an operator's *intent* with a lock, and
a combination, like a rollback's recorded generation, carries the resolved spec itself; it is validated
by the spec's own validators (the compatibility table among them) before anything is deployed, and a
combination they refuse is skipped and said, never forced (so is every suspect that needs a reboot the
operator did not allow with ``--reboot``).

A step deploys a combination the way a rollback deploys a recorded generation (pyinfra with the
combination as its source: :data:`rigkit.deploy.source.COMBINATION_ENV`; rendered by the one renderer),
confirmed by inference or put back (:func:`rigkit.deploy.transaction.settle`), then benched through
llama-swap like the smoke (``rigkit bench --preset small``; not a window: the deploy refuses while one is
open) and judged against the good generation's figures by the bench's own rules
(:func:`rigkit.bench.results.verdict`: FAIL is slower beyond the noise of both runs, PASS within the band;
anything else is measured once more, then said to be undecided). Each step is recorded as a generation
with a ``bisect`` field (``rigkit generations`` shows the walk; a step is never a ``rollback --to``
target: it is a trial mix, not a state anyone declared).

The search (:func:`search`) is over prefixes of the suspects in a fixed order (the ones needing a reboot
last): with the good generation fast and the bad one slow, the first prefix that is slow ends with the
culprit — ⌈log2 N⌉ deploys after the good one's, so one culprit is *named* after ⌈log2 N⌉ + 1 deploys.
Then one more deploy, the culprit alone on the good generation, tells one culprit from a pair: when it
is fast alone, its partner is the first of the earlier suspects that makes it slow, another ⌈log2 k⌉
deploys among the k before it. A re-measure (an undecided verdict) adds a bench, not a deploy; the bad
generation's own bench adds a deploy only when the host does not start at it; going back to where it
started is one deploy more (:func:`plan_steps`). A mix the spec's validators refuse costs no deploy: it is
said skipped and the search tries the next prefix nearest the middle (as ``git bisect skip`` does), within
the same bound; when every mix between the last fast prefix and the first slow one is refused, the answer
is the range of suspects the culprit is one of (or its partner is), never one of them guessed. A step whose
deploy *fails* (it cost a deploy and was put back) still stops the walk.

The host ends where it started, whatever happens: a journal on the host (``rigkit-agent generation
bisect-begin``, :data:`rigkit.paths.BISECT_JOURNAL`) names the start generation before the first step; the
way back deploys it and ends the journal. A step that fails is put back by the confirmation and stops
the bisect; Ctrl-C goes back before exiting; a lost connection or a killed ``rigkit`` leaves the journal,
and ``rigkit bisect --abort`` or the next deploy puts the host back at the start and says so.
"""

from __future__ import annotations

import copy
import json
import math
import secrets as pysecrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from rigkit import exitcodes, hints, paths
from rigkit.common import scratch
from rigkit.lockfile.view import IMAGE_KEYS
from rigkit.render.generations import LOCKFILE_KEYS, RUN_KEYS, flat
from rigkit.spec.compat import DRIVER_PACKAGES

#: Seconds a step costs beyond its deploy, confirm and bench when it holds a suspect of this kind
#: (estimates for ``--dry``: a HyperQwen boot is ~3 min cold, DESIGN.md "The rig"; a reboot waits for a new
#: boot id; an image is a pull; a model commit a download, at :data:`DOWNLOAD_BPS` from its locked sizes).
EXTRA_S = {"reboot": 180.0, "image": 60.0, "hyperqwen": 180.0}
#: Bytes per second a model download is estimated at (a 400 Mbit/s line).
DOWNLOAD_BPS = 50e6
#: A step's own seconds on the rig without any of :data:`EXTRA_S`: a deploy (~30 s), its confirmation and
#: the small bench (a warm-up and a few answers), rounded up.
STEP_S = 90.0


@dataclass(frozen=True)
class Suspect:
    """One difference between the good and the bad generation, moved as one.

    + name: how it is said (``image strata``, ``model strata``, ``driver``, ``pin cuda``, ``llama-swap release``,
      ``member strata: cmd``, ``member extra`` — a whole member —, ``spec hyperqwen.env.DFLASH_TOKENS``)
    + spec_keys: dotted paths in the spec snapshot it sets to the bad generation's value (or removes)
    + lock_keys: ``(section, name)`` entries of the lock it takes from the bad generation's lock
      (``("images", "strata")``; ``("llama_swap", "")`` for the release)
    + good, bad: the values, for saying (the spec keys', else the lock entries' commit/digest/version)
    + reboot: a step holding it reboots the rig (the driver, a kernel)
    + extra_s: seconds it adds to a step (:data:`EXTRA_S`; estimates)
    """

    name: str
    spec_keys: tuple[str, ...] = ()
    lock_keys: tuple[tuple[str, str], ...] = ()
    good: Any = None
    bad: Any = None
    reboot: bool = False
    extra_s: float = 0.0


def _driver_package(pkg: str) -> bool:
    return pkg in DRIVER_PACKAGES or pkg.startswith("nvidia")


def _group(key: str, whole_members: set[str]) -> str:
    """The suspect a dotted spec key belongs to (:class:`Suspect`'s names)."""
    parts = key.split(".")
    if parts[0] in IMAGE_KEYS and len(parts) > 1 and parts[1] == "image":
        return f"image {parts[0]}"
    if parts[0] == "models" and len(parts) > 1:
        return f"model {parts[1]}"
    if parts[0] == "llama_swap" and len(parts) > 1 and parts[1] in ("version", "release_url", "release_sha256"):
        return "llama-swap release"
    if parts[0] == "llama_swap" and len(parts) > 2 and parts[1] == "members":
        return f"member {parts[2]}" if parts[2] in whole_members else f"member {parts[2]}: {'.'.join(parts[3:])}"
    if key in ("nvidia_driver_version", "driver_flavour"):
        return "driver"
    if key == "cuda_version":
        return "pin cuda"
    if parts[0] == "pacman_pins" and len(parts) > 1:
        return _pin_group(parts[1])
    return f"spec {key}"


def _pin_group(pkg: str) -> str:
    if _driver_package(pkg):
        return "driver"
    return f"pin {pkg}"


def _lock_group(section: str, name: str) -> str:
    if section == "images":
        return f"image {name}"
    if section == "models":
        return f"model {name}"
    if section == "pins":
        return _pin_group(name)
    return "llama-swap release"


def _said(entry: Any) -> Any:
    """A lock entry's short form: its commit, digest, version or sha256."""
    if isinstance(entry, dict):
        for k in ("commit", "digest", "version", "sha256"):
            if entry.get(k):
                return entry[k]
    return entry


def suspects(good_spec: dict[str, Any], bad_spec: dict[str, Any], good_lock: dict[str, Any] | None,
             bad_lock: dict[str, Any] | None) -> list[Suspect]:
    """What differs between two generations' spec snapshots and locks (``rigkit-agent generation show N
    --files``: the record's ``spec``, the stored ``models.lock.json`` parsed; None: no lock), as
    :class:`Suspect` s in the order the search tries them: those that need no reboot first, by name,
    then those that do. The lock file's path and this run's switches are no suspect
    (:data:`rigkit.render.generations.LOCKFILE_KEYS`, ``RUN_KEYS``)."""
    fa, fb = flat(good_spec), flat(bad_spec)
    ma = (good_spec.get("llama_swap") or {}).get("members") or {}
    mb = (bad_spec.get("llama_swap") or {}).get("members") or {}
    whole = set(ma) ^ set(mb)
    groups: dict[str, dict[str, Any]] = {}

    def add(name: str) -> dict[str, Any]:
        return groups.setdefault(name, {"spec": [], "lock": []})

    for key in sorted(set(fa) | set(fb)):
        if fa.get(key, _ABSENT) == fb.get(key, _ABSENT) or key.startswith(LOCKFILE_KEYS) or key in RUN_KEYS:
            continue
        name = _group(key, whole)
        parts = key.split(".")
        path = ".".join(parts[:3]) if name.startswith("member ") and ":" not in name else key
        if path not in add(name)["spec"]:
            add(name)["spec"].append(path)
    la, lb = good_lock or {}, bad_lock or {}
    for section in ("images", "models", "pins"):
        sa, sb = la.get(section) or {}, lb.get(section) or {}
        for name in sorted(set(sa) | set(sb)):
            if sa.get(name) != sb.get(name):
                add(_lock_group(section, name))["lock"].append((section, name))
    if la.get("llama_swap") != lb.get("llama_swap"):
        add("llama-swap release")["lock"].append(("llama_swap", ""))
    out = []
    for name, g in groups.items():
        keys, locks = tuple(g["spec"]), tuple(g["lock"])
        if locks and name.startswith(("image", "model", "llama-swap")):
            good = [_said(_lock_entry(la, s, n)) for s, n in locks]
            bad = [_said(_lock_entry(lb, s, n)) for s, n in locks]
        else:
            good = [_get(good_spec, k) for k in keys]
            bad = [_get(bad_spec, k) for k in keys]
        reboot = name == "driver" or name.startswith("pin linux")
        extra = EXTRA_S["reboot"] if reboot else 0.0
        if name.startswith("image"):
            extra += EXTRA_S["image"]
        if name.startswith("model"):
            entry = _lock_entry(lb, "models", name.split(" ", 1)[1]) or {}
            size = sum(int(f.get("size") or 0) for f in entry.get("files") or [] if isinstance(f, dict))
            extra += size / DOWNLOAD_BPS if size else EXTRA_S["image"]
        if "hyperqwen" in name:
            extra += EXTRA_S["hyperqwen"]
        out.append(Suspect(name, keys, locks, good[0] if len(good) == 1 else good,
                           bad[0] if len(bad) == 1 else bad, reboot, extra))
    return sorted(out, key=lambda s: (s.reboot, s.name))


_ABSENT = object()


def _lock_entry(lock: dict[str, Any], section: str, name: str) -> Any:
    return lock.get(section) if not name else (lock.get(section) or {}).get(name)


def _get(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _copy_path(src: dict[str, Any], dst: dict[str, Any], path: str) -> None:
    """``dst``'s value at dotted ``path`` made ``src``'s (removed where ``src`` has none)."""
    parts = path.split(".")
    node_s: Any = src
    for part in parts:
        node_s = node_s.get(part, _ABSENT) if isinstance(node_s, dict) else _ABSENT
    node_d = dst
    for part in parts[:-1]:
        node_d = node_d.setdefault(part, {})
    if node_s is _ABSENT:
        node_d.pop(parts[-1], None)
    else:
        node_d[parts[-1]] = copy.deepcopy(node_s)


def combine(good_spec: dict[str, Any], bad_spec: dict[str, Any], good_lock: dict[str, Any] | None,
            bad_lock: dict[str, Any] | None, chosen: Iterable[Suspect]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The good generation with ``chosen`` suspects of the bad one: ``(spec snapshot, lock)`` — new objects,
    each suspect's spec keys and lock entries taken from the bad side together (removed where it has none).
    ``combine(..., [])`` is the good generation's own; with every suspect, the bad one's."""
    spec = copy.deepcopy(good_spec)
    lock = copy.deepcopy(good_lock) if good_lock is not None else None
    for s in chosen:
        for path in s.spec_keys:
            _copy_path(bad_spec, spec, path)
        for section, name in s.lock_keys:
            if lock is None:
                continue
            if not name:
                _copy_path(bad_lock or {}, lock, section)
            else:
                _copy_entry(bad_lock or {}, lock, section, name)
    return spec, lock


def _copy_entry(src: dict[str, Any], dst: dict[str, Any], section: str, name: str) -> None:
    """Lock entry ``section.name`` made ``src``'s (removed where it has none); ``name`` may hold dots."""
    entry = (src.get(section) or {}).get(name, _ABSENT)
    if entry is _ABSENT:
        (dst.get(section) or {}).pop(name, None)
    else:
        dst.setdefault(section, {})[name] = copy.deepcopy(entry)


class Untestable(RuntimeError):
    """A combination cannot be deployed or measured (refused by the spec's validators, a deploy that failed
    and was put back, a bench that cannot tell); the message says which and why."""


class RefusedMix(Untestable):
    """The spec's validators refuse a combination (:meth:`Runner.deploy`, before anything is deployed): ``step``
    the number it was given, ``label`` how it is said, ``why`` each refused field and its message
    (:class:`rigkit.spec.problems.SpecProblem`, ``; ``-joined). The search skips it (:func:`search`); the two
    generations' own measures stop the walk on it."""

    def __init__(self, step: int, label: str, why: str) -> None:
        self.step, self.label, self.why = step, label, why
        super().__init__(f"step {step} ({label}) cannot be deployed: the spec's validators refuse the "
                         f"combination: {why}")


@dataclass
class Answer:
    """What :func:`search` found.

    + culprits: indices into the suspects: the one named, or the pair ``(partner, culprit)``; ``()`` when only
      a range is known (``among``)
    + named_at: how many *deploys* (probes not refused) had run when the first culprit (or its range) was named
    + probes: every probe, in order: ``(indices tried, slow)``; slow ``None``: refused, skipped, no deploy
    + alone: whether the culprit was measured alone (False with ``pairs`` off, or when refused: ``alone_refused``)
    + alone_refused: the culprit alone is a combination the validators refuse: whether it needs a partner is untold
    + among: the culprit could not be named: the suspects (consecutive indices) it is one of — every mix between
      the fast prefix and the slow one was refused
    + partner_among: the culprit is fast alone and its partner could not be named: the suspects it is one of
    """

    culprits: tuple[int, ...]
    named_at: int
    probes: list[tuple[frozenset[int], bool | None]] = field(default_factory=list)
    alone: bool = False
    alone_refused: bool = False
    among: tuple[int, ...] = ()
    partner_among: tuple[int, ...] = ()


def search(n: int, slow: Callable[[frozenset[int]], bool | None], pairs: bool = True) -> Answer:
    """The culprit among suspects ``0..n-1`` (n ≥ 1), given that none of them is fast and all of them slow
    (the good and bad generations, measured before) and ``slow(indices)`` — whether the good generation with
    those suspects of the bad one is slow; ``None`` when the spec's validators refuse that combination (it cost
    no deploy); raises :class:`Untestable` to stop.

    Prefix search: the smallest k with ``slow({0..k-1})`` names suspect k-1 after ⌈log2 n⌉ probes. With
    ``pairs``, suspect k-1 is then tried alone (1 probe): slow, it is the culprit; fast, the slowdown needs
    one of suspects 0..k-2 beside it, and the same prefix search over them with k-1 added names the first
    that does (⌈log2 (k-1)⌉ probes): the pair. Assumes a slowdown that, once present, stays when more
    suspects are added (monotone); where that fails the answer is still a set that was measured slow
    against one measured fast, one suspect apart.

    Refused probes are skipped, as ``git bisect skip`` does: between the largest prefix measured fast (lo) and
    the smallest measured slow (hi), the next probe is the middle one of the prefixes not yet refused (after a
    refusal, its neighbour nearest the middle). Halving the prefixes still open keeps the bound: at most
    ⌈log2 n⌉ deploys to name (refused probes cost none: :func:`plan_steps` holds counting deploys). When every
    prefix between lo and hi is refused, the culprit is one of suspects lo..hi-1 (``among``); likewise the
    partner (``partner_among``). No combination is probed twice."""
    if n < 1:
        raise ValueError("no suspect to search")
    probes: list[tuple[frozenset[int], bool | None]] = []

    def probe(s: frozenset[int]) -> bool | None:
        got = slow(s)
        probes.append((s, got))
        return got

    def first_slow(count: int, extra: frozenset[int]) -> tuple[int, int]:
        """``(lo, hi)``, knowing k=0 fast and k=count slow: ``hi - lo == 1``, hi the smallest k in 1..count with
        ``slow({0..k-1} | extra)``; or, wider, every k between them refused."""
        lo, hi = 0, count
        refused: set[int] = set()
        while True:
            open_ = [k for k in range(lo + 1, hi) if k not in refused]
            if not open_:
                return lo, hi
            k = open_[(len(open_) - 1) // 2]  # the middle of those open: (lo + hi) // 2 when none is refused
            got = probe(frozenset(range(k)) | extra)
            if got is None:
                refused.add(k)
            elif got:
                hi = k
            else:
                lo = k

    def deploys() -> int:
        return sum(got is not None for _s, got in probes)

    lo, hi = first_slow(n, frozenset())
    named_at = deploys()
    if hi - lo > 1:
        return Answer((), named_at, probes, among=tuple(range(lo, hi)))
    culprit = hi - 1
    if not pairs or culprit == 0:  # suspect 0 was measured alone (the prefix {0}) or n == 1 (the bad one)
        return Answer((culprit,), named_at, probes, alone=culprit == 0)
    got = probe(frozenset({culprit}))
    if got is None:
        return Answer((culprit,), named_at, probes, alone_refused=True)
    if got:
        return Answer((culprit,), named_at, probes, alone=True)
    lo, hi = first_slow(culprit, frozenset({culprit}))
    if hi - lo > 1:
        return Answer((culprit,), named_at, probes, alone=True, partner_among=tuple(range(lo, hi)))
    return Answer((hi - 1, culprit), named_at, probes, alone=True)


def plan_steps(n: int, pairs: bool = True, at_bad: bool = True) -> dict[str, int]:
    """How many deploys a bisect of ``n`` suspects takes at most: ``{"name": the good one and the search to
    name one culprit (⌈log2 n⌉ + 1), "alone": 1 with ``pairs`` (to tell one culprit from a pair), "partner": the
    search for a partner (⌈log2 (n-1)⌉), "bad": 1 when the host does not start at the bad generation
    (``at_bad`` False), "back": 1 (the way back to the start), "most": the sum}``; re-measures add benches,
    not deploys."""
    name = math.ceil(math.log2(n)) + 1 if n > 1 else 1
    alone = 1 if pairs and n > 1 else 0
    partner = math.ceil(math.log2(n - 1)) if pairs and n > 2 else 0
    out = {"name": name, "alone": alone, "partner": partner, "bad": 0 if at_bad else 1, "back": 1}
    out["most"] = sum(out.values())
    return out


def estimate_s(tried: list[Suspect], steps: dict[str, int]) -> float:
    """Seconds the bisect may take on the rig: every step at :data:`STEP_S`, each carrying the costliest
    suspect's :attr:`Suspect.extra_s` (a bound: the search does not know in advance which it tries)."""
    worst = max((s.extra_s for s in tried), default=0.0)
    return steps["most"] * (STEP_S + worst)


#: Where each step's bench folder goes (``<host>/<bisect id>/step-K``): beside ``results/``, never in it — a step is
#: a trial mix nobody declared, so it must be neither a later run's default baseline
#: (:func:`rigkit.bench.results.find_baselines` walks ``results/``) nor the host's figure in ``rigkit report``.
BENCH_FOLDER = Path("bisects")
#: max_tokens of each chat request a step benches by default: the post-deploy smoke's.
SMOKE_MAX_TOKENS = 256

#: The workloads a bisect may judge on (those :func:`rigkit.bench.results.compared_metrics` compares decode for).
WORKLOADS = ("chat-greedy", "chat", "quoting")
#: The metrics a bisect may judge on (``--metric``) and the bench figure each reads
#: (:data:`rigkit.bench.results.METRICS`): decode tok/s by the bench's own verdict; the time to the first token
#: (seconds) by the bench's own speed rule (:func:`rigkit.bench.results.compare_speed`) on its rate, one over the
#: time (:func:`judge`). Not judged: acceptance (the bench has a floor for it, no comparison between runs) and
#: J/token (one figure per run: no spread to tell a change from the noise by).
METRICS = {"decode": "decode_tps", "ttft": "ttft_s"}


@dataclass
class Setup:
    """A bisect's inputs, read from the host before any change: the two generations' spec snapshots and
    locks, the suspects tried, where the host starts, and ``held``: the suspects skipped (those needing a
    reboot, without ``--reboot``), which every step keeps at the bad generation's value (the host's, when it
    starts there): a driver the operator did not allow a reboot for is never moved, so no step needs one."""

    good: int
    bad: int
    good_spec: dict[str, Any]
    bad_spec: dict[str, Any]
    good_lock: dict[str, Any] | None
    bad_lock: dict[str, Any] | None
    tried: list[Suspect]
    held: list[Suspect]
    start: int | None

    @property
    def skipped(self) -> dict[str, str]:
        """``{name: why}`` of the suspects skipped (:attr:`held`)."""
        return {h.name: SKIPPED_WHY for h in self.held}


#: Why a suspect is skipped: every one that needs a reboot, when ``--reboot`` is not given.
SKIPPED_WHY = "needs a reboot, which --reboot did not allow"


def read_setup(remote: Any, good: int, bad: int, reboot: bool) -> Setup:
    """The bisect's :class:`Setup` from ``remote``'s agent (``generation list``, ``show N --files``).
    Raises :class:`BisectInvalid` (exit 2) for a generation that is not kept, failed, a step of a bisect, or
    the same as the other; :class:`Untestable` when the agent cannot be asked."""
    from rigkit.deploy.transaction import agent_json

    index, why = agent_json(remote, "generation", "list", timeout=60)
    if index is None:
        raise Untestable(f"{remote.name}: rigkit-agent generation list: {why}")
    entries = {g["n"]: g for g in index.get("generations", [])}
    for flag, n in (("--good", good), ("--bad", bad)):
        if n not in entries:
            raise BisectInvalid(f"{flag} {n}: {remote.name} has no generation {n} (kept: "
                                f"{', '.join(map(str, entries)) or 'none'}; `{hints.command('generations', host=remote.name)}`)")
        if entries[n].get("failed"):
            raise BisectInvalid(f"{flag} {n}: generation {n} is a failed change that was put back; it never served")
        if entries[n].get("bisect"):
            raise BisectInvalid(f"{flag} {n}: generation {n} is a step of bisect {entries[n]['bisect'].get('id')}, "
                                "a trial mix; give the generations it was between")
    if good == bad:
        raise BisectInvalid(f"--good {good} --bad {bad}: the same generation; nothing differs")
    shown = {}
    for n in (good, bad):
        data, why = agent_json(remote, "generation", "show", str(n), "--files", timeout=60)
        if data is None:
            raise Untestable(f"{remote.name}: rigkit-agent generation show {n}: {why}")
        shown[n] = data
    specs = {n: shown[n]["record"].get("spec") or {} for n in (good, bad)}
    locks = {n: _lock_of(shown[n]) for n in (good, bad)}
    found = suspects(specs[good], specs[bad], locks[good], locks[bad])
    held = [s for s in found if s.reboot and not reboot]
    tried = [s for s in found if s not in held]
    return Setup(good, bad, specs[good], specs[bad], locks[good], locks[bad], tried, held, index.get("current"))


def _lock_of(bundle: dict[str, Any]) -> dict[str, Any] | None:
    text = (bundle.get("contents") or {}).get(paths.MODELS_LOCK)
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


class BisectInvalid(ValueError):
    """Bad input to a bisect (exit 2, nothing touched); the message names the argument and what is allowed."""


def benched_member(setup: Setup, member: str | None) -> str:
    """The member every step benches: ``member`` when given, else the first resident of the bad generation that is
    a resident of the good one too (:func:`rigkit.common.confirm.residents` — from the two generations, not the inventory, which may
    declare something else by now: an operator's walk benched the inventory's Strata, not running in either).
    Raises :class:`BisectInvalid` naming ``--member`` when the member is not running in both (a step's bench
    would refuse to swap the resident out), or when the two have no resident in common."""
    from rigkit.common.confirm import residents

    good, bad = residents(setup.good_spec), residents(setup.bad_spec)
    both = [m for m in bad if m in good]
    if member is None:
        if not both:
            raise BisectInvalid(f"--member: generations {setup.good} and {setup.bad} keep no member running in common "
                                f"(residents: {', '.join(good) or 'none'} and {', '.join(bad) or 'none'}); a bisect "
                                "benches a member both keep running")
        return both[0]
    if member not in both:
        raise BisectInvalid(f"--member {member}: not kept running by both generations {setup.good} and {setup.bad} "
                            f"(allowed: {', '.join(both) or 'none: they keep no member running in common'}); a step's "
                            "bench through llama-swap would swap the resident out")
    return member


def dry_lines(host: str, setup: Setup, pairs: bool) -> list[str]:
    """``rigkit bisect --dry``: the suspects (good → bad), those skipped and why, the most deploys it may take
    (:func:`plan_steps`) and their estimated time on the rig (:func:`estimate_s`)."""
    lines = [f"{host}: bisect generation {setup.good} (good) .. {setup.bad} (bad): {len(setup.tried)} suspect(s)"
             + (f", {len(setup.skipped)} skipped" if setup.skipped else "")]
    for i, s in enumerate(setup.tried):
        lines.append(f"  {i + 1:>2}. {s.name}: {json.dumps(s.good)} -> {json.dumps(s.bad)}"
                     + (f" (+{s.extra_s:.0f} s a step)" if s.extra_s else ""))
    for name, why in setup.skipped.items():
        lines.append(f"  skipped: {name}: {why}; every step keeps generation {setup.bad}'s")
    if not setup.tried:
        lines.append("  nothing to bisect")
        return lines
    steps = plan_steps(len(setup.tried), pairs, at_bad=setup.start == setup.bad)
    lines.append(f"  at most {steps['most']} deploys: {steps['name']} to name one culprit (the good generation and "
                 f"⌈log2 {len(setup.tried)}⌉ = {steps['name'] - 1})"
                 + (f", {steps['alone']} to try it alone, {steps['partner']} more to find a partner" if pairs else "")
                 + (", 1 for the bad generation (the host is not at it)" if steps["bad"] else "")
                 + ", 1 back to where the host started; a re-measure adds a bench, not a deploy; a mix the spec's "
                 "validators refuse is skipped, not deployed")
    lines.append(f"  estimated at most {estimate_s(setup.tried, steps) / 60:.0f} min on the rig "
                 f"({STEP_S:.0f} s a step plus the costliest suspect's extra)")
    return lines


@dataclass
class Step:
    """One measured combination: its number, the suspects it holds (names; ``chosen``: their indices), the
    deploy's outcome and the figures (``figure``: the judged ``metric``'s median and spread, :data:`METRICS`;
    ``verdict``: the bench's against the good one)."""

    n: int
    entries: list[str]
    chosen: list[int] = field(default_factory=list)
    figure: dict[str, Any] | None = None
    metric: str = "decode"
    verdict: str | None = None
    reasons: list[str] = field(default_factory=list)
    slow: bool | None = None
    generation: int | None = None


def _figure(workload: dict[str, Any], metric: str = "decode") -> dict[str, Any] | None:
    """The stats (``median``, ``min``, ``max``, ``cv``, ``n``) of ``metric`` (:data:`METRICS`) in a summary's
    workload, or None."""
    return ((workload or {}).get("metrics") or {}).get(METRICS[metric])


def figures(step: Step) -> str:
    """``decode 41.2 tok/s (38.0-43.1, n 5)`` or ``ttft 182 ms (170-190, n 5)`` for a step's line."""
    d = step.figure or {}
    if d.get("median") is None:
        return f"{step.metric}: no figure"
    if step.metric == "ttft":
        return f"ttft {1000 * d['median']:.0f} ms ({1000 * d.get('min', 0):.0f}-{1000 * d.get('max', 0):.0f}, n {d.get('n')})"
    return f"decode {d['median']:.1f} tok/s ({d.get('min', 0):.1f}-{d.get('max', 0):.1f}, n {d.get('n')})"


def _rate(s: dict[str, Any]) -> dict[str, Any]:
    """A time's stats (seconds) as its rate's (per second): the median, min and max inverted (the fastest
    time is the highest rate); the CV kept (to first order the CV of 1/x is that of x)."""
    return {"median": 1 / s["median"], "min": 1 / s["max"], "max": 1 / s["min"], "cv": s.get("cv"), "n": s.get("n")}


def judge_ttft(current: dict[str, Any], good: dict[str, Any]) -> tuple[bool | None, str, list[str]]:
    """:func:`judge` for ``--metric ttft``: the time to the first token of a step's workload (``current``) against
    the good generation's workload (``good``), by the bench's own speed rule on the rates (one first token per
    TTFT): :func:`rigkit.bench.results.compare_speed` — FAIL (slow) when the rate is more than 15 % lower and every
    request of this run is slower to its first token than every request of the good run; unstable (CV above
    10 %) is undecided; faster beyond the noise is not the slowdown. Returns ``(slow, label, reasons)``."""
    from rigkit.bench.results import compare_speed

    cur, base = _figure(current, "ttft"), _figure(good, "ttft")
    if not cur or not base or not all(isinstance(x.get(k), (int, float)) and x[k] > 0
                                      for x in (cur, base) for k in ("median", "min", "max")):
        which = "this run" if not cur or not cur.get("median") else "the good run"
        return None, "not comparable", [f"ttft not compared: {which} has no time-to-first-token figure"]
    label, _reason = compare_speed(_rate(cur), _rate(base), "ttft")
    said = (f"ttft {1000 * cur['median']:.0f} ms ({1000 * cur['min']:.0f}-{1000 * cur['max']:.0f}) against "
            f"{1000 * base['median']:.0f} ms ({1000 * base['min']:.0f}-{1000 * base['max']:.0f}): the bench's speed "
            f"rule on 1/ttft says {label}")
    if label == "FAIL":
        return True, label, [said]
    if label == "PASS":
        return False, label, [said]
    if cur["max"] < base["min"]:
        return False, label, [said]  # faster to the first token beyond the noise of both runs: not the slowdown
    return None, label, [said]


#: What :func:`judge` puts for a context key neither run reports (the two runs are one host's one member).
WAIVED = "(not reported; the bisect's own host and member)"


def judge(workload_name: str, current: dict[str, Any], good: dict[str, Any],
          metric: str = "decode") -> tuple[bool | None, str, list[str]]:
    """Whether a step's bench ``current`` (its summary's workload) is slow against the good generation's
    ``good`` summary (loaded, with ``_file``), by the bench's own rules (:func:`rigkit.bench.results.verdict`):
    ``(True: FAIL — slower beyond the noise of both runs; False: PASS, or faster; None: undecided, verdict,
    reasons)``. The step is judged in the good run's context on purpose: what differs between them (an image,
    a driver) is what the bisect is about, so the context check that keeps a bench from comparing across
    them does not apply; a context key the good run left unknown is :data:`WAIVED` on both sides. ``metric``
    ``ttft``: :func:`judge_ttft`."""
    from rigkit.bench.context import CONTEXT_KEYS
    from rigkit.bench.results import verdict

    if metric == "ttft":
        return judge_ttft(current, (good.get("workloads") or {}).get(workload_name) or {})

    # the context a server does not report (HyperQwen's engine version, say) is the same on both sides too:
    # one host, one member, as the bisect found them — marked so, or the check would call it unknown
    context = {**(good.get("context") or {})}
    for key in CONTEXT_KEYS:
        if context.get(key) in (None, ""):
            context[key] = WAIVED
    v = verdict(workload_name, current, context, [{**good, "context": context}])
    label = v["verdict"]
    if label == "FAIL":
        return True, label, v["reasons"]
    if label == "PASS":
        return False, label, v["reasons"]
    cur, base = _figure(current), _figure((good.get("workloads") or {}).get(workload_name))
    if label == "WARN" and cur and base and cur.get("min") is not None and base.get("max") is not None \
            and cur["min"] > base["max"]:
        return False, label, v["reasons"]  # faster beyond the noise of both runs: not the slowdown
    return None, label, v["reasons"]


class Runner:
    """The steps of one bisect on one host under one change (:class:`rigkit.deploy.transaction.Change`,
    its lock held under ``lease``): deploy a combination, settle it, bench it, judge it.

    + hs: the host's :class:`rigkit.spec.inventory.HostSpec`; inventory: its path; setup: :class:`Setup`
    + member, workload: what is benched (through llama-swap, as the smoke); out: :class:`rigkit.deploy.run.Output`
    + overrides: this run's switches (``reboot``, ``force``); budget_s: the confirmation's budget (None: default)
    + metric: the figure judged (:data:`METRICS`)
    """

    def __init__(self, ch: Any, hs: Any, inventory: str, setup: Setup, lease: str, bisect_id: str, member: str,
                 workload: str, out: Any, overrides: dict[str, Any], verbose: int = 0,
                 budget_s: float | None = None, metric: str = "decode", max_tokens: int = SMOKE_MAX_TOKENS) -> None:
        self.ch, self.hs, self.inventory, self.setup, self.lease = ch, hs, inventory, setup, lease
        self.metric, self.max_tokens = metric, max_tokens
        self.id, self.member, self.workload, self.out = bisect_id, member, workload, out
        self.overrides, self.verbose, self.budget_s = overrides, verbose, budget_s
        self.steps: list[Step] = []
        self.good_summary: dict[str, Any] | None = None
        self.folder = BENCH_FOLDER / hs.name / bisect_id
        self.deploys = 0
        self.benches = 0
        self.deploy_s = 0.0  # seconds of the steps' deploys and their confirmations (the way back not counted)
        self.bench_s = 0.0  # seconds of the steps' benches
        self.at: Step | None = None  # the step whose combination the host stands at (None: none yet)

    def say(self, text: str, error: bool = False) -> None:
        self.out.note(f"{self.hs.name}: {text}", error=error)

    def deploy(self, chosen: Iterable[int], label: str) -> Step:
        """Deploy the good generation with the ``chosen`` suspects of the bad one, settled (confirmed, or put
        back by the transaction). Raises :class:`RefusedMix` when the spec's validators refuse it (nothing deployed:
        the step is kept, ``verdict`` ``skipped``), :class:`Untestable` when the deploy does not confirm (the host
        is then back at the bisect's start)."""
        from rigkit.common.lock import LEASE_ENV
        from rigkit.deploy.run import run_pyinfra
        from rigkit.deploy.source import COMBINATION_ENV
        from rigkit.deploy.transaction import current, settle
        from rigkit.lockfile.document import dumps_lock
        from rigkit.render.files import render
        from rigkit.render.generations import manifest
        from rigkit.spec.problems import SpecError
        from rigkit.spec.validate import spec_from_dict

        s = self.setup
        picked = [s.tried[i] for i in sorted(chosen)]
        names = [p.name for p in picked]
        n = len(self.steps) + 1
        spec_data, lock = combine(s.good_spec, s.bad_spec, s.good_lock, s.bad_lock, s.held + picked)
        lock_text = dumps_lock(lock) if lock is not None else None
        info = {"id": self.id, "step": n, "entries": names,
                "reason": f"bisect {self.id} step {n}: {label}"}
        folder = scratch.folder("rigkit-bisect-")
        check = dict(spec_data)
        for key in RUN_KEYS:
            check[key] = getattr(self.hs.spec, key)
        if lock_text is not None:
            (folder / "lock.json").write_text(lock_text)
            check["lockfile"] = str(folder / "lock.json")
            check.pop("models_lock", None)
        try:
            spec = spec_from_dict(check, source=f"bisect step {n} ({label})")
        except SpecError as exc:  # nothing deployed: the step is kept, said skipped, and costs no deploy
            self.steps.append(Step(n, names, sorted(chosen), metric=self.metric, verdict="skipped"))
            raise RefusedMix(n, label, "; ".join(str(p) for p in exc.problems)) from None
        combo = folder / "combination.json"
        combo.write_text(json.dumps({"spec": spec_data, "lock_text": lock_text, "bisect": info}, sort_keys=True))
        self.say(f"step {n}: deploying {label}")
        run_only = {k: v for k, v in self.overrides.items() if k in RUN_KEYS}
        # the generation the host is at before this step (the previous step's): a step that fails before recording
        # its own is recorded as a failed attempt, never marked on the step before it (which deployed and was benched)
        self.ch.before, _rec, _live = current(self.ch)
        t0 = time.monotonic()
        proc, _env = run_pyinfra(self.inventory, [self.hs.name], run_only, verbose=self.verbose,
                                 extra_env={COMBINATION_ENV: str(combo), LEASE_ENV: self.lease}, out=self.out)
        self.deploys += 1
        attempt = manifest(spec, render(spec), lock_text, info["reason"], bisect=info)
        try:
            code = settle(self.ch, proc, self.inventory, run_only, self.verbose, self.lease, attempt, False,
                          self.budget_s)
        finally:
            self.ch.before = None
            self.deploy_s += time.monotonic() - t0
        step = Step(n, names, sorted(chosen), metric=self.metric)
        self.steps.append(step)
        self.at = step
        if code != exitcodes.OK:
            raise Untestable(f"step {n} ({label}) did not deploy or confirm (above); the host was put back to "
                             f"generation {self.ch.start}")
        return step

    def bench(self, step: Step, again: bool = False) -> dict[str, Any]:
        """Bench the host as it stands into ``step``'s folder (``rigkit bench --preset small`` through
        llama-swap, one member, one workload): its summary (``_file`` added; ``step.figure`` set, None when the
        bench kept no figure of the metric). Raises :class:`Untestable` when the bench wrote no summary or the
        workload failed."""
        out_dir = self.folder / (f"step-{step.n}" + ("-again" if again else ""))
        cmd = [str(Path(sys.executable).parent / "rigkit"), "bench", "-i", self.inventory, "--host", self.hs.name,
               "--member", self.member, "--workload", self.workload, "--preset", "small", "--max-tokens", str(self.max_tokens),
               "--out", str(out_dir)]
        self.say(f"step {step.n}: benching {self.member}/{self.workload} through llama-swap"
                 + (" again (the first bench could not tell)" if again else ""))
        t0 = time.monotonic()
        subprocess.run(cmd, stdout=subprocess.DEVNULL)  # its exit is judged against other runs: not ours
        self.benches += 1
        self.bench_s += time.monotonic() - t0
        try:
            summary = json.loads((out_dir / "summary.json").read_text())
        except (OSError, ValueError) as exc:
            raise Untestable(f"step {step.n}: the bench wrote no summary ({exc})") from None
        summary["_file"] = str(out_dir / "summary.json")
        workload = (summary.get("workloads") or {}).get(self.workload) or {}
        if workload.get("status") != "ok":
            raise Untestable(f"step {step.n}: the bench did not measure {self.workload}: {workload.get('error')}")
        step.figure = _figure(workload, self.metric)  # None when every figure was unmeasurable: judged undecided, measured again
        return summary

    def measure(self, chosen: Iterable[int], label: str, deploy: bool = True) -> tuple[Step, dict[str, Any]]:
        """:meth:`deploy` (unless ``deploy`` is False: the host as it stands) then :meth:`bench`: the step and
        its summary. Raises :class:`Untestable`."""
        chosen = list(chosen)
        if deploy:
            step = self.deploy(chosen, label)
        else:
            step = Step(len(self.steps) + 1, [self.setup.tried[i].name for i in chosen], sorted(chosen),
                        metric=self.metric)
            self.steps.append(step)
            self.at = step
            self.say(f"step {step.n}: {label} (the host is at it: no deploy)")
        return step, self.bench(step)

    def baseline(self, step: Step, summary: dict[str, Any]) -> None:
        """Take ``step`` (the good generation's) as the baseline every other step is judged against, benched
        once more when it kept no figure of the metric. Raises :class:`Untestable` when it still has none."""
        if step.figure is None:
            summary = self.bench(step, again=True)
            if step.figure is None:
                raise Untestable(f"step {step.n}: the good generation's bench kept no {self.metric} figure twice (every "
                                 "figure unmeasurable: see its summary); run the bisect with a longer workload")
        self.good_summary = summary
        step.slow, step.verdict = False, "baseline"
        self.say(f"step {step.n}: {figures(step)}: the good generation's figures, the baseline of every step")

    def decide(self, step: Step, summary: dict[str, Any], label: str) -> bool:
        """Judge ``step`` against the baseline (:func:`judge`), measured once more when it cannot tell (benched
        again where the host stands at it; deployed again first when the host has moved on since); says its
        line. Returns whether it is slow. Raises :class:`Untestable` when it still cannot tell."""
        slow, verdict, reasons = judge(self.workload, summary["workloads"][self.workload], self.good_summary or {}, self.metric)
        if slow is None:
            if self.at is not step:  # the host moved on (the bad generation, benched first, then the good one's
                # deploy): its combination is deployed again for the second measure, never another one benched
                step, summary = self.measure(step.chosen, label)
            else:
                summary = self.bench(step, again=True)
            slow, verdict, reasons = judge(self.workload, summary["workloads"][self.workload], self.good_summary or {}, self.metric)
        step.slow, step.verdict, step.reasons = slow, verdict, reasons
        self.say(f"step {step.n}: {figures(step)}: {verdict} against the good generation: "
                 + ("SLOW" if slow else "fast" if slow is False else "UNDECIDED") + (f" ({reasons[0]})" if reasons else ""))
        if slow is None:
            raise Untestable(f"step {step.n} ({label}): the bench cannot tell it from the good generation after "
                             f"two measures ({'; '.join(reasons) or verdict}); run the bisect on a quieter host or a "
                             "longer workload")
        return slow


def _label(setup: Setup, chosen: Iterable[int]) -> str:
    chosen = sorted(chosen)
    if not chosen:
        return f"generation {setup.good} (good)" + (
            f" with generation {setup.bad}'s {', '.join(h.name for h in setup.held)} (skipped)" if setup.held else "")
    if len(chosen) == len(setup.tried):
        return f"generation {setup.good} with every suspect of {setup.bad} (bad)"
    return f"generation {setup.good} + " + ", ".join(setup.tried[i].name for i in chosen)


def run(hs: Any, inventory: str, good: int, bad: int, out: Any, *, member: str | None = None,
        workload: str = "chat-greedy", reboot: bool = False, pairs: bool = True, overrides: dict[str, Any] | None = None,
        verbose: int = 0, budget_s: float | None = None, metric: str = "decode",
        max_tokens: int = SMOKE_MAX_TOKENS) -> int:
    """``rigkit bisect --host H --good G --bad B``: the module docstring's walk on ``hs``'s host under its host
    lock; what it says goes to ``out`` (:class:`rigkit.deploy.run.Output`). ``member`` is benched (default: the
    resident both generations keep running, :func:`benched_member`), on ``workload`` with ``max_tokens`` per chat request
    (default the smoke's 256; longer decodes steady a noisy host), judged on ``metric`` (:data:`METRICS`). Returns 0 (a culprit named
    — or the range it is in, the mixes between refused —, or no slowdown to bisect), 1 (stopped: refused, a step that could not be deployed or told, the host lost — the
    host is back at its start unless said), 2 (bad input: nothing touched)."""
    from rigkit.deploy.transaction import ChangeRefused, agent_json, held
    from rigkit.remote import Remote, RemoteError

    from rigkit.common.holds import GENERATION, HoldsError
    from rigkit.remote import HostReadError, read_holds

    remote = Remote(hs.name, hs.connection)
    overrides = dict(overrides or {})
    if reboot:
        overrides["reboot"] = True
    try:
        hold = read_holds(remote).get(GENERATION)
    except (HostReadError, HoldsError) as exc:
        out.note(f"{hs.name}: {exc}", error=True)
        return exitcodes.FAILED
    if hold:
        out.note(f"{hs.name}: held at generation {hold.get('generation')} (a rollback); a bisect would not end "
                 f"where the next deploy starts: refused, nothing touched (`{hints.command('rollback', '--release', host=hs.name)}` first)",
                 error=True)
        return exitcodes.FAILED
    try:
        setup = read_setup(remote, good, bad, reboot)
    except BisectInvalid as exc:
        out.note(str(exc), error=True)
        return exitcodes.INVALID
    except Untestable as exc:
        out.note(str(exc), error=True)
        return exitcodes.FAILED
    try:
        member = benched_member(setup, member)
    except BisectInvalid as exc:
        out.note(f"{hs.name}: {exc}", error=True)
        return exitcodes.INVALID
    for name, why in setup.skipped.items():
        out.note(f"{hs.name}: skipped, not tried: {name}: {why}")
    if not setup.tried:
        out.note(f"{hs.name}: generations {good} and {bad} differ in nothing a bisect can try")
        return exitcodes.OK
    bisect_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + pysecrets.token_hex(2)
    lease = pysecrets.token_hex(8)
    what = f"bisect {bisect_id}"
    try:
        with held([hs], what, "rigkit bisect", out, lease, remote=lambda _: remote) as (ch,):
            begun, why = agent_json(remote, "generation", "bisect-begin", lease=lease,
                                    stdin=json.dumps({"id": bisect_id, "good": good, "bad": bad,
                                                      "command": " ".join(sys.argv[1:])[:500]}))
            if begun is None or not begun.get("start"):
                out.note(f"{hs.name}: the bisect's journal could not be written: {why}; nothing touched", error=True)
                return exitcodes.FAILED
            runner = Runner(ch, hs, inventory, setup, lease, bisect_id, member, workload, out, overrides, verbose,
                            budget_s, metric, max_tokens)
            code = exitcodes.FAILED
            try:
                code = _walk(runner, setup, pairs)
            except Untestable as exc:
                out.note(f"{hs.name}: bisect stopped: {exc}", error=True)
            except KeyboardInterrupt:
                out.note(f"{hs.name}: bisect interrupted (Ctrl-C); putting the host back at generation {ch.start}",
                         error=True)
                code = exitcodes.FAILED
            finally:
                back = _back(runner)
            return code if back == exitcodes.OK else exitcodes.FAILED
    except ChangeRefused as exc:
        out.note(str(exc), error=True)
        return exitcodes.FAILED
    except RemoteError as exc:
        out.note(f"{hs.name}: the host was lost ({exc}); the bisect's journal stays on it: "
                 f"`{hints.command('bisect', '--abort', host=hs.name)}` (or the next deploy) puts it back", error=True)
        return exitcodes.FAILED


def _walk(runner: Runner, setup: Setup, pairs: bool) -> int:
    """The measures and the search (module docstring); says the answer. Returns 0. Raises :class:`Untestable`."""
    n = len(setup.tried)
    everything = range(n)
    bad_step = bad_summary = None
    if runner.ch.start == setup.bad:
        bad_step, bad_summary = runner.measure(everything, _label(setup, everything), deploy=False)
    good_step, good_summary = runner.measure([], _label(setup, []))
    runner.baseline(good_step, good_summary)
    if bad_step is None:
        bad_step, bad_summary = runner.measure(everything, _label(setup, everything))
    if not runner.decide(bad_step, bad_summary, _label(setup, everything)):
        runner.say(f"generation {setup.bad} is not slower than {_label(setup, [])} on {runner.member}/"
                   f"{runner.workload} by the bench's rules ({figures(bad_step)} against {figures(good_step)}): "
                   + ("nothing to bisect among the suspects tried; the slowdown, if any, is in what was skipped: "
                      f"{', '.join(h.name for h in setup.held)} (rerun with --reboot)" if setup.held
                      else "nothing to bisect"))
        return exitcodes.OK
    before = runner.deploys

    def probe(chosen: frozenset[int]) -> bool | None:
        label = _label(setup, chosen)
        try:
            step, summary = runner.measure(chosen, label)
        except RefusedMix as exc:  # no deploy: the search tries another mix
            runner.say(f"step {exc.step}: skipped: the spec's validators refuse {exc.label}: {exc.why}")
            return None
        return runner.decide(step, summary, label)

    answer = Answer((0,), 0, [], alone=True) if n == 1 else search(n, probe, pairs)
    runner.say(answer_line(answer, setup.tried, runner.member, before, n))
    runner.say(f"{len(runner.steps)} step(s), {runner.deploys} deploy(s) ({runner.deploy_s:.0f} s with their "
               f"confirmations), {runner.benches} bench(es) ({runner.bench_s:.0f} s); the walk: "
               f"`{hints.command('generations', host=runner.hs.name)}`; figures under {runner.folder}")
    for st in runner.steps:
        runner.say(f"  step {st.n}: {', '.join(st.entries) or '(good)'}: "
                   + ("skipped (the spec's validators refuse it; no deploy)" if st.verdict == "skipped"
                      else f"{figures(st)}: {st.verdict}"))
    return exitcodes.OK


#: What a range answer adds: why its suspects could not be told apart, and what to do.
UNDEPLOYABLE = ("the mixes between them cannot be deployed (the spec's validators refuse each one: skipped above); "
                "bisect between generations where they changed in one deploy, or fix the mix in the spec")


def answer_line(answer: Answer, tried: list[Suspect], member: str, before: int, n: int) -> str:
    """The ``FOUND`` line of :func:`search`'s ``answer`` over the ``tried`` suspects (``n`` of them) for the
    benched ``member``, ``before`` the deploys made before the search (the good generation's, the bad one's):
    one culprit (on its own, not tried alone, or alone refused), a pair, or a range — the culprit, or its
    partner, is one of consecutive suspects whose mixes the validators all refused."""
    def said(i: int) -> str:
        return f"{tried[i].name} ({json.dumps(tried[i].good)} -> {json.dumps(tried[i].bad)})"

    def one_of(indices: tuple[int, ...]) -> str:
        return ", ".join(tried[i].name for i in indices)

    def bound(verb: str) -> str:
        return (f"; {verb} after {before + answer.named_at} deploy(s) (at most ⌈log2 {n}⌉ + 1 = "
                f"{plan_steps(n)['name']}" + (", + 1 for the bad generation" if before > 1 else "") + ")")

    if answer.among:
        return (f"FOUND a range: the culprit is one of: {one_of(answer.among)} — {UNDEPLOYABLE}"
                f"{bound('found')}")
    if answer.partner_among:
        c = answer.culprits[-1]
        return (f"FOUND a pair: {said(c)} makes {member} slower only beside one of: {one_of(answer.partner_among)} "
                f"(fast alone) — {UNDEPLOYABLE}")
    if len(answer.culprits) == 2:
        return (f"FOUND a pair: {' + '.join(tried[i].name for i in answer.culprits)} make {member} slower together, "
                "neither alone")
    alone = (" on its own" if answer.alone else
             "; whether it needs a partner could not be tried: the spec's validators refuse it alone (skipped above)"
             if answer.alone_refused else " (not tried alone: --no-pairs)")
    return f"FOUND: {said(answer.culprits[0])} makes {member} slower{alone}{bound('named')}"


def _back(runner: Runner) -> int:
    """The host back at the bisect's start: generation ``start`` deployed again (unless nothing was deployed),
    confirmed, the journal ended (by the deploy's last operation, or directly). Returns 0, or 1 (said: the
    journal stays, ``--abort`` or the next deploy finishes it)."""
    from rigkit.deploy.transaction import agent_json

    ch, start = runner.ch, runner.ch.start
    if runner.deploys:
        code = deploy_back(ch, runner.inventory, runner.id, start, runner.lease, runner.overrides, runner.out,
                           runner.verbose, runner.budget_s)
        if code != exitcodes.OK:
            return code
    else:
        ended, why = agent_json(ch.remote, "generation", "bisect-end", lease=runner.lease)
        if ended is None:
            runner.say(f"the bisect's journal could not be ended: {why}", error=True)
            return exitcodes.FAILED
    runner.say(f"back at generation {start}, where the bisect started (no hold left)")
    return exitcodes.OK


def deploy_back(ch: Any, inventory: str, bisect_id: str, start: int, lease: str, overrides: dict[str, Any], out: Any,
                verbose: int = 0, budget_s: float | None = None) -> int:
    """Deploy generation ``start`` on ``ch``'s host as the way back of bisect ``bisect_id`` (the deploy's
    last operation ends the journal: :data:`rigkit.deploy.source.BISECT_ENV`), settled. Returns 0 or 1 (said)."""
    from rigkit.common.lock import LEASE_ENV
    from rigkit.deploy.run import run_pyinfra
    from rigkit.deploy.source import BISECT_ENV, GENERATION_ENV
    from rigkit.deploy.transaction import agent_json, current, settle
    from rigkit.render.generations import manifest_of_record

    info = {"id": bisect_id, "back_to": start, "reason": f"bisect {bisect_id}: back to generation {start}"}
    run_only = {k: v for k, v in overrides.items() if k in RUN_KEYS}
    _n, last, _live = current(ch)  # the step the host is at: the way back changes the members that differ from it
    out.note(f"{ch.name}: bisect {bisect_id}: deploying generation {start} back, where it started")
    proc, _ = run_pyinfra(inventory, [ch.name], run_only, verbose=verbose,
                          extra_env={GENERATION_ENV: str(start), BISECT_ENV: json.dumps(info), LEASE_ENV: lease}, out=out)
    shown, why = agent_json(ch.remote, "generation", "show", str(start), timeout=60)
    attempt = manifest_of_record((shown or {}).get("record") or {}, info["reason"])
    # the confirmation asks the live members the way back touched — those of the start generation that differ
    # from the step the host was at — besides the resident: judged against that step, not the start itself
    # (inside the bisect the change began at the start, and the start against itself touches nothing)
    kept, ch.start_record = ch.start_record, last or ch.start_record
    try:
        code = settle(ch, proc, inventory, run_only, verbose, lease, attempt, False, budget_s)
    finally:
        ch.start_record = kept
    if code != exitcodes.OK:
        out.note(f"{ch.name}: the way back to generation {start} did not confirm (above); the bisect's journal "
                 f"stays: `{hints.command('bisect', '--abort', host=ch.name, inventory_path=inventory)}` tries again",
                 error=True)
    return code


def abort(hs: Any, inventory: str, out: Any, overrides: dict[str, Any] | None = None, verbose: int = 0,
          budget_s: float | None = None) -> int:
    """``rigkit bisect --abort``: put the host back where an interrupted bisect started (its journal on the
    host), under the host lock: generation ``start`` deployed and confirmed (nothing deployed when the host is
    already there), the journal ended. Returns 0 (also: no bisect to abort), 1 (refused or failed: said)."""
    from rigkit.deploy.transaction import ChangeRefused, agent_json, held
    from rigkit.remote import Remote, RemoteError

    remote = Remote(hs.name, hs.connection)
    journal, why = agent_json(remote, "generation", "bisect-show", timeout=60)
    if journal is None:
        out.note(f"{hs.name}: rigkit-agent generation bisect-show: {why}", error=True)
        return exitcodes.FAILED
    if not journal:
        out.note(f"{hs.name}: no interrupted bisect: nothing to put back")
        return exitcodes.OK
    start, bisect_id = journal.get("start"), journal.get("id")
    out.note(f"{hs.name}: bisect {bisect_id} ({journal.get('since')}, generations {journal.get('good')}..{journal.get('bad')}) "
             f"was interrupted; putting the host back at generation {start}, where it started")
    lease = pysecrets.token_hex(8)
    try:
        with held([hs], f"bisect {bisect_id} abort", "rigkit bisect --abort", out, lease,
                  remote=lambda _: remote) as (ch,):
            ended, why = agent_json(remote, "generation", "bisect-end", lease=lease)
            if ended is None:  # not at the start's key: deploy it
                code = deploy_back(ch, inventory, bisect_id, start, lease, dict(overrides or {}), out, verbose, budget_s)
                if code != exitcodes.OK:
                    return code
            out.note(f"{hs.name}: back at generation {start}; bisect {bisect_id} ended (no hold left)")
            return exitcodes.OK
    except ChangeRefused as exc:
        out.note(str(exc), error=True)
        return exitcodes.FAILED
    except RemoteError as exc:
        out.note(f"{hs.name}: the host was lost ({exc}); the journal stays", error=True)
        return exitcodes.FAILED
