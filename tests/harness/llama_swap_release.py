#!/usr/bin/env python3
"""The real llama-swap v250 for the sandbox: built from upstream's source, packed like upstream's release.

Usage: ``python tests/harness/llama_swap_release.py --out DIR [--print-binary]`` or ``--print-oracle``
(the loader oracle of the differential test, :func:`oracle_dir`).

Writes ``DIR/llama-swap_250_linux_amd64.tar.gz`` holding, at the archive root, ``llama-swap``
(0755, root:root), ``LICENSE.md`` and ``README.md`` — what upstream's goreleaser archive for
``linux_amd64`` holds (``.goreleaser.yaml``: ``name_template: "{{ .ProjectName }}_{{ .Version }}_{{ .Os }}_{{ .Arch }}"``,
default archive files ``LICENSE*``/``README*``, ``builds_info`` owner/group root). Prints
``<sha256>  <path>``; the sandbox inventory pins that sha256 (``inventory/sandbox.py``).

Sources, in order (the first that works; each failure is printed with its exact error):

1. the Go module proxy: ``go install github.com/mostlygeek/llama-swap@v0.0.0-20260814154540-60226b63776e``
   (tag ``v250`` is commit ``60226b63776e``; upstream's tags are not semver, so the pseudo-version
   is asked for exactly). The module's LICENSE.md and README.md come from ``go mod download``.
2. the vendored tree, ``$RIGKIT_LLAMA_SWAP_SRC`` (default
   ``../shared/vendor/llama-swap/llama-swap-60226b63776e.tar.gz`` beside the checkout; CI has a copy
   of shared/ there): upstream's tree at tag v250 as ``git archive`` exports it. Its sha256 is
   checked first (``f8f508fc…``, the vendored README) and a mismatch is an error, never a reason to
   try something else; then ``go build`` of that tree. Its dependencies come from the Go module
   proxy, which serves every one of them (it refuses only llama-swap's own module version).
3. ``$RIGKIT_LLAMA_SWAP_GIT``: a git directory of upstream (mostlygeek/llama-swap); the pinned
   commit is exported with ``git archive 60226b63776e`` (so the tree is that commit by its object
   id) and built with ``go build``; its dependencies still come from the Go module proxy.

Both build with ``CGO_ENABLED=0 -trimpath`` and ``-ldflags "-s -w -X main.version=250
-X main.commit=60226b63776e -X main.date=2026-08-14T15:45:40Z"`` (the commit's date); without the
``embed_ui`` tag v250 builds without its web UI (``internal/server/embed_notag.go``).
``llama-swap -version`` then prints ``version: 250 (60226b63776e), built at 2026-08-14T15:45:40Z``.

The binary is cached in ``$RIGKIT_HARNESS_CACHE`` (default ``${RIGKIT_CACHE:-~/.cache/rigkit}/harness``)
under ``llama-swap-<key>/`` (key: pseudo-version, ldflags, ``go version``): a cold build takes
~95 s on 2 cores (measured: Go 1.26.8, module cache warm), a warm one < 1 s. The tarball is
reproducible (fixed mtimes = the commit's date, owners, order), so a cached binary gives the
same sha256 every time.

Exit status: 0 written; 1 when no source could build it, or when the vendored tarball's sha256 is
not the pinned one (``BLOCKED:`` lines name each error).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

MODULE = "github.com/mostlygeek/llama-swap"
VERSION = "250"                       # the release number: asset name and main.version
COMMIT = "60226b63776e"               # tag v250 (git rev-parse --short=12 v250)
PSEUDO = "v0.0.0-20260814154540-60226b63776e"  # the module version of that commit
DATE = "2026-08-14T15:45:40Z"         # the commit's committer date, UTC
MTIME = 1786722340                    # DATE as a Unix time: the archive's mtimes
LDFLAGS = f"-s -w -X main.version={VERSION} -X main.commit={COMMIT} -X main.date={DATE}"
ASSET = f"llama-swap_{VERSION}_linux_amd64.tar.gz"
SRC_NAME = f"llama-swap-{COMMIT}"     # the vendored archive's prefix and file stem
SRC_SHA256 = "f8f508fc835df760f8f3721b8526a25f91ba9306adb90af1c437c57ab06be5d1"  # shared/vendor/llama-swap/README.md
ROOT = Path(__file__).resolve().parents[2]


class Tampered(RuntimeError):
    """A source whose checksum is not the pinned one: an error that stops the build, never a
    reason to try the next source."""


def vendored_source() -> Path:
    """The vendored v250 source tarball: ``$RIGKIT_LLAMA_SWAP_SRC`` or ``../shared/vendor/llama-swap/``."""
    env = os.environ.get("RIGKIT_LLAMA_SWAP_SRC")
    return Path(env) if env else ROOT.parent / "shared" / "vendor" / "llama-swap" / f"{SRC_NAME}.tar.gz"


def cache_dir() -> Path:
    if os.environ.get("RIGKIT_HARNESS_CACHE"):
        return Path(os.environ["RIGKIT_HARNESS_CACHE"])
    return Path(os.environ.get("RIGKIT_CACHE") or Path.home() / ".cache" / "rigkit") / "harness"


def go_binary() -> str:
    """The Go toolchain: ``$GO``, ``go`` on PATH, or /usr/local/go/bin/go (the official tarball's place)."""
    for cand in (os.environ.get("GO"), shutil.which("go"), "/usr/local/go/bin/go"):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    raise RuntimeError("no Go toolchain: set $GO, put go on PATH or install Go >= 1.26 in /usr/local/go")


def _env() -> dict:
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false", "GOTOOLCHAIN": "local"}
    return env


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), **kw)
    if r.returncode != 0:
        err = (r.stderr or r.stdout).strip()
        raise RuntimeError(f"`{' '.join(cmd)}` exited {r.returncode}: {err}")
    return r


