"""``rigkit bisect`` without a host (issue 68): the search names a planted culprit or pair among any
number of suspects within its bound, the suspects of two real generations' specs and locks, every
combination of them a valid spec whose ends are the two generations, the journal on the host (begin, end
only once back at the start's key, the start never pruned), and the list's mark of a step."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.cli.generations import list_lines
from rigkit.deploy import bisect as b
from rigkit.host import generations as hostgen
from rigkit.render.generations import LOCKFILE_KEYS, flat, spec_snapshot
from rigkit.spec.validate import spec_from_dict, spec_from_layers
from tests.unit.test_generations import _files, _manifest, host  # noqa: F401 - the host fixture

PINS = {"nvidia-open-dkms": "610.57-1", "nvidia-utils": "610.57-1", "opencl-nvidia": "610.57-1", "cuda": "13.3.1-1"}


# ------------------------------------------------------------------------------ the search
def _oracle(bad: set[int]):
    """slow(S): the planted culprit(s) all in S (a single one, or an interaction of two)."""
    return lambda chosen: bad <= chosen


@given(st.integers(1, 64).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))), st.booleans())
def test_one_culprit_is_named_within_ceil_log2_n_probes_after_the_good_one(case, pairs):
    n, culprit = case
    answer = b.search(n, _oracle({culprit}), pairs)
    assert answer.culprits == (culprit,)
    assert answer.named_at <= math.ceil(math.log2(n))  # + the good generation's deploy: ⌈log2 N⌉ + 1
    steps = b.plan_steps(n, pairs)
    assert answer.named_at + 1 <= steps["name"]
    assert len(answer.probes) <= steps["name"] - 1 + steps["alone"]
    assert answer.alone == (pairs or culprit == 0)
    for chosen, slow in answer.probes:  # every probe judged as the oracle says: nothing assumed
        assert slow == (culprit in chosen)


@given(st.integers(2, 64).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1), min_size=2,
                                                                          max_size=2))))
def test_a_pair_slow_only_together_is_named_as_the_pair(case):
    n, pair = case
    answer = b.search(n, _oracle(pair), pairs=True)
    assert answer.culprits == tuple(sorted(pair))
    steps = b.plan_steps(n, True)
    assert len(answer.probes) <= steps["name"] - 1 + steps["alone"] + steps["partner"]


@given(st.integers(2, 40).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1), min_size=2,
                                                                          max_size=2))))
def test_without_pairs_a_pair_is_named_by_its_second_entry(case):
    n, pair = case
    assert b.search(n, _oracle(pair), pairs=False).culprits == (max(pair),)


def test_a_step_that_cannot_be_measured_stops_the_search():
    def slow(chosen):
        raise b.Untestable("step 2 refused")

    with pytest.raises(b.Untestable, match="step 2 refused"):
        b.search(8, slow)


def _refusals(data, n: int):
    """A rule the spec's validators refuse mixes by, drawn: none; random sets (drawn as each is first asked, so
    any set may be refused and the search must cope); or two suspects written for each other (refused unless
    they move together, the ``--flash-attn`` case of docs/operating.md)."""
    kind = data.draw(st.sampled_from(["none", "random", "together"] if n > 1 else ["none", "random"]))
    if kind == "none":
        return lambda chosen: False
    if kind == "random":
        return lambda chosen: data.draw(st.booleans(), label=f"refuse {sorted(chosen)}")
    a, c = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
    return lambda chosen: (a in chosen) != (c in chosen)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_refused_mixes_are_skipped_never_forced_and_never_wrong(data):
    """Over every n ≤ 64, a planted culprit or pair, pairs on or off and mixes refused at random or by rule: a
    refused probe costs no deploy and is never tried again; a named culprit (or pair) is the planted one; a range
    contains it and every mix between its ends was asked and refused (what the FOUND line says); with nothing
    refused the answer is the plain search's; the deploys stay within :func:`plan_steps`."""
    n = data.draw(st.integers(1, 64), label="n")
    bad = data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=min(2, n)), label="planted")
    pairs = data.draw(st.booleans(), label="pairs")
    refuse = _refusals(data, n)
    seen = {}

    def slow(chosen):
        assert chosen not in seen, f"{sorted(chosen)} tried twice"
        seen[chosen] = None if refuse(chosen) else bad <= chosen
        return seen[chosen]

    answer = b.search(n, slow, pairs) if n > 1 else b.Answer((0,), 0, [], alone=True)
    assert [(s, got) for s, got in answer.probes] == list(seen.items())
    top, low = max(bad), min(bad)
    refused = {s for s, got in answer.probes if got is None}
    if answer.among:  # the culprit's range
        lo, hi = answer.among[0], answer.among[-1] + 1
        assert answer.among == tuple(range(lo, hi)) and len(answer.among) > 1 and answer.culprits == ()
        assert top in answer.among
        assert all(frozenset(range(k)) in refused for k in range(lo + 1, hi))
    else:
        assert answer.culprits[-1] == top
    if answer.partner_among:
        (c,) = answer.culprits
        lo, hi = answer.partner_among[0], answer.partner_among[-1] + 1
        assert len(bad) == 2 and low in answer.partner_among and answer.alone and not answer.alone_refused
        assert all(frozenset(range(k)) | {c} in refused for k in range(lo + 1, hi))
    if len(answer.culprits) == 2:
        assert set(answer.culprits) == bad
    if answer.alone_refused:
        assert frozenset({top}) in refused and not answer.alone and answer.culprits == (top,)
    elif len(answer.culprits) == 1 and not answer.partner_among and answer.alone and top > 0:
        assert bad == {top}  # slow on its own: measured so
    if not refused:
        plain = b.search(n, _oracle(bad), pairs) if n > 1 else answer
        assert (answer.culprits, answer.probes, answer.named_at) == (plain.culprits, plain.probes, plain.named_at)
    deploys = [s for s, got in answer.probes if got is not None]
    steps = b.plan_steps(n, pairs)
    assert answer.named_at <= steps["name"] - 1 == (math.ceil(math.log2(n)) if n > 1 else 0)
    assert len(deploys) <= steps["name"] - 1 + steps["alone"] + steps["partner"]


