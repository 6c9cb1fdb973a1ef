"""Admission: a bounded run queue in front of the runs, fair across client keys.

:class:`RunLimiter` lets ``max_running`` scaffold runs execute at once and up to
``queue_size`` more wait; past that a request is refused at once with 429 (and a
``Retry-After``), so overload never turns into unbounded latency. It bounds Ponder's own
memory (1024 runs and 4096 waiting by default, a harness's whole concurrency); what
reaches an engine is bounded per model by sequences in flight
(:mod:`server.pool.sequences`), the engine's own unit of cost.

The runs waiting for a slot wait in one queue per client key, and a freed slot goes to
the waiting key with the fewest runs executing, the one served longest ago among equals
(round robin): one key's thousand queued runs do not starve another key's single
request, which takes the next free slot unless a key with fewer runs executing waits.

Before it queues, a request is held to its key's own limits (:mod:`server.runs.quotas`:
runs at once, requests per minute, a token quota with something left).

>>> limiter = RunLimiter(max_running=1, queue_size=0)
>>> slot = limiter.admit()
>>> try:
...     limiter.admit()
... except OverloadedError as err:
...     err.retry_after
1
>>> slot.release(); limiter.admitted
0

A few slots are kept for the other keys: ``reserved`` of them (``--reserved-runs``, 1 by
default), so that no key executes more than ``max_running - reserved`` runs at once and
the last free slots never go to a key that holds almost all of them. A flooding key's
runs past that wait in its queue (one of its own runs that ends lets the next go), and
another key's request takes a reserved slot at once instead of waiting for one of the
flood's runs to end. The reserve holds from the moment a second key is admitted: until
then no other key has asked, so a lone key uses every slot: with no keys configured
(every request :data:`~server.keys.ANONYMOUS`'s) or one, it always does. The price:
once two keys have asked, a key alone executes at most ``max_running - reserved`` runs
(1,023 of 1,024 at the defaults), and a second key's very first request may still wait
for one of the flood's runs. The reserve is never all the slots (at most
``max_running - 1``).

>>> from server.keys import ClientKey
>>> a, b = ClientKey("a", "team-a"), ClientKey("b", "team-b")
>>> async def grants():
...     limiter = RunLimiter(max_running=3, queue_size=10, reserved=1)
...     limiter.admit(b).release()  # b has asked once: the reserve holds
...     floods = [limiter.admit(a) for _ in range(3)]
...     for slot in floods[:2]:
...         await slot.acquire()  # a takes two of three slots
...     third = asyncio.create_task(floods[2].acquire())
...     await asyncio.sleep(0)  # a's third waits: the last slot is kept for another key
...     probe = limiter.admit(b)
...     at_once = probe.free  # b takes it without waiting
...     await probe.acquire()
...     floods[0].release()  # a's own freed slot lets its third run go
...     await third
...     return at_once, limiter.running
>>> asyncio.run(grants())
(True, 3)

A lone key (here :data:`~server.keys.ANONYMOUS`, as with auth off) runs three:

>>> async def alone():
...     limiter = RunLimiter(max_running=3, queue_size=10, reserved=1)
...     for slot in [limiter.admit() for _ in range(3)]:
...         await slot.acquire()
...     return limiter.running
>>> asyncio.run(alone())
3
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

from server.errors import OverloadedError
from server.keys import ANONYMOUS, ClientKey
from server.runs.quotas import KeyQuotas

if TYPE_CHECKING:
    from server.telemetry.metrics import Metrics

__all__ = ["RunLimiter", "RunSlot"]


class RunSlot:
    """One admitted request: wait for a run slot with :meth:`acquire`, always :meth:`release`."""

    def __init__(self, limiter: RunLimiter, key: ClientKey):
        self._limiter = limiter
        self.key = key
        self._running = False
        self._released = False

    @property
    def free(self) -> bool:
        """Whether :meth:`acquire` would take a run slot at once, without waiting."""
        return self._limiter.free_for(self.key.name)

    async def acquire(self) -> None:
        """Take a run slot: at once when one is free for this key and no waiting key may
        take it, else in turn from this key's queue (round robin across the keys that
        wait)."""
        limiter = self._limiter
        if limiter.free_for(self.key.name):
            limiter.start(self.key.name)
        else:
            await limiter.wait_turn(self.key.name)
        self._running = True
        if limiter.metrics is not None:
            limiter.metrics.runs_in_flight.inc()

    def release(self) -> None:
        """Give the slot back (idempotent)."""
        if self._released:
            return
        self._released = True
        self._limiter.leave(self.key.name)
        if self._running:
            self._running = False
            self._limiter.hand_on(self.key.name)
            if self._limiter.metrics is not None:
                self._limiter.metrics.runs_in_flight.dec()

    async def __aenter__(self) -> RunSlot:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class RunLimiter:
    """At most ``max_running`` runs at once, ``queue_size`` waiting; others get 429. Once
    two keys have asked, one key executes at most ``max_running - reserved`` runs.

    A freed slot goes to the waiting keys in turn (``a`` was served last, so ``b`` first):

    >>> async def order():
    ...     limiter = RunLimiter(max_running=1, queue_size=10)
    ...     a, b = ClientKey("a", "a"), ClientKey("b", "b")
    ...     first = limiter.admit(a)
    ...     await first.acquire()
    ...     slots = [limiter.admit(k) for k in (a, a, a, b)]
    ...     started = []
    ...     async def run(slot):
    ...         await slot.acquire()
    ...         started.append(slot.key.name)
    ...         slot.release()
    ...     tasks = [asyncio.create_task(run(s)) for s in slots]
    ...     await asyncio.sleep(0)
    ...     first.release()
    ...     await asyncio.gather(*tasks)
    ...     return started
    >>> asyncio.run(order())
    ['b', 'a', 'a', 'a']
    """

    def __init__(
        self,
        max_running: int,
        queue_size: int,
        metrics: Metrics | None = None,
        quotas: KeyQuotas | None = None,
        reserved: int = 0,
    ):
        self.max_running = max_running
        self.queue_size = queue_size
        self.reserved = max(0, min(reserved, max_running - 1))
        """Slots no one key may take once two keys have asked (never all of them)."""
        self.shared = False
        """Whether a second key has asked (from then on the reserve holds)."""
        self._first_key: str | None = None
        self.metrics = metrics
        self.quotas = quotas or KeyQuotas()
        self.admitted = 0
        """Requests holding a place, running or waiting."""
        self.running = 0
        self._by_key: dict[str, int] = {}
        """Places held per key name (none held: absent)."""
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        """Each waiting key's queue, in the order the keys began to wait."""
        self._running_by: dict[str, int] = {}
        """Runs executing per key name (none: absent)."""
        self._served: dict[str, int] = {}
        """Per key name, when it last got a run slot (a tick of :attr:`_ticks`)."""
        self._ticks = 0

    @property
    def share(self) -> int:
        """The most runs one key may execute at once: all but the reserved slots once two
        keys have asked, else all of them."""
        return self.max_running - self.reserved if self.shared else self.max_running

    def _may_start(self, name: str) -> bool:
        """Whether a slot is free and key ``name`` is under its :attr:`share`."""
        return self.running < self.max_running and self._running_by.get(name, 0) < self.share

    def free_for(self, name: str) -> bool:
        """Whether a run of key ``name`` would take a slot at once: one is free for it and
        no waiting key may take it first (one at its share waits for a slot of its own)."""
        return self._may_start(name) and not any(self._may_start(k) for k in self._waiting)

    @property
    def waiting(self) -> int:
        return sum(len(queue) for queue in self._waiting.values())

    def held_by(self, key: ClientKey) -> int:
        """Places (running or waiting) ``key`` holds."""
        return self._by_key.get(key.name, 0)

    def admit(self, key: ClientKey = ANONYMOUS) -> RunSlot:
        """Reserve a place (running or queued) for a request of ``key``, or raise: the
        key's own limits first (:class:`~server.errors.KeyLimitError`, 429), then the
        server's (:class:`OverloadedError`, 429). A second key that asks, admitted or not,
        turns the reserve on (:attr:`shared`)."""
        if not self.shared:
            if self._first_key is None:
                self._first_key = key.name
            self.shared = key.name != self._first_key
        self.quotas.check(key, self.held_by(key))
        if self.admitted >= self.max_running + self.queue_size:
            waiting = max(0, self.admitted - self.max_running)
            retry_after = 1 + waiting // max(1, self.max_running)
            raise OverloadedError(
                f"the server is busy ({self.max_running} runs executing, "
                f"{waiting} queued); retry later",
                retry_after=retry_after,
            )
        self.quotas.count_request(key)
        self.admitted += 1
        self._by_key[key.name] = self.held_by(key) + 1
        return RunSlot(self, key)

    async def wait_turn(self, name: str) -> None:
        """Wait in key ``name``'s queue until :meth:`hand_on` gives it a slot."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(name, deque()).append(future)
        if self.metrics is not None:
            self.metrics.runs_queued.inc()  # counted as queued while it waits
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # handed a slot as it was cancelled
                self.hand_on(name)
            else:
                queue = self._waiting.get(name)
                if queue is not None and future in queue:
                    queue.remove(future)
                    if not queue:
                        del self._waiting[name]
            raise
        finally:
            if self.metrics is not None:
                self.metrics.runs_queued.dec()

    def start(self, name: str) -> None:
        """Key ``name`` takes a run slot."""
        self.running += 1
        self._running_by[name] = self._running_by.get(name, 0) + 1
        self._ticks += 1
        self._served[name] = self._ticks

    def hand_on(self, name: str) -> None:
        """Key ``name``'s run gave its slot back: give it to the waiting key with the
        fewest runs executing, the one served longest ago among equals, of those under
        their :attr:`share`, or leave it free (kept for another key when every waiting key
        is at its share: one of theirs that ends lets the next of theirs go)."""
        self.running -= 1
        left = self._running_by.get(name, 0) - 1
        if left > 0:
            self._running_by[name] = left
        else:
            self._running_by.pop(name, None)
            if name not in self._waiting:
                self._served.pop(name, None)  # nothing of the key left to remember
        while ready := [k for k in self._waiting if self._may_start(k)]:
            turn = min(ready, key=lambda k: (self._running_by.get(k, 0), self._served.get(k, 0)))
            queue = self._waiting[turn]
            future = queue.popleft()
            if not queue:
                del self._waiting[turn]
            if not future.done():
                self.start(turn)
                future.set_result(None)

    def leave(self, name: str) -> None:
        """A request of key ``name`` gave its place back."""
        self.admitted -= 1
        held = self._by_key.get(name, 0) - 1
        if held > 0:
            self._by_key[name] = held
        else:
            self._by_key.pop(name, None)
