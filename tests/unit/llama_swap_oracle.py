"""llama-swap 250's own loader as an oracle for the differential test: ``rigkit-oracle`` (built and cached
by ``tests/harness/llama_swap_release.py --print-oracle`` from the vendored v250 tree) kept running as one
process; :meth:`Oracle.verdict` writes a config to a file, sends its path, reads one JSON verdict line.
It runs with the environment ``llama-swap.service`` gives llama-swap on the rig
(:func:`rigkit.render.files.llama_swap_environment`), since ``${env.X}`` macros read it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .llama_swap_live import ROOT  # noqa: F401  (it fixes RIGKIT_HARNESS_CACHE to the real cache, as for the binary)


def oracle_dir() -> Path:
    """The cached oracle's folder, or ``pytest.fail`` with the BLOCKED text (never a skip)."""
    import pytest

    proc = subprocess.run([sys.executable, str(ROOT / "tests/harness/llama_swap_release.py"), "--print-oracle"],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail("BLOCKED — the llama-swap loader oracle could not be built:\n" + proc.stderr[-2000:], pytrace=False)
    return Path(proc.stdout.strip().splitlines()[-1])


class Oracle:
    """One running ``rigkit-oracle``; ``verdict(text)`` → ``{"ok": bool, "stage", "error"}``."""

    def __init__(self, folder: Path, environ: dict[str, str], scratch: Path):
        self.proc = subprocess.Popen([str(folder / "rigkit-oracle")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=dict(environ), cwd=str(scratch))
        self.scratch = scratch
        self.count = 0

    def verdict(self, text: str) -> dict:
        self.count += 1
        path = self.scratch / f"config-{self.count}.yaml"
        path.write_text(text)
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        path.unlink()
        if not line:
            raise RuntimeError(f"rigkit-oracle exited {self.proc.wait()} on {text!r}")
        out = json.loads(line)
        if out.get("error"):
            out["error"] = out["error"].replace(str(path), "<config>")
        return out

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
