"""Admission at the engine: at most so many sequences in flight per served model.

What a scaffold run costs the engine is sequences (samples): ``majority(k=8)`` is one
call of eight, ``rsa(n=8)``'s rounds are eight calls of one. :class:`SequenceGate` holds
each engine call until its ``n`` sequences fit under the bound, first come first served
(a wide call is never overtaken forever by narrow ones), and gives them back when the
call ends, however it ends. A call wider than the whole bound goes alone.

The bound (:func:`sequence_bound`) is, in order: the one set for the model
(``--max-sequences``); else twice what the engine says it runs at once (SGLang's
``max_running_requests``, vLLM's ``max_num_seqs`` where it publishes its config), so the
engine's own waiting queue stays full as sequences finish; else :data:`DEFAULT_SEQUENCES`
per replica. The run limiter (:mod:`server.runs.admission`) in front of it only bounds
Ponder's own memory; this gate is what keeps the engine full and no fuller.

>>> import asyncio
>>> async def demo() -> list[int]:
...     gate = SequenceGate(8)
...     seen = []
...     async def call(n: int) -> None:
...         async with gate.hold(n):
...             seen.append(gate.in_flight)
...             await asyncio.sleep(0.01)
...     await asyncio.gather(call(4), call(4), call(4))
...     return seen + [gate.in_flight, gate.peak]
>>> asyncio.run(demo())
[4, 8, 4, 0, 8]
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

__all__ = [
    "DEFAULT_SEQUENCES",
    "Held",
    "SequenceGate",
    "engine_capacity",
    "sequence_bound",
]

DEFAULT_SEQUENCES = 4096
"""Sequences in flight per engine replica when neither the user nor the engine says:
four times vLLM's default batch on a large GPU (``max_num_seqs`` 1024; 256 on smaller
ones), so a GPU engine is never starved by Ponder, while Ponder's own memory and
connections stay bounded."""


class SequenceGate:
    """At most ``limit`` sequences held at once; waiters are served in arrival order.

    ``in_flight`` and ``waiting`` are the sequences held and waiting now; ``peak`` the
    most ever held; ``on_change(in_flight, waiting)``, when given, hears each change (the
    server's gauges). :meth:`resize` changes the bound (when the engine says its own).
    """

    def __init__(self, limit: int, on_change: Callable[[int, int], None] | None = None) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1 (got {limit})")
        self.limit = limit
        self.on_change = on_change
        self.in_flight = 0
        self.waiting = 0
        self.peak = 0
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()

    def __repr__(self) -> str:
        return f"SequenceGate({self.in_flight}/{self.limit}, waiting {self.waiting})"

    def resize(self, limit: int) -> None:
        """Set a new bound; waiters that now fit go at once."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1 (got {limit})")
        self.limit = limit
        self._wake()

    @contextlib.asynccontextmanager
    async def hold(self, sequences: int) -> AsyncIterator[Held]:
        """Hold ``sequences`` (at least 1, at most the bound) for the ``async with`` body,
        or until its :meth:`Held.release`, whichever comes first."""
        n = max(1, min(sequences, self.limit))
        await self._acquire(n)
        held = Held(self, n)
        try:
            yield held
        finally:
            held.release()

    async def _acquire(self, n: int) -> None:
        if not self._queue and self.in_flight + n <= self.limit:
            self._take(n)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (n, future)
        self._queue.append(entry)
        self.waiting += n
        self._changed()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(n)  # granted just as the caller left: give it back
            else:
                self._queue.remove(entry)
                self.waiting -= n
                self._wake()  # the head may have been this one, blocking others
                self._changed()
            raise

    def _take(self, n: int) -> None:
        self.in_flight += n
        self.peak = max(self.peak, self.in_flight)
        self._changed()

    def _release(self, n: int) -> None:
        self.in_flight -= n
        self._wake()
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.in_flight, self.waiting)

    def _wake(self) -> None:
        while self._queue:
            n, future = self._queue[0]
            if self.in_flight + min(n, self.limit) > self.limit and self.in_flight > 0:
                return
            self._queue.popleft()
            self.waiting -= n
            self._take(n)
            future.set_result(None)


class Held:
    """Sequences a :meth:`SequenceGate.hold` holds; :meth:`release` gives them back at
    once (the end of the ``async with`` then gives nothing back twice).

    >>> async def demo() -> list[int]:
    ...     gate = SequenceGate(4)
    ...     async with gate.hold(3) as held:
    ...         seen = [gate.in_flight]
    ...         held.release()
    ...         held.release()
    ...         seen.append(gate.in_flight)
    ...     return seen + [gate.in_flight]
    >>> asyncio.run(demo())
    [3, 0, 0]
    """

    __slots__ = ("_gate", "_sequences", "released")

    def __init__(self, gate: SequenceGate, sequences: int) -> None:
        self._gate = gate
        self._sequences = sequences
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._gate._release(self._sequences)


def sequence_bound(set_bound: int | None, reported: int | None, replicas: int) -> int:
    """The gate's bound for a model: ``set_bound``; else twice the engine's ``reported``
    capacity (summed over replicas); else :data:`DEFAULT_SEQUENCES` per replica.

    >>> sequence_bound(64, 256, 1), sequence_bound(None, 256, 1), sequence_bound(None, None, 2)
    (64, 512, 8192)
    """
    if set_bound is not None:
        return set_bound
    if reported is not None:
        return 2 * reported
    return DEFAULT_SEQUENCES * max(1, replicas)


async def engine_capacity(engines: Sequence[Any]) -> int | None:
    """The sequences ``engines`` (a model's replicas) say they run at once, summed; None
    when any of them does not say (an engine says through ``sequence_capacity()``)."""
    reads = []
    for engine in engines:
        read = getattr(engine, "sequence_capacity", None)
        if read is None:
            return None
        reads.append(read())
    found: list[int | None] = list(await asyncio.gather(*reads))
    counts = [value for value in found if isinstance(value, int)]
    return sum(counts) if found and len(counts) == len(found) else None
