"""What the facts share: the mark that carries a command's exit code on the last line of its
output, and its reader."""

from __future__ import annotations

#: Appended as ``__RIGKIT_RC__=<code>`` by a fact's command whose exit code its ``process`` reads
#: (pyinfra hands ``process`` the output only).

RC_MARK = "__RIGKIT_RC__="


def split_rc(output: list[str]) -> tuple[list[str], int | None]:
    """``(lines, code)``: the output less its last line when that is ``RC_MARK<code>``, and the code
    (None when the command printed no mark)."""
    if output and output[-1].startswith(RC_MARK):
        return output[:-1], int(output[-1][len(RC_MARK):])
    return output, None
