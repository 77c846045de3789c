"""The window journal as both sides read it (format: :mod:`rigkit.host.window`): reading it, the
one "is a window open" test (:func:`is_open`, which the keeper, the watchdog, the activation, the
deploy's preflight and drift all use) and what an open window is expected to have changed. Writing it
step by step is the window's: :mod:`rigkit.host.journal`."""

from __future__ import annotations

import os

from rigkit.common.jsonfile import read_object

CLOSED_STATES = ("closed", "restored")
JOURNAL_VERSION = 1


def read_journal(path: str | os.PathLike) -> dict | None:
    """The window journal at ``path`` as a dict (format: :mod:`rigkit.host.window`), or None when there
    is no such file (or it is empty). Raises ValueError (naming the path) when it is not a JSON object."""
    return read_object(path)


def is_open(journal: dict | None) -> bool:
    """True when ``journal`` describes an open window: any ``state`` but ``closed``/``restored``
    (the contract the keeper, the watchdog and the deploy's preflight read)."""
    return bool(journal) and journal.get("state") not in (None, *CLOSED_STATES)


def expected_deviations(journal: dict | None) -> list[str]:
    """What differs from *steady* because a window is open, and is not drift.

    One string per deviation, ``"<what> <observed state>: <why>"`` — the first word a unit
    name, or ``:PORT``: ``"hyperqwen.service active: ..."``, ``"llama-swap.service inactive: ..."``,
    ``":<proxy port> closed: ..."``, ``"<timer> inactive: ..."``, ``"<tenant .env path> changed: ..."``
    (a sweep installed one of its settings), ``"GPU <index> power limit: ..."`` (a power-limit sweep set
    one of its limits). Empty when no window is open. Derived
    from ``journal["changed"]`` (what the window did and restore has not undone yet) and the
    plan's unit names and ports.
    """
    if not is_open(journal):
        return []
    plan = journal.get("plan") or {}
    changed = journal.get("changed") or {}
    wid = journal.get("id", "?")
    tenant_unit = plan.get("tenant_unit", "hyperqwen.service")
    proxy_unit = plan.get("proxy_unit", "llama-swap.service")
    out: list[str] = []
    if changed.get("tenant_started"):
        out.append(f"{tenant_unit} active: window {wid} swapped the tenant in "
                   f"(:{plan.get('tenant_port', '?')} serves {plan.get('tenant', 'hyperqwen')})")
    if changed.get("proxy_stopped"):
        out.append(f"{proxy_unit} inactive: window {wid} stopped the proxy")
        out.append(f":{plan.get('proxy_port', '?')} closed: window {wid} stopped the proxy "
                   f"({plan.get('resident', 'the resident')} not loaded)")
    for timer in changed.get("timers") or []:
        out.append(f"{timer} inactive: window {wid} paused it")
    env = changed.get("tenant_env")
    if env:
        out.append(f"{env['path']} changed: window {wid} installed a sweep setting's .env "
                   f"(the restore puts the deployed one back from {env['backup']})")
    pl = changed.get("power_limit")
    if pl:
        out.append(f"GPU {pl.get('index', 0)} power limit: window {wid} is sweeping power limits "
                   f"(the restore puts the declared {pl.get('declared_w', '?'):g} W back)"
                   if isinstance(pl.get("declared_w"), (int, float)) else
                   f"GPU {pl.get('index', 0)} power limit: window {wid} is sweeping power limits")
    return out
