"""The real validators: they pass the rendered rig and catch what each is for."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigkit import paths
from rigkit.cache import ArtefactUnavailable, fetch_pinned
from rigkit.render.checks import CheckResult, check_compose, check_llama_swap, check_units, run_checks, verdict_code
from rigkit.spec.llama_swap_schema import strict_problems
from rigkit.render.files import RenderedFile, render
from rigkit.spec.validate import spec_from_dict

import os

SHARED = Path(os.environ.get("RIGKIT_SHARED", Path(__file__).resolve().parents[3] / "shared"))

pytestmark = pytest.mark.slow
SPEC = spec_from_dict({})


def replaced(files, path, text):
    out = dict(files)
    out[path] = dataclasses.replace(files[path], text=text)
    return out


def _missing_here(unit_text: str) -> set[str]:
    """The deploy-installed executables a unit runs that this control machine lacks: the executable of
    each ``Exec*=`` line, except those prefixed ``-`` (a failure is ignored, and systemd-analyze does
    not check them)."""
    exes = set()
    for line in unit_text.splitlines():
        if line.startswith("Exec") and "=" in line:
            value = line.split("=", 1)[1]
            if value and not value.startswith("-"):
                exes.add(value.lstrip("@:+!").split()[0])
    return {p for p in exes if p in paths.DEPLOY_INSTALLED_EXECUTABLES and not Path(p).exists()}


def test_rendered_rig_passes_every_validator_and_skips_only_deploy_installed_executables():
    """Whatever the control machine has installed: a unit naming a deploy-installed executable that is
    missing here is skipped, naming exactly those; one whose executables are all here (docker at
    /usr/bin/docker, say) is verified for real and passes."""
    files = render(SPEC)
    results = run_checks(files, SPEC)
    assert [r for r in results if r.status in ("fail", "error")] == []
    units = {p: f for p, f in files.items() if p.startswith(paths.UNIT_DIR + "/")}
    naming = {p for p, f in units.items() if any(x in f.text for x in paths.DEPLOY_INSTALLED_EXECUTABLES)}
    assert naming == {f"{paths.UNIT_DIR}/{u}" for u in ("llama-swap.service", "hyperqwen.service", "gpu-power-limit.service",
                                                        "hyperqwen-watchdog.service", "rigkit-keeper.service",
                                                        "rigkit-power.service")}
    verdicts = {r.path: r for r in results if r.validator == "systemd-analyze verify"}
    assert set(verdicts) == set(units)
    for path, f in units.items():
        missing = _missing_here(f.text)
        if missing:
            assert verdicts[path].status == "skip", verdicts[path]
            assert verdicts[path].detail == "not executable here, installed by the deploy: " + ", ".join(sorted(missing))
        else:
            assert verdicts[path].status == "pass", verdicts[path]
    assert {r.validator for r in results if r.status == "pass"} >= {
        "compose-spec schema", "compose v2 parser", "llama-swap v250 schema", "llama-swap loader and strict model"}


def test_a_deploy_installed_executable_present_on_the_control_machine_is_verified_not_skipped(tmp_path):
    """The same unit, once naming a deploy-installed path missing here and once an executable that
    exists: skipped, then verified for real. Independent of what this machine has installed."""
    files = render(SPEC)
    unit = f"{paths.UNIT_DIR}/hyperqwen.service"
    missing = tmp_path / "not-here" / "docker"
    present = tmp_path / "docker"
    present.write_text("#!/bin/sh\n")
    present.chmod(0o755)
    text = files[unit].text.replace(paths.DOCKER_BIN, str(missing))
    import rigkit.render.checks as checks_mod

    old = paths.DEPLOY_INSTALLED_EXECUTABLES
    try:
        paths.DEPLOY_INSTALLED_EXECUTABLES = old + (str(missing), str(present))
        skipped = next(r for r in checks_mod.check_units(replaced(files, unit, text)) if r.path == unit)
        real = next(r for r in checks_mod.check_units(replaced(files, unit, text.replace(str(missing), str(present))))
                    if r.path == unit)
    finally:
        paths.DEPLOY_INSTALLED_EXECUTABLES = old
    assert skipped.status == "skip" and skipped.detail == f"not executable here, installed by the deploy: {missing}"
    assert real.status == "pass", real


def test_systemd_analyze_fails_a_unit_with_an_unknown_key():
    files = render(SPEC)
    unit = f"{paths.UNIT_DIR}/gpu-power-limit.service"
    bad = replaced(files, unit, files[unit].text.replace("RemainAfterExit=yes", "RemainAfterExitt=yes"))
    result = next(r for r in check_units(bad) if r.path == unit)
    assert result.status == "fail"
    assert result.detail == ("/etc/systemd/system/gpu-power-limit.service:9: Unknown key 'RemainAfterExitt' in "
                             "section [Service], ignoring.")
    others = [r for r in check_units(bad) if r.path != unit]
    assert all(r.status != "fail" for r in others)


def test_systemd_analyze_fails_a_missing_executable_the_deploy_does_not_install():
    files = render(SPEC)
    unit = f"{paths.UNIT_DIR}/rigkit-keeper.service"
    bad = replaced(files, unit, files[unit].text.replace(paths.AGENT_BIN, "/usr/local/bin/not-ours"))
    result = next(r for r in check_units(bad) if r.path == unit)
    assert result.status == "fail"
    assert "Command /usr/local/bin/not-ours is not executable" in result.detail


def test_compose_schema_refuses_an_unknown_service_key():
    files = render(SPEC)
    text = files[paths.HYPERQWEN_COMPOSE].text.replace("    command: prepare", "    command: prepare\n    restartt: no")
    results = {r.validator: r for r in check_compose(replaced(files, paths.HYPERQWEN_COMPOSE, text))}
    assert results["compose-spec schema"].status == "fail"
    assert "restartt" in results["compose-spec schema"].detail


def test_compose_parser_refuses_a_required_variable_that_is_unset():
    files = render(SPEC)
    text = files[paths.HYPERQWEN_COMPOSE].text.replace("count: ${GPU_COUNT:-1}", "count: ${GPU_COUNTS:?set GPU_COUNTS}", 1)
    results = {r.validator: r for r in check_compose(replaced(files, paths.HYPERQWEN_COMPOSE, text))}
    assert results["compose-spec schema"].status == "pass"
    assert results["compose v2 parser"].status == "fail"
    assert "set GPU_COUNTS" in results["compose v2 parser"].detail


def test_llama_swap_schema_refuses_a_wrong_type_and_strict_model_an_ignored_key():
    files = render(SPEC)
    text = files[paths.LLAMA_SWAP_CONFIG].text.replace("    ttl: 0\n", "    ttl: forever\n    cmd_stop: x\n", 1)
    results = check_llama_swap(replaced(files, paths.LLAMA_SWAP_CONFIG, text), SPEC)
    by = {(r.validator, r.path): r for r in results}
    schema = by[("llama-swap v250 schema", paths.LLAMA_SWAP_CONFIG)]
    strict = by[("llama-swap loader and strict model", paths.LLAMA_SWAP_CONFIG)]
    assert schema.status == "fail" and "models.strata.ttl" in schema.detail
    assert strict.status == "fail"
    assert "models.strata.cmd_stop: unknown key (llama-swap ignores it silently)" in strict.detail


def test_upstream_example_config_passes_the_strict_model():
    example = yaml.safe_load((SHARED / "data" / "llama-swap" / "config.example.yaml").read_text())
    assert strict_problems(example) == []


@pytest.mark.parametrize("key", ["readyTimeout", "host", "port", "timeout"])
def test_strict_model_refuses_the_dead_top_level_keys_real_configs_carry(key):
    assert strict_problems({"models": {"a": {"cmd": "x"}}, key: 1}) == [f"{key}: unknown key (llama-swap ignores it silently)"]


def test_group_preload_is_refused(tmp_path):
    data = {"models": {"a": {"cmd": "x"}}, "groups": {"g": {"members": ["a"], "preload": True}}}
    assert strict_problems(data) == ["groups.g.preload: unknown key (llama-swap ignores it silently)"]


@pytest.mark.parametrize("data,problem", [
    # reserved macro names (macros.go:52-54), legacy groups beside routing.router (load.go:189-198): issue #25
    ({"macros": {"PORT": 1}, "models": {"a": {"cmd": "x"}}}, "macro name 'PORT' is reserved"),
    ({"models": {"a": {"cmd": "x", "macros": {"MODEL_ID": "m", "ok": 1}}}}, "model a: macro name 'MODEL_ID' is reserved"),
    ({"models": {"a": {"cmd": "x", "proxy": "http://127.0.0.1:1"}}, "groups": {"g": {"members": ["a"]}},
      "routing": {"router": {"settings": {"groups": {"h": {"members": ["a"]}}}}}},
     "config uses both the legacy top-level 'matrix'/'groups' keys and the new 'routing.router' block; please "
     "migrate the top-level keys into 'routing.router' and remove them"),
    ({"models": {"a": {"cmd": "x", "proxy": "http://127.0.0.1:1", "timeouts": {"idleconn": 2}}}},
     "models.a.timeouts.idleconn: unknown key (llama-swap ignores it silently)"),  # the fix's own key, typo'd
])
def test_the_loader_refuses_what_llama_swaps_load_refuses_and_its_schema_cannot_say(data, problem):
    from rigkit.spec.llama_swap_load import judge

    assert judge(yaml.safe_dump(data), {}).problems == [problem]


def test_an_env_macro_llama_swap_cannot_resolve_is_refused_in_the_spec_and_in_the_rendered_config():
    from rigkit.render.checks import check_llama_swap
    from rigkit.spec.problems import SpecError

    with pytest.raises(SpecError) as exc:
        spec_from_dict({"llama_swap": {"members": {"strata": {"description": "key ${env.HF_TOKEN}"}}}})
    assert [p.key for p in exc.value.problems] == ["llama_swap.members.strata.description"]
    assert "'${env.HF_TOKEN}' is not set in the environment llama-swap.service gives it" in exc.value.problems[0].allowed
    files = render(SPEC)
    text = files[paths.LLAMA_SWAP_CONFIG].text.replace("resident coder model (GGUF)", "key ${env.HF_TOKEN}", 1)
    results = [r for r in check_llama_swap(replaced(files, paths.LLAMA_SWAP_CONFIG, text), SPEC)
               if r.validator == "llama-swap loader and strict model" and r.path == paths.LLAMA_SWAP_CONFIG]
    assert [r.status for r in results] == ["fail"]
    assert results[0].detail.startswith("environment variable 'HF_TOKEN' is not set (llama-swap.service gives")


def test_a_clamp_passes_and_is_shown_naming_the_value_llama_swap_will_use():
    import io

    from rich.console import Console

    from rigkit.cli.common import print_verdicts

    files = render(SPEC)
    text = files[paths.LLAMA_SWAP_CONFIG].text.replace("healthCheckTimeout: 300", "healthCheckTimeout: 5", 1)
    results = check_llama_swap(replaced(files, paths.LLAMA_SWAP_CONFIG, text), SPEC)
    loader = [r for r in results if r.validator == "llama-swap loader and strict model"][0]
    assert loader.status == "pass" and verdict_code(results) == 0
    assert loader.detail == ("warning: healthCheckTimeout: 5 — llama-swap raises it to 15 (load.go:63-65: any value "
                             "below 15 s becomes 15)")
    out = io.StringIO()
    print_verdicts("rig", results, Console(file=out, width=300))
    assert "pass  llama-swap loader and strict model: /etc/llama-swap/config.yaml\n        warning: healthCheckTimeout: 5" \
        in out.getvalue()


def test_pinned_fetch_refuses_a_wrong_sha256_and_caches_nothing(tmp_path):
    src = tmp_path / "schema.json"
    src.write_text("{}")
    with pytest.raises(ArtefactUnavailable) as info:
        fetch_pinned(src.as_uri(), "0" * 64, "schema.json", cache=tmp_path / "cache")
    assert str(info.value) == (f"{src.as_uri()}: sha256 {hashlib.sha256(b'{}').hexdigest()} does not match "
                               f"the pinned {'0' * 64}")
    assert not list((tmp_path / "cache").rglob("schema.json"))


def test_pinned_fetch_uses_the_cache_once_verified(tmp_path):
    src = tmp_path / "a.bin"
    src.write_bytes(b"abc")
    digest = hashlib.sha256(b"abc").hexdigest()
    first = fetch_pinned(src.as_uri(), digest, "a.bin", cache=tmp_path / "c")
    src.unlink()
    assert fetch_pinned(src.as_uri(), digest, "a.bin", cache=tmp_path / "c") == first
    assert Path(first).read_bytes() == b"abc"


def test_unreachable_schema_is_a_validator_that_could_not_run_naming_the_url_and_the_seam(monkeypatch, tmp_path):
    monkeypatch.setenv("RIGKIT_LLAMA_SWAP_SCHEMA_URL", (tmp_path / "missing.json").as_uri())
    results = check_llama_swap(render(SPEC), SPEC, cache=tmp_path / "empty-cache")
    schema = [r for r in results if r.validator == "llama-swap v250 schema"]
    assert [(r.status, r.path) for r in schema] == [
        ("error", f"{paths.LLAMA_SWAP_CONFIG}, {paths.LLAMA_SWAP_STAGED}")]
    assert "missing.json" in schema[0].detail and "RIGKIT_LLAMA_SWAP_SCHEMA_URL=file://" in schema[0].detail
    assert str(tmp_path / "empty-cache" / "artefacts") in schema[0].detail
    assert verdict_code(results) == 1  # could not run: exit 1, not a rejected file
    strict = [r for r in results if r.validator == "llama-swap loader and strict model"]
    assert [r.status for r in strict] == ["pass", "pass"]  # the other validators still ran


def test_verdict_code_rejected_beats_could_not_run():
    def r(status):
        return CheckResult("v", "/p", status)
    assert verdict_code([r("pass"), r("skip")]) == 0
    assert verdict_code([r("pass"), r("error")]) == 1
    assert verdict_code([r("error"), r("fail")]) == 2


# ----------------------------------------------------------------------------- the operator's units (issue 57)

NIGHTLY = ("[Unit]\nDescription=the operator's nightly job\nAfter=network-online.target\n\n"
           "[Service]\nType=oneshot\nExecStart={exe} --quiet\nExecStartPost=/bin/true\n")


def _with_operator_units(tmp_path, units: dict[str, str]):
    """The rig rendered with the operator's own unit files (``operator_units``), and its checks."""
    for name, text in units.items():
        (tmp_path / name).write_text(text)
    spec = spec_from_dict({"operator_units": [str(tmp_path / n) for n in units]})
    files = render(spec)
    return {r.path: r for r in run_checks(files, spec) if r.validator == "systemd-analyze verify"}


