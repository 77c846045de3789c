#!/usr/bin/env python3
"""The real ``nvidia-ctk`` (NVIDIA container toolkit v1.17.8), built from upstream's Go module — the
oracle of how the toolkit writes docker's ``daemon.json`` (issue 57), and for the sandbox host.

Usage: ``python tests/harness/nvidia_ctk_release.py --out DIR`` (prints ``<sha256>  <path>``), or
:func:`build` from Python: ``build(out_dir) -> Path`` of ``out_dir/nvidia-ctk``.

Source: the Go module proxy, ``go install github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk@v1.17.8``
(the proxy serves v1.17.8 … v1.20.2; v1.17.8 is pinned). Built as upstream's ``Makefile`` l.68 builds
its commands — ``-ldflags "-s -w -X github.com/NVIDIA/nvidia-container-toolkit/internal/info.version=1.17.8"``
(``CLI_VERSION_PACKAGE``, Makefile l.54; the commit is left out: the module zip carries none) — with
``-trimpath`` and cgo on: ``github.com/NVIDIA/go-nvml`` (a dependency of the command) does not build
without it (``undefined: Return`` with ``CGO_ENABLED=0``, measured); the library is dlopen'ed at run
time, so no NVIDIA library is needed to build or to run ``nvidia-ctk runtime configure``.
``nvidia-ctk --version`` then prints ``NVIDIA Container Toolkit CLI version 1.17.8``.

Cached in ``$RIGKIT_HARNESS_CACHE`` (default ``${RIGKIT_CACHE:-~/.cache/rigkit}/harness``, fixed at
import as tests/harness/hostctl.py fixes it) under ``nvidia-ctk-<key>/`` (key: module version, ldflags,
``go version``); never committed. A cold build takes ~25 s on 2 cores with the module cache warm
(measured: Go 1.26.8), a warm one copies the cached binary.

:class:`Unbuildable` (``--out``: exit 1 with a ``BLOCKED:`` line) when Go is missing or the build
fails, naming the exact error: tests skip with that reason.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MODULE = "github.com/NVIDIA/nvidia-container-toolkit"
VERSION = "v1.17.8"
COMMAND = f"{MODULE}/cmd/nvidia-ctk"
LDFLAGS = f"-s -w -X {MODULE}/internal/info.version={VERSION.lstrip('v')}"
CACHE = Path(os.environ.get("RIGKIT_HARNESS_CACHE")
             or Path(os.environ.get("RIGKIT_CACHE") or Path.home() / ".cache" / "rigkit") / "harness")


class Unbuildable(RuntimeError):
    """No Go toolchain, or the build failed; the message names the error."""


def go_binary() -> str:
    """The Go toolchain: ``$GO``, ``go`` on PATH, or /usr/local/go/bin/go. Raises :class:`Unbuildable`."""
    for cand in (os.environ.get("GO"), shutil.which("go"), "/usr/local/go/bin/go"):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    raise Unbuildable("no Go toolchain: set $GO, put go on PATH or install Go in /usr/local/go")


def _env() -> dict[str, str]:
    return {**os.environ, "CGO_ENABLED": "1", "GOFLAGS": "-mod=mod -buildvcs=false", "GOTOOLCHAIN": "local"}


def build_key(go: str) -> str:
    """What the cached binary depends on: the module version, the ldflags and ``go version``."""
    gov = subprocess.run([go, "version"], capture_output=True, text=True, env=_env()).stdout.strip()
    return hashlib.sha256(f"{COMMAND}@{VERSION}\0{LDFLAGS}\0{gov}".encode()).hexdigest()[:16]


def build(out_dir: str | os.PathLike) -> Path:
    """``nvidia-ctk`` v1.17.8 at ``out_dir/nvidia-ctk`` (0755), from the cache or built (module
    docstring). Returns its path. Raises :class:`Unbuildable` naming the error."""
    go = go_binary()
    cached = CACHE / f"nvidia-ctk-{build_key(go)}" / "nvidia-ctk"
    if not cached.is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cached.parent) as tmp:
            r = subprocess.run([go, "install", "-trimpath", "-ldflags", LDFLAGS, f"{COMMAND}@{VERSION}"],
                               capture_output=True, text=True, env={**_env(), "GOBIN": tmp}, cwd=tmp)
            if r.returncode != 0:
                raise Unbuildable(f"go install {COMMAND}@{VERSION} exited {r.returncode}: {r.stderr.strip()[-2000:]}")
            os.replace(Path(tmp) / "nvidia-ctk", cached)  # atomic: a concurrent build finds a whole binary
    dest = Path(out_dir) / "nvidia-ctk"
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.resolve() != cached.resolve():
        shutil.copy2(cached, dest)
    dest.chmod(0o755)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder to put nvidia-ctk in")
    args = ap.parse_args(argv)
    try:
        path = build(args.out)
    except Unbuildable as exc:
        print(f"BLOCKED: {exc}", file=sys.stderr)
        return 1
    print(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
