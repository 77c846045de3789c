"""Generations: the manifest and its key (control side), the record, prune, show, check and hold on
the host (rigkit.host.generations against files in a temporary root), a generation turned back into
what the roles deploy, the diff, and the host lock's lease a rollback's commands join."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rigkit.render import generations as gen
from rigkit.host import generations as hostgen
from rigkit.host import lock as host_lock
from rigkit.host.config import HostConfig
from rigkit.render.files import RenderedFile, render
from rigkit.spec.validate import spec_from_layers

ROOT = Path(__file__).resolve().parents[2]
PINS = {"nvidia-open-dkms": "610.57-1", "nvidia-utils": "610.57-1", "opencl-nvidia": "610.57-1", "cuda": "13.3.1-1"}


def spec(**over):
    return spec_from_layers([{"pacman_pins": dict(PINS), "paused_timers": [], "lock_files": [], **over}])


# ------------------------------------------------------------------------------ the manifest
def test_the_key_is_what_the_host_holds_not_when_or_by_whom():
    a = gen.manifest(spec(), render(spec()), '{"models": {}}')
    again = gen.manifest(spec(), render(spec()), '{"models": {}}')
    assert a["key"] == again["key"] and a["spec_hash"] == again["spec_hash"]
    assert gen.manifest(spec(reboot=True), render(spec(reboot=True)), '{"models": {}}')["key"] == a["key"]
    assert "reboot" not in a["spec"] and "force" not in a["spec"]  # how a run goes, not what the host holds
    for over in ({"hyperqwen": {"dflash_tokens": 5}}, {"llama_swap": {"members": {"gguf-baseline": {"ttl": 300}}}},
                 {"pacman_pins": {**PINS, "cuda": "13.3.2-1"}}):
        assert gen.manifest(spec(**over), render(spec(**over)), '{"models": {}}')["key"] != a["key"], over
    assert gen.manifest(spec(), render(spec()), '{"models": {"x": {}}}')["key"] != a["key"]  # the model lock
    assert a["files"]["/var/lib/rigkit/models.lock.json"]["mode"] == "0644"
    assert a["secrets"] == ["/etc/rigkit/secrets/hf.env", "/etc/rigkit/secrets/hyperqwen.env"]
    assert a["keep"] == 10 and a["units"]["disabled"] == ["hyperqwen.service", "strata.service"]


def test_generations_keep_is_validated_with_the_spec():
    from rigkit.spec.problems import SpecError

    with pytest.raises(SpecError, match=r"generations_keep.*1"):
        spec(generations_keep=1)


def _bundle(n: int, s, rendered, lock_text='{"models": {}}') -> dict:
    m = gen.manifest(s, rendered, lock_text)
    contents = {p: f.text for p, f in rendered.items()} | {"/var/lib/rigkit/models.lock.json": lock_text}
    rec = {**{k: v for k, v in m.items() if k not in ("secrets", "hold")}, "n": n,
           "secrets": {"/etc/rigkit/secrets/hf.env": {"sha256": "aa" if n == 1 else "bb"}}}
    return {"record": rec, "contents": contents}


def test_the_diff_shows_exactly_what_changed_between_two_generations():
    a = _bundle(1, spec(), render(spec()))
    b_spec = spec(hyperqwen={"dflash_tokens": 5}, llama_swap={"members": {"gguf-baseline": {"ttl": 300}}},
                  pacman_pins={**PINS, "cuda": "13.3.2-1"})
    b = _bundle(2, b_spec, render(b_spec))
    d = gen.diff(a, b, mask=lambda t: t.replace("DFLASH", "MASKED"))
    assert d["pins"] == {"cuda": ["13.3.1-1", "13.3.2-1"]}
    assert d["members"] == {"gguf-baseline.ttl": [600, 300]}
    assert d["spec"] == {"hyperqwen.dflash_tokens": [7, 5], "llama_swap.members.gguf-baseline.ttl": [600, 300],
                         "pacman_pins.cuda": ["13.3.1-1", "13.3.2-1"]}
    assert [f["path"] for f in d["files"]] == ["/etc/llama-swap/config.staged.yaml", "/etc/llama-swap/config.yaml",
                                               "/opt/rigkit/hyperqwen/.env"]
    env = next(f["diff"] for f in d["files"] if f["path"].endswith(".env"))
    assert "-MASKED_TOKENS=7" in env and "+MASKED_TOKENS=5" in env  # through the caller's mask
    assert d["secrets"] == ["/etc/rigkit/secrets/hf.env"]
    assert "units" not in d and "models" not in d
    text = gen.diff_text(d)
    assert "pins:\n  cuda: \"13.3.1-1\" -> \"13.3.2-1\"" in text and "(by hash; never shown)" in text
    assert gen.diff_text(gen.diff(a, a)) == "generation 1 -> generation 1: no difference\n"


_EXTRA = {"cmd": "docker run --rm --init --name s8k --label rigkit.member=s8k img --port 18060",
          "cmd_stop": "docker stop s8k", "proxy": "http://127.0.0.1:18060", "vram_gib": 4.0, "cold_boot_s": 30}
_GROUP = {"gpu": {"members": ["strata", "gguf-baseline", "hyperqwen", "s8k"]}}


@pytest.mark.parametrize("staged", [False, True])
def test_the_diff_and_the_record_say_a_removal_is_a_removal(staged):
    """Issue 61: a member dropped between two generations is one line, "removed (was live)", never a
    line per key ending in null; the record's change says added/removed, not just the name."""
    with_it = spec(llama_swap={"members": {"s8k": {**_EXTRA, "staged": staged}}, "groups": _GROUP})
    a, b = _bundle(1, with_it, render(with_it)), _bundle(2, spec(), render(spec()))
    d = gen.diff(a, b)
    was = "staged" if staged else "live"
    assert d["members"] == {"s8k": [was, None]}
    assert d["spec"]["llama_swap.members.s8k"] == [was, None]
    assert not [k for k in d["spec"] if k.startswith("llama_swap.members.s8k.")]
    text = gen.diff_text(d)
    assert f"  s8k: removed (was {was})" in text and "null" not in text.split("files:")[0]
    assert gen.diff(b, a)["members"] == {"s8k": [None, was]} and f"s8k: added ({was})" in gen.diff_text(gen.diff(b, a))
    phrase = [c for c in hostgen.changed(a["record"], b["record"]) if c.startswith("members: ")]
    assert phrase == [f"members: {'staged' if staged else 'removed'} s8k"]
    assert [c for c in hostgen.changed(b["record"], a["record"]) if c.startswith("members: ")] == \
        [f"members: {'staged' if staged else 'added'} s8k"]


