"""Coalescing: the engine calls of several concurrent runs sent as ONE engine request.

A ``/v1/completions`` request with k prompts through ``single`` is k scaffold runs, one
per prompt, each making its one engine call. A :class:`Coalescer`, made for that one
request (never shared between requests), stands in for their engine: it holds each call
until every run that is still going is waiting on it, then sends the calls that can
share a request (text prompts, the same params: :func:`~scaffolds.engines.protocol.batchable`) as
one :meth:`~scaffolds.engines.protocol.BatchEngine.generate_batch` and hands each run its own
result. A call that shares with no other goes out alone, as it would have anyway.

Runs stay exactly as they are (budget, trace, forced answers, errors): only the engine
underneath is shared. One failed request fails every run waiting on it (the same error);
a run that is cancelled (its deadline, or the client leaving) stops waiting, and a
request nobody waits for any more is cancelled, which closes its HTTP call.

>>> import asyncio
>>> from scaffolds.engines.protocol import GenerateRequest
>>> from scaffolds.engines.mock import MockEngine
>>> class Lists(MockEngine):
...     takes_prompt_lists = True
...     async def generate_batch(self, requests):
...         return [await self.generate(r) for r in requests]
>>> engine = Lists(lambda r: r.prompt_text().upper())
>>> async def main():
...     coalescer = Coalescer(engine, runs=2)
...     calls = [coalescer.member(coalescer.generate(GenerateRequest(p))) for p in "ab"]
...     return [r.completions[0].text for r in await asyncio.gather(*calls)]
>>> asyncio.run(main())
['A', 'B']
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from scaffolds.engines.protocol import (
    BatchEngine,
    GenerateRequest,
    GenerateResult,
    StreamItem,
    batchable,
    stream_from_generate,
)

__all__ = ["Coalescer"]

T = TypeVar("T")
_Waiting = tuple[GenerateRequest, "asyncio.Future[GenerateResult]"]


class Coalescer:
    """An engine for ``runs`` concurrent runs of one request that batches their calls.

    Wrap each run in :meth:`member` (so the coalescer knows when one has ended), give
    the runs this object as their engine, and :meth:`aclose` it when they are done.
    """

    def __init__(self, engine: BatchEngine, runs: int) -> None:
        self.engine = engine
        self._live = runs
        self._waiting: list[_Waiting] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def member(self, run: Awaitable[T]) -> T:
        """Await one run; once it ends, the calls of the others no longer wait for it."""
        try:
            return await run
        finally:
            self._live -= 1
            self._send_if_all_wait()

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        future: asyncio.Future[GenerateResult] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        self._waiting.append((request, future))
        self._send_if_all_wait()
        try:
            return await future
        finally:  # cancelled before it was sent: it leaves the queue
            self._waiting = [w for w in self._waiting if w[1] is not future]

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        return stream_from_generate(self, request)

    async def aclose(self) -> None:
        """Cancel the requests still in flight (nobody waits for them) and wait for them."""
        for task in self._sending:
            task.cancel()
        if self._sending:
            await asyncio.wait(self._sending)

    def _send_if_all_wait(self) -> None:
        # A call whose run was just cancelled has its future cancelled already.
        self._waiting = [w for w in self._waiting if not w[1].done()]
        if not self._waiting or len(self._waiting) < self._live:
            return
        waiting, self._waiting = self._waiting, []
        groups: list[list[_Waiting]] = []
        for item in waiting:
            group = next((g for g in groups if batchable([g[0][0], item[0]])), None)
            if group is None:
                groups.append([item])
            else:
                group.append(item)
        for group in groups:
            task = asyncio.ensure_future(self._send(group))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
            for _, future in group:
                future.add_done_callback(functools.partial(_abandon, group, task))

    async def _send(self, group: list[_Waiting]) -> None:
        requests = [request for request, _ in group]
        try:
            if len(requests) == 1:
                results = [await self.engine.generate(requests[0])]
            else:
                results = await self.engine.generate_batch(requests)
        except asyncio.CancelledError:
            for _, future in group:  # no result will come: nobody may wait for one
                future.cancel()
            raise
        except Exception as exc:
            for _, future in group:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(group, results, strict=True):
            if not future.done():
                future.set_result(result)


def _abandon(group: list[_Waiting], task: asyncio.Task[None], _: object) -> None:
    """Cancel a request once every run that waited on it has stopped waiting."""
    if all(future.cancelled() for _, future in group):
        task.cancel()


def _retrieve(future: asyncio.Future[GenerateResult]) -> None:
    # A run cancelled just as its request failed never reads the error: read it here,
    # so asyncio does not log it as never retrieved.
    if not future.cancelled():
        future.exception()
