"""The run: every host declared, planned, probed and compared (:func:`check`), one host's exit
code (:func:`exit_code`), and the run as one document (:func:`document`, written by
``rigkit drift --json`` and read back by :func:`read_document` — ``rigkit report`` reads it).

The document is JSON Lines, one object per line, every line with ``kind``, ``host``, ``item``
and ``severity`` (so a reader of finding records can filter the others out):

- one line per finding (:meth:`Finding.record`: ``{host, kind, item, declared, actual,
  severity}``, ``diff`` with ``--diff``);
- then one ``kind: "status"`` line per host, clean hosts included: ``status`` (``clean``,
  ``drift`` or ``not checked``), ``exit_code``, ``findings`` (how many count: ``drift`` and
  ``error``), ``state`` (what was read: the GPU's power limits and driver, CUDA, llama-swap's
  live members as declared and whether the live config is the declared one, the hold, the host
  lock, the last window's journal — None for a host not reached);
- last, one ``kind: "run"`` line: ``schema_version``, ``generated`` (UTC ISO-8601),
  ``inventory``, ``hosts`` (names, in order), ``exit_code`` (DESIGN.md precedence).
"""

from __future__ import annotations

import functools
import json
from datetime import datetime, timezone
from typing import Any

from rigkit import exitcodes
from rigkit.drift import severity
from rigkit.drift.compare import Finding, compare_host, generation_hold, window_open
from rigkit.drift.masking import masked
from rigkit.drift.declared import Declared, declared_for
from rigkit.drift.plan import finish_plan, plan_findings, start_plan
from rigkit.drift.probe import connect_and_probe


def held_declared(decl: Any, facts: dict[str, Any], connection: dict[str, Any], inventory: str,
                  token: Any) -> Any:
    """``decl`` declared again from the generation a hold keeps its host at (read with
    ``rigkit-agent generation show N --files`` over SSH); ``decl`` unchanged, with a warning in its
    ``lock_note``, when that generation cannot be read."""
    from rigkit.common import scratch
    from rigkit.render.generations import source_from_bundle
    from rigkit.remote import Remote, RemoteError

    n = generation_hold(facts)["generation"]
    try:
        proc = Remote(decl.host, connection).agent("generation", "show", str(n), "--files", timeout=120)
    except RemoteError as exc:  # the host lost since the probe: said in the note, compared with the spec
        decl.lock_note = f"held generation {n} unreadable ({str(exc)[-200:]}); compared with the spec"
        return decl
    try:
        bundle = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else None
        source = source_from_bundle(bundle, decl.spec, scratch.folder("rigkit-drift-")) if bundle else None
    except Exception:  # noqa: BLE001 - an unreadable generation is reported, never a crash
        source = None
    if source is None:
        why = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}")[-200:]
        decl.lock_note = f"held generation {n} unreadable ({why}); compared with the spec"
        return decl
    return declared_for(decl.host, source.spec, inventory, token, files=source.rendered, generation=n)


@functools.lru_cache(maxsize=8)
def built_wheelhouse(python: str) -> dict[str, str] | str:
    """The agent's wheelhouse this checkout builds for Python ``python`` (``"3.13"``;
    :func:`rigkit.render.wheelhouse.build`, what the deploy syncs) as ``{file name: sha256}``
    (:func:`rigkit.operations.wheels.local_sums`), or why it cannot be built here (the error's text;
    drift says so and does not compare). Once per process: every host of a fleet on the same Python
    compares with the same build."""
    from rigkit.render import wheelhouse
    from rigkit.operations.wheels import local_sums

    try:
        return local_sums(wheelhouse.build(python))
    except Exception as exc:  # noqa: BLE001 - a build failure here is reported, never a crash
        return str(exc) or type(exc).__name__


def wheelhouse_for(facts: dict[str, Any]) -> dict[str, str] | str | None:
    """:func:`built_wheelhouse` for the Python the probe found the host's agent on (``facts["wheels"]
    ["python"]``); None when the probe read no agent (nothing to compare the wheelhouse with)."""
    python = (facts.get("wheels") or {}).get("python")
    return built_wheelhouse(python) if python else None


def spec_is_generation(decl: Declared, entry: dict[str, Any]) -> bool | None:
    """Whether the spec declares what generation ``entry`` (an index entry) recorded — the key the
    next deploy would record is its key (:func:`rigkit.render.generations.manifest`, the model lock read as
    :func:`rigkit.deploy.source.source_for` reads it) — or None when it cannot be told."""
    from rigkit.render.generations import lock_text, manifest

    try:
        key = manifest(decl.spec, decl.files, lock_text(decl.spec))["key"]
    except Exception:  # noqa: BLE001 - a spec the manifest cannot describe is check's business
        return None
    return entry.get("key") == key


def exit_code(findings: list[Finding]) -> int:
    """DESIGN.md's code for one host's findings, by :mod:`rigkit.drift.severity`'s table: 1 any
    ``error``, else 3 any ``drift``, else 0 (``warn`` and ``expected`` are reported, not counted)."""
    return severity.exit_code({f.severity for f in findings})


