"""Unit tests for drift's comparisons (pure: declared values and parsed facts in, findings out)."""

from __future__ import annotations

import json

from hypothesis import given, strategies as st

from rigkit import drift
from rigkit.drift import Finding, HostProbe, compare, mask, probe
from rigkit.drift import plan as drift_plan
from rigkit.render.files import RenderedFile, render
from rigkit.spec.model import RigSpec
from rigkit.spec.secrets import HfToken
from rigkit.spec.validate import spec_from_dict

PINS = {"nvidia-open-dkms": "610.57-1", "nvidia-utils": "610.57-1", "opencl-nvidia": "610.57-1", "cuda": "13.3.1-1"}
TOKEN = "hf_DriftCanaryTokenValue0123456789"


def spec(**over) -> RigSpec:
    return spec_from_dict({"pacman_pins": PINS, **over})


def decl(hf_token=None, **over) -> drift.Declared:
    token = HfToken(hf_token, "environment variable HF_TOKEN") if hf_token else None
    return drift.declared_for("h1", spec(**over), "inventory/nonexistent.py", token)


def smi_ok(power=420.0, driver="610.57"):
    return {"state": "ok", "message": "", "gpus": [{
        "index": 0, "name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-x", "driver_version": driver,
        "memory_total_gib": 24.0, "memory_used_gib": 0.0, "power_default_w": 350.0, "power_limit_w": power,
        "power_enforced_w": power, "power_min_w": 100.0, "power_max_w": 450.0}]}


def kinds(findings):
    return [(f.kind, f.item) for f in findings]


# ---- files


def _stat_of(f: RenderedFile, **over):
    user, group = f.owner.split(":")
    st = {"mode": f.mode.lstrip("0"), "user": user, "group": group, "size": len(f.text.encode()),
          "sha256": f.sha256, "content": f.text.encode()}
    st.update(over)
    return st


def test_rendered_files_identical_are_no_drift():
    files = render(spec())
    assert compare.compare_files("h1", files, {p: _stat_of(f) for p, f in files.items()}) == []


def test_changed_config_content_is_found_with_masked_diff():
    files = render(spec())
    path = "/etc/llama-swap/config.yaml"
    f = files[path]
    edited = f.text + f"# pasted by hand\nVLLM_API_KEY={'z' * 40}\n"
    import hashlib
    actual = {p: _stat_of(x) for p, x in files.items()}
    actual[path] = _stat_of(f, sha256=hashlib.sha256(edited.encode()).hexdigest(), content=edited.encode())
    found = compare.compare_files("h1", files, actual, diff=True)
    assert kinds(found) == [("file", path)]
    assert found[0].declared == f"content sha256:{f.sha256[:12]}"
    assert "+# pasted by hand" in found[0].diff
    # compare is pure: the diff is what differs; it is masked where findings leave the check
    from rigkit.drift.masking import masked

    assert "z" * 40 in found[0].diff
    [out] = masked(found)
    assert "z" * 40 not in out.diff and "VLLM_API_KEY=***" in out.diff


def test_mode_and_owner_changes_are_separate_findings():
    files = render(spec())
    path = "/opt/rigkit/hyperqwen/.env"
    actual = {p: _stat_of(x) for p, x in files.items()}
    actual[path] = _stat_of(files[path], mode="644", group="root")
    found = compare.compare_files("h1", files, actual)
    assert [(f.kind, f.declared, f.actual) for f in found] == [
        ("file-mode", "0640", "0644"), ("file-owner", "root:llama-swap", "root:root")]


def test_missing_rendered_file():
    files = render(spec())
    actual = {p: _stat_of(x) for p, x in files.items()}
    actual["/etc/systemd/system/hyperqwen.service"] = None
    found = compare.compare_files("h1", files, actual)
    assert [(f.kind, f.item, f.actual) for f in found] == [("file", "/etc/systemd/system/hyperqwen.service", "missing")]


# ---- secrets


SECRETS_DIR_OK = {"mode": "750", "user": "root", "group": "llama-swap", "size": 4096, "sha256": "dir"}