def test_a_generation_comes_back_as_its_files_and_spec_with_this_runs_flags(tmp_path):
    s = spec(hyperqwen={"dflash_tokens": 5})
    rendered = render(s)
    bundle = _bundle(3, s, rendered, '{"models": {"strata": {}}}')
    src = gen.source_from_bundle(bundle, spec(reboot=True), tmp_path)
    assert src.generation == 3 and src.spec.hyperqwen.dflash_tokens == 5 and src.spec.reboot is True
    assert gen.spec_hash(src.spec) == gen.spec_hash(s.model_copy(update={"lockfile": src.spec.lockfile}))
    assert Path(src.spec.lockfile).read_text() == '{"models": {"strata": {}}}' == src.lock_text
    assert {p: f.text for p, f in src.rendered.items()} == {p: f.text for p, f in rendered.items()}
    assert "/var/lib/rigkit/models.lock.json" not in src.rendered


def test_a_generation_recorded_before_models_lock_was_renamed_comes_back_with_the_same_hash(tmp_path):
    """Issue 64 renamed the spec key ``models_lock`` ``lockfile``: a record from before holds the old key in its
    spec; it comes back with the lock at the new key, the same spec hash, and no spec difference for it."""
    s = spec(hyperqwen={"dflash_tokens": 5}, lockfile="inventory/old.lock.json")
    bundle = _bundle(3, s, render(s), '{"models": {"strata": {}}}')
    old_spec = dict(bundle["record"]["spec"])
    old_spec["models_lock"] = old_spec.pop("lockfile")
    old = {**bundle, "record": {**bundle["record"], "spec": old_spec}}
    src = gen.source_from_bundle(old, spec(), tmp_path)
    assert Path(src.spec.lockfile).read_text() == '{"models": {"strata": {}}}' and src.spec.hyperqwen.dflash_tokens == 5
    assert gen.spec_hash(src.spec) == gen.spec_hash(s)
    assert "spec" not in gen.diff(old, bundle)