def test_every_refused_set_of_prefixes_keeps_the_bound_for_small_n():
    """Exhaustively for n ≤ 10 (every culprit, every set of refused prefixes): the prefix search names the culprit
    or a range holding it within ⌈log2 n⌉ deploys. The middle is taken among the prefixes still open — after a
    refusal the neighbour that halves them (n 8, culprit 7, prefix 4 refused: probing 3 first would cost 4)."""
    import itertools

    for n in range(2, 11):
        bound = b.plan_steps(n, pairs=False)["name"] - 1
        for culprit in range(n):
            for r in range(n):
                for refused in itertools.combinations(range(1, n), r):
                    gone = {frozenset(range(k)) for k in refused}
                    answer = b.search(n, lambda s: None if s in gone else culprit in s, pairs=False)
                    assert answer.named_at <= bound, (n, culprit, refused)
                    assert answer.culprits == (culprit,) or culprit in answer.among, (n, culprit, refused)


def test_the_plan_counts():
    assert b.plan_steps(8) == {"name": 4, "alone": 1, "partner": 3, "bad": 0, "back": 1, "most": 9}
    assert b.plan_steps(6, pairs=False, at_bad=False) == {"name": 4, "alone": 0, "partner": 0, "bad": 1, "back": 1,
                                                          "most": 6}
    assert b.plan_steps(1)["most"] == 2


# ------------------------------------------------------------------------------ suspects and combinations
def _spec(**over):
    return spec_from_layers([{"pacman_pins": dict(PINS), "paused_timers": [], "lock_files": [], **over}])


DIGEST_A, DIGEST_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def _pair():
    """Two generations' spec snapshots and locks with seven differences: an image digest, a model commit
    (lock only), a member's key, a HyperQwen env value, the cuda pin, the llama-swap release, the driver."""
    good = spec_snapshot(_spec())
    bad_spec = _spec(nvidia_driver_version="610.60", hyperqwen={"dflash_tokens": 5}, llama_swap={"members": {"gguf-baseline": {"ttl": 300}}},
                     pacman_pins={**PINS, "cuda": "13.3.2-1", "nvidia-open-dkms": "610.60-1",
                                  "nvidia-utils": "610.60-1", "opencl-nvidia": "610.60-1"})
    bad = spec_snapshot(bad_spec)
    good["strata"]["image"]["ref"], bad["strata"]["image"]["ref"] = DIGEST_A, DIGEST_B
    lock_good = {"images": {"strata": {"digest": DIGEST_A}}, "models": {"m": {"commit": "1" * 40, "files": []}},
                 "pins": {"cuda": {"version": "13.3.1-1"}}, "llama_swap": {"sha256": "c" * 64}}
    lock_bad = {"images": {"strata": {"digest": DIGEST_B}}, "models": {"m": {"commit": "2" * 40, "files": []}},
                "pins": {"cuda": {"version": "13.3.2-1"}}, "llama_swap": {"sha256": "d" * 64}}
    return good, bad, lock_good, lock_bad