def test_the_secrets_folder_has_one_owner_and_mode():
    """A token change once left /etc/rigkit/secrets root:root: llama-swap could no longer read the API key."""
    d = decl(hf_token=None)
    ok = {"/etc/rigkit/secrets": SECRETS_DIR_OK,
          "/etc/rigkit/secrets/hyperqwen.env": {"mode": "640", "user": "root", "group": "llama-swap", "size": 77,
                                                "sha256": "ab" * 32}}
    assert compare.compare_secrets("h1", d.secrets, ok) == []
    flipped = {**ok, "/etc/rigkit/secrets": {**SECRETS_DIR_OK, "group": "root"}}
    assert [(f.kind, f.item, f.declared, f.actual) for f in compare.compare_secrets("h1", d.secrets, flipped)] == [
        ("secret-owner", "/etc/rigkit/secrets", "root:llama-swap", "root:root")]


def test_secret_files_owner_mode_and_content_only_with_token_at_hand():
    d = decl(hf_token=TOKEN)
    import hashlib
    good = hashlib.sha256(f"HF_TOKEN={TOKEN}\n".encode()).hexdigest()
    actual = {"/etc/rigkit/secrets": SECRETS_DIR_OK,
              "/etc/rigkit/secrets/hf.env": {"mode": "600", "user": "root", "group": "root", "size": 10, "sha256": good},
              "/etc/rigkit/secrets/hyperqwen.env": {"mode": "640", "user": "root", "group": "llama-swap", "size": 77,
                                                    "sha256": "ab" * 32}}
    assert compare.compare_secrets("h1", d.secrets, actual) == []
    actual["/etc/rigkit/secrets/hf.env"] = {**actual["/etc/rigkit/secrets/hf.env"], "sha256": "cd" * 32, "mode": "644"}
    found = compare.compare_secrets("h1", d.secrets, actual, "environment variable HF_TOKEN")
    assert [(f.kind, f.declared, f.actual) for f in found] == [
        ("secret-mode", "0600", "0644"),
        ("secret", "the value from environment variable HF_TOKEN", "a different value (not shown)")]
    assert all(TOKEN not in json.dumps(f.record()) and good not in json.dumps(f.record()) for f in found)


def test_hf_env_optional_without_token_but_owner_mode_checked_when_present():
    d = decl(hf_token=None)
    actual = {"/etc/rigkit/secrets": SECRETS_DIR_OK, "/etc/rigkit/secrets/hf.env": None,
              "/etc/rigkit/secrets/hyperqwen.env": {"mode": "640", "user": "root", "group": "llama-swap", "size": 77,
                                                    "sha256": "ab" * 32}}
    assert compare.compare_secrets("h1", d.secrets, actual) == []
    actual["/etc/rigkit/secrets/hf.env"] = {"mode": "644", "user": "rig", "group": "root", "size": 9, "sha256": "ee" * 32}
    actual["/etc/rigkit/secrets/hyperqwen.env"] = None
    found = compare.compare_secrets("h1", d.secrets, actual)
    assert [(f.kind, f.item, f.declared, f.actual) for f in found] == [
        ("secret-owner", "/etc/rigkit/secrets/hf.env", "root:root", "rig:root"),
        ("secret-mode", "/etc/rigkit/secrets/hf.env", "0600", "0644"),
        ("secret", "/etc/rigkit/secrets/hyperqwen.env", "present root:llama-swap 0640", "missing")]


# ---- pins, driver, cuda, reboot, power


def _ign(*entries, error=None):
    return {"entries": list(entries), "rc": 1 if error else 0, "messages": [error] if error else [], "error": error}


def test_pin_moved_and_ignorepkg_removed():
    installed = {**PINS, "nvidia-utils": "610.60-1"}
    found = compare.compare_pins("h1", PINS, installed, _ign("cuda", "nvidia-open-dkms", "opencl-nvidia"))
    assert [(f.kind, f.item, f.declared, f.actual) for f in found] == [
        ("pin", "nvidia-utils", "610.57-1", "610.60-1"),
        ("pin-held", "nvidia-utils", "held by IgnorePkg (pacman-conf IgnorePkg)",
         "not held (IgnorePkg: cuda nvidia-open-dkms opencl-nvidia)")]
    assert compare.compare_pins("h1", PINS, PINS, _ign(*PINS)) == []


def test_a_glob_holds_the_pins_as_alpm_matches_it():
    assert compare.compare_pins("h1", PINS, PINS, _ign("nvidia*", "opencl-*", "cud?")) == []
    assert {f.item for f in compare.compare_pins("h1", PINS, PINS, _ign("nvidia-*"))} == {"cuda", "opencl-nvidia"}


