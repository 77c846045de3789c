"""The one confirmation of a change to what serves (DESIGN.md "Confirmed, or put back"), run ON THE
HOST (``rigkit-agent confirm``): after a deploy that changed something, a rollback, a wire-in
activation or a revert, the host is confirmed against the generation it should now be at — or the
command that changed it puts it back (:mod:`rigkit.deploy.transaction` on the control side).

A generation is *confirmed* when, within a budget (s):

1. every service the generation declares enabled (``units.enabled``, ``*.service``: llama-swap,
   docker, the power limit, persistenced) is ``active`` (``systemctl is-active``), waiting while one
   is ``activating``;
2. the GPU enforces the generation's power limit (``nvidia-smi --query-gpu=enforced.power.limit``,
   :func:`rigkit.common.gpu.query`; as :func:`rigkit.common.powerlimit.limit_agrees` judges it);
3. every file the generation declares has its declared sha256, mode and owner on disk (what drift
   checks of the files the change touched: all rendered files and the model lock);
4. llama-swap answers ``/health``, then a real chat completion through it (:func:`completion`,
   tokens counted from ``usage.completion_tokens``, > 0) to each member the change touched that is
   live and not staged, then to the resident (the first preloaded member), last, so it stays loaded.
   Staged members are never asked: on the real rig asking HyperQwen costs its cold boot and a
   Strata reload.

The budget is the sum of the asked members' declared ``cold_boot_s`` plus :data:`MARGIN_S`, or the
caller's. ``rigkit-agent confirm`` reads ``{"generation": N, "members": [id], "budget_s": s|null,
"files": bool (default true)}`` on stdin, prints one line per check and, last, the result as one JSON line::

    {"generation": N, "confirmed": bool, "took_s": s, "budget_s": s,
     "checks": [{"check": "unit llama-swap.service" | "power limit" | "files" | "health" | "member strata",
                 "ok": bool, "detail": str}],
     "failed": [the detail of each failed check]}

Exit 0 confirmed, 1 not (or the generation unreadable), 2 bad input. It changes nothing and takes
no lock: the command that changed the host holds the host lock around it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from rigkit.common import envfile
from rigkit.host import gpu
from rigkit.bench import llama_swap

#: Seconds added to the asked members' cold boots (llama-swap's restart, /health, the requests).
MARGIN_S = 60.0
#: A budget never shorter than this (s): a member with a tiny declared cold boot still gets time.
MIN_BUDGET_S = 30.0


class ConfirmError(RuntimeError):
    """One check of a confirmation failed; the message names what was asked and what answered."""


def completion(base: str, member: str, api_key: str | None, timeout_s: float) -> str:
    """One real chat completion to ``member`` through llama-swap at ``base`` (``http://127.0.0.1:<port>``,
    :func:`rigkit.bench.llama_swap.complete`: ``max_tokens`` 1, not streamed). Returns ``"HTTP 200, N token(s) in
    S s"``; raises ConfirmError on no answer within ``timeout_s`` s, a non-200 answer (with the
    member's own last log lines, which say why a server refused to start), or an answer without
    ``usage.completion_tokens`` > 0. The API key is a bearer token, masked in every message."""
    import requests

    t0 = time.monotonic()
    try:
        r = llama_swap.complete(base, member, api_key, timeout_s=max(1.0, timeout_s))
    except requests.RequestException as exc:
        raise ConfirmError(f"{member}: no answer through llama-swap within {timeout_s:.0f} s "
                           f"({type(exc).__name__})") from None
    took = time.monotonic() - t0

    def masked(text: str) -> str:
        return text.replace(api_key, "<VLLM_API_KEY>") if api_key else text

    if r.status_code != 200:
        body = " ".join(r.text.split())[:300]
        said = " | ".join(llama_swap.member_log(base, member))[-600:]
        raise ConfirmError(masked(f"{member}: HTTP {r.status_code} through llama-swap after {took:.1f} s: {body}"
                                  + (f"; its server said: {said}" if said else "")))
    try:
        n = int(((r.json() or {}).get("usage") or {}).get("completion_tokens") or 0)
    except (ValueError, TypeError, AttributeError):
        n = 0
    if n <= 0:
        raise ConfirmError(masked(f"{member}: HTTP 200 through llama-swap but no completion tokens in its usage "
                                  f"({' '.join(r.text.split())[:200]})"))
    return f"HTTP 200, {n} token(s) in {took:.1f} s"


def asked_members(spec: dict[str, Any], touched: list[str]) -> list[str]:
    """The members a confirmation asks, in order: each of ``touched`` that ``spec`` (a generation's
    spec snapshot, :func:`rigkit.render.generations.spec_snapshot`) declares live — not ``staged`` —
    then the resident (``llama_swap.preload[0]``) last. Unknown and staged ids are left out."""
    ls = spec.get("llama_swap") or {}
    members = ls.get("members") or {}
    resident = next(iter(ls.get("preload") or []), None)
    out = [m for m in dict.fromkeys(touched) if m in members and not (members[m] or {}).get("staged") and m != resident]
    return out + ([resident] if resident in members else [])


def budget_for(spec: dict[str, Any], asked: list[str]) -> float:
    """The default budget (s): the asked members' declared ``cold_boot_s`` summed, plus :data:`MARGIN_S`
    (at least :data:`MIN_BUDGET_S`)."""
    members = (spec.get("llama_swap") or {}).get("members") or {}
    total = sum(float((members.get(m) or {}).get("cold_boot_s") or 0) for m in asked)
    return max(MIN_BUDGET_S, total + MARGIN_S)


def _unit_state(unit: str) -> str:
    p = subprocess.run(["systemctl", "is-active", unit], capture_output=True, text=True, timeout=30)
    return (p.stdout.strip().splitlines() or ["unknown"])[0]


def _file_problems(files: dict[str, Any]) -> list[str]:
    """Each declared file (``{path: {"sha256", "mode", "owner", "declared_sha256"?}}``, a generation
    record's ``files``) whose content, mode or owner on disk differs, named."""
    from rigkit.host.generations import owner_of

    out = []
    for path, meta in sorted(files.items()):
        want = meta.get("declared_sha256") or meta.get("sha256")
        try:
            data = Path(path).read_bytes()
            st = os.stat(path)
        except FileNotFoundError:
            out.append(f"{path} is missing")
            continue
        except OSError as exc:
            out.append(f"{path}: {exc.strerror}")
            continue
        if hashlib.sha256(data).hexdigest() != want:
            out.append(f"{path}: content {hashlib.sha256(data).hexdigest()[:12]}, declared {str(want)[:12]}")
        mode = f"0{st.st_mode & 0o7777:o}"
        if meta.get("mode") and int(str(meta["mode"]), 8) != st.st_mode & 0o7777:
            out.append(f"{path}: mode {mode}, declared {meta['mode']}")
        if meta.get("owner") and owner_of(st) != meta["owner"]:
            out.append(f"{path}: owner {owner_of(st)}, declared {meta['owner']}")
    return out


class Probe:
    """What a confirmation reads on the host, as methods (the unit tests replace them)."""

    def __init__(self, base: str, api_key_file: Path) -> None:
        self.base, self.api_key_file = base.rstrip("/"), api_key_file

    def unit_state(self, unit: str) -> str:
        """``systemctl is-active UNIT``'s word."""
        return _unit_state(unit)

    def enforced_w(self, index: int) -> tuple[float | None, str | None]:
        """GPU ``index``'s ``enforced.power.limit`` (W), or ``(None, why)`` (:func:`rigkit.host.gpu.enforced_w`)."""
        return gpu.enforced_w(index)

    def file_problems(self, files: dict[str, Any]) -> list[str]:
        """:func:`_file_problems`."""
        return _file_problems(files)

    def health(self) -> bool:
        """``GET /health`` answers 200."""
        import requests

        try:
            return requests.get(f"{self.base}/health", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def complete(self, member: str, timeout_s: float) -> str:
        """:func:`completion` with the host's API key."""
        return completion(self.base, member, envfile.read_value(self.api_key_file, "VLLM_API_KEY"), timeout_s)


def confirm(record: dict[str, Any], touched: list[str], probe: Probe, budget_s: float | None = None,
            power_index: int = 0, log: Callable[[str], None] = print,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
            files: bool = True, live_members: set[str] | None = None,
            held: dict[str, str] | None = None) -> dict[str, Any]:
    """Confirm that the host serves as generation ``record`` (a record of :mod:`rigkit.host.generations`)
    declares, asking the members of ``touched`` (:func:`asked_members`); the checks and the result's
    shape are the module docstring's. Never raises for a failed check: each is in ``checks`` and
    ``failed``. ``budget_s`` None: :func:`budget_for`; ``files`` False leaves check 3 out (a wire-in's
    activation leaves the live config unlike the recorded generation's).

    + live_members: the member ids of the live llama-swap config (None: not read); a touched member
      it lacks is not asked (a hold keeps that config), and said
    + held: ``{path: why}`` of files a hold keeps unlike the generation (the live config under a
      ``wire-in --rollback`` hold), left out of the files check and said
    """
    spec = record.get("spec") or {}
    asked = asked_members(spec, touched)
    if live_members is not None:
        absent = [m for m in asked if m not in live_members]
        asked = [m for m in asked if m in live_members]
    budget = float(budget_s) if budget_s else budget_for(spec, asked)
    t0 = clock()
    deadline = t0 + budget
    checks: list[dict[str, Any]] = []

    def add(check: str, ok: bool, detail: str) -> None:
        checks.append({"check": check, "ok": ok, "detail": detail})
        log(f"{'ok  ' if ok else 'FAIL'} {check}: {detail}")

    services = [u for u in (record.get("units") or {}).get("enabled", []) if u.endswith(".service")]
    for unit in services:
        state = probe.unit_state(unit)
        while state in ("activating", "reloading") and clock() < deadline:
            sleep(0.5)
            state = probe.unit_state(unit)
        add(f"unit {unit}", state == "active", state)
    want_w = spec.get("gpu_power_limit_w")
    if want_w is not None:
        from rigkit.common.powerlimit import limit_agrees

        enforced, why = probe.enforced_w(power_index)
        ok = limit_agrees(enforced, float(want_w))
        add("power limit", ok, f"enforced {enforced:g} W, declared {float(want_w):g} W" if enforced is not None
            else f"unread ({why}), declared {float(want_w):g} W")
    if files:
        declared = {p: m for p, m in (record.get("files") or {}).items() if p not in (held or {})}
        problems = probe.file_problems(declared)
        add("files", not problems, f"{len(declared)} as declared" if not problems
            else "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else ""))
        for path, why in sorted((held or {}).items()):
            log(f"note {path}: not compared ({why})")
    if live_members is not None and absent:
        log(f"note {', '.join(absent)}: not in the live llama-swap config (a hold keeps it): not asked")
    healthy = probe.health()
    while not healthy and clock() < deadline:
        sleep(0.5)
        healthy = probe.health()
    add("health", healthy, "llama-swap answers /health" if healthy
        else f"llama-swap did not answer /health within {budget:.0f} s")
    if healthy:
        for member in asked:
            left = deadline - clock()
            if left <= 0:
                add(f"member {member}", False, f"not asked: the budget of {budget:.0f} s is spent")
                continue
            try:
                add(f"member {member}", True, probe.complete(member, left))
            except ConfirmError as exc:
                add(f"member {member}", False, str(exc))
    failed = [c["detail"] if c["check"].startswith("member") else f"{c['check']}: {c['detail']}"
              for c in checks if not c["ok"]]
    return {"generation": record.get("n"), "confirmed": not failed, "took_s": round(clock() - t0, 2),
            "budget_s": round(budget, 1), "members": asked, "checks": checks, "failed": failed}


def _live_state(cfg: Any, log: Callable[[str], None]) -> tuple[set[str] | None, dict[str, str]]:
    """``(the live llama-swap config's member ids or None when unreadable, {path: why} of files a hold
    keeps)``: a ``llama-swap`` hold (:mod:`rigkit.common.holds`) keeps the live config it restored."""
    import yaml

    from rigkit.common.holds import LLAMA_SWAP, read_holds
    from rigkit.common.swapconfig import parse_config

    live = Path(cfg.get("llama_swap", "config"))
    try:
        members: set[str] | None = set(parse_config(live.read_text(), str(live), yaml)["models"])
    except (OSError, ValueError) as exc:
        log(f"note the live config is unreadable ({exc}); every touched member is asked")
        members = None
    try:
        hold = read_holds(cfg.path("holds")).get(LLAMA_SWAP)
    except ValueError:
        hold = None
    held = {str(live): f"held since {hold.get('since')} by `{hold.get('by')}`"} if hold else {}
    return members, held


def main(argv: list[str]) -> int:
    """``rigkit-agent confirm`` (module docstring): the request on stdin, one line per check, the
    result as the last line of stdout."""
    from rigkit.host.config import ConfigError
    from rigkit.host.config import load as load_config
    from rigkit.host.generations import GenerationError, read_record

    if argv:
        print("usage: rigkit-agent confirm < {\"generation\": N, \"members\": [id], \"budget_s\": s|null}",
              file=sys.stderr)
        return 2
    try:
        req = json.loads(sys.stdin.read())
        n = int(req["generation"])
        touched = [str(m) for m in req.get("members") or []]
        budget = float(req["budget_s"]) if req.get("budget_s") else None
        files = bool(req.get("files", True))
    except (ValueError, KeyError, TypeError) as exc:
        print(f"error: the request on stdin: {exc}", file=sys.stderr)
        return 2
    try:
        cfg = load_config()
        record = read_record(cfg.path("generations"), n)
    except (ConfigError, GenerationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    def log(msg: str) -> None:
        print(f"confirm: {msg}", file=sys.stderr, flush=True)

    live_members, held = _live_state(cfg, log)
    probe = Probe(cfg.proxy_url, cfg.path("api_key_file"))
    result = confirm(record, touched, probe, budget, int(cfg.get("power", "index")), log, files=files,
                     live_members=live_members, held=held)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0 if result["confirmed"] else 1
