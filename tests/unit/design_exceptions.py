"""Where ``../shared/DESIGN.md`` and the code disagree on purpose (tests/unit/test_design.py).

The code is the truth for what test_design.py checks; DESIGN.md is the shared picture, which a
session cannot edit. When an issue asks for a change DESIGN.md does not say yet, its disagreement is
listed here with its reason (the issue that asks for it), and the test passes and prints the list
(a ``DesignDisagreement`` warning in pytest's summary). An entry that no longer disagrees fails the
test: take it out once DESIGN.md follows.

``EXCEPTIONS``: ``{(check, item): reason}``; ``check`` is one of test_design.py's check names
(``folders``, ``layout``, ``tests folders``, ``host third-party``, ``host ships``, ``control only``,
``bench third-party``, ``units``, ``section``, ``tests path``), ``item`` what that check names in
its message (a folder, a package, a unit, ``file: cited text`` — no line number, which moves).
"""

from __future__ import annotations

EXCEPTIONS: dict[tuple[str, str], str] = {
    ("folders", "lockfile"): "issue 64 item 2 gives the lock file a home of its own (its document, one "
                                     "path function, its view and resolvers); DESIGN.md's Layout puts the lock "
                                     "file under spec/ and its resolvers under resolve/",
    ("folders", "resolve"): "issue 64 item 2 moves the resolvers (archive, registry, release) into "
                                    "rigkit/lockfile/; DESIGN.md's Layout still names resolve/",
}