def test_a_generation_recorded_before_the_pins_file_moved_comes_back_with_it_at_its_new_path(tmp_path):
    """Issue 57 moved rigkit's pins file out of /etc/pacman.d/: a rollback to an earlier generation puts
    the same content at the new path (the pins role installs that one; its Include line follows)."""
    from rigkit import paths

    s = spec()
    rendered = render(s)
    old = {(paths.LEGACY_PINS_CONF if p == paths.PINS_CONF else p): f for p, f in rendered.items()}
    src = gen.source_from_bundle(_bundle(2, s, old), s, tmp_path)
    assert paths.LEGACY_PINS_CONF not in src.rendered
    assert src.rendered[paths.PINS_CONF].text == rendered[paths.PINS_CONF].text


def test_the_plan_line_says_which_generation_a_deploy_replaces():
    from rigkit.operations.generations import plan_line

    m = gen.manifest(spec(), render(spec()), None)
    assert plan_line({"data": None}, m) == (True, "no generation recorded yet: this deploy records generation 1 (deploy)")
    index = {"data": {"current": 2, "generations": [{"n": 1, "key": "x"}, {"n": 2, "key": m["key"], "time": "T",
                                                                              "operator": "rig", "reason": "deploy",
                                                                              "rigkit_version": m["rigkit_version"],
                                                                              "spec_hash": m["spec_hash"]}]}}
    assert plan_line(index, m) == (False, "generation 2 (T, rig, deploy) stays current: this deploy leaves the host as "
                                          "it recorded")
    # recorded by another rigkit build: still nothing for pyinfra to record (the deploy restamps it afterwards)
    index["data"]["generations"][1]["rigkit_version"] = "0.1.0+src.000000000000"
    assert plan_line(index, m)[0] is False
    index["data"]["generations"][1]["key"] = "y"
    assert plan_line(index, m) == (True, "generation 2 (T, rig, deploy) is replaced by generation 3 (deploy)")


# ------------------------------------------------------------------------------ on the host
@pytest.fixture
def host(tmp_path):
    """A host config whose paths are under tmp_path, and rendered files written there."""
    paths = {"generations": tmp_path / "gen", "holds": tmp_path / "holds.json", "models_root": tmp_path / "models",
             "state_dir": tmp_path / "state", "lock": tmp_path / "rig.lock", "window_journal": tmp_path / "w.json"}
    cfg = HostConfig({"version": 1, "paths": {k: str(v) for k, v in paths.items()}}, "test host.json")
    cfg.root = tmp_path
    return cfg


def _files(root: Path, env: str = "DFLASH_TOKENS=7\n") -> dict:
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "a.env").write_text(env)
    (root / "etc" / "b.yaml").write_text("ttl: 600\n")
    (root / "secret.env").write_text("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz\n")
    return {str(root / "etc" / "a.env"): env, str(root / "etc" / "b.yaml"): "ttl: 600\n"}


def _manifest(texts: dict, root: Path, **extra) -> dict:
    rendered = {p: RenderedFile(t, "0640", "root:root") for p, t in texts.items()}
    m = {"files": {p: {"sha256": f.sha256, "mode": f.mode, "owner": f.owner} for p, f in rendered.items()},
         "secrets": [str(root / "secret.env")], "pins": {"cuda": "13.3.1-1"}, "reason": "deploy", "keep": 10,
         "units": {"enabled": [], "disabled": []}}
    m.update(extra)
    m["key"] = json.dumps(sorted((p, v["sha256"]) for p, v in m["files"].items()) + sorted(m["pins"].items()))
    return m


