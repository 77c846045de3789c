"""daemon.json as its owners read and write it (issue 57).

- The nvidia runtime entry as the real ``nvidia-ctk`` writes it: v1.17.8 built from its Go module
  (``tests/harness/nvidia_ctk_release.py``) runs ``nvidia-ctk runtime configure --runtime=docker
  --config=FILE`` over generated daemon.json files, and rigkit's merge
  (:func:`rigkit.render.declared_state.merge_json` with :data:`~rigkit.render.declared_state.DAEMON_JSON_KEYS`)
  must give what it gives, plus the cgroup mitigation in ``exec-opts``. The toolkit replaces an existing
  ``runtimes.nvidia`` whole (``pkg/config/engine/docker/docker.go`` ``AddRuntime``: ``runtimes[name] =
  {"path": …, "args": []}``): extra ``runtimeArgs`` and args go.
- ``exec-opts`` as dockerd reads a repeated ``native.cgroupdriver``: docker <= 28 the first (moby v28.5.0
  ``daemon/daemon_unix.go`` ``getCD``), docker >= 29 the last (``daemon/config/config.go``
  ``parseExecOptions``, commit d7f59cec05): rigkit refuses an operator's other driver
  (:func:`~rigkit.render.declared_state.cgroup_driver_problem`), so whatever rigkit writes, both readings
  give ``cgroupfs``; drift reports the operator's driver and docker's own answer.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rigkit.drift.compare import compare_daemon_json
from rigkit.render.declared_state import (CGROUP_DRIVER, DAEMON_JSON_KEYS, cgroup_driver_problem, cgroup_drivers,
                                          merge_json)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import nvidia_ctk_release  # noqa: E402

MITIGATION = DAEMON_JSON_KEYS["exec-opts"]


@pytest.fixture(scope="module")
def nvidia_ctk(tmp_path_factory) -> Path:
    try:
        return nvidia_ctk_release.build(tmp_path_factory.mktemp("nvidia-ctk"))
    except nvidia_ctk_release.Unbuildable as exc:
        pytest.skip(f"the real nvidia-ctk could not be built here: {exc}")


def ctk_configure(ctk: Path, folder: Path, data: dict) -> dict | None:
    """What ``nvidia-ctk runtime configure --runtime=docker --config=FILE`` leaves in FILE holding
    ``data``; None when the tool fails (it panics on a ``runtimes`` that is not an object)."""
    file = folder / "daemon.json"
    file.write_text(json.dumps(data))
    r = subprocess.run([str(ctk), "runtime", "configure", "--runtime=docker", f"--config={file}"],
                       capture_output=True, text=True, timeout=60)
    return json.loads(file.read_text()) if r.returncode == 0 else None


JSON = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text("abc", max_size=3),
                    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text("xyz", max_size=2), inner,
                                                                               max_size=2), max_leaves=4)
RUNTIME = st.fixed_dictionaries({}, optional={"path": st.sampled_from(["nvidia-container-runtime", "/usr/bin/nvidia-container-runtime",
                                                                     "/opt/old/runtime"]),
                                              "args": st.lists(st.sampled_from(["--debug", "x"]), max_size=2),
                                              "runtimeArgs": st.lists(st.sampled_from(["--log", "y"]), max_size=2),
                                              "options": JSON})
OPTS = st.lists(st.sampled_from(["native.cgroupdriver=cgroupfs", " Native.CgroupDriver = cgroupfs ",
                                 "isolation=default", "native.umask=normal"]), max_size=3)


@st.composite
def daemon_json(draw) -> dict:
    data = draw(st.dictionaries(st.sampled_from(["log-level", "data-root", "default-runtime", "features",
                                                 "registry-mirrors", "live-restore", "storage-driver"]), JSON, max_size=3))
    if draw(st.booleans()):
        data["runtimes"] = draw(st.dictionaries(st.sampled_from(["nvidia", "runc-old", "crun"]), RUNTIME, max_size=3))
    if draw(st.booleans()):
        data["exec-opts"] = draw(OPTS)
    return data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=daemon_json())
def test_rigkits_merge_is_what_the_real_nvidia_ctk_writes_plus_the_mitigation(nvidia_ctk, tmp_path, data):
    assert cgroup_driver_problem(data) is None  # what the generator holds: no other driver (refused apart)
    theirs = ctk_configure(nvidia_ctk, tmp_path, data)
    assume(theirs is not None)
    opts = data.get("exec-opts", [])
    want = {**theirs, "exec-opts": opts + [o for o in MITIGATION if o not in opts]}
    assert merge_json(data, DAEMON_JSON_KEYS) == want
    assert ctk_configure(nvidia_ctk, tmp_path, want) == want  # the toolkit leaves rigkit's result as it is
    assert compare_daemon_json("h", DAEMON_JSON_KEYS, {"exists": True, "data": want}, CGROUP_DRIVER) == []


def test_an_existing_nvidia_runtime_is_replaced_whole_as_the_toolkit_does(nvidia_ctk, tmp_path):
    data = {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": ["--debug"],
                                    "args": ["--log=/x"]}, "crun": {"path": "/usr/bin/crun"}}}
    theirs = ctk_configure(nvidia_ctk, tmp_path, data)
    assert theirs["runtimes"] == {"nvidia": {"args": [], "path": "nvidia-container-runtime"}, "crun": {"path": "/usr/bin/crun"}}
    assert merge_json(data, DAEMON_JSON_KEYS)["runtimes"] == theirs["runtimes"]
    # drift: the old entry (rigkit's earlier union kept runtimeArgs) is a finding now
    found = compare_daemon_json("h", DAEMON_JSON_KEYS, {"exists": True, "data": {**data, "exec-opts": MITIGATION}})
    assert [f.item for f in found] == ["runtimes"]


def moby_first(opts: list[str]) -> str | None:
    """docker <= 28: moby v28.5.0 daemon/daemon_unix.go ``getCD`` — the first entry whose key is
    ``native.cgroupdriver`` (``parsers.ParseKeyValueOpt`` trims both sides, ``strings.EqualFold``)."""
    for opt in opts:
        key, eq, value = opt.partition("=")
        if eq and key.strip().lower() == "native.cgroupdriver":
            return value.strip()
    return None


def moby_last(opts: list[str]) -> str | None:
    """docker >= 29: ``parseExecOptions`` — a map filled in order, so the last entry wins."""
    found = [opt.partition("=")[2].strip() for opt in opts
             if "=" in opt and opt.partition("=")[0].strip().lower() == "native.cgroupdriver"]
    return found[-1] if found else None


DRIVER_OPTS = st.lists(st.sampled_from(["native.cgroupdriver=systemd", "native.cgroupdriver=cgroupfs",
                                        "NATIVE.CGROUPDRIVER= systemd", " native.cgroupdriver =cgroupfs",
                                        "isolation=default"]), max_size=4)


@settings(max_examples=300, deadline=None)
@given(opts=DRIVER_OPTS)
def test_whatever_rigkit_lets_through_dockerd_reads_cgroupfs_in_every_version(opts):
    """Refused exactly when some entry names another driver; otherwise rigkit's merge leaves exec-opts
    whose cgroup driver is cgroupfs by docker <= 28's reading (first) and docker >= 29's (last). Before
    issue 57 the union appended cgroupfs after an operator's systemd: docker <= 28 read systemd."""
    data = {"exec-opts": opts}
    problem = cgroup_driver_problem(data)
    assert (problem is not None) == any(d != "cgroupfs" for d in cgroup_drivers(opts))
    merged = merge_json(data, DAEMON_JSON_KEYS)["exec-opts"]
    if problem is None:
        assert moby_first(merged) == moby_last(merged) == "cgroupfs"
    else:
        assert "exec-opts sets native.cgroupdriver=systemd;" in problem and "Remove your native.cgroupdriver entry" in problem


def test_the_regression_an_operators_systemd_driver_and_what_drift_now_says():
    data = {"exec-opts": ["native.cgroupdriver=systemd"], "runtimes": {"nvidia": DAEMON_JSON_KEYS["runtimes"]["nvidia"]}}
    merged = merge_json(data, DAEMON_JSON_KEYS)  # what rigkit wrote before: systemd, then cgroupfs
    assert merged["exec-opts"] == ["native.cgroupdriver=systemd", "native.cgroupdriver=cgroupfs"]
    assert moby_first(merged["exec-opts"]) == "systemd"  # docker <= 28: the mitigation is off
    found = compare_daemon_json("h", DAEMON_JSON_KEYS, {"exists": True, "data": merged}, "systemd")
    assert [(f.item, f.actual.split(":")[0]) for f in found] == [
        ("exec-opts", "/etc/docker/daemon.json"), ("docker's cgroup driver (docker info)", "systemd")]
    assert cgroup_driver_problem(merged).startswith(
        "/etc/docker/daemon.json: exec-opts sets native.cgroupdriver=systemd; rigkit sets native.cgroupdriver=cgroupfs")
