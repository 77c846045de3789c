"""The operator's own unit files (``operator_units``) and timers named in ``paused_timers``, read by
systemd's grammar (issue #59).

- A unit file is read as systemd.syntax(7) says: ``[Section]`` headers, ``Key=value`` lines, ``#`` and
  ``;`` comment lines, a line ending in ``\\`` continued on the next; list values split on whitespace
  (systemd.unit(5): ``Requires=`` "may be specified more than once … space-separated list").
- An operator unit that ``Requires=``/``BindsTo=``/``Requisite=``/``PartOf=`` ``llama-swap.service`` is
  refused: stopping the proxy (the window, a restart) would then stop the operator's job, and starting
  the job would start the proxy — the coupling trap of the seeds, by the operator's hand. ``Wants=`` and
  ``After=`` are the valid neighbours (a weak dependency and an order).
- A timer's ``OnCalendar=`` is judged by its owner, ``systemd-analyze calendar`` (on the control
  machine; skipped when it is absent): a schedule it cannot parse, or one whose next elapse is
  ``never``, is refused.
- ``paused_timers`` names the operator's agent timers; rigkit's own timers stand down by themselves
  during a window (DESIGN.md), so naming one there is refused.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from rigkit.spec.model import RigSpec
from rigkit.spec.problems import SpecProblem

#: Dependencies that couple the operator's unit to the unit it names (systemd.unit(5)); Wants= and After= do not.
STRONG = ("Requires", "BindsTo", "Requisite", "PartOf")
#: Units whose lifecycle rigkit owns: an operator unit may not bind itself to them.
GUARDED = frozenset({"llama-swap.service", "hyperqwen.service"})
#: rigkit's own timers (DESIGN.md "Host paths and units").
OWN_TIMERS = frozenset({"hyperqwen-watchdog.timer", "rigkit-keeper.timer", "rigkit-power.timer"})


def read_unit(text: str) -> list[tuple[str, str, str, int]]:
    """``(section, key, value, line number)`` of each assignment of a unit file (systemd.syntax(7)):
    comments dropped, continuation lines joined."""
    out: list[tuple[str, str, str, int]] = []
    section, pending, start = "", "", 0
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not pending and (not stripped or stripped[0] in "#;"):
            continue
        if pending and stripped[:1] in ("#", ";"):
            continue  # a comment inside a continuation is skipped
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            start = start or n
            continue
        whole, first = pending + stripped, start or n
        pending, start = "", 0
        if whole.startswith("[") and whole.endswith("]"):
            section = whole[1:-1]
        elif "=" in whole:
            key, _, value = whole.partition("=")
            out.append((section, key.strip(), value.strip(), first))
    return out


def calendar_problem(expr: str) -> str | None:
    """What ``systemd-analyze calendar EXPR`` says is wrong with a schedule (unparsable, or never
    elapses), or None; None too when systemd-analyze is not on the control machine."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        return None
    try:
        r = subprocess.run([tool, "calendar", expr], capture_output=True, text=True, timeout=10,
                           env={"LC_ALL": "C", "TZ": "UTC", "PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return (r.stderr.strip().splitlines() or ["systemd-analyze calendar refused it"])[-1]
    if "Next elapse: never" in r.stdout:
        return "systemd-analyze calendar: Next elapse: never (the schedule is in the past)"
    return None


def unit_file_problems(spec: RigSpec) -> list[SpecProblem]:
    """Every problem of the module's list over ``operator_units`` (files that exist; their names are
    checked elsewhere) and ``paused_timers``."""
    out: list[SpecProblem] = []
    for i, path in enumerate(spec.operator_units):
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for section, key, value, line in read_unit(text):
            if section == "Unit" and key in STRONG:
                for unit in value.split():
                    if unit in GUARDED:
                        out.append(SpecProblem(
                            key=f"operator_units[{i}]", value=f"{path}:{line}: {key}={value}",
                            allowed=f"{key}= binds this unit to {unit} (systemd.unit(5)): stopping it for a window or a "
                                    f"restart would stop this unit, and starting this unit would start {unit}; use "
                                    f"Wants={unit} and After={unit}"))
            elif section == "Timer" and key == "OnCalendar" and value:
                why = calendar_problem(value)
                if why:
                    out.append(SpecProblem(key=f"operator_units[{i}]", value=f"{path}:{line}: OnCalendar={value}",
                                           allowed=f"{why}; a schedule systemd accepts and that still fires "
                                                   "(systemd.time(7), try: systemd-analyze calendar '<expr>')"))
    for i, timer in enumerate(spec.paused_timers or []):
        if timer in OWN_TIMERS:
            out.append(SpecProblem(key=f"paused_timers[{i}]", value=repr(timer),
                                   allowed="rigkit's own timer: it stands down by itself during a window; paused_timers "
                                           "names the operator's agent timers"))
    return out