def check(host_specs: list[Any], inventory: str, token: Any, deep: bool = False, diff: bool = False,
          plan: bool = True, connect_timeout: int = 10,
          states: dict[str, Any] | None = None) -> tuple[list[Finding], dict[str, int]]:
    """Drift of every host: ``(findings, {host: exit code})``, every host reported. ``token``: the
    command's HF token (:func:`rigkit.spec.secrets.hf_token`, read once by the command) or None: with
    one, hf.env's content is compared and the value masked out of every finding. Findings are
    masked; an unreachable host is one ``error`` finding (kind ``host``). When ``states`` (a
    dict) is given, it is filled with each host's :func:`host_state` (None when not reached).
    The hosts are probed at once (pyinfra's own parallel connect and fact gathering)."""
    decls = [declared_for(hs.name, hs.spec, inventory, token) for hs in host_specs]
    # one plan per host, all at once: a DeployError on one host (a refusal in preflight) aborts
    # pyinfra's whole run, and every other host must still be reported
    procs = {hs.name: start_plan(inventory, [hs.name]) for hs in host_specs} if plan else {}
    connections = {hs.name: hs.connection for hs in host_specs}
    probes = connect_and_probe(decls, connections, deep=deep, connect_timeout=connect_timeout, diff=diff)
    # a host a rollback holds is compared with the held generation, not the spec: declared again
    # from that generation's record and files, and probed again for them
    held = [held_declared(d, probes[d.host][0], connections[d.host], inventory, token) for d in decls
            if probes.get(d.host, (None,))[0] is not None and generation_hold(probes[d.host][0])]
    if held:
        by_host = {d.host: d for d in held}
        decls = [by_host.get(d.host, d) for d in decls]
        probes.update(connect_and_probe(held, connections, deep=deep, connect_timeout=connect_timeout, diff=diff))
    plans = {name: finish_plan(proc) for name, proc in procs.items()}
    findings: list[Finding] = []
    codes: dict[str, int] = {}
    for decl in decls:
        facts, why = probes.get(decl.host, (None, "not probed"))
        if states is not None:
            states[decl.host] = None if facts is None else host_state(decl, facts)
        if facts is None:
            host_findings = [Finding(decl.host, "host", "connection", "reachable, probed", why)]
        else:
            host_findings = compare_host(decl, facts, diff=diff, wheelhouse=wheelhouse_for(facts))
            if plan and window_open(facts):
                host_findings.append(Finding(decl.host, "not-compared", "pyinfra --dry --json", "a plan",
                                             "skipped: the deploy refuses while a window is open"))
            elif plan:
                plan_json, plan_err = plans[decl.host]
                if plan_json is None:
                    host_findings.append(Finding(decl.host, "plan-failed", "pyinfra --dry --json", "a plan", plan_err))
                else:
                    host_findings += plan_findings(decl.host, plan_json)
        findings += masked(host_findings, decl.secret_values)  # the one place findings are masked
        codes[decl.host] = exit_code(host_findings)
    return findings, codes


STATUS = {exitcodes.OK: "clean", exitcodes.FINDINGS: "drift", exitcodes.FAILED: "not checked",
          exitcodes.INVALID: "not checked"}
SCHEMA_VERSION = 1


def host_state(decl: Any, facts: dict[str, Any]) -> dict[str, Any]:
    """What the probe read that an operator wants at a glance (no secret in it): ``gpu``
    (name, driver, power limit / enforced / default / min / max in W, from ``NvidiaSmi``),
    ``cuda`` (the driver's CUDA version), ``llama_swap_live`` (the members the declared live
    config holds, names only, and ``live_config_as_declared``: False when the live file's hash
    differs), ``hold`` (the holds file's data or None), ``lock`` (``held``/``holder``/``stale``),
    ``window`` (the last window journal's ``id``, ``state``, ``tenant``, ``started``/``ended``,
    or None when none was ever run), ``generation`` (:func:`generation_state`), ``power_healer``
    (the power-limit healer's ``last_check`` and ``last_reapply``, :mod:`rigkit.host.power`, or None
    before its first run)."""
    from rigkit import paths

    smi = facts.get("smi") or {}
    gpus = smi.get("gpus") or []
    g = gpus[0] if gpus else {}
    members = getattr(getattr(decl.spec, "llama_swap", None), "members", {}) or {}
    live = sorted(n for n, m in members.items() if not getattr(m, "staged", False))
    files = facts.get("files") or {}
    declared = (decl.files or {}).get(paths.LLAMA_SWAP_CONFIG)
    actual = files.get(paths.LLAMA_SWAP_CONFIG) or {}
    want = declared.get("sha256") if isinstance(declared, dict) else getattr(declared, "sha256", None)
    as_declared = None if not want or not actual else actual.get("sha256") == want
    journal = (facts.get("window") or {}).get("data") or None
    window = None
    if isinstance(journal, dict):
        window = {k: journal.get(k) for k in ("id", "state", "started", "ended", "started_at", "ended_at")
                  if journal.get(k) is not None}
        window["tenant"] = (journal.get("plan") or {}).get("tenant")
    holds = (facts.get("holds") or {}).get("data") or None
    lock = facts.get("rig_lock") or {}
    return {
        "gpu": {"state": smi.get("state"), "name": g.get("name"), "driver": g.get("driver_version"),
                "power_limit_w": g.get("power_limit_w"), "power_enforced_w": g.get("power_enforced_w"),
                "power_default_w": g.get("power_default_w"), "power_min_w": g.get("power_min_w"),
                "power_max_w": g.get("power_max_w"), "declared_power_limit_w": decl.spec.gpu_power_limit_w,
                "declared_driver": decl.spec.nvidia_driver_version},
        "cuda": facts.get("smi_cuda"), "declared_cuda": decl.spec.cuda_version,
        "llama_swap_live": {"members": live, "live_config_as_declared": as_declared},
        "hold": holds if holds else None,
        "lock": {"held": bool(lock.get("held")), "holder": lock.get("holder"), "stale": lock.get("stale")},
        "window": window,
        "generation": generation_state(decl, facts),
        "power_healer": power_healer_state(facts),
    }


