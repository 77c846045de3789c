"""The group router and its FIFO scheduling, held to upstream
``internal/router/{base,group}.go`` and ``internal/router/scheduler/fifo.go``.

Eviction (``groupSwapper.EvictionFor``): a request for X in group G stops the other
running members of G when ``G.swap``; when ``G.exclusive`` it also stops every
running model of other groups that are not ``persistent``. Eviction completes before
X starts (stops in parallel with ``healthCheckTimeout`` as the grace, then start).
Requests for a model whose start is in flight join that start (queued while a member
starts); a swap that would evict a model still serving requests waits until its
in-flight count is 0 (a busy member is not evicted mid-request).
"""

from __future__ import annotations

import threading
from typing import Dict, List, Optional

from .config import Config
from .log import Logger
from .process import READY, SHUTDOWN, STOPPED, Process, StartError, effective_health_timeout

DEFAULT_CONCURRENCY_LIMIT = 10


class RouterError(Exception):
    """A request the router refuses: ``status`` (HTTP) and ``message`` (upstream's wording)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Swap:
    def __init__(self, model: str, evict: List[str]) -> None:
        self.model = model
        self.evict = evict
        self.done = False
        self.err: Optional[str] = None


class GroupRouter:
    """Owns one Process per group member. Thread-safe."""

    name = "group"

    def __init__(self, cfg: Config, proxylog: Logger, upstreamlog: Logger) -> None:
        self.cfg = cfg
        self.log = proxylog
        self.model_to_group: Dict[str, str] = {}
        for gid in sorted(cfg.groups):
            for mid in cfg.groups[gid].members:
                self.model_to_group[mid] = gid
        self.processes: Dict[str, Process] = {
            mid: Process(mid, cfg.models[mid], proxylog, upstreamlog) for mid in sorted(self.model_to_group)
        }
        self._cond = threading.Condition()
        self._active: Dict[str, _Swap] = {}
        self._inflight: Dict[str, int] = {}
        self._shutting_down = False

    # ---------------------------------------------------------------- helpers
    def handles(self, model_id: str) -> bool:
        return model_id in self.processes

    def health_timeout(self) -> float:
        return effective_health_timeout(self.cfg.health_check_timeout)

    def running_models(self) -> Dict[str, str]:
        """``{model_id: state}`` for every process not stopped/shut down (``/running``)."""
        return {
            mid: p.state for mid, p in self.processes.items() if p.state not in (STOPPED, SHUTDOWN)
        }

    def eviction_for(self, target: str, running: List[str]) -> List[str]:
        tg = self.model_to_group[target]
        tcfg = self.cfg.groups[tg]
        out: List[str] = []
        for mid in running:
            if mid == target or mid in out:
                continue
            og = self.model_to_group.get(mid)
            if og == tg and tcfg.swap:
                out.append(mid)
            elif og != tg and tcfg.exclusive and not self.cfg.groups[og].persistent:
                out.append(mid)
        return out

    def _running_set(self, exclude: str) -> List[str]:
        s = set(self.running_models())
        s.update(m for m in self._active if m != exclude)
        return sorted(s)

    def _collides(self, target: str, evict: List[str]) -> bool:
        for mid, sw in self._active.items():
            if mid == target:
                continue
            if mid in evict or target in sw.evict or set(evict) & set(sw.evict):
                return True
        return False

    # ---------------------------------------------------------------- requests
    def acquire(self, model_id: str) -> Process:
        """Wait until ``model_id`` is ready with nothing to evict, count the request in
        flight and return its Process. Pair with ``release``.

        Raises RouterError: 500 ``unspecific error: <start error>`` when the start fails
        (upstream ``swaputil.SendError`` default branch), 429 ``Too many requests`` above
        ``concurrencyLimit`` (default 10), 500 ``unspecific error: group is shutting down``.
        """
        if model_id not in self.processes:
            raise RouterError(404, "no router for requested model")
        proc = self.processes[model_id]
        with self._cond:
            while True:
                if self._shutting_down:
                    raise RouterError(500, "unspecific error: %s is shutting down" % self.name)
                sw = self._active.get(model_id)
                if sw is not None:
                    while not sw.done and not self._shutting_down:
                        self._cond.wait()
                    if sw.err is not None:
                        raise RouterError(500, "unspecific error: %s" % sw.err)
                    continue
                running = self._running_set(model_id)
                evict = self.eviction_for(model_id, running)
                if proc.state == READY and not evict and not self._collides(model_id, evict):
                    limit = self.cfg.models[model_id].concurrency_limit or DEFAULT_CONCURRENCY_LIMIT
                    if self._inflight.get(model_id, 0) >= limit:
                        raise RouterError(429, "Too many requests")
                    self._inflight[model_id] = self._inflight.get(model_id, 0) + 1
                    return proc
                if self._collides(model_id, evict) or any(self._inflight.get(m, 0) > 0 for m in evict):
                    self.log.debug("%s: queuing request for model %s" % (self.name, model_id))
                    self._cond.wait()
                    continue
                self.log.debug("%s: starting swap for model %s, evicting %s" % (self.name, model_id, evict))
                sw = _Swap(model_id, evict)
                self._active[model_id] = sw
                threading.Thread(target=self._do_swap, args=(sw,), daemon=True).start()

    def release(self, model_id: str) -> None:
        """The request counted by ``acquire`` finished."""
        with self._cond:
            self._inflight[model_id] = self._inflight.get(model_id, 1) - 1
            if self._inflight[model_id] <= 0:
                del self._inflight[model_id]
            self._cond.notify_all()

    def _do_swap(self, sw: _Swap) -> None:
        timeout = self.health_timeout()
        threads = [
            threading.Thread(target=self.processes[m].stop, args=(timeout,), daemon=True) for m in sw.evict
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        err: Optional[str] = None
        try:
            self.processes[sw.model].ensure_ready(timeout)
        except StartError as e:
            err = str(e)
            if not self._shutting_down:
                self.log.warn("%s: starting %s failed: %s" % (self.name, sw.model, err))
        with self._cond:
            sw.done = True
            if sw.err is None:
                sw.err = err
            if self._active.get(sw.model) is sw:
                del self._active[sw.model]
            self._cond.notify_all()

    # ---------------------------------------------------------------- unload
    def unload(self, models: Optional[List[str]] = None) -> None:
        """Stop the named models (all when None), each with its ``unloadTimeout`` (s);
        returns once they have exited. Waiters of an unloaded model's start get
        ``group: model unloaded``."""
        targets = list(models) if models else list(self.processes)
        with self._cond:
            for mid in targets:
                sw = self._active.get(mid)
                if sw is not None:
                    sw.err = "%s: model unloaded" % self.name
        buckets: Dict[int, List[str]] = {}
        for mid in targets:
            buckets.setdefault(self.cfg.models[mid].unload_timeout, []).append(mid)
        for timeout in sorted(buckets):
            threads = [
                threading.Thread(target=self.processes[m].stop, args=(float(timeout),), daemon=True)
                for m in buckets[timeout]
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        with self._cond:
            self._cond.notify_all()

    def shutdown(self, timeout_s: float) -> None:
        """Refuse new requests and stop every process in parallel (graceful ``timeout_s``)."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()
        threads = [
            threading.Thread(target=p.shutdown, args=(timeout_s,), daemon=True) for p in self.processes.values()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s + 5)
