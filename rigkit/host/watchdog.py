"""The watchdog (``rigkit-agent watchdog``, timer ``hyperqwen-watchdog.timer``): while llama-swap
lists a watched member (HyperQwen: its engine can die and answer 500 until restarted) ready, a
1-token completion with a timeout straight to the member; after N failures in a row, unload it
through llama-swap so the next request starts it afresh; back off after repeated unloads. State in
the host config's ``paths.watchdog_state``; each decision printed with its reason (the unit's
journal). Stands down while a window is open or the host lock is held; unloads under the host lock.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable

from rigkit.bench import llama_swap
from rigkit.common import envfile
from rigkit.host import standdown
from rigkit.host.config import HostConfig
from rigkit.common.jsonfile import iso_utc, read_object, write_atomic


def probe(member: dict, model: str, api_key: str | None, timeout_s: float) -> str | None:
    """One 1-token completion straight to a running member's ``proxy`` (never through llama-swap, which
    would load it if it went away meanwhile). Returns None when it answered (any status below 500),
    else why not: ``"HTTP 500: <error message>"`` or ``"no answer within 60 s (ReadTimeout)"``."""
    import requests

    try:
        resp = llama_swap.complete(member["proxy"].rstrip("/"), model, api_key, timeout_s=timeout_s)
    except requests.RequestException as exc:
        return f"no answer within {timeout_s:g} s ({type(exc).__name__})"
    if resp.status_code < 500:
        if resp.status_code >= 400:
            print(f"watchdog: {member['model']} answered HTTP {resp.status_code} (a client error, not a dead engine: "
                  "check the API key and the model name)", file=sys.stderr)
        return None
    return f"HTTP {resp.status_code}: {llama_swap.error_text(resp, api_key)}"


def watchdog(cfg: HostConfig, members: tuple[str, ...] | None = None, failures: int | None = None,
             backoff_after: int | None = None, backoff_s: float | None = None, timeout_s: float | None = None,
             now: Callable[[], float] | None = None) -> int:
    """Unload a watched member that keeps failing, so the next request starts it afresh.

    Each knob defaults to the host config's ``watchdog`` section:
    + members: the llama-swap member ids watched
    + failures: consecutive failed probes (5xx or no answer within ``timeout_s`` s) before an unload
    + backoff_after: unloads in a row, without a healthy answer between them, before backing off
    + backoff_s: the first backoff in s; it doubles with each further unload (at most ``backoff_max_s``)

    Only while llama-swap's ``/running`` lists the member ``ready``: one 1-token completion with a
    timeout (:func:`probe`). State per member: ``failures`` in a row, ``unloads`` in a row,
    ``backoff_until``, ``last_ok``, ``last_failure``, ``last_reason``, ``last_unload``.

    Returns 0 when all is well, an unload was done or it stood down; 1 when an unload failed or a
    failing member is left alone while backing off (the unit shows failed: a human should look).
    """
    import requests  # noqa: F401  (the probe's errors)

    w = cfg.get("watchdog")
    members = tuple(members or w["members"])
    failures = failures or int(w["failures"])
    backoff_after = backoff_after or int(w["backoff_after"])
    backoff_s = backoff_s if backoff_s is not None else float(w["backoff_s"])
    backoff_max_s = float(w.get("backoff_max_s", 86400.0))
    timeout_s = timeout_s or float(w["timeout_s"])
    now = now or time.time
    why = standdown.reason(cfg, "watchdog")
    if why:
        print(why)
        return 0
    state_path = cfg.path("watchdog_state")
    try:
        state = read_object(state_path) or {}
    except ValueError:
        state = {}
    base = cfg.proxy_url
    listed = {m.get("model"): m for m in llama_swap.running(base)}
    defined = cfg.data.get("members") or {}
    key = envfile.read_value(cfg.path("api_key_file"), "VLLM_API_KEY")
    status = 0
    for mid in members:
        st = state.setdefault(mid, {"failures": 0, "unloads": 0})
        entry = listed.get(mid)
        if not entry or entry.get("state") != "ready" or not entry.get("proxy"):
            print(f"watchdog: {mid} is not running as a member ({entry.get('state') if entry else 'not listed'}); idle")
            continue
        model = (defined.get(mid) or {}).get("use_model_name") or mid
        reason = probe(entry, model, key, timeout_s)
        t = now()
        if reason is None:
            print(f"watchdog: {mid} answers again; counters reset" if st.get("failures") or st.get("unloads")
                  else f"watchdog: {mid} answers")
            st.update(failures=0, unloads=0, backoff_until=None, last_ok=iso_utc(t))
            continue
        st["failures"] = st.get("failures", 0) + 1
        st.update(last_failure=iso_utc(t), last_reason=reason)
        print(f"watchdog: {mid} failed a 1-token completion ({reason}): {st['failures']} of {failures} in a row",
              file=sys.stderr)
        if st["failures"] < failures:
            continue
        until = st.get("backoff_until")
        if until and t < until:
            print(f"watchdog: backing off until {iso_utc(until)}: {mid} was unloaded {st['unloads']} times in a row without "
                  f"a healthy answer; leaving it alone (a human should look: `journalctl -u llama-swap`, "
                  f"`docker logs`)", file=sys.stderr)
            status = 1
            continue
        lock, why = standdown.take(cfg, "watchdog", f"unloading {mid}")
        if lock is None:
            print(why + f" (not unloading {mid} now)")
            continue
        try:
            print(f"watchdog: unloading {mid} through llama-swap after {st['failures']} failures in a row ({reason}); "
                  "the next request starts it afresh", file=sys.stderr)
            ok, detail = llama_swap.unload(base, mid, timeout_s=max(30.0, timeout_s))
        finally:
            lock.release()
        if not ok:
            print(f"watchdog: unloading {mid} failed: {detail}", file=sys.stderr)
            status = 1
            continue
        st["unloads"] = st.get("unloads", 0) + 1
        st.update(failures=0, last_unload=iso_utc(t))
        if st["unloads"] >= backoff_after:
            wait = min(backoff_s * 2 ** (st["unloads"] - backoff_after), backoff_max_s)
            st["backoff_until"] = t + wait
            print(f"watchdog: {mid} unloaded {st['unloads']} times in a row without a healthy answer; backing off "
                  f"{wait:g} s (until {iso_utc(t + wait)}) before unloading it again", file=sys.stderr)
        else:
            print(f"watchdog: {mid} unloaded")
    write_atomic(state_path, state)
    return status


def main(cfg: HostConfig, argv: list[str]) -> int:
    """``rigkit-agent watchdog [--member ID] [--failures N] [--backoff-after K] [--backoff-s S] [--timeout S]``
    (defaults: the host config's ``watchdog`` section)."""
    ap = argparse.ArgumentParser(prog="rigkit-agent watchdog", description="unload a watched member that keeps failing")
    ap.add_argument("--member", action="append", help="member id to watch (repeatable)")
    ap.add_argument("--failures", type=int, help="failures in a row before an unload")
    ap.add_argument("--backoff-after", type=int, help="unloads in a row before backing off")
    ap.add_argument("--backoff-s", type=float, help="first backoff in s (doubles)")
    ap.add_argument("--timeout", type=float, help="s for the probe completion")
    a = ap.parse_args(argv)
    return watchdog(cfg, members=tuple(a.member) if a.member else None, failures=a.failures,
                    backoff_after=a.backoff_after, backoff_s=a.backoff_s, timeout_s=a.timeout)