def build_key(go: str) -> str:
    gov = _run([go, "version"]).stdout.strip()
    return hashlib.sha256(f"{MODULE}@{PSEUDO}\0{LDFLAGS}\0{gov}".encode()).hexdigest()[:16]


def build_from_proxy(go: str, out: Path) -> None:
    """``go install MODULE@PSEUDO`` into ``out``; LICENSE.md/README.md from the module's download dir."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**_env(), "GOBIN": tmp}
        r = subprocess.run([go, "install", "-trimpath", "-ldflags", LDFLAGS, f"{MODULE}@{PSEUDO}"],
                           capture_output=True, text=True, env=env, cwd=tmp)
        if r.returncode != 0:
            raise RuntimeError(f"go install {MODULE}@{PSEUDO} exited {r.returncode}: {r.stderr.strip()}")
        info = json.loads(_run([go, "mod", "download", "-json", f"{MODULE}@{PSEUDO}"], cwd=tmp).stdout)
        shutil.copy2(Path(tmp) / "llama-swap", out / "llama-swap")
        for doc in ("LICENSE.md", "README.md"):
            shutil.copyfile(Path(info["Dir"]) / doc, out / doc)


def _build_tree(go: str, src: Path, what: str, out: Path) -> None:
    """``go build`` of upstream's tree ``src`` (its go.mod must name :data:`MODULE`; ``what`` names
    where it came from in the error) into ``out``, with its LICENSE.md and README.md."""
    mod = (src / "go.mod").read_text().splitlines()[0].strip()
    if mod != f"module {MODULE}":
        raise RuntimeError(f"{what} is not {MODULE} (go.mod says {mod!r})")
    _run([go, "build", "-trimpath", "-ldflags", LDFLAGS, "-o", str(out / "llama-swap"), "."], cwd=src)
    for doc in ("LICENSE.md", "README.md"):
        shutil.copyfile(src / doc, out / doc)


def _git_tree(git_dir: str, dest: Path) -> Path:
    """``git archive COMMIT`` of an upstream git directory extracted as ``dest/src``; raises RuntimeError
    naming the commit, the directory and git's error."""
    src = dest / "src"
    src.mkdir()
    arch = subprocess.run(["git", f"--git-dir={git_dir}", "archive", "--format=tar", COMMIT], capture_output=True)
    if arch.returncode != 0:
        raise RuntimeError(f"git archive {COMMIT} in {git_dir} exited {arch.returncode}: "
                           f"{arch.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(arch.stdout)) as tf:
        tf.extractall(src, filter="data")
    return src


def build_from_git(go: str, git_dir: str, out: Path) -> None:
    """``git archive COMMIT`` of an upstream git directory, then ``go build`` of that tree."""
    with tempfile.TemporaryDirectory() as tmp:
        _build_tree(go, _git_tree(git_dir, Path(tmp)), f"{git_dir}: commit {COMMIT}", out)


def build_from_vendored(go: str, tarball: Path, out: Path) -> None:
    """``go build`` of the vendored tree after checking the tarball's sha256 (a mismatch raises)."""
    with tempfile.TemporaryDirectory() as tmp:
        _build_tree(go, _vendored_tree(tarball, Path(tmp)), str(tarball), out)


def binary_dir() -> Path:
    """The cached build (``llama-swap``, ``LICENSE.md``, ``README.md``), building it when missing."""
    go = go_binary()
    d = cache_dir() / f"llama-swap-{build_key(go)}"
    if (d / "llama-swap").is_file():
        return d
    sources = [("the Go module proxy", lambda o: build_from_proxy(go, o)),
               (f"the vendored source {vendored_source()}", lambda o: build_from_vendored(go, vendored_source(), o))]
    if os.environ.get("RIGKIT_LLAMA_SWAP_GIT"):
        sources.append((f"$RIGKIT_LLAMA_SWAP_GIT={os.environ['RIGKIT_LLAMA_SWAP_GIT']}",
                        lambda o: build_from_git(go, os.environ["RIGKIT_LLAMA_SWAP_GIT"], o)))

    def checked(what: str, build):
        def run(out: Path) -> None:
            print(f"llama-swap {VERSION}: building from {what} ...", file=sys.stderr, flush=True)
            build(out)
            ver = subprocess.run([str(out / "llama-swap"), "-version"], capture_output=True, text=True).stdout
            if f"version: {VERSION} ({COMMIT})" not in ver:
                raise RuntimeError(f"the built binary says {ver.strip()!r}")
        return run

    return _first_build(d, [(what, checked(what, build)) for what, build in sources], "llama-swap-")


def _first_build(d: Path, sources: list, prefix: str) -> Path:
    """Build into a fresh folder of the cache with the first of ``sources`` (``[(what, build(out))]``)
    that succeeds and move it to ``d`` (a folder already at ``d`` is replaced); a source that raises
    :class:`Tampered` ends the search: a tarball with the wrong sha256 is never passed over for another
    source. Returns ``d``; raises RuntimeError with one line per source tried (``what: error``)."""
    errors = []
    for what, build in sources:
        cache_dir().mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=cache_dir()))
        try:
            build(tmp)
        except Tampered as e:
            shutil.rmtree(tmp, ignore_errors=True)
            errors.append(f"{what}: {e}")
            break
        except Exception as e:  # noqa: BLE001 - every source's error is reported
            shutil.rmtree(tmp, ignore_errors=True)
            errors.append(f"{what}: {e}")
            continue
        d.parent.mkdir(parents=True, exist_ok=True)
        if d.exists():
            shutil.rmtree(d)
        tmp.rename(d)
        return d
    raise RuntimeError("\n".join(errors) or f"no source to build {d.name}")