def test_pacman_conf_failing_is_one_finding_naming_its_error():
    err = "error: config file /etc/pacman.d/gone.conf could not be read: No such file or directory"
    found = compare.compare_pins("h1", PINS, PINS, _ign(error=err))
    assert [(f.kind, f.item, f.actual) for f in found] == [("pin-held", "/etc/pacman.conf", f"pacman-conf: {err}")]


def test_a_pacman_conf_pacman_cannot_read_is_one_finding_not_every_package_missing():
    err = "error: config file /etc/pacman.d/gone.conf could not be read: No such file or directory"
    found = compare.compare_pins("h1", PINS, {}, _ign(error=err)) + compare.compare_repo_packages("h1", ["docker"], {})
    assert [(f.kind, f.actual) for f in compare.without_pacman_unanswered(found, _ign(error=err))] == [
        ("pin-held", f"pacman-conf: {err}")]
    assert compare.without_pacman_unanswered(found, _ign(*PINS)) == found


def test_driver_agreement_across_pacman_module_and_nvidia_smi():
    kernel = {"running": "6.12.58-1-lts", "nvidia_module": "610.57", "installed_kernels": ["6.12.58-1-lts"]}
    assert compare.compare_driver("h1", "610.57", "nvidia-open-dkms", PINS, kernel, smi_ok()) == []
    installed = {**PINS, "nvidia-utils": "610.60-1"}
    mismatch = {"state": "mismatch", "message": "Failed to initialize NVML: Driver/library version mismatch", "gpus": []}
    found = compare.compare_driver("h1", "610.57", "nvidia-open-dkms", installed, kernel, mismatch)
    assert [(f.item, f.actual) for f in found] == [
        ("pacman -Q nvidia-utils", "610.60"),
        ("nvidia-smi", "mismatch: Failed to initialize NVML: Driver/library version mismatch")]


def test_findings_name_the_release_without_epoch_and_pkgrel():
    installed = {**PINS, "nvidia-utils": "1:610.60.02-2", "cuda": "13.4.1-1"}
    kernel = {"running": "6.12.58-1-lts", "nvidia_module": "610.57", "installed_kernels": ["6.12.58-1-lts"]}
    assert [(f.item, f.actual) for f in compare.compare_driver("h1", "610.57", "nvidia-open-dkms", installed, kernel,
                                                                smi_ok())] == [("pacman -Q nvidia-utils", "610.60.02")]
    assert [(f.item, f.actual) for f in compare.compare_cuda("h1", "13.3", installed, "13.3", True)] == [
        ("pacman -Q cuda", "13.4.1")]


def test_cuda_series_and_driver_level():
    assert compare.compare_cuda("h1", "13.3", PINS, "13.3", True) == []
    assert compare.compare_cuda("h1", "13.3", PINS, "13.4", True) == []
    found = compare.compare_cuda("h1", "13.3", {**PINS, "cuda": "13.4.0-1"}, "13.2", True)
    assert [(f.item, f.declared, f.actual) for f in found] == [
        ("pacman -Q cuda", "13.3.x", "13.4.0"), ("driver CUDA level", ">= 13.3", "13.2")]


def test_reboot_pending_uses_the_deploys_own_reasons():
    from rigkit.render.declared_state import reboot_reasons

    kernel = {"running": "6.12.58-1-lts", "nvidia_module": "610.57", "installed_kernels": ["6.12.58-1-lts", "6.12.60-1-lts"]}
    reasons = reboot_reasons(kernel, [], "610.57", "nvidia-open-dkms")
    found = compare.compare_reboot("h1", reasons)
    assert [f.kind for f in found] == ["reboot"] and "DKMS has not built nvidia 610.57" in found[0].actual
    assert compare.compare_reboot("h1", []) == []


def test_power_limit_enforced_vs_declared():
    assert compare.compare_power("h1", 420, smi_ok(420.0)) == []
    found = compare.compare_power("h1", 420, smi_ok(300.0))
    assert [(f.item, f.declared, f.actual) for f in found] == [
        ("GPU 0 enforced.power.limit", "420 W", "300 W"), ("GPU 0 power.limit", "420 W", "300 W")]


# ---- daemon.json


