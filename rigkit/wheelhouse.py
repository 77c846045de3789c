"""The host agent's wheelhouse, built on the control machine for the host's Python, so the
deploy installs the agent with ``pip --no-index`` (DESIGN.md "The host agent": no package
index on the host, exact versions pinned)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rigkit.cache import cache_dir

#: What the agent imports beyond the standard library, pinned exactly (huggingface-hub: the
#: model fetch, rigkit.fetch).
AGENT_REQUIREMENTS = ("requests==2.34.2", "pyyaml==6.0.3", "huggingface-hub==2.4.0")
PROJECT_ROOT = Path(__file__).resolve().parent.parent


class WheelhouseError(RuntimeError):
    """pip could not build or download a wheel; the message carries pip's output."""


def _source_digest() -> str:
    h = hashlib.sha256()
    for path in sorted([PROJECT_ROOT / "pyproject.toml", *(PROJECT_ROOT / "rigkit").rglob("*.py")]):
        h.update(path.relative_to(PROJECT_ROOT).as_posix().encode())
        h.update(path.read_bytes())
    h.update("\n".join(AGENT_REQUIREMENTS).encode())
    return h.hexdigest()[:16]


def build(python_version: str, platform: str = "manylinux2014_x86_64", cache: Path | None = None) -> Path:
    """A folder of wheels for CPython ``python_version`` ("3.13"): rigkit itself (built
    reproducibly, ``SOURCE_DATE_EPOCH``) and :data:`AGENT_REQUIREMENTS` with their dependencies
    (binary wheels only). Cached by the sources' digest; raises :class:`WheelhouseError`."""
    out = cache_dir(cache) / "wheelhouse" / f"cp{python_version.replace('.', '')}-{_source_digest()}"
    if (out / ".complete").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    # a private build folder, renamed into place at the end: two deploys may build at once
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = [sys.executable, "-m", "pip"]
    steps = [
        [*pip, "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp), str(PROJECT_ROOT)],
        [*pip, "download", "--quiet", "--only-binary=:all:", "--python-version", python_version,
         "--implementation", "cp", "--platform", platform, "--platform", "manylinux_2_17_x86_64",
         "--platform", "any", "--dest", str(tmp), *AGENT_REQUIREMENTS],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise WheelhouseError(f"{' '.join(cmd[2:4])} failed:\n{proc.stdout}{proc.stderr}")
    (tmp / ".complete").write_text("\n".join(sorted(p.name for p in tmp.glob("*.whl"))) + "\n")
    try:
        tmp.rename(out)
    except OSError:  # another build finished first: keep it
        shutil.rmtree(tmp, ignore_errors=True)
    return out
