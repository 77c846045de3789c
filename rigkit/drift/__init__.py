"""Drift: what on a host is no longer what the inventory declares, and why (``rigkit drift``).

Each difference is a :class:`Finding` ``(host, kind, item, declared, actual, severity)``:

- ``drift``: the host differs from the declared state (exit 3);
- ``warn``: worth reading, not drift (exit stays 0, as DESIGN.md's warnings);
- ``error``: the host could not be checked — unreachable, a tool failed (exit 1).

How the facts are gathered (one connection per host): the inventory's hosts are reached with
pyinfra's own connectors and connection data (``HostSpec.connection``: ``ssh_*``, ``_sudo``),
through pyinfra's API, and each host answers **one** fact, :class:`HostProbe`: a shell script
built from rigkit's facts' own commands (``NvidiaSmi``, ``PacmanVersions``, ``PacmanIgnorePkg``,
``JsonFile``, ``KernelState``, ``DkmsStatus``) plus ``stat``/``sha256sum`` of every rendered and
secret file, ``systemctl show`` of the declared units and ``rigkit-agent`` checks, each section
parsed by the same ``process()`` the deploy uses. One round trip per host instead of ~60 facts.
The probe covers every operation of the deploy (:mod:`rigkit.drift.coverage`), so it is all that
runs by default. ``--plan`` adds the deploy's own second opinion — pyinfra's plan, ``pyinfra
INVENTORY deploy.py --dry --json --limit HOST`` (its stable, documented output; the in-process route
needs ``pyinfra_cli`` internals), one subprocess per host (a ``DeployError`` on one host aborts
pyinfra's whole run), all started *before* the probes so everything runs at once; ~10 s of CPU on
the control machine per host, ten times the probe.

The comparison functions (``compare_*``) are pure: declared values and parsed facts in, findings
out; they are what the unit tests pin. Secrets: the HF token is compared by hash only, never
sent or shown; every string that leaves the package passes :func:`mask`, in one place
(:func:`rigkit.drift.masking.masked`, where :func:`check` hands the findings out).

The rooms:

- :mod:`rigkit.drift.declared`: what is declared for a host (:class:`Declared`, :func:`declared_for`, :func:`declared_lock_file`)
- :mod:`rigkit.drift.probe`: the probe (sections, script, :class:`HostProbe`, :func:`parse_probe`, reaching the hosts)
- :mod:`rigkit.drift.compare`: :class:`Finding` and the pure ``compare_*``
- :mod:`rigkit.drift.masking`: :func:`mask` (one string) and :func:`~rigkit.drift.masking.masked` (findings)
- :mod:`rigkit.drift.plan`: pyinfra's ``--dry --json`` plan (start, finish, findings)
- :mod:`rigkit.drift.run`: :func:`check` (every host) and :func:`exit_code`
- :mod:`rigkit.drift.coverage`: each deploy operation and what the probe reports when what it manages
  breaks (:data:`~rigkit.drift.coverage.COVERAGE`; notes/drift-coverage.md is its table)
"""

from rigkit.drift.compare import Finding
from rigkit.drift.masking import mask
from rigkit.drift.declared import Declared, declared_for
from rigkit.drift.probe import HostProbe
from rigkit.drift.run import check, exit_code

__all__ = ["Declared", "Finding", "HostProbe", "check", "declared_for", "exit_code", "mask"]
