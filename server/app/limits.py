"""Admission control: a bounded run queue, and a request body size limit.

:class:`RunLimiter` lets ``max_running`` scaffold runs execute at once and up to
``queue_size`` more wait; past that a request is refused at once with 429 (and a
``Retry-After``), so overload never turns into unbounded latency. It bounds Ponder's own
memory (1024 runs and 4096 waiting by default, a harness's whole concurrency); what
reaches an engine is bounded per model by sequences in flight
(:mod:`server.pool.sequences`), the engine's own unit of cost.

:class:`BodySizeLimit` is ASGI middleware that counts body bytes as they stream in
(``Content-Length`` is only an early shortcut) and answers 413 past ``max_bytes``.

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
import json
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import BodyTooLargeError, OverloadedError, api_error

if TYPE_CHECKING:
    from server.telemetry.metrics import Metrics


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


def raise_open_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; the new soft limit.

    Each client connection and each engine call in flight holds a socket: a thousand
    concurrent runs fanning out to an engine need several thousand, past the common
    default soft limit of 1,024 (vLLM raises its own the same way).

    >>> raise_open_file_limit() >= 1
    True
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft


class BodySizeLimit:
    """ASGI middleware: 413 in the OpenAI error shape when a body passes ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int, metrics: Metrics | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._reject(send)
                    return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLargeError(self.max_bytes)
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except BodyTooLargeError:
            if started:
                raise
            await self._reject(send)

    async def _reject(self, send: Send) -> None:
        error = api_error(BodyTooLargeError(self.max_bytes))
        if self.metrics is not None:
            self.metrics.rejected.labels(reason=error.code or "413").inc()
        body = json.dumps(error.body()).encode()
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})
