"""Admission: a bounded run queue in front of the runs.

:class:`RunLimiter` lets ``max_running`` scaffold runs execute at once and up to
``queue_size`` more wait; past that a request is refused at once with 429 (and a
``Retry-After``), so overload never turns into unbounded latency. It bounds Ponder's own
memory (1024 runs and 4096 waiting by default, a harness's whole concurrency); what
reaches an engine is bounded per model by sequences in flight
(:mod:`server.pool.sequences`), the engine's own unit of cost.

>>> import asyncio
>>> limiter = RunLimiter(max_running=1, queue_size=0)
>>> slot = limiter.admit()
>>> try:
...     limiter.admit()
... except OverloadedError as err:
...     err.retry_after
1
>>> slot.release(); limiter.admitted
0
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from server.errors import OverloadedError

if TYPE_CHECKING:
    from server.telemetry.metrics import Metrics

__all__ = ["RunLimiter", "RunSlot"]


class RunSlot:
    """One admitted request: wait for a run slot with :meth:`acquire`, always :meth:`release`."""

    def __init__(self, limiter: RunLimiter):
        self._limiter = limiter
        self._running = False
        self._released = False

    @property
    def free(self) -> bool:
        """Whether :meth:`acquire` would take a run slot at once, without waiting."""
        return not self._limiter.semaphore.locked()

    async def acquire(self) -> None:
        limiter = self._limiter
        metrics = limiter.metrics
        if not self.free and metrics is not None:
            metrics.runs_queued.inc()  # counted as queued while it waits
            try:
                await limiter.semaphore.acquire()
            finally:
                metrics.runs_queued.dec()
        else:
            await limiter.semaphore.acquire()  # a free slot is taken at once
        self._running = True
        if metrics is not None:
            metrics.runs_in_flight.inc()

    def release(self) -> None:
        """Give the slot back (idempotent)."""
        if self._released:
            return
        self._released = True
        limiter = self._limiter
        limiter.admitted -= 1
        if self._running:
            self._running = False
            limiter.semaphore.release()
            if limiter.metrics is not None:
                limiter.metrics.runs_in_flight.dec()

    async def __aenter__(self) -> RunSlot:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class RunLimiter:
    """At most ``max_running`` runs at once, ``queue_size`` waiting; others get 429."""

    def __init__(self, max_running: int, queue_size: int, metrics: Metrics | None = None):
        self.max_running = max_running
        self.queue_size = queue_size
        self.metrics = metrics
        self.semaphore = asyncio.Semaphore(max_running)
        self.admitted = 0

    def admit(self) -> RunSlot:
        """Reserve a place (running or queued) or raise :class:`OverloadedError`."""
        if self.admitted >= self.max_running + self.queue_size:
            waiting = max(0, self.admitted - self.max_running)
            retry_after = 1 + waiting // max(1, self.max_running)
            raise OverloadedError(
                f"the server is busy ({self.max_running} runs executing, "
                f"{waiting} queued); retry later",
                retry_after=retry_after,
            )
        self.admitted += 1
        return RunSlot(self)