def test_an_operators_unit_calling_a_script_that_exists_only_on_the_rig_is_not_refused(tmp_path):
    """Before, systemd-analyze ran on the control machine and said ``Command /usr/local/bin/nightly-backup
    is not executable``: the spec was refused. Judged against what the rig will have, the script is
    staged as the rig has it and the one line says what could not be checked here; the rest of the unit is
    still judged (``/bin/true`` exists here and is checked for real)."""
    got = _with_operator_units(tmp_path, {"nightly-backup.service": NIGHTLY.format(exe="/usr/local/bin/nightly-backup"),
                                          "nightly-backup.timer": "[Timer]\nOnCalendar=daily\n\n[Install]\nWantedBy=timers.target\n"})
    service = got[f"{paths.UNIT_DIR}/nightly-backup.service"]
    assert (service.status, service.detail) == ("skip", "not checked here, exists only on the rig: /usr/local/bin/nightly-backup")
    assert got[f"{paths.UNIT_DIR}/nightly-backup.timer"].status == "pass"
    assert [r for r in got.values() if r.status in ("fail", "error")] == []


def test_an_operators_unit_is_still_judged_by_systemd(tmp_path):
    got = _with_operator_units(tmp_path, {"nightly.service": NIGHTLY.format(exe="/usr/local/bin/nightly")
                                          .replace("Type=oneshot", "Typo=oneshot")})
    result = got[f"{paths.UNIT_DIR}/nightly.service"]
    assert result.status == "fail"
    assert "Unknown key 'Typo' in section [Service]" in result.detail


