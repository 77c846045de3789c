"""`rigkit render` and `rigkit check` as an operator runs them (subprocess: pyinfra's loader
gevent-patches the process that imports it, so it never runs inside the test process).

They run in projects of their own (:func:`project`, :data:`RIG_PROJECT`: an ``inventory/rig.py``
shaped like the operator's and the test's own ``group_data/``), never in the checkout, whose
``group_data/all.py`` is the operator's rig data and may change while the tests run."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rigkit.spec.model import unset_operator_values
from rigkit.spec.validate import spec_from_dict

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
RIGKIT = [sys.executable, "-m", "rigkit"]
RIG_INVENTORY = 'gpu_rigs = [("rig", {"ssh_hostname": "rig.lan", "_sudo": True})]\n'


def _rig_project() -> Path:
    """A project with the default inventory's path (``inventory/rig.py``, one host ``rig``) and an
    empty ``group_data/all.py``: the defaults, whatever the operator's checkout declares."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="rigkit-test-project-"))
    (root / "inventory").mkdir()
    (root / "group_data").mkdir()
    (root / "inventory" / "rig.py").write_text(RIG_INVENTORY)
    (root / "group_data" / "all.py").write_text('"""The tests\' own: no overrides."""\n')
    return root


RIG_PROJECT = _rig_project()
TOKEN = "hf_RIGKITtestTOKEN0123456789abcdef"


