"""The host agent: what runs on the rig itself, from ``/opt/rigkit/venv`` (``rigkit-agent``).

Imports only the standard library, ``requests`` and ``yaml`` (its wheelhouse is small). Each
job stands down while a window is open (``/var/lib/rigkit/window.json``):

- ``keeper``: when llama-swap has no member loaded (a ttl ran out after a swap), send one real
  completion to the first preloaded member so the resident comes back — llama-swap has no
  return-to-resident of its own (upstream issue #591).
- ``watchdog``: while llama-swap lists HyperQwen ready, a 1-token completion with a timeout; after
  N failures in a row (5xx: its engine died and answers 500 until restarted; or no answer) unload
  it through llama-swap so the next request starts it afresh; back off after repeated unloads;
  state in ``/var/lib/rigkit/watchdog.json``, each decision logged with its reason.
- ``activate``: the activation path of llama-swap's config (:mod:`rigkit.host.activate`).

Keeper and watchdog also stand down while an activation runs (``/var/lib/rigkit/activate.lock``).

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


def _stand_down(job: str) -> str | None:
    """Why ``job`` stands down now (a window is open, an activation is running), or None."""
    from rigkit.host.activate import activation_running

    if window_open():
        return f"{job}: a window is open ({WINDOW}); standing down (the window watches its own tenant)"
    if activation_running():
        return f"{job}: an activation of llama-swap's config is running; standing down"
    return None


def keeper(base: str = LLAMA_SWAP, config: Path = CONFIG) -> int:
    """Bring the resident member back when none is loaded. Returns an exit code.

    Stands down while a window is open or an activation runs. "Loaded" means ``/running`` lists a
    member ``ready`` or ``starting``; otherwise one real completion (``max_tokens`` 1) goes to the first
    ``hooks.on_startup.preload`` member of the live config through llama-swap, which loads it.
    """
    why = _stand_down("keeper")
    if why:
        print(why)
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
    print(f"keeper: no member loaded (a ttl ran out after a swap?); bringing {resident} back")
    resp = complete(base, resident, None)
    if resp.status_code >= 400:
        print(f"keeper: bringing {resident} back failed: HTTP {resp.status_code}", file=sys.stderr)
        return 1
    print(f"keeper: {resident} is back")
    return 0


WATCHDOG_STATE = Path("/var/lib/rigkit/watchdog.json")
#: Defaults of the timer's run: failures in a row before an unload; unloads in a row (no healthy answer
#: between them) before backing off; the first backoff in s (doubling per further unload, at most a day).
WATCHDOG_FAILURES = 3
WATCHDOG_BACKOFF_AFTER = 2
WATCHDOG_BACKOFF_S = 900.0
WATCHDOG_BACKOFF_MAX_S = 86400.0


def _load_state(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_state(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def _iso(t: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def probe(member: dict, model: str, api_key: str | None, timeout_s: float) -> str | None:
    """One 1-token completion straight to a running member's ``proxy`` (never through llama-swap, which
    would load it if it went away meanwhile). Returns None when it answered (any status below 500),
    else why not: ``"HTTP 500: <error message>"`` or ``"no answer within 60 s (ReadTimeout)"``."""
    import requests

    try:
        resp = complete(member["proxy"].rstrip("/"), model, api_key, timeout_s=timeout_s)
    except requests.RequestException as exc:
        return f"no answer within {timeout_s:g} s ({type(exc).__name__})"
    if resp.status_code < 500:
        if resp.status_code >= 400:
            print(f"watchdog: {member['model']} answered HTTP {resp.status_code} (a client error, not a dead engine: "
                  "check the API key and the model name)", file=sys.stderr)
        return None
    try:
        err = resp.json().get("error")
        msg = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError):
        msg = None
    text = " ".join(str(msg or resp.text).split())[:200]
    if api_key:
        text = text.replace(api_key, "<VLLM_API_KEY>")
    return f"HTTP {resp.status_code}: {text}"


def watchdog(base: str = LLAMA_SWAP, config: Path = CONFIG, state_path: Path = WATCHDOG_STATE,
             members: tuple[str, ...] = ("hyperqwen",), failures: int = WATCHDOG_FAILURES,
             backoff_after: int = WATCHDOG_BACKOFF_AFTER, backoff_s: float = WATCHDOG_BACKOFF_S,
             timeout_s: float = 60.0, now=None) -> int:
    """Unload a watched member that keeps failing, so the next request starts it afresh.

    + members: the llama-swap member ids watched (HyperQwen: its engine can die and answer 500 forever)
    + failures: consecutive failed probes (5xx or no answer within ``timeout_s`` s) before an unload
    + backoff_after: unloads in a row, without a healthy answer between them, before backing off
    + backoff_s: the first backoff in s; it doubles with each further unload (at most a day)

    Only while llama-swap's ``/running`` lists the member ``ready``: one 1-token completion with a
    timeout (:func:`probe`). State per member in ``state_path`` (``/var/lib/rigkit/watchdog.json``):
    ``failures`` in a row, ``unloads`` in a row, ``backoff_until``, ``last_ok``, ``last_failure``,
    ``last_reason``, ``last_unload``. Each decision is printed with its reason (the journal of
    ``hyperqwen-watchdog.service``). Stands down while a window is open or an activation runs.

    Returns 0 when all is well or an unload was done; 1 when an unload failed or a failing member is
    left alone while backing off (the unit shows failed: a human should look).
    """
    import time

    import requests

    now = now or time.time
    why = _stand_down("watchdog")
    if why:
        print(why)
        return 0
    state = _load_state(state_path)
    listed = {m.get("model"): m for m in running(base)}
    models = (_config(config).get("models") or {}) if config.exists() else {}
    key = _api_key()
    status = 0
    for mid in members:
        st = state.setdefault(mid, {"failures": 0, "unloads": 0})
        entry = listed.get(mid)
        if not entry or entry.get("state") != "ready" or not entry.get("proxy"):
            print(f"watchdog: {mid} is not running as a member ({entry.get('state') if entry else 'not listed'}); idle")
            continue
        model = (models.get(mid) or {}).get("useModelName") or mid
        reason = probe(entry, model, key, timeout_s)
        t = now()
        if reason is None:
            if st.get("failures") or st.get("unloads"):
                print(f"watchdog: {mid} answers again; counters reset")
            else:
                print(f"watchdog: {mid} answers")
            st.update(failures=0, unloads=0, backoff_until=None, last_ok=_iso(t))
            continue
        st["failures"] = st.get("failures", 0) + 1
        st.update(last_failure=_iso(t), last_reason=reason)
        print(f"watchdog: {mid} failed a 1-token completion ({reason}): {st['failures']} of {failures} in a row",
              file=sys.stderr)
        if st["failures"] < failures:
            continue
        until = st.get("backoff_until")
        if until and t < until:
            print(f"watchdog: backing off until {_iso(until)}: {mid} was unloaded {st['unloads']} times in a row without "
                  f"a healthy answer; leaving it alone (a human should look: `journalctl -u llama-swap`, "
                  f"`docker logs`)", file=sys.stderr)
            status = 1
            continue
        print(f"watchdog: unloading {mid} through llama-swap after {st['failures']} failures in a row ({reason}); "
              "the next request starts it afresh", file=sys.stderr)
        try:
            resp = requests.post(f"{base}/api/models/unload/{mid}", timeout=max(TIMEOUT_S, timeout_s))
            ok, detail = resp.status_code < 400, f"HTTP {resp.status_code}"
        except requests.RequestException as exc:
            ok, detail = False, type(exc).__name__
        if not ok:
            print(f"watchdog: unloading {mid} failed: {detail}", file=sys.stderr)
            status = 1
            continue
        st["unloads"] = st.get("unloads", 0) + 1
        st.update(failures=0, last_unload=_iso(t))
        if st["unloads"] >= backoff_after:
            wait = min(backoff_s * 2 ** (st["unloads"] - backoff_after), WATCHDOG_BACKOFF_MAX_S)
            st["backoff_until"] = t + wait
            print(f"watchdog: {mid} unloaded {st['unloads']} times in a row without a healthy answer; backing off "
                  f"{wait:g} s (until {_iso(t + wait)}) before unloading it again", file=sys.stderr)
        else:
            print(f"watchdog: {mid} unloaded")
    _save_state(state_path, state)
    return status


def _watchdog_main(argv: list[str]) -> int:
    """``rigkit-agent watchdog [--member ID] [--failures N] [--backoff-after K] [--backoff-s S] [--timeout S]``."""
    ap = argparse.ArgumentParser(prog="rigkit-agent watchdog", description=watchdog.__doc__.splitlines()[0])
    ap.add_argument("--member", action="append", help="member id to watch (repeatable) [default: hyperqwen]")
    ap.add_argument("--failures", type=int, default=WATCHDOG_FAILURES, help="failures in a row before an unload")
    ap.add_argument("--backoff-after", type=int, default=WATCHDOG_BACKOFF_AFTER, help="unloads in a row before backing off")
    ap.add_argument("--backoff-s", type=float, default=WATCHDOG_BACKOFF_S, help="first backoff in s (doubles)")
    ap.add_argument("--timeout", type=float, default=60.0, help="s for the probe completion")
    ap.add_argument("--state", type=Path, default=WATCHDOG_STATE)
    a = ap.parse_args(argv)
    return watchdog(members=tuple(a.member or ("hyperqwen",)), failures=a.failures, backoff_after=a.backoff_after,
                    backoff_s=a.backoff_s, timeout_s=a.timeout, state_path=a.state)


def main(argv: list[str] | None = None) -> None:
    """``rigkit-agent {keeper,watchdog,version}``; ``rigkit-agent {fetch,record,status} ...`` is the
    model fetch (:func:`rigkit.host.fetch.main`)."""
    from rigkit import __version__

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["activate"]:
        from rigkit.host.activate import main as activate_main

        sys.exit(activate_main(argv[1:]))
    if argv[:1] == ["watchdog"] and len(argv) > 1:
        try:
            sys.exit(_watchdog_main(argv[1:]))
        except Exception as exc:  # requests errors, an unreadable config: say what, exit 1
            print(f"watchdog: {type(exc).__name__}: {exc}", file=sys.stderr)
            sys.exit(1)
    if argv[:1] == ["window"]:  # tenant windows (rigkit.host.window)
        from rigkit.host.window import main as window_main

        sys.exit(window_main(argv[1:]))
    if argv[:1] in (["fetch"], ["record"], ["status"]):
        from rigkit.host.fetch import main as fetch_main

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