def power_healer_state(facts: dict[str, Any]) -> dict[str, Any] | None:
    """``{"last_check": {...}, "last_reapply": {...} | None, "reapplies": n}`` from the healer's record
    (``/var/lib/rigkit/power.json``, shape in :mod:`rigkit.host.power`), or None when it never ran."""
    data = (facts.get("power_healer") or {}).get("data")
    if not isinstance(data, dict):
        return None
    return {"last_check": data.get("last_check"), "last_reapply": data.get("last_reapply"),
            "reapplies": data.get("reapplies") or 0}


def generation_state(decl: Any, facts: dict[str, Any]) -> dict[str, Any] | None:
    """``{"current": n, "time", "operator", "reason", "held": n | None, "compared_with": "spec" |
    "generation n", "spec_is_current": bool | None}`` from the probe's generations index (the last:
    whether the spec declares what the current generation recorded — False after a change of the
    spec or a wire-in since the last deploy: the next deploy records a new generation), or None when
    none is recorded."""
    data = (facts.get("generations") or {}).get("data") or {}
    current = data.get("current")
    entry = next((g for g in data.get("generations", []) if g.get("n") == current), None)
    if entry is None:
        return None
    hold = generation_hold(facts)
    return {"current": current, "time": entry.get("time"), "operator": entry.get("operator"),
            "reason": entry.get("reason"), "held": hold.get("generation") if hold else None,
            "compared_with": f"generation {decl.generation}" if decl.generation is not None else "spec",
            "spec_is_current": spec_is_generation(decl, entry) if decl.generation is None else None}


def document(findings: list[Finding], codes: dict[str, int], hosts: list[str], inventory: str,
             states: dict[str, Any] | None = None, with_diff: bool = False) -> list[dict[str, Any]]:
    """The run as the records of the module doc, in order: findings, a status per host, the run."""
    states = states or {}
    out = [f.record(with_diff=with_diff) for f in findings]
    for h in hosts:
        mine = [f for f in findings if f.host == h]
        out.append({"kind": "status", "host": h, "item": "drift", "severity": "status",
                    "status": STATUS.get(codes[h], "not checked"), "exit_code": codes[h],
                    "findings": sum(severity.counted(f.severity) for f in mine),
                    "warnings": sum(not severity.counted(f.severity) for f in mine), "state": states.get(h)})
    out.append({"kind": "run", "host": None, "item": "rigkit drift", "severity": "status",
                "schema_version": SCHEMA_VERSION, "inventory": inventory, "hosts": list(hosts),
                "generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "exit_code": exitcodes.combine(*codes.values()) if codes else exitcodes.OK})
    return out


def dumps_document(records: list[dict[str, Any]]) -> str:
    """JSON Lines text of a :func:`document` (one sorted-key object per line)."""
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)


def read_document(text: str, source: str = "drift document") -> dict[str, Any]:
    """Parse ``rigkit drift --json`` output: ``{"run": run record, "hosts": {name: status
    record + "records": [its findings]}}``. Raises ValueError naming ``source`` and the line
    when a line is not a JSON object, or when the ``run`` record is missing (an output cut
    short, or one written before the document had one)."""
    run: dict[str, Any] | None = None
    hosts: dict[str, dict[str, Any]] = {}
    findings: list[dict[str, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{source}: line {n} is not JSON ({exc})") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{source}: line {n} is not a JSON object")
        if rec.get("kind") == "run":
            run = rec
        elif rec.get("kind") == "status":
            hosts[str(rec.get("host"))] = {**rec, "records": []}
        else:
            findings.append(rec)
    if run is None:
        raise ValueError(f"{source}: no \"run\" record (cut short, or written by an older rigkit "
                         f"drift --json); run rigkit drift --json again")
    for rec in findings:
        if str(rec.get("host")) in hosts:
            hosts[str(rec.get("host"))]["records"].append(rec)
    return {"run": run, "hosts": hosts}
