"""The coverage table (:mod:`rigkit.drift.coverage`): every operation of ``roles/`` has its row,
every ``probe`` row a breakage whose findings the probe can produce, and the probe's new
comparisons (folders, accounts, repo packages, the release binary, mkinitcpio, legacy backups, the
agent's wheelhouse) find what they say."""

from __future__ import annotations

import ast
import fnmatch
import hashlib
from pathlib import Path

from click.testing import CliRunner
from hypothesis import given, strategies as st

from rigkit.drift import compare, coverage, probe
from rigkit.operations.facts.files import FileStates, FolderFiles
from rigkit.operations.facts.util import RC_MARK

ROOT = Path(__file__).resolve().parents[2]


def finding_kinds() -> set[str]:
    """The ``kind`` of every ``Finding(host, "<kind>", ...)`` that rigkit/drift/compare.py writes."""
    tree = ast.parse((ROOT / "rigkit/drift/compare.py").read_text())
    return {n.args[1].value for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Finding"
            and len(n.args) > 1 and isinstance(n.args[1], ast.Constant)}


def covers(patterns: tuple[str, ...], own: str) -> bool:
    """Whether one of ``patterns`` (concrete rows or patterns) is the operation ``own`` (a pattern)."""
    return any(fnmatch.fnmatchcase(p, own) or fnmatch.fnmatchcase(own, p) for p in patterns)


def test_every_operation_of_the_roles_has_exactly_one_row():
    ops = [(o.role, o.name) for o in coverage.deploy_operations()]
    rows = [(c.role, c.op) for c in coverage.COVERAGE]
    assert len(ops) > 50
    assert sorted(set(ops) - set(rows)) == [], "operations without a drift expectation (add a row to COVERAGE)"
    assert sorted(set(rows) - set(ops)) == [], "rows naming no operation of roles/"
    assert len(rows) == len(set(rows)), "one row per operation"


def test_a_new_operation_without_a_row_is_caught(tmp_path):
    (tmp_path / "extra.py").write_text('from pyinfra.api import deploy\nfrom pyinfra.operations import files\n\n'
                                       '@deploy("Extra")\ndef extra(spec):\n'
                                       '    files.line(name=f"Hold {spec.x} in a file", path="/etc/x", line="y", _if=lambda: 1)\n')
    ops = coverage.deploy_operations(tmp_path)
    assert ops == [coverage.Operation("extra", "Extra", "Hold {spec.x} in a file", True)]
    assert coverage.row_for("extra", ops[0].name) is None


def test_rows_are_what_they_say():
    kinds = finding_kinds()
    ops = {(o.role, o.name): o for o in coverage.deploy_operations()}
    for c in coverage.COVERAGE:
        assert c.how in coverage.HOW, c
        assert c.note, c
        op = ops[(c.role, c.op)]
        if op.gated:  # an _if operation never changes on its own: its trigger's row covers it
            assert c.how == "gated", c
        if c.how != "probe":
            assert c.breakage is None, c
            continue
        if c.breakage is None:
            if c.seen_with:
                other = coverage.row_for(c.role, c.seen_with)
                assert other is not None and other.breakage, c
                assert covers(other.plan, coverage.own_plan_row(c)), c
            else:
                assert c.note.startswith("not broken:"), c
            continue
        assert c.restore and c.findings and c.plan, c
        assert {k for k, _ in c.findings} <= kinds, c
        # the row's own operation is among the plan rows it expects
        assert covers(c.plan, coverage.own_plan_row(c)), c


def test_help_names_the_plan_only_operations():
    from rigkit.cli.main import cli

    out = CliRunner().invoke(cli, ["drift", "--help"]).output
    assert "--plan / --no-plan" in out
    squashed = "".join(out.split())  # the help is wrapped at any space or hyphen
    assert "notes/drift-coverage.md" in squashed
    for c in coverage.PLAN_ONLY:
        assert "".join(c.op.split()) in squashed
    if not coverage.PLAN_ONLY:
        assert "none:everyoperationthatcanchangethehostisseenbytheprobe" in squashed


def test_op_pattern_matches_the_rendered_name():
    row = coverage.row_for("agent", "Install {stem}.{kind}")
    assert row.op_pattern == "Install *.*"
    assert fnmatch.fnmatchcase("Install rigkit-keeper.timer", row.op_pattern)


