"""Headless Chromium (Debian's ``chromium``) opening a page from disk, for the report tests.

One run of ``chromium --headless --dump-dom`` with ``--enable-logging=stderr --v=0``: the DOM
after load comes back on stdout, and every console message Chromium logs (uncaught exceptions,
``console.error``, resources that failed to load) on stderr as
``…:INFO:CONSOLE:line] "message", source: URL (line)`` (older builds: ``CONSOLE(line)``).
Chromium's logging does not carry failed resource loads (a DevTools-only message), so the
tests check separately that every local file the page names exists. A second run takes the
screenshot. Flags
for root in a container: ``--no-sandbox``, no GPU, no network chatter, a fresh profile.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]
CONSOLE = re.compile(r':CONSOLE(?:\(\d+\)|:\d+)\] "(.*)", source: (\S*)')
FAILED_LOAD = re.compile(r"(Failed to load resource|net::ERR_[A-Z_]+)")


@dataclass
class Loaded:
    """What Chromium saw: ``dom`` (serialised after load), ``console`` (``[(message, source)]``),
    ``errors`` (console lines that are errors: uncaught exceptions, failed loads, console.error),
    ``stderr`` (all of it, for messages)."""

    dom: str
    console: list[tuple[str, str]]
    errors: list[str]
    stderr: str


def chromium() -> str:
    """The chromium binary; AssertionError naming the Makefile's apt list when missing."""
    path = shutil.which("chromium")
    assert path, "chromium is not installed: `make apt` installs it (APT_PACKAGES in the Makefile)"
    return path


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="rigkit-chromium-") as profile:
        return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=timeout)


def load(page: Path, timeout: float = 60) -> Loaded:
    """Open ``page`` (a file) and return the DOM and the console; AssertionError when Chromium
    itself fails (exit status, no DOM)."""
    proc = _run(["--dump-dom", page.resolve().as_uri()], timeout)
    assert proc.returncode == 0 and "<html" in proc.stdout, proc.stderr[-3000:]
    console = CONSOLE.findall(proc.stderr)
    errors = [m for m, _ in console if "Uncaught" in m or "Error" in m or FAILED_LOAD.search(m)]
    errors += [ln for ln in proc.stderr.splitlines() if FAILED_LOAD.search(ln) and "CONSOLE" not in ln]
    return Loaded(proc.stdout, console, errors, proc.stderr)


def screenshot(page: Path, out: Path, size: str = "1200,4200", timeout: float = 60) -> Path:
    """Write a PNG of ``page`` to ``out`` (``--screenshot``); returns ``out``."""
    proc = _run([f"--screenshot={out}", f"--window-size={size}", "--hide-scrollbars",
                 page.resolve().as_uri()], timeout)
    assert proc.returncode == 0 and out.is_file(), proc.stderr[-3000:]
    return out
