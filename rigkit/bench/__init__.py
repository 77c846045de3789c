"""Smoke benchmarks that count right (`rigkit bench`, `rigkit window --sweep`): the control side's own
part is the sweep's arguments and frontier (:mod:`rigkit.bench.sweep`; the SSH forward is
:class:`rigkit.remote.SSHForward`); the command is :mod:`rigkit.cli.bench`, the charts :mod:`rigkit.report.chart`.

The measuring core lives in :mod:`rigkit.host.bench` (the window on the host imports it too).
Modules, one concern each:

- :mod:`rigkit.host.bench.sse` — Server-Sent Events parser (WHATWG HTML "Server-sent events",
  §9.2.6 "Interpreting an event stream"), incremental UTF-8.
- :mod:`rigkit.host.bench.client` — one streamed OpenAI-compatible chat completion, timed on a
  monotonic clock; token counts from the server's ``usage``.
- :mod:`rigkit.host.bench.workloads` — the presets (``warmup``, ``chat-greedy``, ``chat-sampled``,
  ``quoting``) and the verbatim check.
- :mod:`rigkit.host.bench.results` — JSONL records, per-workload summaries, verdicts.
- :mod:`rigkit.host.bench.context` — what makes numbers comparable (GPU, driver, engine, model).
- :mod:`rigkit.host.bench.metrics` — vLLM ``/metrics`` speculative-decoding counters.
- :mod:`rigkit.report.chart` — the PNG chart (matplotlib, Agg canvas) and ``write_outputs``.
- :mod:`rigkit.bench.sweep` — the draft-length sweep's control side.
- :mod:`rigkit.host.bench.runner` — runs the workloads against a target.
- :mod:`rigkit.cli.bench` — the ``rigkit bench`` click command.

Nothing here touches pyinfra state at import time.
"""
