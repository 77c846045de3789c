"""Prometheus' own tools for the tests (issue 47), from Debian's packages (:data:`debs.METRICS_DEBS`,
fetched with ``apt-get download`` and unpacked into the cache, nothing installed):

- :func:`promtool` — ``/usr/bin/promtool`` of Debian's ``prometheus`` 2.42.0: ``promtool check metrics``
  (reads the text exposition format on stdin; exit 0 clean, 3 with lint problems, 1 unparsable) and
  ``promtool check rules`` — run on the control side only, never as a service.
- :func:`node_exporter` — ``/usr/bin/prometheus-node-exporter`` of Debian's ``prometheus-node-exporter``
  1.5.0: the real exporter; the sandbox mirror's Arch-shaped ``prometheus-node-exporter`` package carries this
  binary (issue 66: the deploy installs it), and tests run it on the control side for ``--metrics`` files.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import debs  # noqa: E402


def promtool() -> Path:
    """The path of promtool (fetched and unpacked on first use)."""
    return debs.unpacked("metrics") / "prometheus" / "usr" / "bin" / "promtool"


def node_exporter() -> Path:
    """The path of Debian's node_exporter binary (fetched and unpacked on first use)."""
    return debs.unpacked("metrics") / "prometheus-node-exporter" / "usr" / "bin" / "prometheus-node-exporter"


def check_metrics(text: str) -> tuple[int, str]:
    """``promtool check metrics`` on ``text`` (stdin): ``(exit code, its output)``; 0 is clean."""
    proc = subprocess.run([str(promtool()), "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def check_rules(path: str | Path) -> tuple[int, str]:
    """``promtool check rules PATH``: ``(exit code, its output)``; 0 is valid."""
    proc = subprocess.run([str(promtool()), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    return proc.returncode, (proc.stdout + proc.stderr).strip()
