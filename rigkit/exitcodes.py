"""Exit codes shared by every rigkit command (DESIGN.md "Exit codes").

0 done / nothing found (warnings still 0); 1 failed (unreachable host, failed step, FAIL
verdict); 2 invalid input (inventory, spec, arguments), nothing touched; 3 findings (drift,
differences to review). With several hosts, :func:`combine` applies 2 > 1 > 3 > 0.
"""

OK = 0
FAILED = 1
INVALID = 2
FINDINGS = 3

_PRECEDENCE = {INVALID: 3, FAILED: 2, FINDINGS: 1, OK: 0}


def combine(*codes: int) -> int:
    """Return the code that wins across hosts: 2 > 1 > 3 > 0.

    + codes: per-host exit codes, each one of 0, 1, 2, 3.
    Raises ValueError for any other code.
    """
    result = OK
    for code in codes:
        if code not in _PRECEDENCE:
            raise ValueError(f"exit code {code!r} is not one of 0, 1, 2, 3")
        if _PRECEDENCE[code] > _PRECEDENCE[result]:
            result = code
    return result