OWNED = {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
         "exec-opts": ["native.cgroupdriver=cgroupfs"]}


def test_daemon_json_foreign_key_is_not_drift_runtime_removed_is():
    data = {**OWNED, "log-driver": "journald", "runtimes": {**OWNED["runtimes"], "crun": {"path": "/usr/bin/crun"}}}
    assert compare.compare_daemon_json("h1", OWNED, {"exists": True, "data": data, "error": None}) == []
    data = {"exec-opts": ["native.cgroupdriver=cgroupfs"], "log-driver": "journald", "runtimes": {}}
    found = compare.compare_daemon_json("h1", OWNED, {"exists": True, "data": data, "error": None})
    assert [(f.kind, f.item, f.actual) for f in found] == [("daemon.json", "runtimes", "{}")]
    assert json.loads(found[0].declared) == OWNED["runtimes"]


def test_daemon_json_missing_or_broken():
    assert compare.compare_daemon_json("h1", OWNED, {"exists": False, "data": None, "error": None})[0].actual == "missing"
    assert compare.compare_daemon_json("h1", OWNED, {"exists": True, "data": None, "error": "not valid JSON: x"})[0].actual \
        == "not valid JSON: x"


# ---- agent, units


def test_agent_venv_python_gone():
    assert compare.compare_agent("h1", {"rc": 0, "output": "rigkit-agent 0.1 (Python 3.11.2)"}) == []
    found = compare.compare_agent("h1", {"rc": 126, "output": "/opt/rigkit/venv/bin/rigkit-agent: bad interpreter"})
    assert [(f.kind, f.actual) for f in found] == [("agent", "exit 126: /opt/rigkit/venv/bin/rigkit-agent: bad interpreter")]


def _unit(uid, enabled="enabled", active="active", **deps):
    return {"Id": uid, "LoadState": "loaded", "UnitFileState": enabled, "ActiveState": active,
            "SubState": "running" if active == "active" else "dead", **deps}


def _converged_units(d):
    units = {u: _unit(u) for u in d.units}
    units["gpu-power-limit.service"] = _unit("gpu-power-limit.service", active="inactive")
    units["hyperqwen.service"] = _unit("hyperqwen.service", enabled="disabled", active="inactive")
    units["strata.service"] = {"Id": "strata.service", "LoadState": "not-found", "UnitFileState": "",
                               "ActiveState": "inactive"}
    return units


def test_units_converged():
    d = decl()
    assert compare.compare_units("h1", d, _converged_units(d)) == []


def test_llama_swap_disabled_and_hyperqwen_enabled():
    d = decl()
    units = _converged_units(d)
    units["llama-swap.service"] = _unit("llama-swap.service", enabled="disabled")
    units["hyperqwen.service"] = _unit("hyperqwen.service", enabled="enabled", active="inactive")
    found = compare.compare_units("h1", d, units)
    assert [(f.kind, f.item, f.declared, f.actual) for f in found] == [
        ("unit", "llama-swap.service", "enabled", "disabled"),
        ("unit", "hyperqwen.service", "installed, not enabled", "enabled")]


def test_strata_back_with_requires():
    d = decl()
    units = _converged_units(d)
    units["strata.service"] = _unit("strata.service")
    units["llama-swap.service"] = _unit("llama-swap.service", Requires="system.slice strata.service sysinit.target")
    found = compare.compare_units("h1", d, units)
    assert [(f.kind, f.item) for f in found] == [
        ("legacy-unit", "strata.service"), ("unit-dependency", "llama-swap.service Requires=strata.service")]


def test_parse_units_blocks():
    lines = ["Id=a.service", "LoadState=loaded", "Requires=", "", "Id=b.timer", "ActiveState=active"]
    assert probe.parse_units(lines) == {"a.service": {"Id": "a.service", "LoadState": "loaded", "Requires": ""},
                                        "b.timer": {"Id": "b.timer", "ActiveState": "active"}}


def test_llama_swap_running_an_older_config():
    active = {"ActiveState": "active"}
    assert compare.compare_llama_swap_live("h1", {"started": 100, "mtime": 90}, active) == []
    assert [f.kind for f in compare.compare_llama_swap_live("h1", {"started": 100, "mtime": 130}, active)] == [
        "llama-swap-live"]