# --- the probe's comparisons added for the table --------------------------------------------


def test_directory_missing_mode_and_owner():
    declared = {"/opt/rigkit": {"user": "root", "group": "root", "mode": "755"},
                "/etc/llama-swap": {"user": "root", "group": "llama-swap", "mode": "750"}}
    got = compare.compare_directories("h", declared, {"/opt/rigkit": {"mode": "700", "user": "root", "group": "root"}})
    assert [(f.kind, f.item, f.declared, f.actual) for f in got] == [
        ("directory", "/etc/llama-swap", "present root:llama-swap 0750", "missing"),
        ("directory-mode", "/opt/rigkit", "0755", "0700")]
    got = compare.compare_directories("h", declared, {"/opt/rigkit": {"mode": "755", "user": "root", "group": "root"},
                                                      "/etc/llama-swap": {"mode": "750", "user": "root", "group": "root"}})
    assert [(f.kind, f.actual) for f in got] == [("directory-owner", "root:root")]


def _account(passwd: str, ids: str, group: str | None = "llama-swap:x:995:") -> dict | None:
    lines = [passwd, probe.GROUPS_MARK, ids] + ([probe.GROUP_MARK, group or "missing"] if group is not False else [])
    return probe.parse_account(lines)


LS = {"llama-swap": {"system": True, "group": "llama-swap", "groups": ["docker"], "exact": True,
                     "home": "/var/lib/llama-swap", "shell": "/usr/bin/nologin"},
      "rig": {"system": False, "group": None, "groups": ["docker"], "exact": False, "home": None, "shell": None}}
PASSWD = "llama-swap:x:995:995::/var/lib/llama-swap:/usr/bin/nologin"


def test_accounts_as_pyinfra_compares_them():
    good = {"llama-swap": _account(PASSWD, "llama-swap docker"),
            "rig": _account("rig:x:1000:1000::/home/rig:/bin/bash", "rig wheel docker", group=False)}
    assert compare.compare_accounts("h", LS, good) == []
    bad = {"llama-swap": _account(PASSWD.replace("/usr/bin/nologin", "/bin/sh"), "llama-swap docker wheel"),
           "rig": _account("rig:x:1000:1000::/home/rig:/bin/bash", "rig wheel", group=False)}
    assert [(f.item, f.declared, f.actual) for f in compare.compare_accounts("h", LS, bad)] == [
        ("llama-swap groups", "exactly docker", "docker, wheel"), ("llama-swap shell", "/usr/bin/nologin", "/bin/sh"),
        ("rig groups", "in docker", "wheel")]
    gone = {"llama-swap": probe.parse_account(["missing", probe.GROUPS_MARK, "", probe.GROUP_MARK, "missing"])}
    assert [(f.item, f.actual) for f in compare.compare_accounts("h", {"llama-swap": LS["llama-swap"]}, gone)] == [
        ("llama-swap", "missing")]


@given(st.lists(st.sampled_from(["docker", "wheel", "video", "render"]), unique=True))
def test_exact_groups_are_exactly_the_declared_ones(supplementary):
    got = {"llama-swap": _account(PASSWD, " ".join(["llama-swap", *supplementary]))}
    rows = [f.item for f in compare.compare_accounts("h", {"llama-swap": LS["llama-swap"]}, got)]
    assert ("llama-swap groups" in rows) == (set(supplementary) != {"docker"})


def test_release_binary_missing_or_from_another_tarball():
    sha = "a" * 64
    assert compare.compare_release_binary("h", sha, {"marker": sha, "present": True}) == []
    assert [f.actual for f in compare.compare_release_binary("h", sha, {"marker": sha, "present": False})] == ["missing"]
    assert [f.actual for f in compare.compare_release_binary("h", sha, {"marker": "b" * 64, "present": True})] == [
        "marker says sha256:bbbbbbbbbbbb"]
    assert compare.compare_release_binary("h", None, {}) == []


