"""Engine wrappers the server puts around its engines: replicas and metering.

:class:`~server.pool.replica_engine.ReplicaEngine`
routes calls over several replicas of one model: affinity by problem, least outstanding
requests, circuit breakers, health polling and failover. :class:`MeteredEngine` counts
every call, its latency and its tokens for Prometheus (and exports a wrapped
``ReplicaEngine``'s per-replica gauges). Both implement the
:class:`~scaffolds.engines.protocol.Engine` protocol, so a scaffold cannot tell.

>>> import asyncio
>>> from scaffolds.engines.protocol import GenerateRequest
>>> from scaffolds.engines.mock import MockEngine
>>> from server.telemetry.metrics import Metrics
>>> pool = ReplicaEngine([MockEngine(lambda r: "a"), MockEngine(lambda r: "b")])
>>> engine = MeteredEngine(pool, Metrics(), "m")
>>> [asyncio.run(engine.generate(GenerateRequest("hi"))).completions[0].text for _ in range(3)]
['a', 'b', 'a']
>>> [r["breaker"] for r in replica_status(engine)]
['closed', 'closed']
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from scaffolds.engines.factory import EngineOptions, engine_from_url
from scaffolds.engines.protocol import (
    Engine,
    GenerateRequest,
    GenerateResult,
    StreamItem,
    Usage,
    batch_engine,
)
from scaffolds.fanout import gather
from server.pool.replica_engine import ReplicaEngine, engine_health
from server.pool.sequences import SequenceGate, engine_capacity, run_key, sequence_bound

if TYPE_CHECKING:
    from server.model_settings import ModelConfig
    from server.settings import Settings
    from server.telemetry.metrics import Metrics

R = TypeVar("R")

STREAM_CLOSE_S = 5.0
"""The longest :meth:`MeteredEngine.metered_stream` waits, by default, for an engine
stream its consumer left to close (an HTTP engine's closes at once: its connection is
closed, not drained); past it the close is cancelled and logged."""

log = logging.getLogger("ponder.engine_calls")


def model_engine(config: ModelConfig, settings: Settings) -> Engine:
    """One served model's engine: each of its URLs through
    :func:`~scaffolds.engines.factory.engine_from_url`, behind a :class:`ReplicaEngine`
    when there are several.

    >>> from server.settings import Settings
    >>> settings = Settings(model="m", engines=("http://a/v1", "http://b/v1"))
    >>> model_engine(settings.served_models()[0], settings)
    ReplicaEngine(['http://a/v1', 'http://b/v1'])
    """
    key = config.engine_api_key.get_secret_value() if config.engine_api_key else None
    options = EngineOptions(
        model=config.served_engine_model,
        api_key=key,
        dialect=config.dialect,
        connect_timeout=settings.engine_connect_timeout_s,
        read_timeout=settings.engine_read_timeout_s,
        max_retries=settings.engine_max_retries,
        pool_shards=settings.engine_pool_shards,
        max_model_len=config.max_model_len,
    )
    replicas = [engine_from_url(url, options) for url in config.engines]
    if len(replicas) == 1:
        return replicas[0]
    return ReplicaEngine(
        replicas,
        failure_threshold=settings.engine_breaker_threshold,
        cooldown_s=settings.engine_breaker_cooldown_s,
        health_interval_s=settings.engine_health_interval_s,
        health_failures=settings.engine_health_failures,
        load_factor=settings.engine_load_factor,
    )


class MeteredEngine:
    """Counts calls, latency, tokens and outcomes of ``inner`` under the ``model`` label,
    and holds each call at ``gate`` until its sequences fit (:mod:`server.pool.sequences`),
    in the turn of the run's client key (:data:`~server.pool.sequences.run_key`).

    With ``max_sequences`` None the gate's bound is taken from the engine at
    :meth:`start` where it says its capacity (else it stays the default). ``close_s``
    bounds the close of a stream its consumer left (:meth:`metered_stream`)."""

    def __init__(
        self,
        inner: Engine,
        metrics: Metrics,
        model: str,
        *,
        max_sequences: int | None = None,
        close_s: float = STREAM_CLOSE_S,
    ):
        self.inner = inner
        self.close_s = close_s
        self.metrics = metrics
        self.model = model
        self.max_sequences = max_sequences
        in_flight = metrics.sequences_in_flight.labels(model=model)
        waiting = metrics.sequences_waiting.labels(model=model)

        def observe(held: int, queued: int) -> None:
            in_flight.set(held)
            waiting.set(queued)

        bound = sequence_bound(max_sequences, None, len(self.replicas))
        self.gate = SequenceGate(bound, on_change=observe)
        if isinstance(inner, ReplicaEngine):
            inner.bind_metrics(metrics, model)

    @property
    def replicas(self) -> list[Any]:
        """The engines behind this one (each replica's, or just ``inner``)."""
        if isinstance(self.inner, ReplicaEngine):
            return [r.engine for r in self.inner.replicas]
        return [self.inner]

    def __repr__(self) -> str:
        return f"MeteredEngine({self.inner!r})"

    def _record(self, started: float, outcome: str, result: GenerateResult | None) -> None:
        m = self.metrics
        m.engine_calls.labels(model=self.model, outcome=outcome).inc()
        log.debug("%s: an engine call recorded as %s", self.model, outcome)
        m.engine_latency.labels(model=self.model).observe(time.perf_counter() - started)
        if result is not None:
            m.prompt_tokens.labels(model=self.model).inc(result.usage.prompt_tokens)
            m.completion_tokens.labels(model=self.model).inc(result.usage.completion_tokens)

    @property
    def takes_prompt_lists(self) -> bool:
        return batch_engine(self.inner) is not None

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[GenerateResult]:
        """Several prompts as one call of the inner engine (one each where it cannot)."""
        inner = batch_engine(self.inner)
        if inner is None:
            return await gather(*(self.generate(r) for r in requests))
        results = await self.metered(
            lambda: inner.generate_batch(requests),
            sum(r.params.n for r in requests),
            lambda results: GenerateResult((), sum((r.usage for r in results), Usage())),
        )
        return results

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        return await self.metered(
            lambda: self.inner.generate(request), request.params.n, lambda result: result
        )

    async def metered(
        self,
        call: Callable[[], Awaitable[R]],
        sequences: int,
        usage_of: Callable[[R], GenerateResult],
    ) -> R:
        """Make one engine call once its ``sequences`` fit the gate, recording its
        outcome, latency (from when it left the gate) and tokens; a call cancelled while
        it waited never reached the engine and is not counted."""
        async with self.gate.hold(sequences, key=run_key.get()):
            started = time.perf_counter()
            try:
                result = await call()
            except asyncio.CancelledError:
                self._record(started, "cancelled", None)
                raise
            except Exception:
                self._record(started, "error", None)
                raise
        self._record(started, "ok", usage_of(result))
        return result

    def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        return self.metered_stream(
            lambda: self.inner.stream(request),
            request.params.n,
            lambda item: item if isinstance(item, GenerateResult) else None,
        )

    async def metered_stream(
        self,
        open_stream: Callable[[], AsyncIterator[R]],
        sequences: int,
        result_of: Callable[[R], GenerateResult | None],
    ) -> AsyncIterator[R]:
        """The items of one streamed engine call, opened once its ``sequences`` fit the
        gate and holding them until its last item, an error or the consumer closing it;
        recorded as :meth:`metered` does, with the usage of the item ``result_of`` says
        is its result (an error when none came).

        When the consumer leaves, the sequences are given back and the call recorded
        before the engine's stream is closed, and that close is given ``close_s`` at
        most: a leave frees what it held whatever the engine is doing. (A leave that
        lands while the engine's stream awaits its next item reaches that stream first:
        :class:`~scaffolds.engines.openai_http.OpenAIEngine`'s then closes its connection
        without waiting on the engine.)"""
        result: GenerateResult | None = None
        outcome = "cancelled"
        async with self.gate.hold(sequences, key=run_key.get()) as held:
            started = time.perf_counter()
            iterator = open_stream()
            try:
                async for item in iterator:
                    if (found := result_of(item)) is not None:
                        result = found
                    yield item
                outcome = "ok" if result is not None else "error"
            except asyncio.CancelledError:
                raise
            except Exception:
                outcome = "error"
                raise
            finally:
                if outcome == "cancelled":
                    log.debug("%s: the engine call's consumer left", self.model)
                held.release()
                self._record(started, outcome, result)
                await _aclose(iterator, self.model, self.close_s)

    async def health(self) -> bool:
        return await engine_health(self.inner)

    async def start(self) -> None:
        """Start the inner engine's background work; with no bound set, size the gate
        by what the engines say they run at once (unchanged when they do not say)."""
        await engine_start(self.inner)
        if self.max_sequences is None:
            reported = await engine_capacity(self.replicas)
            if reported is not None:
                self.gate.resize(sequence_bound(None, reported, len(self.replicas)))

    async def aclose(self) -> None:
        await engine_aclose(self.inner)


async def engine_start(engine: Any) -> None:
    """Call an engine's optional ``start()`` (background work such as health polls)."""
    start = getattr(engine, "start", None)
    if start is not None:
        await start()


def engine_leaves(engine: Any) -> list[Any]:
    """The engines that answer ``engine``'s calls: under its metering, each replica's."""
    if isinstance(engine, MeteredEngine):
        return engine_leaves(engine.inner)
    if isinstance(engine, ReplicaEngine):
        return [leaf for r in engine.replicas for leaf in engine_leaves(r.engine)]
    return [engine]


def replica_status(engine: Any) -> list[dict[str, Any]] | None:
    """The per-replica state of a (possibly wrapped) :class:`ReplicaEngine`, else None."""
    while engine is not None:
        if isinstance(engine, ReplicaEngine):
            return engine.status()
        engine = getattr(engine, "inner", None)
    return None


async def engine_aclose(engine: Any) -> None:
    """Call an engine's optional ``aclose()``."""
    close = getattr(engine, "aclose", None)
    if close is not None:
        await close()


async def _aclose(iterator: AsyncIterator[Any], model: str, within_s: float) -> None:
    """Close an engine stream, waiting ``within_s`` at most."""
    close = getattr(iterator, "aclose", None)
    if close is not None:
        try:
            async with asyncio.timeout(within_s):
                await close()
        except TimeoutError:
            log.warning("%s: an engine stream did not close in %g s", model, within_s)
            return
    log.debug("%s: the engine stream is closed", model)


__all__ = [
    "STREAM_CLOSE_S",
    "MeteredEngine",
    "engine_aclose",
    "engine_leaves",
    "engine_start",
    "model_engine",
    "replica_status",
]
