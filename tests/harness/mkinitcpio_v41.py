"""mkinitcpio v41 as upstream ships it, for the sandbox's stand-in and the tests that hold rigkit's loader
to it: the vendored tarball (``../shared/vendor/mkinitcpio/``, or ``$RIGKIT_MKINITCPIO_SRC``; its
sha256 checked first) and the pieces cut from it verbatim.

- :func:`load_config_lines`: ``mkinitcpio`` l.1119-1139, from ``# Source additional configuration
  files`` to ``arrayize_config`` — the drop-ins found and sorted, appended to a copy of the main file,
  sourced once, then arrayized;
- :func:`arrayize_config`: ``functions`` l.521-529;
- :func:`stock_conf`: ``mkinitcpio.conf`` with ``@MKINITCPIO_HOOKS@`` as ``meson.build`` l.39 sets it
  (the default build: ``base udev autodetect microcode modconf kms keyboard keymap consolefont block
  filesystems fsck``);
- :func:`preset`: ``mkinitcpio.d/hook.preset`` with ``%PKGBASE%`` replaced, as the alpm hook script
  ``libalpm/scripts/mkinitcpio`` l.18 writes ``/etc/mkinitcpio.d/<pkgbase>.preset`` on Arch.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
from functools import lru_cache
from pathlib import Path

SHA256 = "ccc29ccced2203770548c361905d5a703f85668e1350b8f03fcf62b53a47ae00"  # shared/vendor/mkinitcpio/README.md
PREFIX = "mkinitcpio-v41/"
ROOT = Path(__file__).resolve().parents[2]


def tarball() -> Path:
    """The vendored tarball: ``$RIGKIT_MKINITCPIO_SRC``, else ``$RIGKIT_SHARED`` (default ``../shared``)
    ``/vendor/mkinitcpio/mkinitcpio-v41.tar.gz``. Raises SystemExit when missing or its sha256 differs."""
    shared = Path(os.environ.get("RIGKIT_SHARED", ROOT.parent / "shared"))
    path = Path(os.environ.get("RIGKIT_MKINITCPIO_SRC", shared / "vendor" / "mkinitcpio" / "mkinitcpio-v41.tar.gz"))
    if not path.is_file():
        raise SystemExit(f"BLOCKED: mkinitcpio v41 source not found at {path} (set RIGKIT_MKINITCPIO_SRC)")
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    if got != SHA256:
        raise SystemExit(f"BLOCKED: {path}: sha256 {got}, expected {SHA256}")
    return path


@lru_cache(maxsize=None)
def member(name: str) -> str:
    """The text of ``mkinitcpio-v41/<name>`` in the tarball."""
    with tarfile.open(tarball()) as tar:
        f = tar.extractfile(PREFIX + name)
        assert f is not None, name
        return io.TextIOWrapper(f, encoding="utf-8").read()


def load_config_lines() -> str:
    """``mkinitcpio``'s configuration loading, verbatim (l.1119-1139)."""
    text = member("mkinitcpio")
    start = text.index("# Source additional configuration files")
    end = text.index("\narrayize_config\n", start) + len("\narrayize_config\n")
    return text[start:end]


def arrayize_config() -> str:
    """``functions``' ``arrayize_config``, verbatim (l.521-529)."""
    text = member("functions")
    m = re.search(r"^arrayize_config\(\) \{\n.*?^\}\n", text, re.S | re.M)
    assert m is not None
    return m.group(0)


def default_hooks() -> str:
    """``meson.build`` l.39: the HOOKS of the default build."""
    m = re.search(r"^hooks = '([^']+)'$", member("meson.build"), re.M)
    assert m is not None
    return m.group(1)


def stock_conf() -> str:
    """Arch's stock ``/etc/mkinitcpio.conf`` (HOOKS with kms)."""
    return member("mkinitcpio.conf").replace("@MKINITCPIO_HOOKS@", default_hooks())


def preset(pkgbase: str) -> str:
    """``/etc/mkinitcpio.d/<pkgbase>.preset`` as the alpm hook writes it (no ``ALL_config``)."""
    return member("mkinitcpio.d/hook.preset").replace("%PKGBASE%", pkgbase)