def test_mkinitcpio_kms_hook_read_as_the_deploy_reads_it():
    from rigkit.common.mkinitcpio import parse_load

    assert compare.compare_mkinitcpio("h", None) == []
    assert compare.compare_mkinitcpio("h", parse_load(["main absent"])) == []
    assert compare.compare_mkinitcpio("h", parse_load(["main present", "hook base", "hook udev"])) == []
    found = compare.compare_mkinitcpio("h", parse_load(["main present", "hook base", "hook kms", "rigkit-hook base"]))
    assert [(f.kind, f.actual) for f in found] == [("boot", "kms hook in effect: HOOKS=(base kms)")]
    preset = parse_load(["main present", "preset /etc/mkinitcpio.d/linux.preset\tALL_config=/etc/mkinitcpio.conf\thooks base kms",
                         "hook base"])
    assert "/etc/mkinitcpio.d/linux.preset: ALL_config=/etc/mkinitcpio.conf (HOOKS: base kms)" in compare.compare_mkinitcpio("h", preset)[0].actual
    # a preset naming its own config without kms (issue 57): nothing for drift to report
    clean = parse_load(["main present", "preset /etc/mkinitcpio.d/linux.preset\tALL_config=/etc/mkinitcpio.conf\thooks base udev",
                        "hook base", "hook udev"])
    assert clean["presets"] == [["/etc/mkinitcpio.d/linux.preset", "ALL_config=/etc/mkinitcpio.conf", ["base", "udev"]]]
    assert compare.compare_mkinitcpio("h", clean) == []
    broken = parse_load(["main present", "preset /p\tdefault_config=/gone.conf\terror", "hook base"])
    assert "does not load (/p: default_config=/gone.conf)" in compare.compare_mkinitcpio("h", broken)[0].actual


def test_legacy_unit_without_its_copy():
    parsed = probe.parse_probe({"legacy-backup": ["strata.service unbacked", "old.service backed"]}, [])
    assert [f.item for f in compare.compare_legacy_backups("h", parsed["legacy_backup"])] == ["strata.service backup"]


def test_repo_packages_installed_at_any_version():
    got = compare.compare_repo_packages("h", ["docker", "docker-buildx"], {"docker": "1:20.10.24-1", "docker-buildx": None})
    assert [(f.kind, f.item) for f in got] == [("package", "docker-buildx")]


def test_wheelhouse_compared_file_by_file(tmp_path, monkeypatch):
    house = tmp_path / "house"
    house.mkdir()
    (house / "a-1-py3-none-any.whl").write_bytes(b"a")
    (house / ".complete").write_text("a-1-py3-none-any.whl\n")
    sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in house.iterdir()}
    lines = (["3.11", probe.WHEELS_MARK] + [f"S 644 root root 1 ./{n}" for n in sums]
             + [f"{s}  ./{n}" for n, s in sums.items()] + [f"{RC_MARK}0"])
    wheels = probe.parse_probe({"wheels": lines}, [])["wheels"]
    assert wheels["python"] == "3.11" and set(wheels["files"]) == set(sums)
    from rigkit.operations.wheels import local_sums

    assert compare.compare_wheelhouse("h", wheels, local_sums(house)) == []
    other = tmp_path / "other"  # another build (a built wheelhouse never changes in place)
    other.mkdir()
    (other / "a-1-py3-none-any.whl").write_bytes(b"changed")
    (other / ".complete").write_text("a-1-py3-none-any.whl\n")
    [f] = compare.compare_wheelhouse("h", wheels, local_sums(other))
    assert (f.kind, f.actual) == ("agent-wheelhouse", "missing or different: a-1-py3-none-any.whl")

    def fails(version):
        raise RuntimeError("pip download failed\nmore")

    monkeypatch.setattr("rigkit.render.wheelhouse.build", fails)
    from rigkit.drift.run import built_wheelhouse

    built_wheelhouse.cache_clear()
    try:
        [f] = compare.compare_wheelhouse("h", wheels, built_wheelhouse("3.11"))
    finally:
        built_wheelhouse.cache_clear()
    assert f.severity == "warn" and "pip download failed" in f.actual



