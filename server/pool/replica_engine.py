"""Several replicas of one model behind one :class:`~scaffolds.engines.protocol.Engine`.

:class:`ReplicaEngine` picks a replica for every call:

* **Affinity.** Calls that carry an ``affinity_key`` (every call of one scaffold run on
  one problem carries the same key) go to the replica that ranks first for that key by
  rendezvous hashing over the replicas that are up, so the run's shared prompt prefix
  stays warm in that replica's prefix cache. When a replica leaves or comes back, only
  the keys that ranked it first move.
* **Bounded load.** The preferred replica is skipped when taking the call would put it
  above ``load_factor`` times the mean outstanding calls per replica (rounded up); the
  call then goes to the least busy replica. Calls without a key always go to the least
  busy replica (ties rotate).
* **Passive health.** Failures that are the replica's fault (it could not be reached,
  answered 5xx after the engine's own retries, timed out, or sent garbage) count
  against it; ``failure_threshold`` of them in a row open its circuit breaker. After
  ``cooldown_s`` the breaker is half-open: one probe call goes through, and its outcome
  closes the breaker or opens it again. A refusal (4xx) proves the replica is alive.
* **Active health.** :meth:`ReplicaEngine.start` runs a background task that asks every
  replica's ``health()`` each ``health_interval_s`` seconds. ``health_failures`` failed
  checks in a row (one slow answer from a busy engine is not an outage) take the replica
  out of rotation and move the calls still waiting on it for a first answer to another
  replica that is up (an engine that died behind an open socket never fails them
  itself); with no other replica up they stay where they are, since moving them could
  only fail them. A passing check brings it back (and lets an open breaker try a probe
  at once).
* **Failover.** A call that fails on one replica before it produced anything is tried
  once more on another replica that is up. A stream that has already yielded is never
  restarted. When no replica is up the call fails at once with
  :class:`~scaffolds.errors.EngineUnavailableError` naming each replica's state.

>>> import asyncio
>>> from scaffolds.engines.protocol import GenerateRequest
>>> from scaffolds.engines.mock import MockEngine
>>> a, b = MockEngine(lambda r: "a"), MockEngine(lambda r: "b")
>>> pool = ReplicaEngine([a, b], names=["a", "b"])
>>> [asyncio.run(pool.generate(GenerateRequest("hi"))).completions[0].text for _ in range(3)]
['a', 'b', 'a']
>>> keyed = GenerateRequest("hi", affinity_key="problem-7")
>>> len({asyncio.run(pool.generate(keyed)).completions[0].text for _ in range(5)})
1
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from scaffolds.engines.protocol import (
    Engine,
    GenerateRequest,
    GenerateResult,
    StreamItem,
    batch_engine,
)
from scaffolds.errors import (
    EngineRejectedError,
    EngineUnavailableError,
)
from scaffolds.fanout import gather
from server.pool.breaker import CircuitBreaker
from server.pool.replica import Lease, Replica, is_replica_fault

if TYPE_CHECKING:
    from server.telemetry.metrics import Metrics

log = logging.getLogger("ponder.replicas")
T = TypeVar("T")


class ReplicaEngine:
    """Routes calls over ``replicas`` of one model (see the module docstring).

    ``names`` label the replicas in logs, errors, ``/ready`` and metrics (default: each
    engine's ``base_url``). ``health_interval_s`` of 0 disables the active check;
    ``health_failures`` is how many failed checks in a row take a replica out.
    ``clock`` is injectable for tests.
    """

    def __init__(
        self,
        replicas: Sequence[Engine],
        *,
        names: Sequence[str] | None = None,
        failure_threshold: int = 3,
        cooldown_s: float = 10.0,
        health_interval_s: float = 5.0,
        health_failures: int = 3,
        load_factor: float = 1.5,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not replicas:
            raise ValueError("ReplicaEngine needs at least one replica")
        if load_factor < 1.0:
            raise ValueError(f"load_factor must be >= 1 (got {load_factor})")
        if health_failures < 1:
            raise ValueError(f"health_failures must be >= 1 (got {health_failures})")
        if names is None:
            names = [
                str(getattr(engine, "base_url", None) or f"replica-{i}")
                for i, engine in enumerate(replicas)
            ]
        if len(names) != len(replicas) or len(set(names)) != len(names):
            raise ValueError("replica names must be unique, one per replica")
        self.replicas = tuple(
            Replica(
                i,
                name,
                engine,
                CircuitBreaker(
                    name, threshold=failure_threshold, cooldown_s=cooldown_s, clock=clock
                ),
            )
            for i, (name, engine) in enumerate(zip(names, replicas, strict=True))
        )
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.health_interval_s = health_interval_s
        self.health_failures = health_failures
        self.load_factor = load_factor
        self.clock = clock
        self._rotation = itertools.count()
        self._poller: asyncio.Task[None] | None = None
        self._metrics: Metrics | None = None
        self._model = ""

    def __repr__(self) -> str:
        return f"ReplicaEngine({[r.name for r in self.replicas]!r})"

    # -- choosing a replica ------------------------------------------------------------
    def available(self, exclude: frozenset[int] = frozenset()) -> list[Replica]:
        """The replicas that may take a call now (healthy, and their breaker admits)."""
        return [
            r for r in self.replicas if r.index not in exclude and r.healthy and r.breaker.admits()
        ]

    def pick(self, request: GenerateRequest, exclude: frozenset[int] = frozenset()) -> Replica:
        """The replica for ``request`` (see the module docstring); raises when none is up."""
        candidates = self.available(exclude)
        if not candidates:
            raise self._unavailable(exclude)
        key = request.affinity_key
        if key is not None:
            ranked = sorted(candidates, key=lambda r: _score(key, r.name), reverse=True)
            first = ranked[0]
            total = sum(r.outstanding for r in candidates) + 1
            capacity = math.ceil(self.load_factor * total / len(candidates))
            if first.outstanding + 1 <= capacity:
                return first
            # Over its bound: the least busy replica, in the key's own order on ties.
            return min(ranked, key=lambda r: r.outstanding)
        start = next(self._rotation) % len(candidates)
        rotated = candidates[start:] + candidates[:start]
        return min(rotated, key=lambda r: r.outstanding)

    def _unavailable(self, exclude: frozenset[int]) -> EngineUnavailableError:
        states = []
        for r in self.replicas:
            if r.index in exclude:
                why = "failed this call"
            elif not r.healthy:
                why = "failed its health check"
            elif r.breaker.state == "open":
                left, failures = r.breaker.retry_in_s(), r.breaker.failures
                why = f"circuit open after {failures} consecutive failures, retry in {left:.1f}s"
            else:
                why = "a probe call is in flight"
            states.append(f"{r.name} ({why})")
        model = f" of {self._model}" if self._model else ""
        return EngineUnavailableError(f"no engine replica{model} is available: {'; '.join(states)}")

    # -- outcomes ----------------------------------------------------------------------
    def _retried(self) -> None:
        if self._metrics is not None:
            self._metrics.replica_retries.labels(model=self._model).inc()

    # -- Engine protocol ---------------------------------------------------------------
    def _settle_failure(
        self, lease: Lease, exc: BaseException, tried: frozenset[int], produced: bool
    ) -> BaseException | None:
        """Record a failed call; return the error to raise, or None to try another replica."""
        if lease.evicted and isinstance(exc, asyncio.CancelledError) and not _cancelling():
            exc = EngineUnavailableError(
                f"engine replica {lease.replica.name} failed its health check during the call"
            )
        if not is_replica_fault(exc):
            lease.finish("ok" if isinstance(exc, EngineRejectedError) else "neutral")
            return exc
        lease.finish("fail", str(exc))
        if produced or len(tried) > 1 or not self.available(tried):
            return exc
        log.warning("replica %s failed (%s); trying another", lease.replica.name, exc)
        self._retried()
        return None

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        return await self._routed(request, lambda engine: engine.generate(request))

    @property
    def takes_prompt_lists(self) -> bool:
        return all(batch_engine(r.engine) is not None for r in self.replicas)

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        """The requests as one call on one replica (chosen by the first's affinity)."""

        async def batch(engine: Engine) -> list[GenerateResult]:
            lists = batch_engine(engine)
            if lists is None:
                return await gather(*(engine.generate(r) for r in requests))
            return await lists.generate_batch(requests)

        return await self._routed(requests[0], batch)

    async def _routed(self, request: GenerateRequest, call: Callable[[Engine], Awaitable[T]]) -> T:
        """``call`` on the replica picked for ``request``, failing over as the module says."""
        tried: frozenset[int] = frozenset()
        while True:
            lease = self.pick(request, tried).lease()
            tried |= {lease.replica.index}
            # In a task of its own, so the health poll can pull it off a silent replica.
            call_task = asyncio.ensure_future(call(lease.replica.engine))
            lease.silent = call_task
            try:
                result = await call_task
            except BaseException as exc:
                error = self._settle_failure(lease, exc, tried, produced=False)
                if error is None:
                    continue
                if error is exc:
                    raise
                raise error from exc
            lease.finish("ok")
            return result

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        return self.routed_stream(request, lambda engine: engine.stream(request))

    async def routed_stream(
        self, request: GenerateRequest, open_stream: Callable[[Engine], AsyncIterator[T]]
    ) -> AsyncIterator[T]:
        """The items of ``open_stream`` on the replica picked for ``request``, failing
        over until the first item (as the module says). The call's lease, which the
        least-busy choice and the breaker count, is held until the last item, an error,
        or the consumer closing the stream."""
        tried: frozenset[int] = frozenset()
        while True:
            lease = self.pick(request, tried).lease()
            tried |= {lease.replica.index}
            produced = False
            iterator = open_stream(lease.replica.engine)
            try:
                # The wait for the first item runs in a task the health poll may cancel;
                # once anything came back the call stays where it is.
                first = asyncio.ensure_future(_first(iterator))
                lease.silent = first
                item = await first
                lease.silent = None
                if item is not _END:
                    produced = True
                    yield item
                    async for item in iterator:
                        yield item
            except BaseException as exc:
                error = self._settle_failure(lease, exc, tried, produced)
                if error is None:
                    continue
                if error is exc:
                    raise
                raise error from exc
            else:
                lease.finish("ok")
                return
            finally:
                if lease.silent is not None and not lease.silent.done():
                    lease.silent.cancel()
                lease.finish("neutral")  # a no-op unless nothing above settled it
                await _aclose(iterator)

    # -- health ------------------------------------------------------------------------
    async def check_health(self) -> None:
        """Ask every replica's ``health()`` once and mark each up or down (the poll).

        A replica goes down after ``health_failures`` failed checks in a row; its calls
        still waiting for a first answer then move, where another replica is up. A
        passing check brings it back and ends an open breaker's cooldown, so the next
        call probes it.
        """
        results = await asyncio.gather(*(engine_health(r.engine) for r in self.replicas))
        for replica, ok in zip(self.replicas, results, strict=True):
            replica.failed_checks = 0 if ok else replica.failed_checks + 1
            if ok:
                if not replica.healthy:
                    log.info("replica %s: health check passed, back in rotation", replica.name)
                replica.healthy = True
                replica.breaker.end_cooldown()  # an open breaker probes on the next call
            elif replica.failed_checks >= self.health_failures and replica.healthy:
                log.warning(
                    "replica %s: %d health checks failed in a row, out of rotation",
                    replica.name,
                    replica.failed_checks,
                )
                replica.healthy = False
        for replica in self.replicas:
            if replica.healthy or not replica.leases:
                continue
            if not self.available(frozenset({replica.index})):
                continue  # nowhere to move them: a call that stays may yet be answered
            for lease in list(replica.leases):
                lease.evict()

    async def health(self) -> bool:
        """True when some replica passes a health check now and its breaker lets calls in.

        A read-only check (for ``/ready``): routing state changes only through calls and
        the poll.
        """
        results = await asyncio.gather(*(engine_health(r.engine) for r in self.replicas))
        return any(ok and r.breaker.cooled() for r, ok in zip(self.replicas, results, strict=True))

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval_s)
            try:
                await self.check_health()
            except Exception:  # never let the poller die
                log.exception("replica health poll failed")

    async def start(self) -> None:
        """Start the active health poll (no-op when the interval is 0 or it runs)."""
        if self.health_interval_s > 0 and self._poller is None:
            self._poller = asyncio.create_task(self._poll(), name="ponder-replica-health")

    async def stop(self) -> None:
        """Stop the health poll."""
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller

    async def aclose(self) -> None:
        await self.stop()
        for replica in self.replicas:
            close = getattr(replica.engine, "aclose", None)
            if close is not None:
                await close()

    # -- state and metrics -------------------------------------------------------------
    def status(self) -> list[dict[str, Any]]:
        """Each replica's state, for ``/ready``."""
        return [r.describe() for r in self.replicas]

    def bind_metrics(self, metrics: Metrics, model: str) -> None:
        """Export per-replica gauges (read at scrape time) under the ``model`` label."""
        self._metrics, self._model = metrics, model
        for r in self.replicas:
            labels = {"model": model, "replica": r.name}
            metrics.replica_up.labels(**labels).set_function(r.up_value)
            metrics.replica_outstanding.labels(**labels).set_function(r.outstanding_value)
            metrics.replica_breaker.labels(**labels).set_function(r.breaker_value)


_END: Any = object()


async def _first(iterator: AsyncIterator[Any]) -> Any:
    """The first item of ``iterator``, or ``_END`` when it is empty."""
    try:
        return await anext(iterator)
    except StopAsyncIteration:
        return _END


def _cancelling() -> bool:
    """Whether the current task itself is being cancelled (not just a call it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _score(key: str, name: str) -> int:
    """Rendezvous score of a replica for a key (stable across processes)."""
    digest = hashlib.blake2b(f"{key}\x00{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


async def engine_health(engine: Any) -> bool:
    """Ask an engine's optional ``health()``; engines without one count as healthy."""
    check = getattr(engine, "health", None)
    if check is None:
        return True
    try:
        return bool(await check())
    except Exception:
        return False


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


__all__ = ["ReplicaEngine"]
