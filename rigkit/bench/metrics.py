"""vLLM's speculative-decoding counters from ``/metrics`` (Prometheus text format), read so that a
scrape never loads a member and never merges someone else's requests into the bench's figures.

**Names, types and labels** (:data:`VLLM_COUNTERS`), from vLLM's own source:
``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingProm`` at commit
``016a8587edb04ae53c913a1da9355a07dc0ca4ae`` (four ``prometheus_client.Counter``: ``vllm:spec_decode_num_drafts``,
``…_num_draft_tokens``, ``…_num_accepted_tokens`` labelled ``model_name``, ``engine``, and
``…_num_accepted_tokens_per_pos`` with ``position`` added, ``"0"`` … ``num_speculative_tokens - 1``)
and ``vllm/v1/metrics/loggers.py`` ``PrometheusStatLogger`` at commit
``005a810bc40faa25b8870fbc8559c3462581eee3`` (``labelnames = ["model_name", "engine"]``; the counter
``vllm:request_success`` labelled ``finished_reason`` as well: one increment per finished request).
prometheus-client exposes a counter ``x`` as the sample ``x_total`` (and ``x_created``).
``tests/bench/test_spec_metrics.py`` holds this table to those lines.

**Figures** (the same source's ``SpecDecodingLogging.log`` and ``SpecDecodingProm`` docstring), over
the interval between two scrapes:

- acceptance length = 1 + Δaccepted / Δdrafts (tokens emitted per verify step, the bonus token included)
- acceptance rate   = Δaccepted / Δdraft_tokens (0–1)
- rate at position p = Δaccepted_per_pos[p] / Δdrafts (how often the p-th drafted token was kept)
- generated tokens  = Δdrafts + Δaccepted (each verify step emits its accepted tokens and one more)

**Foreign traffic.** The counters are the engine's, not the bench's: any other client's request
moves them. ``vllm:request_success_total`` (summed over ``finished_reason``) counts every finished
request; when it moved by more than the requests the bench sent in the interval, the interval is
*mixed*: :func:`spec_delta` then gives no acceptance at all (``mixed`` True and how many requests were
not the bench's), never a merged figure.

**Scrapes never swap.** Behind llama-swap v250 the counters are read through
``/upstream/<member>/metrics``, and ``handleUpstream`` (``internal/server/api.go:479-546`` of the
vendored v250 tree) hands any path to ``s.local.ServeHTTP``, which starts the member when it is not
running — unless the path matches ``upstream.ignorePaths`` (lines 513-530: answered ``409`` while the
member is not ``ready``), whose default covers static files only
(``internal/config/upstream.go:14``: ``.*\\.(js|json|css|png|gif|jpg|jpeg|ico|txt)$``; ``/metrics``
does not match). rigkit takes the first path: :func:`scrape` reads ``GET /running``
(``api.go:333`` ``handleRunning``) first and scrapes only a member it lists ``ready``; any other
state is a skip naming it. (The second path, ``ignorePaths: ['^/metrics$', <the default>]`` in the
rendered config, would close the instant between the two reads; it changes every rig's llama-swap
config and is left to its own change.)
"""

from __future__ import annotations

import re
from typing import Any, Callable

# requests is imported where it is used: ``rigkit.cli`` imports this module's ACCEPTANCE_FLOOR for its
# options, and ssl imported before a command's gevent monkey-patching recurses (``rigkit lock``)

#: vLLM's counters: key → (metric family as vLLM names it, its label names). Source: module docstring.
VLLM_COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "drafts": ("vllm:spec_decode_num_drafts", ("model_name", "engine")),
    "draft_tokens": ("vllm:spec_decode_num_draft_tokens", ("model_name", "engine")),
    "accepted": ("vllm:spec_decode_num_accepted_tokens", ("model_name", "engine")),
    "per_pos": ("vllm:spec_decode_num_accepted_tokens_per_pos", ("model_name", "engine", "position")),
    "requests": ("vllm:request_success", ("model_name", "engine", "finished_reason")),
}
#: The exposed sample names (``<family>_total``) → key.
COUNTERS = {key: fam + "_total" for key, (fam, _labels) in VLLM_COUNTERS.items()}
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_POSITION = re.compile(r'position="(\d+)"')