def test_agreement_names_each_disagreement():
    mode = coverage.row_for("llama_swap", "Install llama-swap.service")
    power = coverage.row_for("power", "Set the GPU power limit to {spec.gpu_power_limit_w} W")
    findings = [("file-mode", "/etc/systemd/system/llama-swap.service", "drift"),
                ("power", "GPU 0 power.limit", "drift"), ("power", "GPU 0 enforced.power.limit", "drift"),
                ("lock", "/var/lib/rigkit/rig.lock", "warn"), ("reboot", "pending", "drift")]
    plan = ["llama-swap | Install llama-swap.service", "Power limit | Set the GPU power limit to 420 W"]
    assert coverage.agreement([mode, power], findings, plan) == []
    assert coverage.agreement([], [], []) == []  # the converged host
    assert coverage.agreement([mode, power], findings[:1], plan[:1]) == [
        "power: Set the GPU power limit to {spec.gpu_power_limit_w} W: the probe did not report power GPU 0 power.limit",
        "power: Set the GPU power limit to {spec.gpu_power_limit_w} W: the probe did not report power GPU 0 enforced.power.limit",
        "power: Set the GPU power limit to {spec.gpu_power_limit_w} W: the plan did not show it"]
    assert coverage.agreement([], findings[:1], ["Docker | Enable and start docker"]) == [
        "the probe reported file-mode /etc/systemd/system/llama-swap.service, which no breakage of the batch explains",
        "the plan would change Docker | Enable and start docker, which no breakage of the batch explains"]


def test_batches_keep_alone_rows_apart():
    rows = list(coverage.COVERAGE)
    got = coverage.batches(rows, 5)
    flat = [c for b in got for c in b]
    assert sorted(map(id, flat)) == sorted(id(c) for c in rows if c.breakage)
    assert all(len(b) <= 5 for b in got)
    assert all(len(b) == 1 for b in got if any(c.alone for c in b))


def test_op_pattern_keeps_brackets_literal():
    row = coverage.row_for("pins", "Hold the pinned packages: Include rigkit's pins file from [options]")
    assert fnmatch.fnmatchcase("Hold the pinned packages: Include rigkit's pins file from [options]", row.op_pattern)
    assert not fnmatch.fnmatchcase("Hold the pinned packages: Include rigkit's pins file from o", row.op_pattern)


def test_folder_files_and_file_states_parse_their_own_commands_output():
    assert FolderFiles().process([f"{RC_MARK}1"]) is None
    assert FolderFiles().process([f"{RC_MARK}0"]) == {}
    got = FolderFiles().process(["S 644 root root 3 ./.complete", "S 600 root root 7 ./x y.whl", "S 644 root root 1 ./no-sum",
                                 f"{'a' * 64}  ./.complete", f"{'b' * 64}  ./x y.whl", f"{RC_MARK}0"])
    assert got == {".complete": {"mode": "644", "user": "root", "group": "root", "size": 3, "sha256": "a" * 64},
                   "x y.whl": {"mode": "600", "user": "root", "group": "root", "size": 7, "sha256": "b" * 64}}
    fact = FileStates()
    assert "sha256sum" in fact.command(["/etc/a", "/etc/b c"])
    assert fact.process(["S 644 root root 5 /etc/a", f"{'c' * 64}  /etc/a"]) == {
        "/etc/a": {"mode": "644", "user": "root", "group": "root", "size": 5, "sha256": "c" * 64}}


def test_the_facts_commands_run_in_a_real_shell(tmp_path):
    import os
    import subprocess

    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "a.whl").write_bytes(b"wheel")
    (tmp_path / "w" / ".complete").write_text("a.whl\n")
    os.chmod(tmp_path / "w" / "a.whl", 0o600)

    def sh(cmd: str) -> list[str]:
        return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout.splitlines()

    got = FolderFiles().process(sh(FolderFiles().command(str(tmp_path / "w"))))
    assert set(got) == {"a.whl", ".complete"} and got["a.whl"]["mode"] == "600"
    assert got["a.whl"]["sha256"] == hashlib.sha256(b"wheel").hexdigest()
    assert FolderFiles().process(sh(FolderFiles().command(str(tmp_path / "none")))) is None
    fact = FileStates()
    out = fact.process(sh(fact.command([str(tmp_path / "w" / "a.whl"), str(tmp_path / "gone")])))
    assert out[str(tmp_path / "w" / "a.whl")]["size"] == 5 and str(tmp_path / "gone") not in out
