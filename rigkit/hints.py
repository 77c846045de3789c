"""The commands rigkit prints for the operator to run next ("hints"), complete so they can be
pasted: ``rigkit VERB -i INVENTORY --host NAME ARGS``.

A hint without ``-i`` goes to the default inventory when pasted (``error: --host demo: not in
inventory/rig.py``); one without ``--host`` acts on every host of the inventory. So every hint the
control side prints is built by :func:`command`, and the host side's messages — the host agent
knows neither the inventory nor the host's name in it — are completed by :func:`complete` where
the control side relays them (:meth:`rigkit.remote.Remote.agent`, the deploy's output).
``tests/unit/test_hints.py`` collects every hint from the code and runs each as printed.

The inventory is the one the running command was given: its ``-i`` (the ``inventory`` parameter
of the click command running now), else ``$RIGKIT_INVENTORY`` (which :func:`rigkit.deploy.run.run_pyinfra`
sets for the pyinfra run a command starts, so the deploy's own output names the same), else the CLI's
default.
"""

from __future__ import annotations

import os
import re
import shlex

INVENTORY_ENV = "RIGKIT_INVENTORY"
DEFAULT_INVENTORY = "inventory/rig.py"

#: rigkit's commands and the sub-commands of its groups (``rigkit models lock``).
GROUPS = {"models": ("lock", "check")}
VERBS = ("bench", "bisect", "check", "deploy", "drift", "generations", "lock", "models", "render", "report", "rollback",
         "window", "wire-in")
#: Commands that take no ``--host`` (they act on the inventory as a whole).
NO_HOST = frozenset()

#: A hint inside a message: a backticked ```rigkit VERB …``` (never ``rigkit-agent``).
HINT_RE = re.compile(r"`(rigkit (?:" + "|".join(map(re.escape, VERBS)) + r")(?: [^`]*)?)`")


def inventory() -> str:
    """The inventory hints name: the running click command's ``inventory`` parameter (``-i``) when it
    was given, else ``$RIGKIT_INVENTORY``, else ``inventory/rig.py`` — the CLI's own rule
    (:func:`rigkit.spec.inventory.default_inventory`)."""
    import click

    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if ctx.params.get("inventory"):
            return str(ctx.params["inventory"])
        ctx = ctx.parent
    return os.environ.get(INVENTORY_ENV) or DEFAULT_INVENTORY


def command(verb: str, *args: str, host: str | None = None, inventory_path: str | None = None) -> str:
    """``rigkit VERB -i INVENTORY [--host HOST] ARGS`` as one shell-quoted line (:func:`shlex.join`).

    ``verb`` is a command, or a group and its sub-command (``"models lock"``); ``args`` its further
    arguments as separate words (``"--to", "2"``); ``host`` the host's name in the inventory;
    ``inventory_path`` the inventory when the caller holds it (default :func:`inventory`). Raises
    ValueError for a verb rigkit does not have (a hint must be a command that exists)."""
    words = verb.split()
    if not words or words[0] not in VERBS or (words[0] in GROUPS and words[1:2] and words[1] not in GROUPS[words[0]]):
        raise ValueError(f"not a rigkit command: {verb!r} (commands: {', '.join(VERBS)})")
    argv = ["rigkit", *words, "-i", inventory_path or inventory()]
    if host is not None and words[0] not in NO_HOST:
        argv += ["--host", host]
    return shlex.join([*argv, *args])


def complete(text: str, host: str | None = None) -> str:
    """``text`` with each backticked ```rigkit VERB …``` hint made complete: ``-i INVENTORY`` and,
    when ``host`` is given, ``--host HOST`` inserted after the verb where the hint lacks them (the
    host side's messages, which know neither). Other text is unchanged."""

    def fix(m: re.Match) -> str:
        words = shlex.split(m.group(1))
        n = 3 if words[1] in GROUPS and words[2:3] and words[2] in GROUPS[words[1]] else 2
        head, rest = words[:n], words[n:]
        if not any(w in ("-i", "--inventory") or w.startswith("--inventory=") for w in rest):
            head += ["-i", inventory()]
        if host is not None and words[1] not in NO_HOST and "--host" not in rest:
            head += ["--host", host]
        return f"`{shlex.join(head + rest)}`"

    return HINT_RE.sub(fix, text)
