"""The keeper (``rigkit-agent keeper``, timer ``rigkit-keeper.timer``): when llama-swap has no member
loaded (a ttl ran out after a swap), send one real completion to the resident so it comes back —
llama-swap has no return-to-resident of its own (upstream issue #591).

Stands down while a window is open or the host lock is held (an activation, a rollback or a deploy
step owns the rig then); brings the resident back under the host lock.
"""

from __future__ import annotations

import sys

from rigkit.bench import llama_swap
from rigkit.host import standdown
from rigkit.host.config import HostConfig


def keeper(cfg: HostConfig) -> int:
    """Bring the resident member back when none is loaded. Returns an exit code (0 nothing to do,
    done, or stood down; 1 the completion failed).

    "Loaded" means ``/running`` lists a member ``ready`` or ``starting``; otherwise one real
    completion (``max_tokens`` 1) goes to the resident (the host config's ``resident``, the first
    preloaded member) through llama-swap, which loads it.
    """
    why = standdown.reason(cfg, "keeper")
    if why:
        print(why)
        return 0
    base = cfg.proxy_url
    loaded = [m for m in llama_swap.running(base) if m.get("state") in ("ready", "starting")]
    if loaded:
        print("keeper: loaded: " + ", ".join(m["model"] for m in loaded))
        return 0
    resident = cfg.resident
    if not resident:
        print("keeper: nothing loaded and no resident member to bring back")
        return 0
    lock, why = standdown.take(cfg, "keeper", f"bringing {resident} back")
    if lock is None:
        print(why)
        return 0
    try:
        print(f"keeper: no member loaded (a ttl ran out after a swap?); bringing {resident} back")
        resp = llama_swap.complete(base, resident, None, timeout_s=float(cfg.get("keeper", "timeout_s")))
        if resp.status_code >= 400:
            print(f"keeper: bringing {resident} back failed: HTTP {resp.status_code}", file=sys.stderr)
            return 1
        print(f"keeper: {resident} is back")
        return 0
    finally:
        lock.release()