ORACLE_SRC = Path(__file__).resolve().parent / "llama_swap_oracle" / "main.go"


def _vendored_tree(tarball: Path, dest: Path) -> Path:
    """The vendored tree extracted under ``dest`` after its sha256 check (a mismatch raises :class:`Tampered`)."""
    if not tarball.is_file():
        raise RuntimeError(f"{tarball}: no such file (set $RIGKIT_LLAMA_SWAP_SRC to the vendored tarball)")
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if digest != SRC_SHA256:
        raise Tampered(f"{tarball}: sha256 {digest}, expected {SRC_SHA256}: refusing to build it")
    with tarfile.open(tarball) as tf:
        tf.extractall(dest, filter="data")
    return dest / SRC_NAME


def oracle_dir() -> Path:
    """llama-swap 250's own verdict on config files, for rigkit's differential test (test-only; the
    operator's machine needs no Go): a cached folder holding ``rigkit-oracle`` (``llama_swap_oracle/main.go``
    compiled inside upstream's module tree — the loader is under ``internal/`` — with the same Go
    environment as the binary, its dependencies from the same module proxy and cache),
    ``upstream-configs.json`` (the YAML configs of upstream's ``internal/config/*_test.go``, extracted
    with go/ast by ``rigkit-oracle -extract``) and upstream's ``config.example.yaml``. Built from the
    vendored tree (sha256 checked), else ``$RIGKIT_LLAMA_SWAP_GIT``; key: commit, ``go version``, the
    oracle's source. Raises RuntimeError naming each source's error."""
    go = go_binary()
    gov = _run([go, "version"]).stdout.strip()
    key = hashlib.sha256(f"{COMMIT}\0{gov}\0".encode() + ORACLE_SRC.read_bytes()).hexdigest()[:16]
    d = cache_dir() / f"llama-swap-oracle-{key}"
    if (d / "rigkit-oracle").is_file():
        return d

    def build(tree):
        def run(out: Path) -> None:
            with tempfile.TemporaryDirectory() as work:
                src = tree(Path(work))
                (src / "cmd" / "rigkit-oracle").mkdir(parents=True)
                shutil.copyfile(ORACLE_SRC, src / "cmd" / "rigkit-oracle" / "main.go")
                _run([go, "build", "-trimpath", "-o", str(out / "rigkit-oracle"), "./cmd/rigkit-oracle"], cwd=src)
                configs = _run([str(out / "rigkit-oracle"), "-extract", str(src / "internal" / "config")]).stdout
                (out / "upstream-configs.json").write_text(configs)
                shutil.copyfile(src / "config.example.yaml", out / "config.example.yaml")
        return run

    sources = [("vendored", build(lambda work: _vendored_tree(vendored_source(), work)))]
    if os.environ.get("RIGKIT_LLAMA_SWAP_GIT"):
        sources.append(("git", build(lambda work: _git_tree(os.environ["RIGKIT_LLAMA_SWAP_GIT"], work))))
    return _first_build(d, sources, "llama-swap-oracle-")


def build_tarball(out_dir: Path, src: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ASSET
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, mode in (("LICENSE.md", 0o644), ("README.md", 0o644), ("llama-swap", 0o755)):
            data = (src / name).read_bytes()
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), mode, MTIME
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            tf.addfile(ti, io.BytesIO(data))
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
        gz.write(raw.getvalue())
    tmp.replace(path)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="where to write the release tarball")
    ap.add_argument("--print-binary", action="store_true", help="print the cached binary's path")
    ap.add_argument("--print-oracle", action="store_true",
                    help="build (cached) the loader oracle for the differential test and print its folder")
    a = ap.parse_args(argv)
    if a.print_oracle:
        try:
            print(oracle_dir())
        except RuntimeError as e:
            for line in str(e).splitlines():
                print(f"BLOCKED: llama-swap {VERSION} oracle: {line}", file=sys.stderr)
            return 1
        return 0
    try:
        src = binary_dir()
    except RuntimeError as e:
        for line in str(e).splitlines():
            print(f"BLOCKED: llama-swap {VERSION}: {line}", file=sys.stderr)
        return 1
    if a.print_binary:
        print(src / "llama-swap")
    if a.out:
        path = build_tarball(a.out, src)
        print(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