def test_the_suspects_of_two_generations_each_moved_whole():
    good, bad, lg, lb = _pair()
    found = b.suspects(good, bad, lg, lb)
    names = [s.name for s in found]
    assert names[-1] == "driver" and found[-1].reboot  # last: the search rarely needs its reboot
    assert {"image strata", "model m", "pin cuda", "llama-swap release", "driver"} <= set(names)
    assert any(n.startswith("member gguf-baseline:") for n in names)
    assert any(n.startswith("spec hyperqwen.") for n in names)
    image = found[names.index("image strata")]
    assert image.spec_keys == ("strata.image.ref",) and image.lock_keys == (("images", "strata"),)
    assert (image.good, image.bad) == (DIGEST_A, DIGEST_B)
    assert found[names.index("model m")].bad == "2" * 40  # a commit only the lock records
    assert not any(s.reboot for s in found[:-1])


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_every_combination_is_a_valid_spec_between_the_two(data):
    good, bad, lg, lb = _pair()
    found = b.suspects(good, bad, lg, lb)
    chosen = data.draw(st.sets(st.sampled_from(range(len(found)))))
    spec, lock = b.combine(good, bad, lg, lb, [found[i] for i in chosen])
    moved = {k for i in chosen for k in found[i].spec_keys}
    fg, fb, fc = flat(good), flat(bad), flat(spec)
    for key in set(fg) | set(fb):
        if key.startswith(LOCKFILE_KEYS):
            continue
        owner = next((p for p in moved if key == p or key.startswith(p + ".")), None)
        assert fc.get(key) == (fb.get(key) if owner else fg.get(key)), key
    for s in found:
        for section, name in s.lock_keys:
            side = lb if found.index(s) in chosen else lg
            assert (lock.get(section) if not name else lock[section].get(name)) == \
                (side.get(section) if not name else side[section].get(name))
    spec_from_dict({**spec, "reboot": False, "force": False})  # the validators accept it
    assert b.combine(good, bad, lg, lb, []) == (good, lg)
    assert b.combine(good, bad, lg, lb, found) == (bad, lb)


def test_a_combination_the_validators_refuse_is_said():
    good, bad, lg, lb = _pair()
    bad["hyperqwen"]["dflash_tokens"] = -3  # not a draft length
    found = [s for s in b.suspects(good, bad, lg, lb) if s.name.startswith("spec hyperqwen")]
    spec, _ = b.combine(good, bad, lg, lb, found)
    from rigkit.spec.problems import SpecError

    with pytest.raises(SpecError, match="dflash_tokens"):
        spec_from_dict({**spec, "reboot": False, "force": False})


def test_dry_says_the_suspects_the_bound_and_what_is_skipped():
    good, bad, lg, lb = _pair()
    found = b.suspects(good, bad, lg, lb)
    setup = b.Setup(1, 2, good, bad, lg, lb, [s for s in found if not s.reboot], [s for s in found if s.reboot], 2)
    lines = b.dry_lines("rig", setup, pairs=True)
    n = len(setup.tried)
    assert lines[0] == f"rig: bisect generation 1 (good) .. 2 (bad): {n} suspect(s), 1 skipped"
    assert "  skipped: driver: needs a reboot, which --reboot did not allow; every step keeps generation 2's" in lines
    assert any(f"to name one culprit (the good generation and ⌈log2 {n}⌉ = {math.ceil(math.log2(n))})" in ln
               for ln in lines)
    assert lines[-1].startswith("  estimated at most ")


# ------------------------------------------------------------------------------ the journal on the host
def test_the_journal_ends_only_once_the_host_is_back_at_its_start(host):  # noqa: F811
    root = host.root
    texts = _files(root)
    hostgen.record(host, _manifest(texts, root), "rig")
    begun = hostgen.bisect_begin(host, {"id": "x", "good": 1, "bad": 1})
    assert begun["start"] == 1
    with pytest.raises(hostgen.GenerationError, match="interrupted bisect"):
        hostgen.bisect_begin(host, {"id": "y"})
    step = _files(root, env="DFLASH_TOKENS=5\n")
    entry = hostgen.record(host, _manifest(step, root, bisect={"id": "x", "step": 1, "entries": ["spec a"]}), "rig")
    assert entry["bisect"]["step"] == 1 and hostgen.read_index(host.path("generations"))["current"] == 2
    assert "[bisect step 1]" in list_lines(hostgen.read_index(host.path("generations")), None)[1]
    with pytest.raises(hostgen.GenerationError, match="not back at generation 1"):
        hostgen.bisect_end(host)
    for _ in range(12):  # many steps: the start is never pruned while the journal stands
        hostgen.record(host, _manifest(_files(root, env="DFLASH_TOKENS=3\n"), root, keep=2), "rig")
        hostgen.record(host, _manifest(step, root, keep=2), "rig")
    assert 1 in [g["n"] for g in hostgen.read_index(host.path("generations"))["generations"]]
    hostgen.record(host, _manifest(_files(root), root), "rig")  # the way back: the start's key again
    assert hostgen.bisect_end(host) == {"ended": True, "start": 1, "current": 1}
    assert hostgen.read_index(host.path("generations"))["current"] == 1
    assert hostgen.bisect_end(host)["ended"] is False  # no journal: nothing to end