def run(args, cwd=RIG_PROJECT, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(env_extra or {})
    return subprocess.run([*RIGKIT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def project(tmp_path, all_py: str, inventory: str = 'hosts = [("box", {"ssh_hostname": "box.lan"})]\n'):
    (tmp_path / "inventory").mkdir()
    (tmp_path / "group_data").mkdir()
    (tmp_path / "inventory" / "lab.py").write_text(inventory)
    (tmp_path / "group_data" / "all.py").write_text(all_py)
    return tmp_path


def test_check_on_the_default_inventory_exits_0_with_one_warning_per_unset_value():
    proc = run(["check"])
    assert proc.returncode == 0, proc.stderr
    warns = [ln for ln in proc.stderr.splitlines() if ln.strip().startswith("warn")]
    expected = unset_operator_values(spec_from_dict({}))
    assert [w.split()[1].rstrip(":") for w in warns] == expected + ["lockfile"]  # and no lock yet
    assert "0 rejected, 0 could not run" in proc.stdout  # results on stdout: `rigkit check | less`
    assert "spec valid" in proc.stdout and "spec valid" not in proc.stderr


def test_check_warns_once_per_field_with_its_description_and_where_to_find_it():
    """Each unset operator value's warning is its own: the field's description from the spec model and
    where the value is found (``operator_value``), never one shared sentence; what "unset" means is said
    once; no suggested value is one check would then warn about."""
    from rigkit.spec.model import RigSpec, unset_operator_fields

    proc = run(["check"])
    lines = proc.stderr.splitlines()
    fields = unset_operator_fields(spec_from_dict({}))
    for key, description, where in fields:
        (line,) = [ln for ln in lines if ln.startswith(f"  warn  {key}: ")]
        assert line == f"  warn  {key}: unset — {description}. Where to find it: {where}"
    texts = [ln.split(": ", 1)[1] for ln in lines if ln.startswith("  warn  ")]
    by_model = {(d, w) for _, d, w in fields}
    assert len(by_model) >= 6  # one text per kind of field (the three models share the source's)
    assert sum("RIGKIT-UNSET placeholder" in ln for ln in lines) == 1
    assert f"  {len(fields)} operator value(s) unset: " in proc.stderr
    assert "server-cuda-b6123" not in proc.stderr + proc.stdout  # no tag suggested that check then warns about
    # what an index knows is not asked of the operator (issue #43): rigkit lock resolves it
    assert not {"pacman_pins", "hyperqwen.image.ref", "strata.image.ref", "gguf_baseline.image.ref",
                "llama_swap.release_sha256"} & {k for k, _, _ in fields}
    assert RigSpec.model_fields["operator_user"].description in proc.stderr


def test_check_piped_into_a_reader_that_stops_early_keeps_its_exit_code():
    """``rigkit check | head -1``: the pipe closes after one line; check still exits 0 (its own code),
    without a traceback."""
    import shlex

    cmd = " ".join(map(shlex.quote, [*RIGKIT, "check", "-v"])) + " | head -1; echo \"rc=${PIPESTATUS[0]}\""
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    proc = subprocess.run(["bash", "-c", cmd], cwd=RIG_PROJECT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines()[-1] == "rc=0", proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr


def test_render_writes_every_file_and_the_manifest(tmp_path):
    proc = run(["render", "--out", str(tmp_path / "out")])
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    by_path = {m["path"]: m for m in manifest}
    assert by_path["/opt/rigkit/hyperqwen/.env"]["mode"] == "0640"
    assert by_path["/opt/rigkit/hyperqwen/.env"]["owner"] == "root:llama-swap"
    for path in ("/opt/rigkit/hyperqwen/compose.yaml", "/etc/llama-swap/config.yaml",
                 "/etc/llama-swap/config.staged.yaml", "/etc/systemd/system/llama-swap.service",
                 "/etc/systemd/system/hyperqwen.service", "/etc/systemd/system/gpu-power-limit.service"):
        assert (tmp_path / "out" / path.lstrip("/")).is_file()
        assert path in by_path


def test_a_bad_value_in_group_data_exits_2_naming_the_key(tmp_path):
    proj = project(tmp_path, "gpu_power_limit_w = '420'\nhyperqwen = {'dflash_tokens': 15, 'max_model_len': 32768}\n")
    proc = run(["check", "-i", "inventory/lab.py"], cwd=proj)
    assert proc.returncode == 2
    assert "box: gpu_power_limit_w (in group_data/all.py): '420' (str) — expected an integer" in proc.stderr
    assert "box: hyperqwen.dflash_tokens: 15" not in proc.stderr  # type errors stop before cross-field checks


def test_a_typo_in_host_data_exits_2_with_did_you_mean(tmp_path):
    proj = project(tmp_path, "", inventory='hosts = [("box", {"ssh_hostname": "b", "hyperqwen": {"dflash_tokns": 5}})]\n')
    proc = run(["check", "-i", "inventory/lab.py"], cwd=proj)
    assert proc.returncode == 2
    assert ("box: hyperqwen.dflash_tokns (in inventory/lab.py (host box)): unknown key — not a rigkit or pyinfra key "
            "(did you mean 'dflash_tokens'?)") in proc.stderr


def test_one_nested_override_in_group_data_keeps_the_other_defaults(tmp_path):
    proj = project(tmp_path, "hyperqwen = {'dflash_tokens': 5}\n")
    proc = run(["render", "-i", "inventory/lab.py", "--out", "out"], cwd=proj)
    assert proc.returncode == 0, proc.stderr
    env = (proj / "out/opt/rigkit/hyperqwen/.env").read_text()
    assert "DFLASH_TOKENS=5" in env and "SPEC=dflash2" in env and "MAX_LEN=65536" in env and "PORT=18020" in env


def test_host_data_overrides_group_data_key_by_key(tmp_path):
    proj = project(tmp_path, "hyperqwen = {'dflash_tokens': 5, 'ctx': 'long'}\n",
                   inventory='hosts = [("box", {"hyperqwen": {"dflash_tokens": 6}})]\n')
    proc = run(["render", "-i", "inventory/lab.py", "--out", "out"], cwd=proj)
    assert proc.returncode == 0, proc.stderr
    env = (proj / "out/opt/rigkit/hyperqwen/.env").read_text()
    assert "DFLASH_TOKENS=6" in env and "CTX=long" in env


def test_unknown_host_exits_2():
    proc = run(["check", "--host", "nope"])
    assert proc.returncode == 2
    assert "--host nope: not in inventory/rig.py (hosts: rig)" in proc.stderr


def test_missing_inventory_exits_2():
    proc = run(["check", "-i", "inventory/none.py"])
    assert proc.returncode == 2
    assert "inventory 'inventory/none.py': no such file" in proc.stderr


def test_hf_token_source_is_named_and_its_value_appears_nowhere(tmp_path):
    out = tmp_path / "out"
    texts = []
    for args in (["check"], ["check", "-v"], ["render", "--out", str(out)]):
        proc = run(args, env_extra={"HF_TOKEN": TOKEN})
        assert proc.returncode == 0, proc.stderr
        texts += [proc.stdout, proc.stderr]
    assert "HF token: from environment variable HF_TOKEN" in "".join(texts)
    assert not any(TOKEN in t for t in texts)
    assert not any(TOKEN in p.read_text() for p in out.rglob("*") if p.is_file())


def test_hf_token_file_is_named_when_no_variable_is_set(tmp_path):
    (tmp_path / "token").write_text(TOKEN)
    proc = run(["check"], env_extra={"HF_HOME": str(tmp_path)})
    assert f"HF token: from file {tmp_path / 'token'}" in proc.stdout
    assert TOKEN not in proc.stderr + proc.stdout


def test_usage_error_exits_2():
    assert run(["render"]).returncode == 2


def test_a_bad_value_replaced_by_a_higher_layer_is_still_reported_with_its_file(tmp_path):
    proj = project(tmp_path, "hyperqwen = ['x']\n",
                   inventory='hosts = [("box", {"hyperqwen": {"dflash_tokens": 6}})]\n')
    proc = run(["check", "-i", "inventory/lab.py"], cwd=proj)
    assert proc.returncode == 2
    assert "box: hyperqwen (in group_data/all.py): ['x'] (list) — expected a mapping" in proc.stderr


def test_a_group_data_file_that_fails_to_run_exits_2_naming_the_file_and_error(tmp_path):
    proj = project(tmp_path, "this is not python\n")  # parses (a comparison), fails when run
    proc = run(["check", "-i", "inventory/lab.py"], cwd=proj)
    assert proc.returncode == 2, proc.stderr
    assert f"could not be loaded: {proj}/group_data/all.py: NameError: name 'this' is not defined" in proc.stderr
    (tmp_path / "b").mkdir()
    proj2 = project(tmp_path / "b", "x = undefined_name\n")
    proc = run(["check", "-i", "inventory/lab.py"], cwd=proj2)
    assert proc.returncode == 2, proc.stderr
    assert "NameError: name 'undefined_name' is not defined" in proc.stderr
    assert "Traceback" not in proc.stderr


FULL_DATA = '''
pacman_pins = {"nvidia-open-dkms": "610.57-1", "nvidia-utils": "610.57-1", "opencl-nvidia": "610.57-1",
               "cuda": "13.3.1-1"}
operator_user = "op"
paused_timers = []
lock_files = []
hyperqwen = {"image": {"ref": "sha256:" + "0" * 63 + "1"}}
strata = {"image": {"ref": "sha256:" + "0" * 63 + "2"}, "model_file": "s.gguf", "args": ["--threads", "1"]}
gguf_baseline = {"image": {"ref": "sha256:" + "0" * 63 + "2"}, "model_file": "b.gguf"}
llama_swap = {"release_sha256": "0" * 64}
models = {"hyperqwen-dflash2": {"repo_id": "t/a"}, "gguf-baseline": {"repo_id": "t/b"}, "strata": {"repo_id": "t/c"}}
'''
# nothing listens on port 1: had the deploy reached pyinfra, it would fail to connect (also exit 1)
UNREACHABLE = 'hosts = [("box", {"ssh_hostname": "127.0.0.1", "ssh_port": 1})]\n'


def test_offline_schema_is_a_validator_that_could_not_run_saying_what_to_do(tmp_path):
    proj = project(tmp_path, FULL_DATA, UNREACHABLE)
    env = {"RIGKIT_LLAMA_SWAP_SCHEMA_URL": (tmp_path / "nowhere" / "config-schema.json").as_uri(),
           "RIGKIT_CACHE": str(tmp_path / "empty-cache")}
    check = run(["check", "-i", "inventory/lab.py"], cwd=proj, env_extra=env)
    assert check.returncode == 1, check.stdout + check.stderr
    lines = check.stdout.splitlines()
    unrun = [ln for ln in lines if ln.startswith("  could not run")]
    assert unrun == ["  could not run  llama-swap v250 schema: /etc/llama-swap/config.yaml, "
                     "/etc/llama-swap/config.staged.yaml"], check.stdout
    assert re.search(r"The llama-swap v250 schema could not be fetched from file://\S+ \(could not fetch file://",
                     check.stdout), check.stdout
    assert "cached" in check.stdout and "used offline" in check.stdout
    assert "Offline, point RIGKIT_LLAMA_SWAP_SCHEMA_URL at a local copy" in check.stdout
    assert "0 rejected, 1 could not run" in check.stdout

    dep = run(["deploy", "-i", "inventory/lab.py", "--no-smoke"], cwd=proj, env_extra=env)
    assert dep.returncode == 1, dep.stdout + dep.stderr
    assert "a validator could not run (above); the deploy refuses (exit 1, nothing touched)" in dep.stderr
    assert "$ pyinfra" not in dep.stderr  # refused before pyinfra (and the host) was reached

    rendered = run(["render", "-i", "inventory/lab.py", "--out", "out"], cwd=proj, env_extra=env)
    assert rendered.returncode == 1, rendered.stdout + rendered.stderr
    assert "(unverified: a validator could not run)" in rendered.stdout
    assert (proj / "out" / "manifest.json").is_file()


def test_a_rendered_file_a_validator_rejects_is_exit_2_in_check_render_and_deploy(tmp_path):
    proj = project(tmp_path, FULL_DATA + 'operator_units = ["units/sync.service"]\n', UNREACHABLE)
    (proj / "units").mkdir()
    (proj / "units" / "sync.service").write_text("[Service]\nExecStart=/bin/true\nRestartt=no\n")
    check = run(["check", "-i", "inventory/lab.py"], cwd=proj)
    assert check.returncode == 2, check.stdout + check.stderr
    assert "FAIL  systemd-analyze verify: /etc/systemd/system/sync.service" in check.stdout
    assert "Unknown key 'Restartt'" in check.stdout
    rendered = run(["render", "-i", "inventory/lab.py", "--out", "out"], cwd=proj)
    assert rendered.returncode == 2 and not (proj / "out").exists(), rendered.stdout + rendered.stderr
    dep = run(["deploy", "-i", "inventory/lab.py", "--no-smoke"], cwd=proj)
    assert dep.returncode == 2, dep.stdout + dep.stderr
    assert "FAIL  systemd-analyze verify: /etc/systemd/system/sync.service" in dep.stderr
    assert "the deploy refuses (exit 2, nothing touched)" in dep.stderr and "$ pyinfra" not in dep.stderr


def test_check_results_are_on_stdout_so_a_pager_shows_them(tmp_path):
    proj = project(tmp_path, FULL_DATA)
    proc = run(["check", "-i", "inventory/lab.py", "-v"], cwd=proj)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "box: spec valid" in proc.stdout
    assert "  pass  llama-swap v250 schema: /etc/llama-swap/config.yaml" in proc.stdout
    assert "passed, 0 rejected, 0 could not run" in proc.stdout
    # no other warning: every operator value is set; the one left says there is no model lock yet
    assert proc.stderr == ("  warn  lockfile: no lock (inventory/lab.lock.json does not exist); the deploy "
                           "refuses without one: `rigkit lock -i inventory/lab.py` resolves the pins, images, llama-swap "
                           "release and models into it\n")


def _pyinfra_parse_cli_arg():
    """pyinfra's own ``parse_cli_arg`` (``pyinfra_cli/util.py``), its source compiled alone: importing
    ``pyinfra_cli`` gevent-patches the test process."""
    import ast
    import importlib.util
    import json as json_mod
    from pathlib import Path as P

    src = P(importlib.util.find_spec("pyinfra").origin).parents[1] / "pyinfra_cli" / "util.py"
    tree = ast.parse(src.read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parse_cli_arg")
    ns: dict = {"json": json_mod}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(src), "exec"), ns)
    return ns["parse_cli_arg"]


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12)
                    | st.sampled_from(["610.60", "7", "true", "False", "[1]", '"x"', "null", " 3", "1e3", "strata"]),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=6))
