"""The run's converged host, copied (tests/harness/golden.py): what every module that starts from a
copy relies on. The golden host itself was deployed twice from nothing (0 changed the second time);
a copy must be that converged host under another identity: its deploy changes nothing, its model
records still match the files to the nanosecond (the deploy re-fetches a model whose record does
not), and nothing that identifies a host (name, machine-id, SSH host keys) is the golden host's.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.harness
sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden  # noqa: E402
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402

SUMMARY = golden.SUMMARY


@pytest.fixture(scope="module")
def copy(make_module_host):
    return make_module_host("gc", converged=True)


def test_the_golden_host_converged_from_nothing(copy):
    first, second = copy.golden.deploys()
    assert first.returncode == 0 and "no generation recorded yet: this deploy records generation 1" in first.stderr
    assert int(SUMMARY.search(first.stderr)["changed"]) > 40
    assert second.returncode == 0 and SUMMARY.search(second.stderr)["changed"] == "0"


def test_a_copy_has_its_own_identity(copy):
    gold = copy.golden.root
    assert copy.run("hostname").stdout.strip() == copy.name != copy.golden.name
    assert copy.run("cat /etc/machine-id").stdout.strip() != (gold / "etc/machine-id").read_text().strip()
    for t in ("ed25519", "ecdsa", "rsa"):
        mine = copy.run(f"cat /etc/ssh/ssh_host_{t}_key.pub").stdout.split()[1]
        assert mine != (gold / f"etc/ssh/ssh_host_{t}_key.pub").read_text().split()[1]
        assert mine in (hostctl.host_dir(copy.name) / "known_hosts").read_text()
    assert f"ListenAddress {copy.ssh_hostname}" in copy.run("cat /etc/ssh/sshd_config.d/rigkit-sandbox.conf").stdout


def test_a_copy_keeps_its_model_files_to_the_nanosecond(copy):
    for rec_path in sorted((copy.golden.root / "var/lib/rigkit/models").glob("*.json")):
        rec = json.loads(rec_path.read_text())
        for name, f in rec["files"].items():
            st = os.stat(copy.root / rec["dir"].lstrip("/") / name)
            assert (st.st_mtime_ns, st.st_size) == (f["mtime_ns"], f["size"]), (rec["model"], name)


def test_a_copy_serves_strata_and_its_deploy_changes_nothing(copy):
    running = json.loads(copy.run("curl -fsS 127.0.0.1:8080/running").stdout)["running"]
    assert [(m["model"], m["state"]) for m in running] == [("strata", "ready")]
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=copy.name, HF_TOKEN=hostctl.hub_token())
    proc = subprocess.run([str(Path(sys.executable).parent / "rigkit"), "deploy", "-i", "inventory/sandbox.py",
                           "--no-smoke"], cwd=sandbox_project.cwd(), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert SUMMARY.search(proc.stderr)["changed"] == "0", proc.stderr[-3000:]
    assert re.search(r"generation 1 \(.*\) stays current", proc.stderr), proc.stderr[-2000:]