def test_a_standing_journal_sends_the_next_deploy_to_the_full_run(host):  # noqa: F811
    """The gap a killed bisect left (its last step declaring exactly the spec): the deploy's reading under the lock
    (:func:`rigkit.host.generations.current`, ``lock run --current``) carries the journal, and a journal is a
    reason for the full run (:func:`rigkit.deploy.converged.bisect_reasons`) whatever the stamps say — the full
    run deploys the start back and ends it (rigkit.deploy.source.source_for)."""
    from rigkit.deploy import converged

    root = host.root
    hostgen.record(host, _manifest(_files(root), root), "rig")
    assert hostgen.current(host.path("generations"))["bisect"] is None
    assert converged.bisect_reasons(None) == [] and converged.bisect_reasons({}) == []
    hostgen.bisect_begin(host, {"id": "k", "good": 1, "bad": 2})
    step = _manifest(_files(root, env="DFLASH_TOKENS=5\n"), root, bisect={"id": "k", "step": 1, "entries": ["spec a"]})
    hostgen.record(host, step, "rig")
    reading = hostgen.current(host.path("generations"))
    assert reading["current"] == 2 and reading["bisect"]["id"] == "k" and reading["bisect"]["start"] == 1
    reasons = converged.bisect_reasons(reading["bisect"])
    assert len(reasons) == 1 and "interrupted bisect (k, " in reasons[0] and "at generation 1" in reasons[0], reasons


# ------------------------------------------------------------------------------ judging a step
def _workload(median: float, spread: float = 0.01, n: int = 4) -> dict:
    """A bench summary's workload (rigkit.bench.results' shape) with a decode figure of ``median`` tok/s."""
    return {"status": "ok", "metrics": {"decode_tps": {"median": median, "min": median * (1 - spread),
                                                       "max": median * (1 + spread), "cv": spread / 2, "n": n}}}


@given(st.sampled_from([{}, {"engine": "vllm"}, {"engine": None, "quantization": ""}]),
       st.floats(min_value=10, max_value=5000), st.floats(min_value=0.05, max_value=0.6))
def test_a_slowdown_beyond_the_noise_is_slow_whatever_context_the_server_leaves_unknown(context, good, ratio):
    """What the sandbox showed (HyperQwen's stand-in reports no engine version): the good run's unknown context
    keys must not turn every step into "no baseline". The bench's own rule decides: more than 15 % slower with
    every request slower than the baseline's slowest is slow, the same figures are not."""
    base = {"context": context, "workloads": {"chat-greedy": _workload(good)}, "_file": "good/summary.json"}
    slow, label, _ = b.judge("chat-greedy", _workload(good * ratio), base)
    assert (slow, label) == (True, "FAIL")
    same, label, _ = b.judge("chat-greedy", _workload(good), base)
    assert (same, label) == (False, "PASS")


class _Out:
    def __init__(self):
        self.lines = []

    def note(self, text, error=False):
        self.lines.append(text)