def test_a_deploy_is_recorded_once_and_a_change_is_a_new_generation(host):
    root = host.root
    texts = _files(root)
    log: list[str] = []
    first = hostgen.record(host, _manifest(texts, root), "rig", log.append)
    assert first["recorded"] and first["n"] == 1 and first["changed"] == ["first generation"]
    again = hostgen.record(host, _manifest(texts, root), "rig", log.append)
    assert again["recorded"] is False and again["n"] == 1
    texts = _files(root, env="DFLASH_TOKENS=5\n")
    second = hostgen.record(host, _manifest(texts, root, pins={"cuda": "13.3.2-1"}), "ops", log.append)
    assert second["n"] == 2 and second["changed"] == [f"files: {root}/etc/a.env",
                                                       "pins: cuda 13.3.1-1 -> 13.3.2-1"]
    index = hostgen.read_index(root / "gen")
    assert (index["current"], index["previous"]) == (2, 1)
    rec = hostgen.read_record(root / "gen", 2)
    assert rec["operator"] == "ops" and rec["previous"] == 1 and rec["installed"] == {"cuda": rec["installed"]["cuda"]}
    # secrets by hash only: nowhere in the store
    store = b"".join(p.read_bytes() for p in (root / "gen").rglob("*") if p.is_file())
    assert b"hf_abcdefghijklmnopqrstuvwxyz" not in store
    assert rec["secrets"][str(root / "secret.env")]["sha256"]
    assert oct((root / "gen").stat().st_mode & 0o777) == "0o700"
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in (root / "gen" / "objects").iterdir())
    shown = hostgen.show(root / "gen", 1, with_files=True)
    assert shown["contents"][f"{root}/etc/a.env"] == "DFLASH_TOKENS=7\n"
    assert any("recorded generation 2" in ln for ln in log)


def test_a_file_not_as_declared_is_recorded_as_found_and_a_missing_one_refused(host):
    root = host.root
    texts = _files(root)
    m = _manifest(texts, root)
    (root / "etc" / "b.yaml").write_text("edited by hand\n")
    log: list[str] = []
    entry = hostgen.record(host, m, "rig", log.append)
    rec = hostgen.read_record(root / "gen", entry["n"])
    assert rec["files"][f"{root}/etc/b.yaml"]["declared_sha256"] == m["files"][f"{root}/etc/b.yaml"]["sha256"]
    assert any("recorded as found" in ln for ln in log)
    (root / "etc" / "b.yaml").unlink()
    m2 = _manifest(texts, root, pins={"cuda": "x"})
    with pytest.raises(hostgen.GenerationError, match=r"b.yaml: declared by the deploy but not on the host"):
        hostgen.record(host, m2, "rig")
    with pytest.raises(hostgen.GenerationError, match=r"no generation 9 on this host \(kept: 1\)"):
        hostgen.read_record(root / "gen", 9)


def test_prune_keeps_the_count_and_never_the_current_or_previous_and_drops_unused_objects(host):
    root = host.root
    for i in range(5):
        texts = _files(root, env=f"DFLASH_TOKENS={i}\n")
        hostgen.record(host, _manifest(texts, root, keep=3), "rig")
    index = hostgen.read_index(root / "gen")
    assert [g["n"] for g in index["generations"]] == [3, 4, 5] and index["current"] == 5
    assert not (root / "gen" / "1.json").exists()
    kept = {f["sha256"] for n in (3, 4, 5) for f in hostgen.read_record(root / "gen", n)["files"].values()}
    assert {p.name for p in (root / "gen" / "objects").iterdir()} == kept
    assert hostgen.prune(root / "gen", 0) == [3]  # at least the current one and the one before it stay


def test_a_rollbacks_generation_records_a_hold_and_release_removes_only_it(host):
    root = host.root
    texts = _files(root)
    hostgen.record(host, _manifest(texts, root), "rig")
    (root / "holds.json").write_text('{"llama-swap": {"since": "x"}}')
    entry = hostgen.record(host, _manifest(texts, root, reason="rollback to 1",
                                           hold={"rolled_back_to": 1, "by": None}), "rig")
    assert entry["recorded"] and entry["n"] == 2  # a rollback records even when the host is alike
    holds = json.loads((root / "holds.json").read_text())
    assert holds["generation"]["generation"] == 2 and holds["generation"]["by"] == "rig"
    assert holds["llama-swap"] == {"since": "x"}
    log: list[str] = []
    assert hostgen.release(host, log.append) == 0
    assert json.loads((root / "holds.json").read_text()) == {"llama-swap": {"since": "x"}}
    assert "the next deploy applies the spec" in log[0]