def test_a_data_override_reaches_pyinfra_as_the_value_it_is(value):
    """rigkit passes each --data override on to pyinfra; pyinfra's own parser must read back exactly
    that value (a string "610.60" stayed text and pyinfra made it the float 610.6: the spec refused it)."""
    from rigkit.deploy.run import data_text

    back = _pyinfra_parse_cli_arg()(data_text(value))
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize("member,key,macro", [
    ({"cmd": "llama-server --port ${PORT} --models ${MODELS}"}, "cmd", "${MODELS}"),
    ({"env": ["HOME=/var/lib/${USER}"]}, "env[0]", "${USER}"),
    ({"name": "Coder ${VARIANT}"}, "name", "${VARIANT}"),
])
def test_check_exits_2_on_a_member_macro_llama_swap_would_refuse_naming_the_field_and_the_macro(member, key, macro):
    # issue #38: llama-swap 250 refuses the whole config on it (unknown macro '${MODELS}' found in coder.cmd)
    coder = {"cmd": "llama-server --port ${PORT}", "vram_gib": 1, "cold_boot_s": 5, **member}
    data = {"members": {"coder": coder}, "groups": {"gpu": {"members": ["strata", "gguf-baseline", "hyperqwen", "coder"]}}}
    proc = run(["check", "--data", f"llama_swap={json.dumps(data)}"])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if f"llama_swap.members.coder.{key}:" in ln)
    assert f"llama-swap 250 refuses the whole config on the macro '{macro}'" in line


