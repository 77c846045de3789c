"""RIGKIT_HARNESS_NET moves a harness session to its own names and /16 (tests/harness/netcfg.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

NETCFG = Path(__file__).resolve().parents[1] / "harness" / "netcfg.py"
ROOT = Path(__file__).resolve().parents[2]


def _load(net: str | None, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RIGKIT_HARNESS_NET"}
    if net is not None:
        env["RIGKIT_HARNESS_NET"] = net
    prog = (f"import sys, json; sys.path.insert(0, {str(NETCFG.parent)!r}); import netcfg as n; {code}")
    return subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True)


def test_default_keeps_todays_names_and_block():
    r = _load(None, "print(json.dumps([n.FIX_NS, n.HOST_NS, n.FIX_ADDR, n.manifest()['url']]))")
    assert json.loads(r.stdout) == ["rkfx", "rkh", "10.231.255.1", "http://10.231.255.1"]


def test_another_net_moves_every_name_and_address():
    r = _load("232", "m = n.manifest(); print(json.dumps([n.FIX_NS, n.HOST_NS, n.FIX_ADDR, n.BLOCK, m['url'], m['archive_url']]))")
    fix_ns, host_ns, addr, block, url, archive = json.loads(r.stdout)
    assert (fix_ns, host_ns, addr, block) == ("rkfx232", "rk232h", "10.232.255.1", "10.232")
    assert url == "http://10.232.255.1" and archive == "http://10.232.255.1/archive/packages"
    # Linux interface names: at most 15 characters, for the largest host index and veth suffix
    assert max(len(f"{host_ns}250-c"), len(f"{fix_ns}-c")) <= 15


def test_a_bad_value_is_refused_by_name():
    for bad in ("0", "255", "abc", "10.232"):
        r = _load(bad, "print(n.NET)")
        assert r.returncode != 0 and "RIGKIT_HARNESS_NET" in r.stderr, (bad, r.stderr)


def test_the_sandbox_inventory_follows_it(tmp_path):
    meta = tmp_path / "hosts" / "demo" / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"ssh_hostname": "10.232.1.2", "ssh_port": 22, "ssh_user": "rig", "ssh_key": "/k"}))
    code = ("import runpy, json; g = runpy.run_path('inventory/sandbox.py'); d = g['sandbox'][0][1]; "
            "print(json.dumps([d['arch_archive_url'], d['hf_endpoint'], d['llama_swap']['release_url'], d['ssh_hostname']]))")
    env = {**os.environ, "RIGKIT_HARNESS_NET": "232", "RIGKIT_HARNESS_STATE": str(tmp_path),
           "RIGKIT_SANDBOX_HOST": "demo"}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    archive, hub, release, ssh = json.loads(r.stdout)
    assert ssh == "10.232.1.2"
    assert archive.startswith("http://10.232.255.1/") and hub == "http://10.232.255.1:8000"
    assert release.startswith("http://10.232.255.1/releases/")
