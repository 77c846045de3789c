"""The host agent's wheelhouse, built on the control machine for the host's Python, so the
deploy installs the agent with ``pip --no-index`` (DESIGN.md "The host side": no package
index on the host, exact versions pinned).

The agent's own wheel, ``rigkit_host``, holds :mod:`rigkit.host` (what runs on the rig), and beside it
what the host side shares with the control side: :mod:`rigkit.common` (parsers, record formats, names
of host files and units; standard library only) and :mod:`rigkit.bench` (the bench, which the window
runs on the host), plus ``rigkit/__init__.py`` for the version. None of the control side's modules or
dependencies reach the host (tests/unit/test_layout.py holds the import boundary and the staged
project)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from rigkit.cache import cache_dir

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: What the agent imports beyond the standard library, by distribution name (huggingface-hub: the
#: model fetch, rigkit.host.fetch; nvidia-ml-py: NVIDIA's NVML binding ``pynvml``, pure Python over the
#: driver's ``libnvidia-ml.so.1``, the card's energy counter, rigkit.bench.nvml; prometheus-client: the
#: rig's metrics in node_exporter's textfile format, pure Python, rigkit.host.promfile). Their versions
#: are the project's own pins (:data:`AGENT_REQUIREMENTS`): one place to type a version.
AGENT_PACKAGES = ("requests", "pyyaml", "huggingface-hub", "nvidia-ml-py", "prometheus-client")


def _canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them: lower case, runs of ``-_.`` one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(names: tuple[str, ...] | list[str], pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> tuple[str, ...]:
    """``("name==version", ...)`` for each of ``names``, in order, as ``pyproject``'s ``[project]
    dependencies`` pin it (an exact ``==`` pin, names compared as PEP 503 does). Raises
    :class:`WheelhouseError` naming a package that is not a dependency there or is not pinned exactly."""
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    found: dict[str, str] = {}
    for dep in deps:
        m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*?)\s*", dep.split(";")[0])
        if m:
            found[_canonical(m.group(1))] = m.group(2)
    out = []
    for name in names:
        spec = found.get(_canonical(name))
        if spec is None:
            raise WheelhouseError(f"{name}: the agent needs it, but {pyproject.name}'s [project] dependencies do not "
                                  "list it (pin it there: name==version)")
        if not re.fullmatch(r"==\s*[A-Za-z0-9.+!-]+", spec):
            raise WheelhouseError(f"{name}: {pyproject.name} gives it as {spec or 'no version'!r}; the agent's "
                                  "wheelhouse needs an exact pin (name==version)")
        out.append(f"{name}=={spec[2:].strip()}")
    return tuple(out)


class WheelhouseError(RuntimeError):
    """pip could not build or download a wheel (the message carries pip's output), or the project
    does not pin a package the agent needs (:func:`pinned`)."""


#: :data:`AGENT_PACKAGES` pinned as ``pyproject.toml`` pins them (``"requests==2.34.2"``, ...): what
#: the wheelhouse downloads and the agent's wheel requires.
AGENT_REQUIREMENTS = pinned(AGENT_PACKAGES)


#: The packages the agent's wheel ships (folders under ``rigkit/``, each with its subfolders).
HOST_PACKAGES = ("common", "bench", "host")
#: The agent wheel's project file: the host side and what it shares, one console script.
HOST_PYPROJECT = """[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "rigkit-host"
version = "{version}"
description = "rigkit's host side: the agent that runs on the rig"
requires-python = ">=3.11"
dependencies = [{requirements}]

[project.scripts]
rigkit-agent = "rigkit.host.__main__:main"

[tool.setuptools.packages.find]
include = ["rigkit", "rigkit.common", "rigkit.common.*", "rigkit.bench", "rigkit.bench.*", "rigkit.host",
           "rigkit.host.*"]
"""


def _host_sources() -> list[Path]:
    """The files the agent's wheel is built from: ``rigkit/__init__.py`` and every ``.py`` of
    :data:`HOST_PACKAGES`, sorted."""
    files = [p for pkg in HOST_PACKAGES for p in (PROJECT_ROOT / "rigkit" / pkg).rglob("*.py")]
    return sorted([PROJECT_ROOT / "rigkit" / "__init__.py", *files])


def stage_host_project(dest: Path) -> Path:
    """Lay out the agent wheel's project under ``dest``: ``pyproject.toml`` (:data:`HOST_PYPROJECT`)
    and :func:`_host_sources` at their paths (``rigkit/__init__.py``, ``rigkit/{common,bench,host}/**.py``).
    Returns ``dest``."""
    from rigkit import __version__

    for src in _host_sources():
        out = dest / src.relative_to(PROJECT_ROOT)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)
    reqs = ", ".join(f'"{r}"' for r in AGENT_REQUIREMENTS)
    (dest / "pyproject.toml").write_text(HOST_PYPROJECT.format(version=__version__, requirements=reqs))
    return dest


def _source_digest() -> str:
    h = hashlib.sha256()
    h.update(HOST_PYPROJECT.encode())
    for path in _host_sources():
        h.update(path.relative_to(PROJECT_ROOT).as_posix().encode())
        h.update(path.read_bytes())
    h.update("\n".join(AGENT_REQUIREMENTS).encode())
    return h.hexdigest()[:16]


def build(python_version: str, platform: str = "manylinux2014_x86_64", cache: Path | None = None) -> Path:
    """A folder of wheels for CPython ``python_version`` ("3.13"): the agent's ``rigkit_host``
    wheel (:func:`stage_host_project`, built reproducibly, ``SOURCE_DATE_EPOCH``) and :data:`AGENT_REQUIREMENTS` with their dependencies
    (binary wheels only). Cached by the sources' digest; raises :class:`WheelhouseError`."""
    out = cache_dir(cache) / "wheelhouse" / f"cp{python_version.replace('.', '')}-{_source_digest()}"
    if (out / ".complete").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = [sys.executable, "-m", "pip"]
    # a private build folder beside the cache, its wheels renamed into place at the end (two deploys may build at
    # once); both folders removed when the block ends, built or failed
    with tempfile.TemporaryDirectory(prefix=out.name + ".", dir=out.parent) as build_dir, \
            tempfile.TemporaryDirectory(prefix="rigkit-host-src.") as src_dir:
        tmp = Path(build_dir) / "wheels"
        tmp.mkdir()
        src = stage_host_project(Path(src_dir))
        steps = [
            [*pip, "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp), str(src)],
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
        except OSError:  # another build finished first: keep it (this one goes with its build folder)
            pass
    return out