@pytest.mark.parametrize("name, why", [("docker.service", "a unit the rig's packages ship"),
                                       ("nvidia-persistenced.service", "a unit the rig's packages ship"),
                                       ("systemd-journald.service", "a unit systemd itself ships")])
def test_an_operators_unit_named_like_a_shipped_unit_is_refused_for_that_reason(tmp_path, name, why):
    """Before, such a unit was refused only when this machine lacked its binary (``/usr/bin/nvidia-persistenced
    is not executable``); the reason is that in /etc/systemd/system it replaces the shipped unit whole."""
    exe = "/usr/bin/" + name.split(".")[0]
    result = _with_operator_units(tmp_path, {name: NIGHTLY.format(exe=exe)})[f"{paths.UNIT_DIR}/{name}"]
    assert result.status == "fail"
    assert result.detail.startswith(f"{name} is named like {why}: installed in /etc/systemd/system it would replace "
                                    "that unit whole")
    assert "not executable" not in result.detail


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(exe=st.lists(st.text(alphabet="abcxyz-_0123", min_size=1, max_size=8), min_size=1, max_size=4)
       .map(lambda parts: "/" + "/".join(["opt"] + parts)))
def test_no_executable_that_exists_only_on_the_rig_refuses_an_operators_unit(tmp_path_factory, exe):
    tmp = tmp_path_factory.mktemp("units")
    result = _with_operator_units(tmp, {"job.service": NIGHTLY.format(exe=exe)})[f"{paths.UNIT_DIR}/job.service"]
    assert (result.status, result.detail) == ("skip", f"not checked here, exists only on the rig: {exe}")
