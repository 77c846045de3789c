"""The one way a value reaches a command the deploy runs on the host (issue #28): a command is either
:func:`argv` (one simple command, every word quoted) or :func:`script` (a constant template whose
``{slots}`` are filled with quoted values), or a command the agent's builders made
(:mod:`rigkit.agentcmd`, quoted there). No operation or role writes a spec value into a command by
an f-string: ``tests/unit/test_shell_commands.py`` walks every command ``rigkit/operations/`` yields
and ``roles/`` hands to ``server.shell`` and fails on anything else.

Quoting is POSIX ``sh`` quoting (:func:`shlex.quote`): a value is one word, whatever it holds
(``$(…)``, backticks, ``;``, a newline, a leading ``-`` stays literal); pyinfra's sudo wrapping
(``sudo -H -n sh -c '…'``) quotes the whole command once more, which keeps it.
"""

from __future__ import annotations

import shlex
import string

from pyinfra.api import StringCommand


def argv(*words: object) -> StringCommand:
    """One simple command, ``shlex.join`` of the words (each ``str()``'d): ``argv("chmod", "600", path)``.
    No shell operators: every word is literal."""
    return StringCommand(shlex.join(str(w) for w in words))


def script(template: str, **values: object) -> StringCommand:
    """A shell command from ``template`` (a constant: operators, ``$(…)``, redirections live there)
    with each ``{name}`` slot filled by ``values[name]`` quoted as one word (:func:`shlex.quote`),
    except a :class:`~pyinfra.api.StringCommand` value (a command :func:`argv`, :func:`script` or
    :mod:`rigkit.agentcmd` built), which goes in as the command it is. ``{{``/``}}`` are literal
    braces (``${{SUDO_USER}}``). Raises ``KeyError`` for a slot without a value and ``ValueError``
    for a value without a slot or a slot with a format spec or conversion."""
    slots = set()
    for _literal, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if spec or conversion or not name.isidentifier():
            raise ValueError(f"script template slot {{{name}}}: plain names only")
        slots.add(name)
    if set(values) - slots:
        raise ValueError(f"script values without a slot: {sorted(set(values) - slots)}")
    return StringCommand(template.format_map({k: _word(v) for k, v in values.items()}))


def _word(value: object) -> str:
    if isinstance(value, StringCommand):
        return value.get_raw_value()
    return shlex.quote(str(value))