def test_an_undecided_step_the_host_has_left_is_deployed_again_before_its_second_measure():
    """The bad generation is benched first where the host starts, then the good one is deployed: a second
    measure of the bad one must deploy it again — benching the host as it stands would measure the good one
    (the sandbox's first planted walk measured 242 tok/s for "the bad generation" that way)."""
    setup = b.Setup(1, 2, {}, {}, None, None, [b.Suspect("spec a"), b.Suspect("spec b")], [], 2)
    hs = type("HS", (), {"name": "h"})()
    r = b.Runner(None, hs, "inv", setup, "lease", "id", "m", "chat-greedy", _Out(), {})
    figures = {(): 100.0, (0, 1): 20.0}
    shaky = {"first": True}
    deployed = []

    def deploy(chosen, label):
        deployed.append(tuple(sorted(chosen)))
        step = b.Step(len(r.steps) + 1, [], sorted(chosen))
        r.steps.append(step)
        r.at = step
        return step

    def bench(step, again=False):
        key = tuple(r.at.chosen)
        w = _workload(figures[key], spread=0.3 if key == (0, 1) and shaky.pop("first", False) else 0.01)
        step.figure = w["metrics"]["decode_tps"]
        return {"workloads": {"chat-greedy": w}, "context": {}, "_file": f"step-{step.n}"}

    r.deploy, r.bench = deploy, bench
    bad_step, bad_summary = r.measure([0, 1], "bad", deploy=False)  # the host starts at the bad generation
    good_step, good_summary = r.measure([], "good")
    r.baseline(good_step, good_summary)
    assert r.decide(bad_step, bad_summary, "bad") is True  # undecided (CV 15 %), then measured at it again
    assert deployed == [(), (0, 1)] and r.at.chosen == [0, 1]


def _ttft(median: float, spread: float = 0.01, n: int = 4) -> dict:
    """A workload whose time-to-first-token figure is ``median`` seconds."""
    return {"status": "ok", "metrics": {"ttft_s": {"median": median, "min": median * (1 - spread),
                                                   "max": median * (1 + spread), "cv": spread / 2, "n": n}}}


@given(st.floats(min_value=0.005, max_value=30), st.floats(min_value=1.3, max_value=20),
       st.floats(min_value=0.0, max_value=0.3))
def test_ttft_is_judged_by_the_bench_speed_rule_on_its_rate(good, ratio, spread):
    """``--metric ttft``: a step is slow exactly when the bench's own speed rule (compare_speed) says FAIL on the
    rates (1/ttft): more than 15 % slower and every request slower to its first token than every good one;
    an unstable run (CV above 10 %) is undecided; the same figures PASS, faster is never the slowdown."""
    from rigkit.bench.results import compare_speed

    step, base = _ttft(good * ratio, spread), _ttft(good, 0.01)
    slow, label, reasons = b.judge("chat-greedy", step, {"workloads": {"chat-greedy": base}}, "ttft")
    want, _ = compare_speed(b._rate(step["metrics"]["ttft_s"]), b._rate(base["metrics"]["ttft_s"]), "ttft")
    assert label == want and reasons and reasons[0].startswith("ttft ")
    assert slow is (True if want == "FAIL" else None)
    if spread < 0.1:  # a CV below the bench's 10 %: disjoint spreads 30 % or more apart are a FAIL
        assert slow is True
    assert b.judge("chat-greedy", base, {"workloads": {"chat-greedy": base}}, "ttft")[:2] == (False, "PASS")
    faster = b.judge("chat-greedy", _ttft(good / ratio, 0.01), {"workloads": {"chat-greedy": step}}, "ttft")
    assert faster[0] is False or spread >= 0.2  # faster beyond the noise (a noisy baseline: not judged)
    assert b.judge("chat-greedy", {"status": "ok", "metrics": {}}, {"workloads": {"chat-greedy": base}},
                   "ttft")[:2] == (None, "not comparable")


def test_the_cli_offers_the_metrics_the_bisect_judges():
    from rigkit.cli.bisect import bisect as command

    opt = next(p for p in command.params if p.name == "metric")
    assert list(opt.type.choices) == list(b.METRICS)
    step = b.Step(1, [], figure={"median": 0.182, "min": 0.17, "max": 0.19, "n": 5}, metric="ttft")
    assert b.figures(step) == "ttft 182 ms (170-190, n 5)"


def test_a_steps_bench_asks_the_max_tokens_given_and_lands_outside_the_results_folder(tmp_path, monkeypatch):
    """Each step's bench is a normal bench folder under ``bisects/<host>/<id>/step-K``, never under ``results/``:
    a new operator saw the next smoke take a bisect step (a mix nobody declared) as its default baseline and the
    report show it as the host's figure. ``--max-tokens`` reaches the bench (longer decodes steady a noisy host)."""
    from rigkit.bench.results import find_baselines

    monkeypatch.chdir(tmp_path)
    asked = []

    def fake_run(cmd, **_kw):
        asked.append(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True)
        w = _workload(100.0)
        (out / "summary.json").write_text(json.dumps({"timestamp": "2026-12-06T00:00:00+00:00", "context": {},
                                                      "workloads": {"chat-greedy": w}}))

    monkeypatch.setattr(b.subprocess, "run", fake_run)
    setup = b.Setup(1, 2, {}, {}, None, None, [b.Suspect("spec a")], [], 2)
    hs = type("HS", (), {"name": "h"})()
    r = b.Runner(None, hs, "inv", setup, "lease", "id7", "m", "chat-greedy", _Out(), {}, max_tokens=2048)
    summary = r.bench(b.Step(1, [], []))
    assert asked[0][asked[0].index("--max-tokens") + 1] == "2048"
    assert Path(summary["_file"]).resolve() == (tmp_path / "bisects" / "h" / "id7" / "step-1" / "summary.json")
    (tmp_path / "results").mkdir()
    assert find_baselines("results") == [] and len(find_baselines(".")) == 1  # found where it is, never in results/


