"""The bench's measuring core (the client — transport, stream, result —, SSE parser, workloads, metrics,
results, context, runner, and the session both callers run):
imported by ``rigkit bench`` on the control side and by the window on the host. The chart and the
CLI stay on the control side (:mod:`rigkit.bench`)."""
