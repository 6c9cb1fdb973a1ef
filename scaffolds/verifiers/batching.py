"""Concurrent callers' rows scored together: one blocking function on one worker.

A :class:`RowBatcher` stands in front of a function that scores a list of rows at once
(an in-process model's forward pass) and runs on an executor. Each :meth:`RowBatcher.run`
hands in one caller's rows and gets back exactly the outputs of those rows. A call that
finds the worker idle starts at once (no timer, no waiting for company); calls that
arrive while a batch is being scored wait together and go as the next batch, as many
whole calls (first come, first taken) as fit in ``max_rows`` rows (a call bigger than
that goes alone; the function splits it as it must).

Like :class:`~scaffolds.engines.coalesce.Coalescer` for engine calls: a batch that fails
fails every caller in it with the same error; a caller that is cancelled stops waiting
(its rows leave the queue if they were not taken yet; a batch already running still
answers the others); :meth:`RowBatcher.aclose` fails everyone still waiting with an
:class:`~scaffolds.errors.EngineUnavailableError` instead of leaving them hanging.

>>> import asyncio
>>> from concurrent.futures import ThreadPoolExecutor
>>> def lengths(rows: list[str]) -> list[int]:
...     return [len(r) for r in rows]
>>> async def main():
...     batcher = RowBatcher(lengths, ThreadPoolExecutor(1), max_rows=8)
...     try:
...         return await asyncio.gather(batcher.run(["a", "bb"]), batcher.run(["ccc"]))
...     finally:
...         await batcher.aclose()
>>> asyncio.run(main())
[[1, 2], [3]]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Generic, TypeVar

from scaffolds.errors import EngineError, EngineUnavailableError

__all__ = ["RowBatcher"]

Row = TypeVar("Row")
Out = TypeVar("Out")


class RowBatcher(Generic[Row, Out]):
    """Runs ``work(rows) -> outputs`` (one output per row, in order) on ``executor`` for
    the rows of every caller waiting, ``max_rows`` rows at most per batch."""

    def __init__(
        self, work: Callable[[list[Row]], list[Out]], executor: Executor, *, max_rows: int
    ) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, not {max_rows}")
        self.work = work
        self.executor = executor
        self.max_rows = max_rows
        self.batches = 0  # batches handed to ``work`` so far
        self._waiting: list[tuple[list[Row], asyncio.Future[list[Out]]]] = []
        self._worker: asyncio.Task[None] | None = None
        self._closed = False

    async def run(self, rows: Sequence[Row]) -> list[Out]:
        """The outputs of ``rows``, scored along with whatever else is waiting."""
        if self._closed:
            raise EngineUnavailableError("the in-process verifier was closed")
        if not rows:
            return []
        future: asyncio.Future[list[Out]] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        self._waiting.append((list(rows), future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._drain())
        try:
            return await future
        finally:  # cancelled before its batch was taken: its rows leave the queue
            self._waiting = [w for w in self._waiting if w[1] is not future]

    async def aclose(self) -> None:
        """Fail every caller still waiting and stop the worker (a batch already in the
        executor finishes there; nobody waits for it)."""
        self._closed = True
        waiting, self._waiting = self._waiting, []
        for _, future in waiting:
            if not future.done():
                future.set_exception(EngineUnavailableError("the in-process verifier was closed"))
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
            await asyncio.wait([self._worker])

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._waiting = [w for w in self._waiting if not w[1].done()]
            if not self._waiting:
                return
            batch = self._take()
            rows = [row for call_rows, _ in batch for row in call_rows]
            self.batches += 1
            try:
                outputs = await loop.run_in_executor(self.executor, self.work, rows)
                if len(outputs) != len(rows):
                    raise EngineError(f"{len(outputs)} outputs for a batch of {len(rows)} rows")
            except asyncio.CancelledError:  # closed: nobody gets an answer from this batch
                _fail(batch, EngineUnavailableError("the in-process verifier was closed"))
                raise
            except Exception as exc:
                _fail(batch, exc)
                continue
            start = 0
            for call_rows, future in batch:
                if not future.done():
                    future.set_result(list(outputs[start : start + len(call_rows)]))
                start += len(call_rows)

    def _take(self) -> list[tuple[list[Row], asyncio.Future[list[Out]]]]:
        taken, size = 0, 0
        for call_rows, _ in self._waiting:
            if taken and size + len(call_rows) > self.max_rows:
                break
            taken, size = taken + 1, size + len(call_rows)
        batch, self._waiting = self._waiting[:taken], self._waiting[taken:]
        return batch


def _fail(batch: list[tuple[list[Row], asyncio.Future[list[Out]]]], exc: BaseException) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)


def _retrieve(future: asyncio.Future[list[Out]]) -> None:
    # A caller cancelled just as its batch failed never reads the error: read it here,
    # so asyncio does not log it as never retrieved.
    if not future.cancelled():
        future.exception()
