#!/usr/bin/env python3
"""Build the llama-swap stand-in's release tarball, named like upstream's v250 asset.

Usage: ``python tests/standins/build_llama_swap.py --out DIR [--version 250]``

Writes ``DIR/llama-swap_250_linux_amd64.tar.gz`` holding, at the archive root, the
executable ``llama-swap`` (a Python zipapp with ``#!/usr/bin/env python3``: the
``llama_swap`` package plus PyYAML's pure-Python package copied from this
interpreter's site-packages, without its C extension) and ``README.md``/``LICENSE``
(upstream's goreleaser archives carry the binary beside those two). Prints
``<sha256>  <path>`` on stdout. The build is reproducible: fixed timestamps, owners
and ordering, so the same sources give the same sha256.

Runs on any python3 >= 3.9 with nothing installed; raises SystemExit(1) when PyYAML's
pure-Python sources cannot be found.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import sys
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "llama_swap")
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
MTIME = 1767225600  # 2026-01-01T00:00:00Z

README = """# llama-swap (rigkit stand-in)

Not upstream llama-swap. This is rigkit's test stand-in for llama-swap v{version}
(mostlygeek/llama-swap), a Python zipapp that runs on python3 >= 3.9 with no
install. It implements the part of llama-swap the rig relies on; see
tests/standins/README.md in the rigkit repository.

    llama-swap -config /etc/llama-swap/config.yaml -listen 127.0.0.1:8080
"""

LICENSE = """The llama-swap stand-in is part of rigkit's test suite.
It bundles PyYAML (MIT License, Copyright (c) 2017-2021 Ingy dot Net,
Copyright (c) 2006-2016 Kirill Simonov). Upstream llama-swap is MIT licensed
(mostlygeek/llama-swap); no upstream code is included.
"""


def _yaml_dir() -> str:
    import yaml  # the build machine's PyYAML: only its .py files are bundled

    return os.path.dirname(os.path.abspath(yaml.__file__))


def _add(zf: zipfile.ZipFile, arcname: str, data: bytes) -> None:
    info = zipfile.ZipInfo(arcname, date_time=ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    zf.writestr(info, data)


def build_zipapp() -> bytes:
    """The executable's bytes: shebang line + zip (what ``python3 -m zipapp`` makes)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        with open(os.path.join(PKG, "__main__.py"), "rb") as f:
            _add(zf, "__main__.py", f.read())
        for root, label in ((PKG, "llama_swap"), (_yaml_dir(), "yaml")):
            names = sorted(n for n in os.listdir(root) if n.endswith(".py"))
            if label == "yaml" and "__init__.py" not in names:
                raise SystemExit("PyYAML's pure-Python sources not found in %s" % root)
            for n in names:
                with open(os.path.join(root, n), "rb") as f:
                    _add(zf, "%s/%s" % (label, n), f.read())
    return b"#!/usr/bin/env python3\n" + buf.getvalue()


def build_tarball(out_dir: str, version: str = "250") -> str:
    """Write the tarball into ``out_dir``; returns its path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "llama-swap_%s_linux_amd64.tar.gz" % version)
    members = [
        ("LICENSE", LICENSE.encode(), 0o644),
        ("README.md", README.format(version=version).encode(), 0o644),
        ("llama-swap", build_zipapp(), 0o755),
    ]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data, mode in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = mode
            ti.mtime = MTIME
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            tf.addfile(ti, io.BytesIO(data))
    with open(path, "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
            gz.write(raw.getvalue())
    return path


def sha256_file(path: str) -> str:
    """Hex sha256 of the tarball (rigkit's own helper: the deploy checks the same digest)."""
    from rigkit.cache import sha256_file as digest

    return digest(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Build the llama-swap stand-in release tarball.")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--version", default="250", help="release number in the asset name (default 250)")
    a = ap.parse_args(argv)
    path = build_tarball(a.out, a.version)
    print("%s  %s" % (sha256_file(path), path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
