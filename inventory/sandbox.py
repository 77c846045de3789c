"""The local sandbox host: a fake Arch GPU box built by tests/harness (``make demo``).

pyinfra inventory (``pyinfra inventory/sandbox.py deploy.py`` or ``rigkit deploy -i
inventory/sandbox.py``). Connection data and the mirror come from the harness' own records, so
this file needs no editing: the host named ``$RIGKIT_SANDBOX_HOST`` (default ``demo``) must be up
(``bash tests/harness/host.sh up demo``, as ``make demo`` does). The operator-supplied values are the sandbox's
own, and only the intent: the driver and CUDA series, the images' tags and the llama-swap release; `rigkit lock
-i inventory/sandbox.py` resolves them from the fixtures (the archive's listings and dated databases, the
registry, the release server) into ``$RIGKIT_HARNESS_STATE/sandbox.lock.json``, seeded with the committed
model lock ``inventory/sandbox.lock.json`` (the harness and ``make demo`` run it before the deploy).
"""

import importlib.util
import json
import os
from pathlib import Path
from urllib.parse import urlsplit

_ROOT = Path(__file__).resolve().parent.parent
_STATE = Path(os.environ.get("RIGKIT_HARNESS_STATE", "/var/lib/rigkit-harness"))
_NAME = os.environ.get("RIGKIT_SANDBOX_HOST", "demo")
# the harness' network names and addresses (RIGKIT_HARNESS_NET): the mirror's URLs follow them
_spec = importlib.util.spec_from_file_location("rigkit_harness_netcfg", _ROOT / "tests" / "harness" / "netcfg.py")
_netcfg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_netcfg)
_MIRROR = _netcfg.manifest()
_META_PATH = _STATE / "hosts" / _NAME / "meta.json"
_META = json.loads(_META_PATH.read_text()) if _META_PATH.is_file() else {}
_TARBALL = _STATE / "fixtures-www" / "releases" / "llama-swap_250_linux_amd64.tar.gz"
_FIXTURES = _MIRROR["url"]


# the sandbox registry (tests/harness/images.py, pushed by hostctl registry_up) answers for ghcr.io at the
# fixtures address, with the harness' test CA; rigkit lock resolves the tags below to their digests there
_REGISTRY = {"registry": f"https://{_netcfg.FIX_ADDR}", "registry_ca": str(_STATE / "registry" / "tls" / "ca.crt")}
# the lock: the hub's tiny repos (committed, inventory/sandbox.lock.json) plus what `rigkit lock` resolves from
# this run's fixtures (pins, digests, the tarball's sha256), so it lives in the harness state
_LOCK = _STATE / "sandbox.lock.json"


_connection = {
    "ssh_hostname": _META.get("ssh_hostname", "sandbox-host-is-not-up"),
    "ssh_port": _META.get("ssh_port", 22),
    "ssh_user": _META.get("ssh_user", "rig"),
    "ssh_key": _META.get("ssh_key"),
    # the harness records each host's own keys (addresses are reused between hosts)
    "ssh_strict_host_key_checking": "yes",
    "ssh_known_hosts_file": str(_META_PATH.parent / "known_hosts"),
    "_sudo": True,
}

_sandbox_data = {
    **{k: v for k, v in _connection.items() if v is not None},
    "arch_archive_url": _MIRROR["archive_url"],
    "nvidia_driver_version": _MIRROR["nvidia_driver_version"],
    "cuda_version": _MIRROR["cuda_version"],
    "operator_user": _META.get("ssh_user", "rig"),
    "paused_timers": ["agent-sync.timer"],
    "operator_units": ["inventory/units/agent-sync.service", "inventory/units/agent-sync.timer"],
    "hf_endpoint": f"{_FIXTURES}:8000",  # tests/hub in the fixtures namespace (hostctl hub_up)
    # the hub stand-in serves plain http on the harness' own network (a veth pair into the fixtures
    # namespace, nothing else on it); the HF token may cross it in clear (notes/spec-types.md)
    "trusted_http_hosts": [urlsplit(_FIXTURES).hostname],
    "lockfile": str(_LOCK),
    "lock_files": [],
    # metrics asked for: the deploy installs node_exporter (the mirror's prometheus-node-exporter, Debian's real
    # 1.5.0 binary in Arch's package layout, pinned by rigkit lock from the series) reading this folder
    "metrics_textfile_dir": "/var/lib/prometheus/node-exporter",
    "node_exporter": {"version": _MIRROR["node_exporter_version"]},
    # the sandbox registry's tags (resolved by rigkit lock) and its hub's tiny repos (tests/hub)
    "hyperqwen": {"image": {"ref": "sandbox", **_REGISTRY}},
    "strata": {"image": {"ref": "server-cuda", **_REGISTRY}, "model_file": "strata-coder-Q4_K_M.gguf",
               "args": ["--threads", "1"]},
    "gguf_baseline": {"image": {"ref": "server-cuda", **_REGISTRY}, "model_file": "Qwen3.8-27B-Q4_K_M.gguf"},
    "models": {
        "hyperqwen-dflash2": {"repo_id": "rigkit-test/Qwen3.8-27B-DFlash2-W4A16"},
        "gguf-baseline": {"repo_id": "rigkit-test/Qwen3.8-27B-GGUF"},
        "strata": {"repo_id": "rigkit-test/Strata-Coder-GGUF"},
    },
    "llama_swap": {"release_url": f"{_FIXTURES}/releases/{_TARBALL.name}"},
}



def _merged(base, extra):
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


# A test seam: $RIGKIT_SANDBOX_DATA (a JSON object) deep-merged into this host's data, so a test can
# deploy a variant of the sandbox (e.g. {"llama_swap": {"port": 8090}}) and every later command of
# that test (window, wire-in, drift) declares the same.
_sandbox_data = _merged(_sandbox_data, json.loads(os.environ.get("RIGKIT_SANDBOX_DATA") or "{}"))

sandbox = [(_NAME, _sandbox_data)]
