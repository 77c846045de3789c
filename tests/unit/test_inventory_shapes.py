"""Inventories pyinfra would silently mangle are refused with one line each (issue #28): two hosts of
one name (pyinfra keeps one and drops the other), host data that is not a mapping (pyinfra fails with
``dictionary update sequence element #0 …``), a group that is not a list of hosts.

pyinfra's CLI package monkey-patches the process with gevent when imported, so every case runs in a
child process: one ``rigkit check`` per refused inventory, one Python run for the accepted shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def check(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    (tmp_path / "inv.py").write_text(text)
    return subprocess.run([sys.executable, "-m", "rigkit", "check", "-i", str(tmp_path / "inv.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("text, message", [
    ('rig = [("box", {"gpu_power_limit_w": 400}), ("box", {"gpu_power_limit_w": 300})]\n',
     "host 'box' appears twice in group 'rig': give each host a unique name"),
    ('rig = [("box", {"a": 1})]\nlab = [("box", {"b": 2})]\n',
     "host 'box' is declared with its own data twice (groups 'rig' and 'lab'); pyinfra would keep one and drop "
     "the other silently: give each host a unique name"),
    ('rig = [("box", ["not", "a", "mapping"])]\n',
     "host 'box' in group 'rig': its data is a list, not a mapping of keys to values"),
    ('rig = [("box", {}, "extra")]\n', "group 'rig': \"('box', {}, 'extra')\" is not (name, data)"),
])
def test_a_mangled_inventory_is_refused_with_exit_2_naming_the_group_and_host(tmp_path, text, message):
    proc = check(tmp_path, text)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert message in out and "Traceback" not in out and "dictionary update sequence" not in out, out


def test_a_host_in_two_groups_without_its_own_data_twice_is_fine(tmp_path):
    inv = tmp_path / "inv.py"
    inv.write_text('rig = [("box", {"gpu_power_limit_w": 400})]\ngpu_boxes = ["box"]\n')
    code = ("import json, sys; from rigkit.spec.inventory import inventory_shape_problems, load_hosts; "
            f"print(json.dumps([inventory_shape_problems({str(inv)!r}), [h.name for h in load_hosts({str(inv)!r})]]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == [[], ["box"]]


def _hosts(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    inv = tmp_path / "inv.py"
    inv.write_text(text)
    code = ("import json; from rigkit.spec.inventory import load_hosts; from rigkit.spec.problems import SpecError\n"
            f"try:\n    print(json.dumps([h.name for h in load_hosts({str(inv)!r})]))\n"
            "except SpecError as e:\n    print(json.dumps([str(p) for p in e.problems]))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_two_hosts_reaching_one_machine_are_refused_naming_both_and_other_ports_are_two_machines(tmp_path):
    proc = _hosts(tmp_path, 'rig = [("a", {"ssh_hostname": "rig.lan"}), ("b", {"ssh_hostname": "RIG.lan."}),\n'
                            '       ("c", {"ssh_hostname": "rig.lan", "ssh_port": 2222}), ("rig.lan", {})]\n')
    found = json.loads(proc.stdout.splitlines()[-1])
    assert [p.split(":")[0] for p in found] == ["b", "rig.lan"], found
    assert "ssh_hostname: 'RIG.lan.' — host 'a' already reaches rig.lan:22" in found[0]
