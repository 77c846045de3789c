"""The run: every host declared, planned, probed and compared (:func:`check`), and one host's
exit code (:func:`exit_code`)."""

from __future__ import annotations

from typing import Any

from rigkit import exitcodes
from rigkit.drift.compare import Finding, compare_host, mask, window_open
from rigkit.drift.declared import declared_for
from rigkit.drift.plan import finish_plan, plan_findings, start_plan
from rigkit.drift.probe import connect_and_probe


def exit_code(findings: list[Finding]) -> int:
    """DESIGN.md's code for one host's findings: 1 any ``error``, else 3 any ``drift``, else 0
    (``warn`` and ``expected`` — what an open window explains — are reported, not counted)."""
    severities = {f.severity for f in findings}
    if "error" in severities:
        return exitcodes.FAILED
    if "drift" in severities:
        return exitcodes.FINDINGS
    return exitcodes.OK


def check(host_specs: list[Any], inventory: str, deep: bool = False, diff: bool = False, plan: bool = True,
          connect_timeout: int = 10) -> tuple[list[Finding], dict[str, int]]:
    """Drift of every host: ``(findings, {host: exit code})``, every host reported. Findings are
    masked; an unreachable host is one ``error`` finding (kind ``host``)."""
    from rigkit.secrets import hf_token_source, read_hf_token

    token = read_hf_token()
    source = hf_token_source() if token else None
    decls = [declared_for(hs.name, hs.spec, inventory, token) for hs in host_specs]
    # one plan per host, all at once: a DeployError on one host (a refusal in preflight) aborts
    # pyinfra's whole run, and every other host must still be reported
    procs = {hs.name: start_plan(inventory, [hs.name]) for hs in host_specs} if plan else {}
    probes = connect_and_probe(decls, {hs.name: hs.connection for hs in host_specs}, deep=deep,
                               connect_timeout=connect_timeout)
    plans = {name: finish_plan(proc) for name, proc in procs.items()}
    findings: list[Finding] = []
    codes: dict[str, int] = {}
    for decl in decls:
        facts, why = probes.get(decl.host, (None, "not probed"))
        if facts is None:
            host_findings = [Finding(decl.host, "host", "connection", "reachable, probed", why, severity="error")]
        else:
            host_findings = compare_host(decl, facts, diff=diff, token_source=source)
            if plan and window_open(facts):
                host_findings.append(Finding(decl.host, "plan", "pyinfra --dry --json", "a plan",
                                             "skipped: the deploy refuses while a window is open", severity="warn"))
            elif plan:
                plan_json, plan_err = plans[decl.host]
                if plan_json is None:
                    host_findings.append(Finding(decl.host, "plan", "pyinfra --dry --json", "a plan", plan_err,
                                                 severity="error"))
                else:
                    host_findings += plan_findings(decl.host, plan_json)
        for f in host_findings:
            f.declared = mask(f.declared, decl.secret_values)
            f.actual = mask(f.actual, decl.secret_values)
            f.item = mask(f.item, decl.secret_values)
        findings += host_findings
        codes[decl.host] = exit_code(host_findings)
    return findings, codes
