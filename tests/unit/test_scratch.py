"""Scratch folders on the control machine (:mod:`rigkit.common.scratch`): made in one place, kept while the
process runs (a spec names its lock file by path), gone when it exits — also for a bisect's combination
and the deploy's copy of it, which used to pile up under /tmp — and never removed by a forked child."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Run in a child process with TMPDIR set: a folder of the helper (kept across a forked child's exit), a refused
#: bisect step's folder and the deploy's copy of a combination; prints each folder and whether it is there.
CHILD = r"""
import json, os, sys, types
from pathlib import Path
from rigkit.common import scratch
from rigkit.deploy import bisect as b, source
from rigkit.lockfile.document import dumps_lock
from tests.unit.test_bisect import _Out, _pair, _spec

made = [scratch.folder("rigkit-scratch-")]
(made[0] / "x").write_text("kept while the process runs")
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a forked child runs the exit handlers it inherited: the parent's folder must stay
os.waitpid(pid, 0)

good, bad, lg, lb = _pair()
bad["hyperqwen"]["dflash_tokens"] = -3
tried = [s for s in b.suspects(good, bad, lg, lb) if not s.reboot]
r = b.Runner(None, types.SimpleNamespace(name="h", spec=_spec()), "inv", b.Setup(1, 2, good, bad, lg, lb, tried, [], 1),
             "lease", "id", "m", "chat-greedy", _Out(), {})
try:
    r.deploy([i for i, s in enumerate(tried) if s.name.startswith("spec hyperqwen")], "mix")
except b.RefusedMix:
    pass
combined = source._combined({"spec": good, "lock_text": dumps_lock(lg), "bisect": {"step": 1}}, _spec())
made.append(Path(combined.spec.lockfile).parent)
tmp = Path(os.environ["TMPDIR"])
print(json.dumps({"made": [str(p) for p in made], "there": sorted(str(p) for p in tmp.iterdir())}))
"""


def test_scratch_folders_stay_while_the_process_runs_and_go_at_its_exit(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    names = sorted(Path(p).name.rsplit("-", 1)[0] for p in seen["there"])
    assert names == ["rigkit-bisect", "rigkit-bisect", "rigkit-scratch"], seen  # the step's, the deploy's, ours
    assert set(seen["made"]) <= set(seen["there"]), seen  # kept past the forked child's exit and while running
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "left behind at exit"


def _mkdtemp_calls(path: Path) -> list[int]:
    calls = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name == "mkdtemp":
                calls.append(node.lineno)
    return calls


def test_every_scratch_folder_of_rigkit_is_made_by_the_one_helper():
    """A folder that outlives its block is :func:`rigkit.common.scratch.folder`'s; one whose life is a block is a
    ``tempfile.TemporaryDirectory``: no other ``mkdtemp`` in rigkit/ (five used to leave hundreds under /tmp)."""
    found = {f"{p.relative_to(ROOT)}:{line}" for p in (ROOT / "rigkit").rglob("*.py") for line in _mkdtemp_calls(p)}
    assert {f.rsplit(":", 1)[0] for f in found} == {"rigkit/common/scratch.py"}, found