def test_a_stopped_llama_swap_is_not_a_pending_restart_the_unit_row_says_it_is_down():
    d = decl()
    units = {u: {"LoadState": "loaded", "UnitFileState": "enabled", "ActiveState": "active"} for u in d.units}
    units["llama-swap.service"] = {"LoadState": "loaded", "UnitFileState": "enabled", "ActiveState": "inactive",
                                   "SubState": "dead"}
    for state in ("inactive", "failed"):
        assert compare.compare_llama_swap_live("h1", {"started": 100, "mtime": 130}, {"ActiveState": state}) == []
    rows = [f for f in compare.compare_units("h1", d, units) if f.item == "llama-swap.service"]
    assert [(f.declared, f.actual) for f in rows] == [("active", "inactive (dead)")]


def test_a_live_config_that_differs_names_the_backup_the_deploy_keeps_or_the_hold():
    live = [compare.Finding("h1", "file", "/etc/llama-swap/config.yaml", "content sha256:a", "content sha256:b (9 bytes)")]
    named = compare.name_live_backup(live, {"data": {}})
    assert named[0].actual == ("content sha256:b (9 bytes) — the deploy replaces it, keeping this one as "
                               "/etc/llama-swap/config.yaml.bak-<UTC stamp> (`rigkit wire-in -i inventory/rig.py --host h1 --show` diffs them)")
    held = [compare.Finding("h1", "file", "/etc/llama-swap/config.yaml", "content sha256:a", "content sha256:b")]
    assert compare.name_live_backup(held, {"data": {"llama-swap": {"since": "t"}}})[0].actual == "content sha256:b"
    other = [compare.Finding("h1", "file", "/etc/llama-swap/config.staged.yaml", "content sha256:a", "content sha256:b")]
    assert compare.name_live_backup(other, {})[0].actual == "content sha256:b"


# ---- models


def test_no_lock_is_one_warning_not_a_crash():
    d = decl()
    assert d.lock is None and "no model lock" in d.lock_note
    found = compare.compare_models("h1", d.lock_note, None)
    assert [(f.kind, f.severity) for f in found] == [("model-lock", "warn")]
    assert drift.exit_code(found) == 0


def test_model_reasons_become_findings():
    models = {"strata": [], "gguf-baseline": ["gguf-baseline: m.gguf: size or mtime differs from the record"]}
    found = compare.compare_models("h1", None, models)
    assert [(f.item, f.actual) for f in found] == [("gguf-baseline", "m.gguf: size or mtime differs from the record")]


