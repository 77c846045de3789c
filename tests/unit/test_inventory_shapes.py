"""Inventories pyinfra would silently mangle are refused with one line each (issue #28): two hosts of
one name (pyinfra keeps one and drops the other), host data that is not a mapping (pyinfra fails with
``dictionary update sequence element #0 …``), a group that is not a list of hosts."""

from __future__ import annotations

import pytest

from rigkit.spec.inventory import InventoryError, inventory_shape_problems, load_hosts


def write(tmp_path, text: str) -> str:
    p = tmp_path / "inv.py"
    p.write_text(text)
    return str(p)


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
def test_a_mangled_inventory_is_refused_naming_the_group_and_host(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as exc:
        load_hosts(path, cwd=str(tmp_path))
    assert message in str(exc.value)
    assert "Traceback" not in str(exc.value) and "dictionary update sequence" not in str(exc.value)


def test_a_host_in_two_groups_without_its_own_data_twice_is_fine(tmp_path):
    path = write(tmp_path, 'rig = [("box", {"gpu_power_limit_w": 400})]\ngpu_boxes = ["box"]\n')
    assert inventory_shape_problems(path) == []
    assert [h.name for h in load_hosts(path, cwd=str(tmp_path))] == ["box"]
