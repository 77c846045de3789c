"""The host agent: what runs on the rig itself, from ``/opt/rigkit/venv`` (``rigkit-agent``).

Imports only the standard library, ``requests`` and ``yaml`` (its wheelhouse is small). Each
job stands down while a window is open (``/var/lib/rigkit/window.json``):

- ``keeper``: when llama-swap has no member loaded (a ttl ran out after a swap), send one real
  completion to the first preloaded member so the resident comes back — llama-swap has no
  return-to-resident of its own (upstream issue #591).
- ``watchdog``: when a loaded member answers a completion with HTTP 5xx (HyperQwen's engine
  died: it keeps answering 500 until restarted), unload it through llama-swap so the next
  request starts it afresh.

Exit codes: 0 nothing to do or done, 1 the action failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

LLAMA_SWAP = "http://127.0.0.1:8080"
CONFIG = Path("/etc/llama-swap/config.yaml")
WINDOW = Path("/var/lib/rigkit/window.json")
SECRET = Path("/etc/rigkit/secrets/hyperqwen.env")
TIMEOUT_S = 30.0


def window_open(path: Path = WINDOW) -> bool:
    """True when the window journal says a window is open (any state but closed/restored)."""
    try:
        state = json.loads(path.read_text()).get("state")
    except (OSError, ValueError, AttributeError):
        return False
    return state not in (None, "closed", "restored")


def running(base: str = LLAMA_SWAP) -> list[dict]:
    """llama-swap's ``GET /running`` list: ``[{model, state, proxy, ...}]``."""
    import requests

    resp = requests.get(f"{base}/running", timeout=TIMEOUT_S)
    resp.raise_for_status()
    return resp.json().get("running", [])


def _config(path: Path = CONFIG) -> dict:
    import yaml

    return yaml.safe_load(path.read_text()) or {}


def _api_key(path: Path = SECRET) -> str | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("VLLM_API_KEY="):
                return line.split("=", 1)[1].strip()
    except OSError:
        return None
    return None


def complete(base: str, model: str, api_key: str | None, timeout_s: float = 600.0):
    """One tiny real chat completion (max_tokens 1) to ``model`` through ``base``."""
    import requests

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return requests.post(f"{base}/v1/chat/completions", headers=headers, timeout=timeout_s,
                         json={"model": model, "max_tokens": 1,
                               "messages": [{"role": "user", "content": "ping"}]})


def keeper(base: str = LLAMA_SWAP, config: Path = CONFIG) -> int:
    """Bring the resident member back when none is loaded. Returns an exit code."""
    if window_open():
        print("keeper: a window is open; standing down")
        return 0
    loaded = [m for m in running(base) if m.get("state") in ("ready", "starting")]
    if loaded:
        print("keeper: loaded: " + ", ".join(m["model"] for m in loaded))
        return 0
    preload = (((_config(config).get("hooks") or {}).get("on_startup") or {}).get("preload") or [])
    if not preload:
        print("keeper: nothing loaded and no preloaded member to bring back")
        return 0
    resident = preload[0]
    resp = complete(base, resident, None)
    if resp.status_code >= 400:
        print(f"keeper: bringing {resident} back failed: HTTP {resp.status_code}", file=sys.stderr)
        return 1
    print(f"keeper: {resident} is back")
    return 0


def watchdog(base: str = LLAMA_SWAP) -> int:
    """Unload a loaded member that answers 5xx. Returns an exit code."""
    import requests

    if window_open():
        print("watchdog: a window is open; standing down")
        return 0
    key = _api_key()
    status = 0
    for member in running(base):
        if member.get("state") != "ready" or not member.get("proxy"):
            continue
        resp = complete(member["proxy"], member["model"], key, timeout_s=120.0)
        if resp.status_code < 500:
            continue
        print(f"watchdog: {member['model']} answered HTTP {resp.status_code}; unloading it", file=sys.stderr)
        unload = requests.post(f"{base}/api/models/unload/{member['model']}", timeout=TIMEOUT_S)
        if unload.status_code >= 400:
            print(f"watchdog: unloading {member['model']} failed: HTTP {unload.status_code}", file=sys.stderr)
            status = 1
    return status


def main(argv: list[str] | None = None) -> None:
    """``rigkit-agent {keeper,watchdog,version}``; ``rigkit-agent {fetch,record,status} ...`` is the
    model fetch (:func:`rigkit.fetch.main`)."""
    from rigkit import __version__

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["fetch"], ["record"], ["status"]):
        from rigkit.fetch import main as fetch_main

        sys.exit(fetch_main(argv))

    parser = argparse.ArgumentParser(prog="rigkit-agent", description=__doc__.splitlines()[0])
    parser.add_argument("job", choices=["keeper", "watchdog", "version"])
    args = parser.parse_args(argv)
    if args.job == "version":
        print(f"rigkit-agent {__version__} (Python {sys.version.split()[0]})")
        sys.exit(0)
    try:
        sys.exit({"keeper": keeper, "watchdog": watchdog}[args.job]())
    except Exception as exc:  # requests errors, an unreadable config: say what, exit 1
        print(f"{args.job}: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
