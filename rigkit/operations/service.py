"""Waiting for a service: its HTTP endpoint answering on the host."""

from __future__ import annotations

from pyinfra.api import operation


@operation()
def http_ready(url: str, timeout_s: int = 60):
    """Wait until ``url`` answers HTTP 2xx on the host (``curl``), failing after ``timeout_s`` s.
    Always yields a command: gate it with ``_if`` on the change that restarted the service."""
    yield (f"for i in $(seq 1 {timeout_s}); do curl -fsS -o /dev/null --max-time 5 {url} && exit 0; sleep 1; done; "
           f"echo '{url} did not answer within {timeout_s} s' >&2; exit 1")