def test_the_way_back_judges_against_the_step_the_host_is_at(monkeypatch):
    """:func:`bisect.deploy_back` reads the host's current generation as :func:`rigkit.deploy.transaction.current`
    returns it — ``(n, record, live sha256)`` — and settles the way back against that step's record, the start's
    restored after. (It once unpacked two values: every walk that deployed crashed on its way back, the journal
    left standing.)"""
    import types

    from rigkit.deploy import bisect as walk
    from rigkit.deploy import run as deploy_run
    from rigkit.deploy import transaction
    from rigkit.render import generations as gens

    seen = {}
    monkeypatch.setattr(deploy_run, "run_pyinfra", lambda *a, **k: (object(), {}))
    monkeypatch.setattr(transaction, "current", lambda ch: (7, {"key": "step-7"}, "sha256-live"))
    monkeypatch.setattr(transaction, "agent_json", lambda *a, **k: ({"record": {"key": "start-3"}}, ""))
    monkeypatch.setattr(gens, "manifest_of_record", lambda record, reason: {"key": record.get("key")})

    def settle(ch, proc, inventory, run_only, verbose, lease, attempt, no_revert, budget_s):
        seen.update(judged_against=ch.start_record, attempt=attempt)
        return 0

    monkeypatch.setattr(transaction, "settle", settle)
    ch = types.SimpleNamespace(name="h", start_record={"key": "start-3"}, remote=None)
    out = types.SimpleNamespace(note=lambda *a, **k: None)
    assert walk.deploy_back(ch, "inventory.py", "b1", 3, "lease", {}, out) == 0
    assert seen == {"judged_against": {"key": "step-7"}, "attempt": {"key": "start-3"}}
    assert ch.start_record == {"key": "start-3"}


@pytest.mark.parametrize("before, marked, recorded", [(None, [10], []), (10, [], ["attempt"])])
def test_a_failed_step_is_recorded_as_its_own_attempt_not_marked_on_the_step_before(monkeypatch, before, marked,
                                                                                     recorded):
    """A bisect's step that fails before recording its generation leaves the host current at the step before it
    (generation 10, deployed and benched), while the change began at the bisect's start (9). With ``before``
    (:attr:`rigkit.deploy.transaction.Change.before`, set by the bisect's :meth:`Runner.deploy`) :func:`settle`
    records the failed mix as an attempt of its own; without it (the one run of a deploy) generation 10 is "the
    change's new generation" and gets marked failed — what the sandbox walk showed before ("the failed attempt is
    generation 10")."""
    import types

    from rigkit.deploy import run as deploy_run
    from rigkit.deploy import transaction as tx

    seen = {"marked": [], "recorded": []}
    monkeypatch.setattr(deploy_run, "host_result", lambda proc, name: (["llama-swap | Activate"], 3, True))
    monkeypatch.setattr(tx, "relock", lambda ch, lease: None)
    monkeypatch.setattr(tx, "current", lambda ch: (10, {"key": "step-10"}, "live"))
    monkeypatch.setattr(tx, "mark_failed", lambda ch, n, why, lease: seen["marked"].append(n) or True)
    monkeypatch.setattr(tx, "record_failed", lambda ch, manifest, why, lease: seen["recorded"].append(manifest["key"]) or 11)
    monkeypatch.setattr(tx, "_failed", lambda ch, n, why, no_revert, inventory, revert: 1)
    ch = types.SimpleNamespace(name="h", start=9, start_record={"key": "start-9"}, before=before, what="bisect x")
    proc = types.SimpleNamespace(returncode=1)
    assert tx._settle(ch, proc, "inventory.py", {}, 0, "lease", {"key": "attempt", "spec": {}}, False, None) == 1
    assert seen == {"marked": marked, "recorded": recorded}


