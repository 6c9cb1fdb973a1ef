"""Admission at the engine: at most so many sequences in flight per served model.

What a scaffold run costs the engine is sequences (samples): ``majority(k=8)`` is one
call of eight, ``rsa(n=8)``'s rounds are eight calls of one. :class:`SequenceGate` holds
each engine call until its ``n`` sequences fit under the bound, and gives them back when
the call ends, however it ends. The calls of one client key go first come first served;
across keys, the waiting key with the fewest sequences in flight goes next, so one key's
flood does not starve another key's call; a wide call is never overtaken forever by
narrow ones (the rule: :class:`SequenceGate`). A call wider than the whole bound goes
alone.

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
import contextvars
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

__all__ = [
    "DEFAULT_SEQUENCES",
    "Held",
    "SequenceGate",
    "engine_capacity",
    "run_key",
    "sequence_bound",
]

DEFAULT_SEQUENCES = 4096
"""Sequences in flight per engine replica when neither the user nor the engine says:
four times vLLM's default batch on a large GPU (``max_num_seqs`` 1024; 256 on smaller
ones), so a GPU engine is never starved by Ponder, while Ponder's own memory and
connections stay bounded."""

run_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("ponder_run_key", default=None)
"""The name of the client key whose run is making engine calls (the serving layer sets it
for each run, and the run's tasks inherit it); None outside a run. The metered engine
(:mod:`server.pool.metered`) waits at the gate under it."""


class _Waiter:
    """One call waiting at the gate: its sequences, its key, when it came, its grant."""

    __slots__ = ("arrival", "future", "key", "sequences")

    def __init__(self, sequences: int, key: str | None, arrival: int) -> None:
        self.sequences = sequences
        self.key = key
        self.arrival = arrival
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class SequenceGate:
    """At most ``limit`` sequences held at once; waiters are served fairly across keys,
    in arrival order within a key.

    ``in_flight`` and ``waiting`` are the sequences held and waiting now; ``peak`` the
    most ever held; ``on_change(in_flight, waiting)``, when given, hears each change (the
    server's gauges). :meth:`resize` changes the bound (when the engine says its own).

    Each call may name a ``key`` (the run's client key: :data:`run_key`); calls of one
    key wait in one first-in first-out queue. When sequences free, the next call
    considered is the head of the waiting key with the fewest sequences in flight (among
    equals, the key whose head came first); it goes if it fits, and if it does not,
    nothing goes until it does. So one key's thousand waiting calls hold up another
    key's single call by at most what is already in flight, and a wide call is never
    overtaken forever: its key's sequences in flight only fall while it waits, others
    pass it only while they hold fewer, and once it is the one considered it blocks all
    the rest. Calls of one key (every call where no keys are configured) are served in
    arrival order, as one queue, exactly as before keys.

    Key ``a`` holds both sequences and queues three more calls; ``b``'s call, queued
    last, goes first as one of ``a``'s ends (``a`` still holds one, ``b`` none):

    >>> async def order() -> list[object]:
    ...     gate = SequenceGate(2)
    ...     granted = []
    ...     async def call(key: str, pause: float) -> None:
    ...         async with gate.hold(1, key=key):
    ...             granted.append(key)
    ...             await asyncio.sleep(pause)
    ...     running = [asyncio.create_task(call("a", p)) for p in (0.01, 0.05)]
    ...     await asyncio.sleep(0)
    ...     queued = [asyncio.create_task(call(k, 0.01)) for k in ("a", "a", "a", "b")]
    ...     await asyncio.sleep(0)
    ...     waiting = gate.waiting_by_key()
    ...     await asyncio.gather(*running, *queued)
    ...     return [granted[2:], waiting]
    >>> asyncio.run(order())
    [['b', 'a', 'a', 'a'], {'a': 3, 'b': 1}]
    """

    def __init__(self, limit: int, on_change: Callable[[int, int], None] | None = None) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1 (got {limit})")
        self.limit = limit
        self.on_change = on_change
        self.in_flight = 0
        self.waiting = 0
        self.peak = 0
        self._queues: dict[str | None, deque[_Waiter]] = {}
        """Each waiting key's calls, in arrival order (a key with none waiting: absent)."""
        self._held_by: dict[str | None, int] = {}
        """Sequences in flight per key (none: absent)."""
        self._arrivals = 0

    def __repr__(self) -> str:
        return f"SequenceGate({self.in_flight}/{self.limit}, waiting {self.waiting})"

    def waiting_by_key(self) -> dict[str | None, int]:
        """The sequences waiting now, per key that has any waiting."""
        return {key: sum(w.sequences for w in queue) for key, queue in self._queues.items()}

    def held_by(self, key: str | None) -> int:
        """The sequences ``key``'s calls hold now."""
        return self._held_by.get(key, 0)

    def resize(self, limit: int) -> None:
        """Set a new bound; waiters that now fit go at once."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1 (got {limit})")
        self.limit = limit
        self._wake()

    @contextlib.asynccontextmanager
    async def hold(self, sequences: int, key: str | None = None) -> AsyncIterator[Held]:
        """Hold ``sequences`` (at least 1, at most the bound) for the ``async with`` body,
        or until its :meth:`Held.release`, whichever comes first; ``key`` is whose call
        it is (its turn among the keys waiting)."""
        n = max(1, min(sequences, self.limit))
        await self._acquire(n, key)
        held = Held(self, n, key)
        try:
            yield held
        finally:
            held.release()

    async def _acquire(self, n: int, key: str | None) -> None:
        if not self._queues and self.in_flight + n <= self.limit:
            self._take(n, key)
            return
        self._arrivals += 1
        waiter = _Waiter(n, key, self._arrivals)
        self._queues.setdefault(key, deque()).append(waiter)
        self.waiting += n
        self._wake()  # its key may be the one to go next, and fit
        self._changed()
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release(n, key)  # granted just as the caller left: give it back
            elif self._unqueue(waiter):
                self._wake()  # the one considered next may have been this one
                self._changed()
            raise

    def _unqueue(self, waiter: _Waiter) -> bool:
        """Take ``waiter`` out of its key's queue; whether it was there."""
        queue = self._queues.get(waiter.key)
        if queue is None or waiter not in queue:
            return False
        queue.remove(waiter)
        if not queue:
            del self._queues[waiter.key]
        self.waiting -= waiter.sequences
        return True

    def _take(self, n: int, key: str | None) -> None:
        self.in_flight += n
        self._held_by[key] = self._held_by.get(key, 0) + n
        self.peak = max(self.peak, self.in_flight)
        self._changed()

    def _release(self, n: int, key: str | None) -> None:
        self.in_flight -= n
        left = self._held_by.get(key, 0) - n
        if left > 0:
            self._held_by[key] = left
        else:
            self._held_by.pop(key, None)
        self._wake()
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.in_flight, self.waiting)

    def _next(self) -> str | None:
        """The waiting key whose head is considered next: fewest sequences in flight,
        then the earliest head."""
        return min(
            self._queues,
            key=lambda k: (self._held_by.get(k, 0), self._queues[k][0].arrival),
        )

    def _wake(self) -> None:
        while self._queues:
            key = self._next()
            waiter = self._queues[key][0]
            if waiter.future.done():  # its caller left (its own cleanup is still to run)
                self._unqueue(waiter)
                continue
            n = waiter.sequences
            if self.in_flight + min(n, self.limit) > self.limit and self.in_flight > 0:
                return
            self._unqueue(waiter)
            self._take(n, key)
            waiter.future.set_result(None)


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

    __slots__ = ("_gate", "_key", "_sequences", "released")

    def __init__(self, gate: SequenceGate, sequences: int, key: str | None = None) -> None:
        self._gate = gate
        self._sequences = sequences
        self._key = key
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._gate._release(self._sequences, self._key)


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
