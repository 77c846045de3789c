"""One severity per kind of drift finding, and what each severity means for the exit code: the
table ``rigkit drift`` (plain and ``--json``), ``rigkit report`` and the run's counts all read.
docs/operating.md "Drift: one probe per host" prints the same table (``tests/drift/test_severity.py`` holds
the two together, and every finding the comparisons make to it).

A kind names what differs (``file``, ``pin``, ``power`` …); its severity is fixed here, never
chosen where a finding is made. The two exceptions are states that explain a difference: while a
window is open, the findings its journal explains (its tenant swapped in, the proxy down, a sweep's
``.env`` or power limit) are ``expected`` (:func:`rigkit.drift.compare.apply_window`); while a hold
stands, the files it keeps are ``hold`` (:func:`rigkit.drift.compare.apply_holds`) — whatever their kind.
"""

from __future__ import annotations

from rigkit import exitcodes

#: severity -> (exit code of a host with such a finding, counted?, meaning). A host's code is the
#: highest by DESIGN.md's precedence (1 > 3 > 0).
SEVERITIES: dict[str, tuple[int, bool, str]] = {
    "error": (exitcodes.FAILED, True, "drift could not check the host, or a record it reads is unreadable"),
    "drift": (exitcodes.FINDINGS, True, "the host differs from the declared state; the deploy repairs it"),
    "warn": (exitcodes.OK, False, "state to know about, not a difference the deploy would change: a hold, the "
                                  "host lock held, an open window, what could not be compared, the power-limit "
                                  "healer having put the limit back"),
    "expected": (exitcodes.OK, False, "a difference an open window explains (any kind, while it is open)"),
    "hold": (exitcodes.OK, False, "a file a hold keeps as the operator rolled it back (any kind, while the hold "
                                  "stands): the deploy leaves it until the command in the hold's row releases it"),
}

#: kind -> severity. Every finding's kind is one of these (a Finding of another kind is a bug).
KINDS: dict[str, str] = {
    # the declared state, item by item: the deploy repairs each
    "file": "drift", "file-mode": "drift", "file-owner": "drift",
    "directory": "drift", "directory-mode": "drift", "directory-owner": "drift",
    "secret": "drift", "secret-mode": "drift", "secret-owner": "drift",
    "account": "drift", "package": "drift", "pin": "drift", "pin-held": "drift",
    "driver": "drift", "cuda": "drift", "boot": "drift", "reboot": "drift", "power": "drift",
    "daemon.json": "drift", "binary": "drift", "legacy-unit": "drift",
    "agent": "drift", "agent-wheelhouse": "drift", "unit": "drift", "unit-dependency": "drift",
    "llama-swap-live": "drift", "model": "drift", "plan": "drift",
    # what drift could not check
    "host": "error", "unreadable": "error", "plan-failed": "error",
    # state, reported, not counted
    "hold": "warn", "lock": "warn", "window": "warn", "not-compared": "warn", "model-lock": "warn",
    "power-healed": "warn",
}

#: The severity an open window gives the findings it explains (:data:`SEVERITIES`).
EXPECTED = "expected"
#: The severity a hold gives the files it keeps (:data:`SEVERITIES`; :func:`rigkit.drift.compare.apply_holds`).
HELD = "hold"


def severity_of(kind: str) -> str:
    """The severity of a finding of ``kind`` (:data:`KINDS`). A kind missing from the table is
    ``drift`` (what every finding was before the table) — and a defect that
    ``tests/drift/test_severity.py`` names: every kind the code makes is in the table."""
    return KINDS.get(kind, "drift")


def counted(severity: str) -> bool:
    """Whether a finding of ``severity`` counts against the host (its exit code is not 0)."""
    return SEVERITIES[severity][1]


def exit_code(severities: list[str] | set[str]) -> int:
    """DESIGN.md's code for one host from its findings' severities: 1 when any is ``error``, else 3
    when any is ``drift``, else 0 (:data:`SEVERITIES`)."""
    return exitcodes.combine(exitcodes.OK, *(SEVERITIES[s][0] for s in severities))


def tally(severities: list[str]) -> str:
    """``"2 differences, 1 warning"``: findings counted by what their severities mean — differences
    (``drift``), checks that failed (``error``), warnings (``warn``), explained by an open window
    (``expected``); ``"nothing found"`` for none. The one wording of drift, ``--json``'s stderr line
    and the report."""
    from collections import Counter

    n = Counter(severities)
    words = (("drift", "difference", "differences"), ("error", "check failed", "checks failed"),
             ("warn", "warning", "warnings"), ("expected", "explained by the window", "explained by the window"),
             ("hold", "kept by a hold", "kept by a hold"))
    return ", ".join(f"{n[s]} {one if n[s] == 1 else many}" for s, one, many in words if n[s]) or "nothing found"

