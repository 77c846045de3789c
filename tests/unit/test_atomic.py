"""One atomic writer (rigkit.common.atomic): write + fsync + rename with an owner and mode, used by every
module that replaces a file; no other module renames or fsyncs (issue #26)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from rigkit.common import atomic

ROOT = Path(__file__).resolve().parents[2]
WRITER = ROOT / "rigkit" / "common" / "atomic.py"
FORBIDDEN = {"replace", "rename", "renames", "fsync", "fdatasync"}


def os_calls(path: Path) -> list[str]:
    """``os.<name>`` calls and uses of names imported ``from os`` in ``path`` that :data:`FORBIDDEN`
    lists, as ``line: os.name``."""
    tree = ast.parse(path.read_text(), str(path))
    from_os = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "os"
               for a in n.names if a.name in FORBIDDEN}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" \
                and node.attr in FORBIDDEN:
            out.append(f"{node.lineno}: os.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in from_os:
            out.append(f"{node.lineno}: {node.id} (from os)")
    return out


def test_no_module_but_the_atomic_writer_renames_or_fsyncs():
    offenders = []
    for path in sorted((ROOT / "rigkit").rglob("*.py")) + sorted((ROOT / "roles").rglob("*.py")) + [ROOT / "deploy.py"]:
        if path != WRITER:
            offenders += [f"{path.relative_to(ROOT)}:{c}" for c in os_calls(path)]
    assert not offenders, "use rigkit.common.atomic:\n" + "\n".join(offenders)
    assert os_calls(WRITER), "the check no longer sees the writer's own calls"


def test_the_check_sees_calls_and_names_imported_from_os(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("import os\nfrom os import replace as r\ndef f(a, b):\n    os.fsync(3)\n    r(a, b)\n"
                   "    'x'.replace('a', 'b')\n")
    assert sorted(os_calls(mod)) == ["4: os.fsync", "5: r (from os)"]


def test_a_write_replaces_the_file_whole_with_its_mode_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "sub" / "f.json"
    atomic.write_text(p, "one\n", mode=0o640)
    atomic.write_bytes(p, b"two\n", mode=0o600, owner=(os.getuid(), os.getgid()))
    assert p.read_text() == "two\n" and p.stat().st_mode & 0o7777 == 0o600
    assert sorted(x.name for x in p.parent.iterdir()) == ["f.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "f"
    p.write_text("old")
    with pytest.raises(KeyError):
        atomic.write_text(p, "new", owner="no-such-user-rigkit:no-such-group-rigkit")
    assert p.read_text() == "old" and sorted(x.name for x in tmp_path.iterdir()) == ["f"]


def test_move_puts_an_existing_file_in_place(tmp_path):
    src, dest = tmp_path / "a.part", tmp_path / "a"
    src.write_text("data")
    atomic.move(src, dest)
    assert dest.read_text() == "data" and not src.exists()