def test_check_names_each_model_a_generation_needs_that_the_host_has_not_verified(host):
    root = host.root
    hostgen.record(host, _manifest(_files(root), root), "rig")
    assert hostgen.check(host, 1) == []  # no model lock in that generation: nothing needed
    lock = {"models": {"strata": {"commit": "c0ffee", "source": {"path": "strata", "repo": "org/strata"},
                                  "files": [{"path": "strata.gguf", "size": 3, "sha256": "ab" * 32}]}}}
    lock_file = root / "models.lock.json"
    lock_file.write_text(json.dumps(lock))
    texts = {**_files(root), str(lock_file): lock_file.read_text()}
    hostgen.record(host, _manifest(texts, root, models_lock_path=str(lock_file)), "rig")
    assert hostgen.check(host, 2) == ["model strata: strata: no record yet"]
    assert hostgen.read_record(root / "gen", 2)["models_verified"]["strata"]["verified"] is False


def test_the_agent_command_lists_shows_and_refuses_bad_input(host, tmp_path):
    root = host.root
    hostgen.record(host, _manifest(_files(root), root), "rig")
    (tmp_path / "host.json").write_text(json.dumps(host.data))
    env = {**os.environ, "RIGKIT_HOST_CONFIG": str(tmp_path / "host.json")}
    agent = [sys.executable, "-m", "rigkit.host", "generation"]
    p = subprocess.run(agent + ["list"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 0 and json.loads(p.stdout)["current"] == 1
    p = subprocess.run(agent + ["current"], capture_output=True, text=True, env=env, cwd=ROOT)  # one read for a deploy
    both = json.loads(p.stdout)
    assert p.returncode == 0 and both["current"] == 1 and both["index"] == hostgen.read_index(root / "gen")
    assert both["record"] == hostgen.read_record(root / "gen", 1)
    p = subprocess.run(agent + ["show", "4"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 1 and "no generation 4 on this host (kept: 1)" in p.stderr
    p = subprocess.run(agent + ["record"], input="not json", capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 2 and "the manifest on stdin is not JSON" in p.stderr
    with host_lock.RigLock(tmp_path / "rig.lock", "window 5"):
        p = subprocess.run(agent + ["record"], input="{}", capture_output=True, text=True, env=env, cwd=ROOT)
    assert p.returncode == 1 and "the rig is locked by window 5" in p.stderr


# ------------------------------------------------------------------------------ the lease
def test_commands_with_the_holders_lease_join_it_and_no_one_else_does(tmp_path, monkeypatch):
    path = tmp_path / "rig.lock"
    code = ("import sys; from rigkit.host.lock import RigLock; "
            f"lk = RigLock({str(path)!r}, 'rollback to generation 1', lease='abc123'); lk.acquire(); "
            "print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)  # holds until killed
    try:
        assert proc.stdout.readline().strip() == "held"
        assert json.loads(path.read_text())["lease"] == "abc123"
        with pytest.raises(host_lock.LockHeld, match="rollback to generation 1"):
            host_lock.RigLock(path, "window 2").acquire()
        monkeypatch.setenv("RIGKIT_LOCK_LEASE", "wrong")
        with pytest.raises(host_lock.LockHeld):
            host_lock.RigLock(path, "activation").acquire()
        assert host_lock.try_lock(path, "keeper") is None
        monkeypatch.setenv("RIGKIT_LOCK_LEASE", "abc123")
        joined = host_lock.RigLock(path, "activation")
        joined.acquire()
        assert joined.joined["what"] == "rollback to generation 1"
        joined.release()
        assert host_lock.state(path)["held"]  # the holder's lock is left to it
    finally:
        proc.kill()
        proc.wait()
    monkeypatch.setenv("RIGKIT_LOCK_LEASE", "abc123")  # the holder died: its lease joins nothing, it is reclaimed
    lock = host_lock.RigLock(path, "activation")
    assert "reclaimed the rig lock from rollback to generation 1" in lock.acquire()[0] and lock.joined is None
    lock.release()


def test_lock_hold_holds_until_stdin_closes(tmp_path):
    from rigkit.render.files import render_host_config

    data = json.loads(render_host_config(spec()))
    data["paths"].update(lock=str(tmp_path / "rig.lock"), window_journal=str(tmp_path / "window.json"))
    (tmp_path / "host.json").write_text(json.dumps(data))
    env = {**os.environ, "RIGKIT_HOST_CONFIG": str(tmp_path / "host.json")}
    hold = subprocess.Popen([sys.executable, "-m", "rigkit.host", "lock", "hold", "--what", "rollback to 2",
                             "--lease", "l1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert hold.stdout.readline().strip() == "held"
    assert host_lock.state(tmp_path / "rig.lock")["holder"]["lease"] == "l1"
    run = [sys.executable, "-m", "rigkit.host", "lock", "run", "--what", "deploy: restart docker", "--", "true"]
    assert subprocess.run(run, env=env, cwd=ROOT, capture_output=True).returncode == 1
    assert subprocess.run(run, env={**env, "RIGKIT_LOCK_LEASE": "l1"}, cwd=ROOT, capture_output=True).returncode == 0
    second = subprocess.run([sys.executable, "-m", "rigkit.host", "lock", "hold", "--what", "rollback to 1",
                             "--lease", "l2"], stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, cwd=ROOT)
    assert second.returncode == 1 and "the rig is locked by rollback to 2" in second.stderr
    hold.stdin.close()
    assert hold.wait(10) == 0 and not host_lock.state(tmp_path / "rig.lock")["held"]


def test_the_preflight_lets_the_rollbacks_own_lock_through():
    from rigkit.deploy.preflight import refusals

    held = {"held": True, "holder": {"what": "rollback to generation 1", "pid": 1, "lease": "l1"}}
    s = spec()
    def locked(lines):
        return [ln for ln in lines if "the rig is locked by rollback to generation 1" in ln]

    assert locked(refusals(s, {}, {}, ["llama-swap restarts"], None, held, lease="l1")) == []
    assert len(locked(refusals(s, {}, {}, ["llama-swap restarts"], None, held))) == 1
    assert len(locked(refusals(s, {}, {}, ["llama-swap restarts"], None, held, lease="other"))) == 1


def test_the_failed_step_comes_from_pyinfras_log_when_it_wrote_no_results():
    from rigkit.deploy.run import failed_operations, ran_operations

    log = ("--> Beginning operation run...\n--> Starting operation: Pins | Install the pinned packages\n"
           "--> Starting operation: llama-swap | Activate the declared live llama-swap config (on the host)\n"
           "    [h] Error: executed 0 commands\n--> pyinfra error: No hosts remaining!\n")
    proc = subprocess.CompletedProcess([], 1, "", log)
    assert ran_operations(proc)
    assert failed_operations(proc) == ["llama-swap | Activate the declared live llama-swap config (on the host)"]
    refused = subprocess.CompletedProcess([], 1, "", "--> Preparing operation files...\nrefusing to deploy\n")
    assert not ran_operations(refused) and failed_operations(refused) == []
    results = json.dumps({"results": {"operations": [{"name": "A", "error": []}, {"name": "B", "error": ["h"]}]}})
    assert failed_operations(subprocess.CompletedProcess([], 1, results, log)) == ["B"]


def test_drift_masks_secret_names_only():
    from rigkit.drift.masking import mask

    assert mask("DFLASH_TOKENS=7\nHF_TOKEN=abcdefg\nVLLM_API_KEY: xyz123\nmax_tokens: 5") == \
        "DFLASH_TOKENS=7\nHF_TOKEN=***\nVLLM_API_KEY: ***\nmax_tokens: 5"


# ------------------------------------------------------------------------------ failed changes
def test_a_failed_attempt_gets_a_number_never_becomes_current_and_prunes_like_any_other(host):
    root = host.root
    texts = _files(root)
    hostgen.record(host, _manifest(texts, root), "rig")
    (root / "etc" / "b.yaml").unlink()  # the failed deploy never wrote it
    log: list[str] = []
    entry = hostgen.record(host, _manifest(texts, root, pins={"cuda": "13.3.2-1"}), "rig", log.append,
                           failed="the deploy failed at: Activate llama-swap's config")
    assert entry["n"] == 2 and entry["failed"].startswith("the deploy failed at")
    index = hostgen.read_index(root / "gen")
    assert index["current"] == 1 and [g.get("failed") is not None for g in index["generations"]] == [False, True]
    rec = hostgen.read_record(root / "gen", 2)
    assert rec["failed"] and rec["files"][f"{root}/etc/b.yaml"]["missing"] is True
    assert "recorded generation 2 as FAILED" in log[-1] and "generation 1 stays current" in log[-1]
    # the same attempt again is recorded again (its key may equal the current one's)
    again = hostgen.record(host, _manifest(texts, root), "rig", failed="again")
    assert again["n"] == 3 and hostgen.read_index(root / "gen")["current"] == 1
    # prune counts failed generations like any other, never the current one
    (root / "etc" / "b.yaml").write_text("ttl: 600\n")
    for i in range(3):
        hostgen.record(host, _manifest(_files(root, env=f"X={i}\n"), root, keep=2), "rig")
    index = hostgen.read_index(root / "gen")
    assert [g["n"] for g in index["generations"]] == [5, 6] and index["current"] == 6


def test_marking_the_current_generation_failed_makes_the_one_before_current_and_drops_its_hold(host):
    root = host.root
    texts = _files(root)
    hostgen.record(host, _manifest(texts, root), "rig")
    hostgen.record(host, _manifest(_files(root, env="A=1\n"), root), "rig")
    hostgen.record(host, _manifest(_files(root, env="A=2\n"), root, reason="rollback to 1",
                                   hold={"rolled_back_to": 1, "by": None}), "rig")
    assert json.loads((root / "holds.json").read_text())["generation"]["generation"] == 3
    with pytest.raises(hostgen.GenerationError, match="generation 2 is not the current one"):
        hostgen.fail(host, 2, "x")
    log: list[str] = []
    entry = hostgen.fail(host, 3, "its confirmation failed: strata: HTTP 502", log.append)
    assert entry["failed"] == "its confirmation failed: strata: HTTP 502"
    index = hostgen.read_index(root / "gen")
    assert (index["current"], index["previous"]) == (2, 1)
    assert hostgen.read_record(root / "gen", 3)["failed"] == entry["failed"]
    assert "generation" not in json.loads((root / "holds.json").read_text())
    assert any("removed the hold at generation 3" in ln for ln in log)
    # the next deploy that leaves the host as generation 2 records nothing: 2 is current again
    assert hostgen.record(host, _manifest(_files(root, env="A=1\n"), root), "rig")["recorded"] is False


def test_a_failed_revert_holds_the_host_at_the_generation_it_started_from(host):
    root = host.root
    hostgen.record(host, _manifest(_files(root), root), "rig")
    with pytest.raises(hostgen.GenerationError, match="no generation 4"):
        hostgen.hold(host, 4, "x")
    held = hostgen.hold(host, 1, "the deploy failed and its revert failed")
    assert held["generation"] == 1 and held["reason"].startswith("the deploy failed")
    assert json.loads((root / "holds.json").read_text())["generation"]["generation"] == 1


def test_a_records_manifest_records_it_again_with_its_declared_files():
    record = {"n": 3, "time": "T", "operator": "rig", "key": "k", "pins": {"cuda": "1"}, "spec": {"x": 1},
              "files": {"/a": {"sha256": "found", "declared_sha256": "declared", "mode": "0644", "owner": "root:root"},
                        "/b": {"sha256": "b", "mode": "0600", "owner": "root:root"}},
              "secrets": {"/s": {"sha256": "s"}}, "installed": {}, "unit_state": {}, "changed": ["x"],
              "hold": {"generation": 3}, "failed": None}
    m = gen.manifest_of_record(record, "rollback to 3")
    assert m["files"] == {"/a": {"sha256": "declared", "mode": "0644", "owner": "root:root"},
                          "/b": {"sha256": "b", "mode": "0600", "owner": "root:root"}}
    assert m["secrets"] == ["/s"] and m["reason"] == "rollback to 3" and m["hold"] is None
    assert m["key"] == "k" and m["pins"] == {"cuda": "1"} and m["spec"] == {"x": 1}
    assert not {"n", "time", "operator", "installed", "unit_state", "changed", "failed"} & set(m)


def test_lock_hold_with_current_reads_where_the_host_starts_under_the_lock(tmp_path):
    """``lock hold --current``: ``held``, then one JSON line — what ``generation current`` prints, read
    while the lock is held (the deploy's begin: one SSH session instead of two)."""
    from rigkit.host import generations as hostgen
    from rigkit.render.files import render_host_config

    data = json.loads(render_host_config(spec()))
    data["paths"].update(lock=str(tmp_path / "rig.lock"), window_journal=str(tmp_path / "window.json"),
                         generations=str(tmp_path / "generations"))
    (tmp_path / "host.json").write_text(json.dumps(data))
    env = {**os.environ, "RIGKIT_HOST_CONFIG": str(tmp_path / "host.json")}
    argv = [sys.executable, "-m", "rigkit.host", "lock", "hold", "--what", "rigkit deploy", "--lease", "l1", "--current"]
    hold = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert hold.stdout.readline().strip() == "held"
    reading = json.loads(hold.stdout.readline())
    assert reading == {**hostgen.current(tmp_path / "generations"), "live_sha256": None} and reading["current"] is None
    assert host_lock.state(tmp_path / "rig.lock")["holder"]["lease"] == "l1"  # read while held
    hold.stdin.close()
    assert hold.wait(10) == 0 and not host_lock.state(tmp_path / "rig.lock")["held"]


@pytest.mark.parametrize("over, only", [
    ({"llama_swap": {"members": {"s8k": {**_EXTRA, "staged": True}}, "groups": _GROUP}}, True),
    ({"llama_swap": {"members": {"hyperqwen": {"description": "changed while staged"}}}}, True),
    ({"llama_swap": {"members": {"s8k": {**_EXTRA, "staged": False}}, "groups": _GROUP}}, False),
    ({"llama_swap": {"members": {"hyperqwen": {"staged": False}}}}, False),
    ({"hyperqwen": {"dflash_tokens": 5}}, False),  # its .env: read when it starts
    ({"llama_swap": {"members": {"gguf-baseline": {"ttl": 300}}}}, False),
])
def test_a_change_only_to_what_is_staged_is_told_apart_from_one_that_serves(over, only):
    """Issue 61: the deploy sends no completion for a generation that changes only what is staged (a
    completion to the resident would swap out the member serving a request)."""
    from rigkit.deploy.transaction import staged_only

    base = gen.manifest(spec(), render(spec()), '{"models": {}}')
    other = gen.manifest(spec(**over), render(spec(**over)), '{"models": {}}')
    assert base["key"] != other["key"]
    def served(record):  # the host serves the live config its start generation recorded
        return record["files"]["/etc/llama-swap/config.yaml"]["sha256"]

    def moved(a, b):  # a run from generation a to b that installed b's live config
        return staged_only(a, b, served(a), served(b))

    assert moved(base, other) is only and moved(other, base) is only
    assert moved(base, base) and not staged_only(None, base, served(base), served(base))
    # what the host serves decides, not the records (a wire-in activation records no generation): a host
    # that served another config than its record's is changed by a run that installs the record's; one
    # whose served config stayed (a hold kept it) is not; unknown is never "unchanged"
    assert not staged_only(base, base, served(base)[::-1], served(base))
    assert staged_only(base, base, "held", "held") and not staged_only(base, base, None, None)


def test_a_bisects_steps_are_pruned_first_and_its_good_and_bad_never_while_it_stands(host):
    """The steps of a bisect (trial mixes) go before any declared generation, so a walk does not push out
    what an operator may roll back or bisect to again; while the journal stands its start, good and bad stay
    whatever their age."""
    root = host.root
    for i in range(4):  # 1..4: declared generations; the bisect is 1 (good) .. 3 (bad), started at 4
        hostgen.record(host, _manifest(_files(root, env=f"D={i}\n"), root, keep=6), "rig")
    (root / "gen" / hostgen.BISECT_JOURNAL).write_text(json.dumps({"id": "b", "good": 1, "bad": 3, "start": 4}))
    for i in range(5):  # 5..9: its steps
        hostgen.record(host, _manifest(_files(root, env=f"S={i}\n"), root, keep=6,
                                       bisect={"id": "b", "step": i + 1, "entries": []}), "rig")
    kept = [g["n"] for g in hostgen.read_index(root / "gen")["generations"]]
    assert {1, 3, 4} <= set(kept) and len(kept) == 6, kept  # 2 (declared, no part of it) may go; the steps go first
    assert kept == [1, 2, 3, 4, 8, 9], kept
    (root / "gen" / hostgen.BISECT_JOURNAL).unlink()
    hostgen.record(host, _manifest(_files(root, env="D=after\n"), root, keep=6), "rig")
    kept = [g["n"] for g in hostgen.read_index(root / "gen")["generations"]]
    assert kept == [1, 2, 3, 4, 9, 10], kept  # the journal gone: still the steps first (8, not 1)
