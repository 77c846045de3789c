"""Shared test settings: the llama-swap schema URL points at the copy beside the checkout
(DESIGN.md "Testing with real parts"; the sha256 is still checked), and the cache is per run."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("RIGKIT_SHARED", ROOT.parent / "shared"))
SCHEMA_COPY = SHARED / "data" / "llama-swap" / "config-schema.json"


@pytest.fixture(scope="session", autouse=True)
def _schema_url_and_cache(tmp_path_factory):
    if not os.environ.get("RIGKIT_LLAMA_SWAP_SCHEMA_URL") and SCHEMA_COPY.is_file():
        os.environ["RIGKIT_LLAMA_SWAP_SCHEMA_URL"] = SCHEMA_COPY.as_uri()
    os.environ.setdefault("RIGKIT_CACHE", str(tmp_path_factory.mktemp("rigkit-cache")))
    yield


# ------------------------------------------------------------------------ lanes (pytest-xdist workers)
# Each lane writes when it started and ended and which modules it ran to a folder the controller
# names before the workers start; the controller prints one line per lane at the end, so a run's
# output (CI's too) shows how the lanes are balanced.
_LANE_T0 = time.time()
_LANE_FILES: dict[str, float] = {}


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER") and getattr(config.option, "numprocesses", None):
        os.environ["RIGKIT_LANES_DIR"] = tempfile.mkdtemp(prefix="rigkit-lanes-")


def pytest_runtest_logreport(report):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        f = report.nodeid.split("::", 1)[0]
        _LANE_FILES[f] = _LANE_FILES.get(f, 0.0) + report.duration


def pytest_sessionfinish(session):
    lane, where = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("RIGKIT_LANES_DIR")
    if lane and where and os.path.isdir(where):
        rec = {"lane": lane, "wall_s": round(time.time() - _LANE_T0, 1), "files": _LANE_FILES}
        Path(where, f"{lane}.json").write_text(json.dumps(rec))


def pytest_terminal_summary(terminalreporter):
    where = os.environ.get("RIGKIT_LANES_DIR")
    if os.environ.get("PYTEST_XDIST_WORKER") or not where or not os.path.isdir(where):
        return
    recs = sorted((json.loads(p.read_text()) for p in Path(where).glob("*.json")), key=lambda r: r["lane"])
    if not recs:
        return
    terminalreporter.section("lanes")
    for r in recs:
        top = sorted(r["files"].items(), key=lambda kv: -kv[1])[:4]
        terminalreporter.write_line(f"{r['lane']}: {r['wall_s']:7.1f} s wall, {len(r['files'])} modules; longest: "
                                    + ", ".join(f"{Path(f).name} {s:.0f} s" for f, s in top))
    shutil.rmtree(where, ignore_errors=True)
