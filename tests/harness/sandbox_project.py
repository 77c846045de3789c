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