def parse_counters(text: str) -> dict[str, Any]:
    """Sum :data:`COUNTERS` over their label sets in a Prometheus exposition ``text``.

    Returns ``{key: value}`` for the counters present (missing series are left out): ``drafts``,
    ``draft_tokens``, ``accepted``, ``requests`` as floats, ``per_pos`` as ``{position: value}``
    (position an int, from the ``position`` label)."""
    wanted = {v: k for k, v in COUNTERS.items()}
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if not m or m.group(1) not in wanted:
            continue
        try:
            val = float(m.group(3))
        except ValueError:
            continue
        key = wanted[m.group(1)]
        if key == "per_pos":
            pos = _POSITION.search(m.group(2) or "")
            if pos:
                per = out.setdefault("per_pos", {})
                per[int(pos.group(1))] = per.get(int(pos.group(1)), 0.0) + val
            continue
        out[key] = out.get(key, 0.0) + val
    return out


def member_state(swap_base: str, member: str, api_key: str | None = None) -> str | None:
    """The member's state in llama-swap's ``GET /running`` (``ready``, ``starting``, …), ``"stopped"``
    when it is not listed (v250 lists every process not stopped), None when ``/running`` cannot be read."""
    import requests

    from rigkit.bench.llama_swap import running

    try:
        listed = running(swap_base, timeout_s=5.0, api_key=api_key)
    except (requests.RequestException, ValueError):
        return None
    for m in listed:
        if m.get("model") == member:
            return str(m.get("state"))
    return "stopped"


def scrape(base_url: str, headers: dict[str, str] | None = None, timeout_s: float = 5.0, *,
           swap_base: str | None = None, member: str | None = None, api_key: str | None = None,
           ) -> tuple[dict[str, Any] | None, str | None]:
    """GET ``base_url/metrics``; return ``(counters, None)`` (:func:`parse_counters`) or ``(None, why
    skipped)``. Never raises: an unreachable or non-vLLM endpoint is a skip, not an error.

    Behind llama-swap (``swap_base`` and ``member`` given; ``api_key`` for its ``/running``) it first reads ``/running`` and scrapes only
    when the member is ``ready`` (module docstring: a scrape of a member not running would start it);
    otherwise the skip says ``member <m> is <state> in llama-swap's /running: not scraped (a scrape
    would load it)``."""
    import requests

    if swap_base and member:
        state = member_state(swap_base, member, api_key)
        if state != "ready":
            seen = "unknown (/running unreadable)" if state is None else state
            return None, (f"member {member} is {seen} in llama-swap's /running: not scraped "
                          f"(a scrape through /upstream would load it)")
    try:
        resp = requests.get(base_url.rstrip("/") + "/metrics", headers=headers or {},
                            timeout=timeout_s)
    except requests.RequestException as exc:
        return None, f"/metrics unreachable ({type(exc).__name__})"
    if resp.status_code != 200:
        return None, f"/metrics answered HTTP {resp.status_code}"
    counters = parse_counters(resp.text)
    if "drafts" not in counters or "accepted" not in counters:
        return None, NO_SPEC
    return counters, None


#: The skip of a member whose ``/metrics`` has no speculative-decoding counters (vLLM registers them
#: only with a ``speculative_config``; llama.cpp has no such counters at all).
NO_SPEC = "no speculative decoding on this member (/metrics has no vllm:spec_decode counters)"


def spec_delta(before: dict[str, Any] | None, after: dict[str, Any] | None,
               own_requests: int | None = None) -> dict[str, Any] | None:
    """Acceptance figures for the interval between two scrapes, or None when either is missing or
    no drafts happened.

    Keys: ``drafts``, ``draft_tokens``, ``accepted``, ``generated`` (Δdrafts + Δaccepted, tokens),
    ``acceptance_length`` (tokens per verify step), ``acceptance_rate`` (0–1), ``by_position``
    (``{"0": rate, …}``, 0–1 per draft position; ``{}`` when vLLM sent no per-position counter),
    ``requests`` (Δ``vllm:request_success_total``; None when not served), ``own_requests`` and
    ``mixed``: True when the engine finished more requests than the bench's ``own_requests`` — then
    ``foreign_requests`` says how many more and the acceptance keys are None (never merged);
    None when it cannot be told (no request counter, or ``own_requests`` not given)."""
    if not before or not after:
        return None
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("drafts", "draft_tokens", "accepted")}
    if d["drafts"] <= 0:
        return None
    req = (after["requests"] - before["requests"]) if "requests" in after and "requests" in before else None
    mixed = None if req is None or own_requests is None else req > own_requests
    out: dict[str, Any] = {
        "drafts": int(d["drafts"]), "draft_tokens": int(d["draft_tokens"]), "accepted": int(d["accepted"]),
        "generated": int(d["drafts"] + d["accepted"]),
        "requests": None if req is None else int(req), "own_requests": own_requests, "mixed": mixed,
    }
    if mixed:
        return {**out, "foreign_requests": int(req - own_requests), "acceptance_length": None,
                "acceptance_rate": None, "by_position": {}}
    pb, pa = before.get("per_pos") or {}, after.get("per_pos") or {}
    return {
        **out,
        "acceptance_length": round(1 + d["accepted"] / d["drafts"], 3),
        "acceptance_rate": round(d["accepted"] / d["draft_tokens"], 4) if d["draft_tokens"] else None,
        "by_position": {str(p): round((pa[p] - pb.get(p, 0.0)) / d["drafts"], 4) for p in sorted(pa)},
    }


