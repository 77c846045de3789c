"""The bench's measuring core (client, SSE parser, workloads, metrics, results, context, runner):
imported by ``rigkit bench`` on the control side and by the window on the host. The chart and the
CLI stay on the control side (:mod:`rigkit.bench`)."""
