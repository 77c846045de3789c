"""The bench (`rigkit bench`, the window's bench, `rigkit window --sweep`), run by both sides: by
``rigkit bench`` on the control machine through an SSH forward, and by the window on the host; it ships
in the agent's wheel. Standard library, ``requests`` (and ``pynvml`` inside :mod:`rigkit.bench.nvml`'s functions)
and :mod:`rigkit.common` only
(tests/unit/test_layout.py). Modules, one concern each:

- :mod:`rigkit.bench.sse` — Server-Sent Events parser (WHATWG HTML "Server-sent events",
  §9.2.6 "Interpreting an event stream"), incremental UTF-8.
- :mod:`rigkit.bench.client` — one streamed OpenAI-compatible chat completion, timed on a
  monotonic clock; token counts from the server's ``usage``. In three parts: ``transport``
  (http.client), ``stream`` (the events' state machine), ``result`` (the record, the counts and
  the one failure classifier).
- :mod:`rigkit.bench.session` — one bench run from the target to the summary, for
  ``rigkit bench`` and the window alike.
- :mod:`rigkit.bench.workloads` — the presets (``warmup``, ``chat-greedy``, ``chat-sampled``,
  ``quoting``, ``long``) and the verbatim check.
- :mod:`rigkit.bench.results` — JSONL records, per-workload summaries, verdicts.
- :mod:`rigkit.bench.context` — what makes numbers comparable (GPU, driver, engine, model).
- :mod:`rigkit.bench.metrics` — vLLM ``/metrics`` speculative-decoding counters: acceptance per workload and
  draft position, never scraped from a member llama-swap has not loaded, mixed when other requests moved
  them, and in windows along the long workload.
- :mod:`rigkit.bench.energy` — the energy of each request, from :mod:`rigkit.bench.nvml`'s readings
  (the card's counter through NVML, else sampled ``power.draw``).
- :mod:`rigkit.bench.llama_swap` — the one client of llama-swap (a completion, ``/running``, the
  key's header, unload, a member's log).
- :mod:`rigkit.bench.runner` — runs the workloads against a target.

The SSH forward ``rigkit bench --host`` measures through is :class:`rigkit.remote.SSHForward`. The command is
:mod:`rigkit.cli.bench`, the charts :mod:`rigkit.report.chart`, the sweep's control side
:mod:`rigkit.report.sweep`.
"""