def test_fetch_compare_finds_a_truncated_file_and_deep_a_same_size_corruption(tmp_path):
    """What the probe runs on the host (rigkit.host.fetch in the agent's venv), here on local files."""
    import os

    from rigkit.host import modelrecords

    d = tmp_path / "models" / "m"
    d.mkdir(parents=True)
    (d / "w.gguf").write_bytes(b"x" * 4096)
    digest = modelrecords.hash_file(d / "w.gguf")
    modelrecords.write_record(tmp_path, "m", {"version": modelrecords.RECORD_VERSION, "model": "m", "dir": str(d), "commit": None,
                                       "reference": "lock", "prepare_needed": False,
                                       "files": {"w.gguf": modelrecords.stat_entry(d / "w.gguf", digest)}, "locked": {}})
    assert modelrecords.compare("m", d, tmp_path) == []
    st = os.stat(d / "w.gguf")
    (d / "w.gguf").write_bytes(b"y" * 4096)  # same size, mtime put back: only hashing sees it
    os.utime(d / "w.gguf", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert modelrecords.compare("m", d, tmp_path) == []
    assert modelrecords.compare("m", d, tmp_path, deep=True) == ["m: w.gguf: content differs from the record (sha256)"]
    with open(d / "w.gguf", "r+b") as fh:
        fh.truncate(100)
    assert modelrecords.compare("m", d, tmp_path) == ["m: w.gguf: size or mtime differs from the record"]
    assert modelrecords.compare("m", d, tmp_path, deep=True) == ["m: w.gguf: size or mtime differs from the record",
                                                          "m: w.gguf: content differs from the record (sha256)"]


def test_the_probes_model_check_is_the_deploys_status_per_model(tmp_path):
    """rigkit.host.modelcheck (what the probe runs with the agent's python): modelrecords.status for each
    locked model, --deep passed down to modelrecords.compare; one model's failure does not hide the others."""
    import os

    from rigkit.host import modelcheck, modelrecords

    d = tmp_path / "models" / "m"
    d.mkdir(parents=True)
    (d / "w.gguf").write_bytes(b"x" * 4096)
    digest = modelrecords.hash_file(d / "w.gguf")
    lock = {"models": {"m": {"source": {"path": "m"}, "commit": "c1",
                             "files": [{"path": "w.gguf", "sha256": digest["sha256"]}]},
                       "n": {"source": {"path": "n"}, "commit": "c2", "files": "not a list"}}}
    modelrecords.write_record(tmp_path / "state", "m", {
        "version": modelrecords.RECORD_VERSION, "model": "m", "dir": str(d), "commit": "c1", "reference": "lock",
        "prepare_needed": False, "files": {"w.gguf": modelrecords.stat_entry(d / "w.gguf", digest)}, "locked": {}})
    modelrecords.write_record(tmp_path / "state", "n", {
        "version": modelrecords.RECORD_VERSION, "model": "n", "dir": str(d), "commit": "c2", "reference": "lock",
        "prepare_needed": False, "files": {}, "locked": {}})
    out = modelcheck.check(lock, tmp_path / "models", tmp_path / "state")
    assert out["m"] == [] and out["n"][0].startswith("n: cannot check: TypeError")
    st = os.stat(d / "w.gguf")
    (d / "w.gguf").write_bytes(b"y" * 4096)
    os.utime(d / "w.gguf", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert modelcheck.check(lock, tmp_path / "models", tmp_path / "state")["m"] == []
    assert modelcheck.check(lock, tmp_path / "models", tmp_path / "state", deep=True)["m"] == [
        "m: w.gguf: content differs from the record (sha256)"]
    assert modelcheck.check(lock, tmp_path / "models", tmp_path / "state", prepared=["m"])["m"] == [
        "m: not prepared yet (its record is the lock's, not prepare's)"]


# ---- plan


def test_plan_rows_are_changes_only_never_gated_operations_beside_them():
    plan = {"plan": [
        {"names": ["Host agent", "Sync the agent wheelhouse"], "hosts_with_change": ["h1"], "hosts_with_conditional_change": []},
        {"names": ["Host agent", "Install the agent"], "hosts_with_change": [], "hosts_with_conditional_change": ["h1"]},
        {"names": ["Docker", "Restart docker"], "hosts_with_change": [], "hosts_with_conditional_change": ["h1"]},
    ]}
    found = drift_plan.plan_findings("h1", plan)
    assert [(f.kind, f.item, f.severity) for f in found] == [
        ("plan", "Host agent | Sync the agent wheelhouse", "drift")]
    converged = {"plan": [dict(op, hosts_with_change=[]) for op in plan["plan"]]}
    assert drift_plan.plan_findings("h1", converged) == []


# ---- probe parsing, masking, exit codes


def test_probe_sections_round_trip_through_the_fact():
    d = decl()
    assert not any("base64" in cmd for _, cmd in probe.probe_sections(d))  # content is read for --diff only
    sections = probe.probe_sections(d, diff=True)
    script = probe.probe_script(sections)
    assert "hf.env" in script and "base64" in script and "cat /etc/rigkit/secrets" not in script
    output = [f"{probe.SECTION} files", "S 640 root llama-swap 5 /etc/llama-swap/config.yaml",
              "a" * 64 + "  /etc/llama-swap/config.yaml",
              f"{probe.SECTION} content:/etc/llama-swap/config.yaml", "aGVsbG8=",
              f"{probe.SECTION} secret:/etc/rigkit/secrets/hf.env", "missing",
              f"{probe.SECTION} pacman", "nvidia-utils 610.57-1", "error: package 'cuda' was not found",
              f"{probe.SECTION} agent", "rigkit-agent 0.1", "__RC__=0",
              f"{probe.SECTION} llama-swap-start", "ExecMainStartTimestamp=@1700000000", "mtime=1699999990"]
    facts = probe.parse_probe(HostProbe().process(output), d.packages)
    assert facts["files"]["/etc/llama-swap/config.yaml"]["content"] == b"hello"
    assert facts["files"]["/etc/llama-swap/config.yaml"]["group"] == "llama-swap"
    assert facts["secrets"]["/etc/rigkit/secrets/hf.env"] is None
    assert facts["pacman"]["nvidia-utils"] == "610.57-1" and facts["pacman"]["cuda"] is None
    assert facts["agent"] == {"rc": 0, "output": "rigkit-agent 0.1"}
    assert facts["llama_swap_start"] == {"started": 1700000000, "mtime": 1699999990}


def test_mask_hides_values_keeps_names_and_references():
    text = (f"HF_TOKEN={TOKEN}\nVLLM_API_KEY=abcdef0123456789\napiKey: \"s3cr3tvalue\"\n"
            "env: VLLM_API_KEY=${VLLM_API_KEY}\nAuthorization: Bearer qwertyuiop\n--api-key zzzzzzzz\nMODEL=qwen")
    out = mask(text, [TOKEN])
    for secret in (TOKEN, "abcdef0123456789", "s3cr3tvalue", "qwertyuiop", "zzzzzzzz"):
        assert secret not in out
    assert "HF_TOKEN=***" in out and "${VLLM_API_KEY}" in out and "MODEL=qwen" in out


def test_exit_code_per_host_and_precedence():
    from rigkit import exitcodes

    warn = Finding("h", "model-lock", "lock", "x", "y")
    drifted = Finding("h", "pin", "cuda", "x", "y")
    error = Finding("h", "host", "connection", "x", "y")
    assert (warn.severity, drifted.severity, error.severity) == ("warn", "drift", "error")  # by kind
    assert drift.exit_code([]) == 0 and drift.exit_code([warn]) == 0
    assert drift.exit_code([warn, drifted]) == 3
    assert drift.exit_code([drifted, error]) == 1
    assert exitcodes.combine(3, 1, 0) == 1


def test_record_shape():
    f = Finding("h1", "pin", "cuda", "13.3.1-1", "13.4.0-1", diff="d")
    assert f.record() == {"host": "h1", "kind": "pin", "item": "cuda", "declared": "13.3.1-1", "actual": "13.4.0-1",
                          "severity": "drift"}
    assert f.record(with_diff=True)["diff"] == "d"


def test_probe_script_keeps_sections_apart_after_a_file_without_final_newline(tmp_path):
    """The real script, run by a local shell: daemon.json written without a final newline (as
    ``json.dump`` does) must not swallow the next section's marker."""
    import subprocess

    from rigkit.operations.facts.files import JsonFile

    p = tmp_path / "daemon.json"
    p.write_text(json.dumps({"runtimes": {}, "log-level": "warn"}, indent=4))
    script = probe.probe_script([("daemon-json", JsonFile().command(str(p))), ("agent", "echo v1; echo __RC__=0")])
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout.splitlines()
    facts = probe.parse_probe(HostProbe().process(out), [])
    assert facts["daemon_json"] == {"exists": True, "data": {"runtimes": {}, "log-level": "warn"}, "error": None}
    assert facts["agent"] == {"rc": 0, "output": "v1"}


def test_a_plan_that_fails_says_why():
    """pyinfra exits 1 with no JSON when a role raises DeployError (e.g. preflight's refusal)."""
    import subprocess

    proc = subprocess.Popen(["sh", "-c", "echo '--> Loading config...' >&2; "
                             "echo '--> pyinfra error in roles/preflight.py line 46: refusing to deploy:' >&2; "
                             "echo '  a window is open' >&2; exit 1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    plan, why = drift_plan.finish_plan(proc)
    assert plan is None
    assert why == ("pyinfra --dry exited 1 without a plan: pyinfra error in roles/preflight.py line 46: "
                   "refusing to deploy: a window is open")


def test_an_open_window_is_reported_and_explains_its_deviations():
    journal = {"id": "w1", "state": "open", "plan": {"tenant": "hyperqwen", "resident": "strata"},
               "changed": {"tenant_started": True, "proxy_stopped": True, "timers": ["agent-sync.timer"]}}
    findings = [drift.Finding("h1", "unit", "llama-swap.service", "active", "inactive (dead)"),
                drift.Finding("h1", "unit", "agent-sync.timer", "active", "inactive (dead)"),
                drift.Finding("h1", "pins", "cuda", "13.3.1-1", "13.4.0-1")]
    out = compare.apply_window("h1", findings, journal)
    assert [(f.item, f.severity) for f in out] == [("llama-swap.service", "expected"), ("agent-sync.timer", "expected"),
                                                   ("cuda", "drift"), ("window w1", "warn")]
    assert out[0].actual == "inactive (dead) — window w1 stopped the proxy"
    assert drift.exit_code(out) == 3  # the pin is still drift
    assert drift.exit_code(out[:2] + out[3:]) == 0


def test_a_closed_window_changes_nothing():
    findings = [drift.Finding("h1", "unit", "llama-swap.service", "active", "inactive (dead)")]
    assert compare.apply_window("h1", list(findings), {"id": "w1", "state": "restored"}) == findings


def test_a_hold_is_reported_with_what_it_holds_back():
    holds = {"exists": True, "error": None, "data": {"llama-swap": {
        "since": "2026-11-30T08:00:00Z", "by": "rollback", "held_back_copy": "/var/lib/rigkit/llama-swap/held.yaml",
        "held_back_members": {"added": ["hyperqwen"], "removed": [], "changed": []}}}}
    (f,) = compare.compare_holds("h1", holds)
    assert (f.kind, f.item, f.severity) == ("hold", "llama-swap", "warn")  # a hold is a warning, as a rollback's
    # what the rollback replaced, against the config it restored — never "held back" as if the spec
    # declared it (a config activated with --data, then rolled back: the spec never had hyperqwen live)
    assert f.actual == ("held since 2026-11-30T08:00:00Z by rollback; rolled back from a config that added: hyperqwen "
                        "(against the one restored; copy: /var/lib/rigkit/llama-swap/held.yaml); the deploy does not "
                        "activate the declared config until `rigkit wire-in -i inventory/rig.py --host h1 --release`")
    assert "held back" not in f.actual
    assert compare.compare_holds("h1", {"exists": False, "data": None, "error": None}) == []


def test_the_host_lock_held_or_left_by_a_dead_holder_is_reported_not_counted():
    from rigkit.drift.compare import compare_rig_lock
    from rigkit.common.lock import parse_state

    assert compare_rig_lock("rig", parse_state(False, "")) == []
    held = compare_rig_lock("rig", parse_state(True, '{"what": "window w1", "pid": 7, "since": "T"}'))
    assert [(f.kind, f.severity) for f in held] == [("lock", "warn")]
    assert held[0].actual == "held by window w1 (pid 7, since T)"
    stale = compare_rig_lock("rig", parse_state(False, '{"what": "activation", "pid": 9, "since": "T"}'))
    assert "activation (pid 9, since T) died holding it" in stale[0].actual


@given(kinds=st.lists(st.sampled_from(["file", "file-mode", "file-owner"]), min_size=1, max_size=3),
       held=st.booleans(), other=st.booleans())
def test_the_files_a_wirein_hold_keeps_are_hold_rows_and_page_no_one(kinds, held, other):
    """Issue 61: after ``wire-in --rollback`` the live config and config.next.yaml are kept by the hold:
    severity ``hold`` (exit 0, not counted, no repair line), each naming the release; without the hold,
    or for any other file, ``drift`` as before."""
    from rigkit import exitcodes, paths
    from rigkit.cli.drift import repair_hint
    from rigkit.drift import run as drift

    holds = {"data": {"llama-swap": {"since": "t", "by": "rigkit wire-in --rollback"}} if held else {}}
    items = [paths.LLAMA_SWAP_CONFIG, paths.LLAMA_SWAP_NEXT]
    found = [compare.Finding("h1", k, items[i % 2], "a", "b") for i, k in enumerate(kinds)]
    if other:
        found.append(compare.Finding("h1", "file", paths.LLAMA_SWAP_STAGED, "a", "b"))
    out = compare.apply_holds("h1", compare.name_live_backup(found, holds) + compare.compare_holds("h1", holds), holds)
    kept = [f for f in out if f.item in items]
    assert {f.severity for f in kept} == ({"hold"} if held else {"drift"})
    if held:
        assert all(f.actual.endswith("until `rigkit wire-in -i inventory/rig.py --host h1 --release`") for f in kept)
        assert [f.severity for f in out if f.kind == "hold"] == ["warn"]
    want = exitcodes.FINDINGS if (other or not held) else exitcodes.OK
    assert drift.exit_code(out) == want
    assert (repair_hint("h1", out) is None) == (want == exitcodes.OK)