def test_the_wire_in_example_in_group_data_works_when_uncommented(tmp_path):
    """``group_data/all.py`` (the operator's file, read here, never changed) carries the wire-in as a
    commented line; uncommented in a copy, it makes HyperQwen a live member: the rendered live config
    has it, while the file as it is keeps HyperQwen staged (issue 40: the example sat inside the
    module's docstring, so uncommenting it did nothing)."""
    import yaml

    text = (ROOT / "group_data" / "all.py").read_text()
    line = '# llama_swap = {"members": {"hyperqwen": {"staged": False}}}'
    assert text.count(line) == 1, "the wire-in example is gone from group_data/all.py"
    uncommented = text.replace(line, line[2:])
    assert ast.get_docstring(ast.parse(uncommented)).count("llama_swap =") == 0  # not inside the docstring

    def live_members(all_py: str, where: Path) -> set[str]:
        proj = where
        (proj / "inventory").mkdir(parents=True)
        (proj / "group_data").mkdir()
        (proj / "inventory" / "rig.py").write_text(RIG_INVENTORY)
        (proj / "group_data" / "all.py").write_text(all_py)
        proc = run(["render", "--out", "out"], cwd=proj)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return set(yaml.safe_load((proj / "out" / "etc/llama-swap/config.yaml").read_text())["models"])

    assert "hyperqwen" not in live_members(text, tmp_path / "as-is")
    assert "hyperqwen" in live_members(uncommented, tmp_path / "uncommented")


def test_check_says_spec_valid_only_when_it_is_and_names_the_skipped_estimate(tmp_path):
    """Issue #59: "spec valid" is the host's last line and only when nothing below it failed; without a
    model lock (or with one that does not match) the VRAM estimate says it was skipped and why."""
    proj = project(tmp_path, FULL_DATA)
    proc = run(["check", "-i", "inventory/lab.py"], cwd=proj)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "  vram: estimate skipped — no model lock" in "\n".join(lines)
    assert lines.index("box: spec valid") > max(i for i, ln in enumerate(lines) if "vram: estimate skipped" in ln)
    (proj / "inventory" / "lab.lock.json").write_text('{"version": 2, "models": {}}\n')
    proc = run(["check", "-i", "inventory/lab.py"], cwd=proj)
    assert proc.returncode == 2 and "spec valid" not in proc.stdout, proc.stdout + proc.stderr
    assert "box: spec invalid (the errors above)" in proc.stdout and "vram: estimate skipped" in proc.stdout