def test_a_mix_the_validators_refuse_costs_no_deploy_and_touches_no_host():
    """:meth:`Runner.deploy` validates the combination before anything else: a refused one raises
    :class:`RefusedMix` naming the field and what is allowed, keeps the step as skipped, and never reaches the host
    (``ch`` None: any host call would raise AttributeError) nor counts a deploy."""
    import types

    good, bad, lg, lb = _pair()
    bad["hyperqwen"]["dflash_tokens"] = -3  # not a draft length
    tried = [s for s in b.suspects(good, bad, lg, lb) if not s.reboot]
    setup = b.Setup(1, 2, good, bad, lg, lb, tried, [], 1)
    out = _Out()
    r = b.Runner(None, types.SimpleNamespace(name="h", spec=_spec()), "inv", setup, "lease", "id", "m", "chat-greedy",
                 out, {})
    i = next(i for i, s in enumerate(tried) if s.name.startswith("spec hyperqwen"))
    with pytest.raises(b.RefusedMix) as refused:
        r.deploy([0, i], "mix")
    assert refused.value.step == 1 and refused.value.why.startswith("hyperqwen.dflash_tokens: -3 (int) — ")
    assert r.deploys == 0 and out.lines == [] and r.at is None
    assert [(s.n, s.chosen, s.verdict) for s in r.steps] == [(1, [0, i], "skipped")]


def _together(x: int, y: int):
    """The validators' rule for two suspects written for each other: a mix moving one without the other is refused."""
    return lambda chosen: (x in chosen) != (y in chosen)


def _walked(n: int, culprits: set[int], refuse, pairs: bool = True):
    """:func:`b._walk` over ``n`` suspects with ``culprits`` planted (slow when all are held) and the mixes
    ``refuse(chosen)`` says the (stubbed) validators refuse; the deploy and the bench stubbed, the measures, the
    judging, the search and the sayings real. Returns (runner, lines)."""
    import types

    setup = b.Setup(1, 2, {}, {}, None, None, [b.Suspect(f"spec {chr(97 + i)}", good=i, bad=i + 1) for i in range(n)],
                    [], 1)
    out = _Out()
    r = b.Runner(types.SimpleNamespace(start=1), types.SimpleNamespace(name="h"), "inv", setup, "lease", "id", "m",
                 "chat-greedy", out, {})

    def deploy(chosen, label):
        chosen = sorted(chosen)
        step = b.Step(len(r.steps) + 1, [setup.tried[i].name for i in chosen], chosen)
        r.steps.append(step)
        if refuse(set(chosen)):
            step.verdict = "skipped"
            raise b.RefusedMix(step.n, label, "spec.x: 1 (int) — moves with spec.y")
        r.deploys += 1
        r.at = step
        return step

    def bench(step, again=False):
        w = _workload(20.0 if culprits <= set(r.at.chosen) else 100.0)
        step.figure = w["metrics"]["decode_tps"]
        return {"workloads": {"chat-greedy": w}, "context": {}, "_file": f"step-{step.n}"}

    r.deploy, r.bench = deploy, bench
    assert b._walk(r, setup, pairs) == 0
    return r, out.lines


def test_the_walk_names_a_range_when_every_mix_between_is_refused():
    """Six suspects, the culprit d (3), c and e written for each other: the prefixes holding c without e are
    refused (skipped, said, no deploy); the answer is the range c, d, e, never a guess."""
    r, lines = _walked(6, {3}, _together(2, 4))
    skipped = [ln for ln in lines if ": skipped: the spec's validators refuse generation 1 + " in ln]
    assert len(skipped) == 2 and all(ln.endswith(": spec.x: 1 (int) — moves with spec.y") for ln in skipped)
    (found,) = [ln for ln in lines if "FOUND" in ln]
    assert found.startswith("h: FOUND a range: the culprit is one of: spec c, spec d, spec e — the mixes between "
                            "them cannot be deployed"), found
    assert r.deploys == 4 and "found after 4 deploy(s)" in found  # good, bad, two probes
    assert any(ln.endswith("skipped (the spec's validators refuse it; no deploy)") for ln in lines)


def test_the_walk_says_when_the_culprit_alone_is_refused():
    """The culprit c named, but c without b refused (c needs b, not the other way round): named, and said that whether
    it needs a partner was not tried."""
    _r, lines = _walked(4, {2}, lambda chosen: 2 in chosen and 1 not in chosen)
    (found,) = [ln for ln in lines if "FOUND" in ln]
    assert found.startswith('h: FOUND: spec c (2 -> 3) makes m slower; whether it needs a partner could not be '
                            "tried: the spec's validators refuse it alone"), found


