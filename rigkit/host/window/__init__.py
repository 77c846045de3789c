"""Tenant windows on the host (DESIGN.md "Lifecycle", the *window* state): measure a tenant
outside the proxy, then always come back to *steady*.

Runs in the host agent (``rigkit-agent window ...``): standard library and ``requests`` only,
plus the bench (:mod:`rigkit.bench.session`, the session ``rigkit bench`` runs too;
the chart is drawn on the control machine, see :func:`_bench_runner`). The control side
(:mod:`rigkit.cli.window`) builds a *plan* from the spec and hands it to ``window start``.

Sub-commands (``rigkit-agent window CMD``; run as root):

- ``start`` — read the plan (JSON) on stdin, refuse while a window is open, write a fresh
  journal and launch ``window run`` as the transient unit ``rigkit-window.service``
  (``systemd-run --collect``: the window lives on without the SSH session that started it).
- ``run`` — the window itself (inside the unit): preflight, pause the declared timers, stop
  llama-swap, wait for the GPU's memory back near idle (no compute app, ``memory.used`` at most the host
  config's ``vram.idle_mib``) and confirm the VRAM is free, start ``hyperqwen.service``, wait for ``/health``
  (boot-to-healthy in s), warm it up (``bench/warmup.sh``'s recipe), run the bench presets;
  then restore, whatever happened.
- ``abort`` — ask a running window to end early (SIGTERM to its main process; it restores).
- ``restore`` — replay the restore from the journal when a window was left open (its unit
  killed, a reboot), as the same transient unit (``restore-run``); nothing when none is open.
- ``follow`` — print the journal as one JSON line each time it changes, until the window is
  over and its unit gone (what ``rigkit window`` reads over SSH).
- ``status`` — print the journal (``null`` when there is none).

The journal (``/var/lib/rigkit/window.json``, written atomically after every change; a copy
with the bench results in ``/var/lib/rigkit/windows/<id>/``) is a JSON object::

    {"version": 1, "id": "20261020T101500Z-ab12cd", "tenant": "hyperqwen",
     "state": "preflight|open|restoring|restored|restore-failed|closed",
     "outcome": null|"ok"|"failed"|"aborted"|"refused"|"interrupted",
     "error": null|str, "started": UTC ISO, "ended": UTC ISO|null, "boot_id": str,
     "unit": "rigkit-window.service", "plan": {...}, "results_dir": str,
     "timers_active_before": [str], "proxy_was_active": bool|null,
     "changed": {"timers": [str], "proxy_stopped": bool, "tenant_started": bool},
     "boot_to_healthy_s": float|null, "warmup": {...}|null,
     "vram_idle": {"vram-free"|"vram-released": what rigkit.host.gpu.wait_idle saw (waited_s, used_mib,
                   ceiling_mib, polls, first_used_mib, first_apps)},
     "bench": {preset: {"dir", "exit_code", "verdicts", "status"}},
     "steps": [{"name", "phase": "window|restore", "started": UTC ISO, "duration_s": float|null,
                "status": "running|ok|failed|skipped", "detail": str}],
     "restores": int, "notes": [str]}

With a ``sweep`` in the plan (``rigkit window --sweep``, :mod:`rigkit.host.window.sweep`) the tenant
steps are replaced by the sweep's (one ``sweep:<param>=<value>`` step per setting, ``sweep:recover``
after a last crash), the journal carries ``sweep`` (the grid, the cells, the starts) and
``changed.tenant_env`` (``{"path", "backup", "mode", "uid", "gid"}`` while a setting's ``.env`` is
installed), and the restore has a ``restore-env`` step after ``stop-tenant``. A ``power_limit`` sweep
keeps the deployed ``.env``, records ``changed.power_limit`` (``{"index", "declared_w",
"enforced_before_w"}``) before it sets its first limit, and its restore has a ``restore-power`` step
after ``stop-tenant`` that sets the declared limit again and reads it back (the window's preflight
refuses a limit outside the card's range before anything is touched). Every restore waits for the
tenant's memory to be released (``vram-released``, before ``start-proxy`` starts the resident).

The window is *open* (keeper and watchdog stand down, the deploy refuses) while ``state`` is
anything but ``closed`` (preflight refused, nothing touched) or ``restored``. ``changed`` says
what the window did that restore has not undone yet: the source of :func:`rigkit.common.journal.expected_deviations`.
"""

from rigkit.host.window.commands import main  # noqa: E402,F401  (``rigkit-agent window``)
