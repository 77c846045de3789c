"""Every request after a swap answers (issue #25): N rollbacks and N activations on a sandbox host,
each followed at once by its smoke through llama-swap's :8080, counted.

On a copy of the converged sandbox host (tests/harness/golden.py), after one setup deploy that changes
Strata's args (generation 2):
- rollbacks: ``rigkit rollback --to <current - 1>``, N times, so each restores the other Strata args
  (llama-swap restarted, Strata restarted with new args) and runs its smoke (``rigkit bench --preset small
  --workload chat-greedy`` through :8080, as ``rigkit deploy`` does), still under the host lock;
- activations: ``rigkit deploy`` N times alternating two specs that differ in Strata's args and the GGUF
  baseline's ttl, so each activation restarts llama-swap, sends a completion to gguf-baseline (swapped in)
  and then to Strata (swapped back), followed by the post-deploy smoke.
A round passes when its command exits 0 and its smoke passed with every request answered (no
``HTTP 5xx`` in its output). At the end, llama-swap's journal over the whole run is searched for the
proxy errors of the issue and for the GPU monitor's gpuCh error.

usage: python benchmarks/swap_smoke.py [--n 10]   (root; `make venv harness sandbox-fixtures` first;
       honours RIGKIT_HARNESS_NET / RIGKIT_HARNESS_STATE / RIGKIT_HARNESS_PREFIX). Slow: ~1 min a round.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "harness"))
import golden  # noqa: E402
import hostctl  # noqa: E402
import sandbox_project  # noqa: E402

RIGKIT = str(ROOT / ".venv" / "bin" / "rigkit")
STRATA_B = 'strata={"args": ["--threads", "1", "--batch-size", "256"]}'
SWAP_B = ["--data", STRATA_B, "--data", 'llama_swap={"members": {"gguf-baseline": {"ttl": 300}}}']
FAILED_REQUEST = re.compile(r"HTTP 5\d\d from [A-Z]+ \S+")


def rigkit(host: str, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    env.update(RIGKIT_SANDBOX_HOST=host, HF_TOKEN=hostctl.hub_token())
    schema = Path(os.environ.get("RIGKIT_SHARED", ROOT.parent / "shared")) / "data/llama-swap/config-schema.json"
    if not env.get("RIGKIT_LLAMA_SWAP_SCHEMA_URL") and schema.is_file():
        env["RIGKIT_LLAMA_SWAP_SCHEMA_URL"] = schema.as_uri()
    t0 = time.monotonic()
    proc = subprocess.run([RIGKIT, *args], cwd=sandbox_project.cwd(), env=env, capture_output=True, text=True,
                          timeout=1200)
    return proc, time.monotonic() - t0


def on_host(meta: dict, cmd: str) -> str:
    return subprocess.run([*hostctl.ssh_base(meta), "sudo sh -c " + shlex.quote(cmd)], capture_output=True, text=True,
                          timeout=120).stdout


def verdict(proc: subprocess.CompletedProcess, host: str) -> tuple[bool, str]:
    out = proc.stdout + proc.stderr
    bad = FAILED_REQUEST.findall(out)
    smoked = f"post-deploy smoke: {host}/strata: passed" in out
    ok = proc.returncode == 0 and smoked and not bad
    why = "" if ok else f"exit {proc.returncode}; smoke {'passed' if smoked else 'NOT passed'}; {bad[:3]}"
    return ok, why


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10, help="rollbacks, and activations, each (default 10)")
    ap.add_argument("--keep", action="store_true", help="leave the host up at the end")
    a = ap.parse_args()
    prefix = os.environ.get("RIGKIT_HARNESS_PREFIX", "rkb-")
    name = prefix + "swapb"
    t_all = time.monotonic()
    gold = golden.ensure(prefix)
    with hostctl.lock():
        hostctl.host_down(name)
    meta = hostctl.host_up(name, "nspawn", copy_of=gold.root)
    meta = {**hostctl.read_meta(name), **meta}
    golden.wait_serving(lambda cmd, check=False, timeout=60: subprocess.CompletedProcess(
        cmd, 0, on_host(meta, cmd), ""))
    on_host(meta, "systemctl stop hyperqwen-watchdog.timer rigkit-keeper.timer")  # only our own requests
    since = on_host(meta, "date '+%Y-%m-%d %H:%M:%S'").strip()
    print(f"host {name} up from the converged copy {gold.key} in {time.monotonic() - t_all:.0f} s", flush=True)
    results: dict[str, list[tuple[bool, float, str]]] = {"rollback": [], "activation": []}
    try:
        setup, s = rigkit(name, "deploy", "-i", "inventory/sandbox.py", "--no-smoke", "--data", STRATA_B)
        if setup.returncode != 0:
            print(setup.stderr[-3000:])
            return 1
        print(f"setup: generation 2 (Strata's args changed) in {s:.0f} s", flush=True)
        for i in range(a.n):
            cur = json.loads(rigkit(name, "generations", "-i", "inventory/sandbox.py", "--host", name, "--json")[0]
                             .stdout)["current"]
            proc, s = rigkit(name, "rollback", "-i", "inventory/sandbox.py", "--host", name, "--to", str(cur - 1))
            ok, why = verdict(proc, name)
            results["rollback"].append((ok, s, why))
            print(f"rollback {i + 1}/{a.n} (--to {cur - 1}): {'ok' if ok else 'FAILED: ' + why} ({s:.0f} s)", flush=True)
            if not ok:
                print(proc.stderr[-2500:], flush=True)
        rel, _ = rigkit(name, "rollback", "-i", "inventory/sandbox.py", "--host", name, "--release")
        assert rel.returncode == 0, rel.stderr
        for i in range(a.n):
            data = SWAP_B if i % 2 == 0 else []
            proc, s = rigkit(name, "deploy", "-i", "inventory/sandbox.py", *data)
            ok, why = verdict(proc, name)
            results["activation"].append((ok, s, why))
            print(f"activation {i + 1}/{a.n} ({'B' if data else 'A'}): {'ok' if ok else 'FAILED: ' + why} ({s:.0f} s)",
                  flush=True)
            if not ok:
                print(proc.stderr[-2500:], flush=True)
        journal = on_host(meta, f"journalctl -u llama-swap --no-pager -o cat --since '{since}'")
    finally:
        if not a.keep:
            with hostctl.lock():
                hostctl.host_down(name)
    print()
    for kind, rs in results.items():
        secs = [s for _, s, _ in rs]
        print(f"{kind}s: {sum(ok for ok, _, _ in rs)} of {len(rs)} smokes passed with every request answered "
              f"(median {statistics.median(secs):.0f} s a round, command + smoke)")
    for what in ("http: proxy error: EOF", "proxy error", "status=502", "failed reading from gpuCh",
                 "using nvidia-smi for GPU monitoring", "Health check passed"):
        print(f"llama-swap journal, whole run: {journal.count(what):4d} x {what!r}")
    print(f"total {time.monotonic() - t_all:.0f} s")
    return 0 if all(ok for rs in results.values() for ok, _, _ in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
