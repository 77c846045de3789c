"""The project directory the sandbox tests run rigkit and pyinfra in: their own declared data, never
the operator's.

pyinfra's loader reads ``group_data/`` from the current directory (and from the inventory's folder):
run from the checkout, the tests would deploy the operator's ``group_data/all.py``, and an edit made
there while they run (a member's ``staged`` flipped) would change what half the suite deploys.
:func:`cwd` is a directory of this test process's own, made once:

- ``group_data/``: a copy of ``tests/harness/declared/group_data/`` (what the tests declare);
- ``inventory`` → the checkout's ``inventory/`` (a symlink: ``-i inventory/sandbox.py`` and the
  sandbox's ``inventory/units/*`` resolve as from the checkout; pyinfra resolves the inventory's
  folder to ``<checkout>/inventory``, which has no ``group_data/``).

Results a command writes relative to the current directory (the deploy's smoke under ``results/``)
land there too. The directory is removed when the process exits.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DECLARED = HERE / "declared" / "group_data"
_MADE: list[Path] = []


def make(dest: Path, declared: Path = DECLARED, root: Path = ROOT) -> Path:
    """Lay out a sandbox test project in ``dest`` (created): ``group_data/`` copied from ``declared``,
    ``inventory`` linked to ``root``/inventory. Returns ``dest``. Raises FileExistsError when ``dest``
    already holds either."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(declared, dest / "group_data")
    (dest / "inventory").symlink_to(root / "inventory", target_is_directory=True)
    return dest


def cwd() -> Path:
    """This process's sandbox test project (:func:`make` in a fresh temporary directory, once)."""
    if not _MADE:
        path = make(Path(tempfile.mkdtemp(prefix="rigkit-sandbox-project-")))
        _MADE.append(path)
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return _MADE[0]


def rigkit(host, *args: str, timeout: float = 900, data: dict | None = None, popen: bool = False):
    """Run ``rigkit ARGS`` as an operator would against the sandbox host ``host`` (its ``.name``): the
    venv's console script, in :func:`cwd`, with ``RIGKIT_SANDBOX_HOST`` naming the host, the sandbox
    hub's token as ``HF_TOKEN`` (never the caller's) and ``data`` (a variant's spec keys) as
    ``RIGKIT_SANDBOX_DATA``. Returns the finished ``subprocess.CompletedProcess`` (text, captured), or
    with ``popen`` the running ``subprocess.Popen`` (stdout and stderr piped). Raises
    ``subprocess.TimeoutExpired`` past ``timeout`` seconds."""
    import json
    import os
    import subprocess
    import sys

    import hostctl  # tests/harness, on the path of every harness module

    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=host.name, HF_TOKEN=hostctl.hub_token())
    if data is not None:
        env["RIGKIT_SANDBOX_DATA"] = json.dumps(data)
    argv = [str(Path(sys.executable).parent / "rigkit"), *args]
    if popen:
        return subprocess.Popen(argv, cwd=cwd(), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(argv, cwd=cwd(), env=env, capture_output=True, text=True, timeout=timeout)