#: The default floor of a window's acceptance rate (0–1) below which the long workload warns
#: (``rigkit bench --acceptance-floor``). An operator's choice: quoting on the rig accepts ~60%, chat ~21%
#: (the seeds' tokens per chunk at 7 drafts); a collapse is a fall towards 0.
ACCEPTANCE_FLOOR = 0.05


class WindowReader:
    """Acceptance along one long generation, read by scrapes during its stream.

    Call :meth:`on_chunk` from the stream's per-read callback (:func:`rigkit.bench.client.stream_chat`
    ``on_chunk``) with the token chunks received so far: each time it passes the next boundary it
    scrapes (``scrape()`` → counters or None) and closes a window. A window is the interval between
    two scrapes, placed along the generation by the counters themselves (generated tokens = Δdrafts +
    Δaccepted since the first scrape), so its span is exact whatever the server had buffered; the next
    boundary is ``window_tokens`` on at the tokens per chunk seen so far. :meth:`windows` →
    ``[{"index", "from_token", "to_token", **spec_delta}]``."""

    def __init__(self, scrape: Callable[[], dict[str, Any] | None], window_tokens: int) -> None:
        self._scrape = scrape
        self.window_tokens = max(1, int(window_tokens))
        self.samples: list[dict[str, Any]] = []
        self._next = max(1, self.window_tokens // 4)  # tokens per chunk unknown yet: a short first window

    def start(self) -> bool:
        """The scrape before the request; False when the counters cannot be read (no windows)."""
        first = self._scrape()
        if first:
            self.samples.append(first)
        return bool(first)

    def _generated(self) -> float:
        a, b = self.samples[0], self.samples[-1]
        return (b.get("drafts", 0) + b.get("accepted", 0)) - (a.get("drafts", 0) + a.get("accepted", 0))

    def on_chunk(self, token_chunks: int) -> None:
        """Scrape when ``token_chunks`` (the stream's count so far) passed the next boundary."""
        if not self.samples or token_chunks < self._next:
            return
        got = self._scrape()
        if got:
            self.samples.append(got)
        per_chunk = max(1.0, self._generated() / token_chunks) if token_chunks else 1.0
        self._next = token_chunks + max(1, round(self.window_tokens / per_chunk))

    def finish(self) -> None:
        """The scrape after the stream ended (the last window)."""
        if self.samples:
            got = self._scrape()
            if got:
                self.samples.append(got)

    def windows(self) -> list[dict[str, Any]]:
        """The windows with drafts in them, in order (see the class docstring)."""
        out: list[dict[str, Any]] = []
        if not self.samples:
            return out
        first = self.samples[0]
        for a, b in zip(self.samples, self.samples[1:]):
            d = spec_delta(a, b, own_requests=None)
            if d is None:
                continue
            start = int((a.get("drafts", 0) + a.get("accepted", 0)) - (first.get("drafts", 0) + first.get("accepted", 0)))
            out.append({"index": len(out) + 1, "from_token": start, "to_token": start + d["generated"], **d})
        return out


def collapsed(windows: list[dict[str, Any]], floor: float) -> dict[str, Any] | None:
    """The first window whose acceptance rate is below ``floor`` (0–1), or None."""
    for w in windows:
        if w.get("acceptance_rate") is not None and w["acceptance_rate"] < floor:
            return w
    return None


def collapse_warning(workload: str, window: dict[str, Any], floor: float, n_windows: int) -> str:
    """The WARN line naming the window: ``long: acceptance fell to 0.0% in window 5 of 8 (generated
    tokens 8192-10240), below the floor of 5.0% (--acceptance-floor)``."""
    return (f"{workload}: speculative decoding's acceptance fell to {100 * window['acceptance_rate']:.1f}% in "
            f"window {window['index']} of {n_windows} (generated tokens {window['from_token']}-"
            f"{window['to_token']}), below the floor of {100 * floor:.1f}% (--acceptance-floor)")