def test_the_walk_names_a_partner_range():
    """A pair (a, d) with a and b written for each other: d is fast alone, and its partner is one of a, b."""
    _r, lines = _walked(5, {0, 3}, _together(0, 1))
    (found,) = [ln for ln in lines if "FOUND" in ln]
    assert found.startswith("h: FOUND a pair: spec d (3 -> 4) makes m slower only beside one of: spec a, spec b "
                            "(fast alone) — the mixes between them cannot be deployed"), found


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_a_skipped_driver_stays_at_the_bad_generations_in_every_step(data):
    """Without ``--reboot`` the driver is skipped (:func:`bisect.read_setup`): every step the walk deploys — the
    good one's baseline included — keeps the *bad* generation's driver series and pins (the host's, when it starts
    there), so no step needs the reboot the operator did not allow. Before, the good step carried the good
    generation's driver: its ``pacman -U`` left a reboot pending, and without ``--reboot`` the deploy stops there
    (the walk could not even measure its baseline). The rest of each mix is the good generation with the chosen
    suspects of the bad one. Checked over generated choices, on what :meth:`Runner.deploy` hands to pyinfra."""
    import json
    import types

    from rigkit.deploy import run as deploy_run
    from rigkit.deploy import source, transaction

    good, bad, lg, lb = _pair()
    found = b.suspects(good, bad, lg, lb)
    held = [s for s in found if s.reboot]
    tried = [s for s in found if not s.reboot]
    setup = b.Setup(1, 2, good, bad, lg, lb, tried, held, 2)
    assert [h.name for h in held] == ["driver"]
    handed = {}

    def run_pyinfra(inventory, hosts, run_only, verbose=0, extra_env=None, out=None):
        handed.update(json.loads(open(extra_env[source.COMBINATION_ENV]).read()))
        return object(), {}

    r = b.Runner(types.SimpleNamespace(before=None, start=2), types.SimpleNamespace(name="h", spec=_spec()), "inv",
                 setup, "lease", "id", "m", "chat-greedy", _Out(), {})
    chosen = sorted(data.draw(st.sets(st.sampled_from(range(len(tried))))))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(deploy_run, "run_pyinfra", run_pyinfra)
        mp.setattr(transaction, "current", lambda ch: (2, {}, None))
        mp.setattr(transaction, "settle", lambda *a, **k: 0)
        r.deploy(chosen, b._label(setup, chosen))
    spec = handed["spec"]
    assert spec["nvidia_driver_version"] == bad["nvidia_driver_version"] == "610.60"
    for pkg in ("nvidia-open-dkms", "nvidia-utils", "opencl-nvidia"):
        assert spec["pacman_pins"][pkg] == bad["pacman_pins"][pkg]
    want, want_lock = b.combine(good, bad, lg, lb, held + [tried[i] for i in chosen])
    assert spec == want and json.loads(handed["lock_text"]) == want_lock
    assert "with generation 2's driver (skipped)" in b._label(setup, [])


def test_the_member_benched_is_one_both_generations_keep_running():
    """The default is the first resident of the bad generation that the good one keeps running too, read from the
    two generations (not the inventory, which may declare another resident by now); a ``--member`` either keeps
    down is refused naming what is allowed; so is a pair of generations with no resident in common."""
    def snap(preload, staged=()):
        return {"llama_swap": {"preload": list(preload),
                               "members": {m: {"staged": m in staged} for m in ("strata", "hyperqwen", "gguf-baseline")}}}

    setup = b.Setup(2, 3, snap(["hyperqwen", "strata"]), snap(["hyperqwen"]), None, None, [b.Suspect("spec a")], [], 3)
    assert b.benched_member(setup, None) == "hyperqwen" and b.benched_member(setup, "hyperqwen") == "hyperqwen"
    with pytest.raises(b.BisectInvalid, match=r"^--member strata: not kept running by both generations 2 and 3 "
                                              r"\(allowed: hyperqwen\)"):
        b.benched_member(setup, "strata")
    apart = b.Setup(2, 3, snap(["strata"]), snap(["hyperqwen"], staged=("strata",)), None, None, [], [], 3)
    with pytest.raises(b.BisectInvalid, match=r"^--member: generations 2 and 3 keep no member running in common "
                                              r"\(residents: strata and hyperqwen\)"):
        b.benched_member(apart, None)
    from rigkit.common.confirm import residents

    assert residents(snap(["strata", "hyperqwen"], staged=("hyperqwen",))) == ["strata"]
