"""Engine wrappers the server puts around its engines: replicas and metering.

:class:`ReplicaEngine` spreads calls over several replicas of one model (round-robin,
moving on to the next replica when one is unreachable before it produced anything).
:class:`MeteredEngine` counts every call, its latency and its tokens for Prometheus.
Both implement the :class:`~scaffolds.engine.Engine` protocol, so a scaffold cannot tell.

>>> import asyncio
>>> from scaffolds.engine import GenerateRequest
>>> from scaffolds.engines.mock import MockEngine
>>> a, b = MockEngine(lambda r: "a"), MockEngine(lambda r: "b")
>>> pool = ReplicaEngine([a, b])
>>> [asyncio.run(pool.generate(GenerateRequest("hi"))).completions[0].text for _ in range(3)]
['a', 'b', 'a']
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from scaffolds.engine import Engine, GenerateRequest, GenerateResult, StreamItem
from scaffolds.errors import EngineUnavailableError

if TYPE_CHECKING:
    from server.metrics import Metrics


class ReplicaEngine:
    """Round-robin over ``replicas``; an unreachable replica passes the call on.

    Failover happens only for :class:`EngineUnavailableError` raised before any output
    (a stream that already yielded text is never restarted elsewhere).
    """

    def __init__(self, replicas: Sequence[Engine]):
        if not replicas:
            raise ValueError("ReplicaEngine needs at least one replica")
        self.replicas = tuple(replicas)
        self._next = itertools.count()

    def __repr__(self) -> str:
        return f"ReplicaEngine({list(self.replicas)!r})"

    def _order(self) -> list[Engine]:
        start = next(self._next) % len(self.replicas)
        return [*self.replicas[start:], *self.replicas[:start]]

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        order = self._order()
        for i, replica in enumerate(order):
            try:
                return await replica.generate(request)
            except EngineUnavailableError:
                if i == len(order) - 1:
                    raise
        raise AssertionError("unreachable")

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        order = self._order()
        for i, replica in enumerate(order):
            produced = False
            iterator = replica.stream(request)
            try:
                async for item in iterator:
                    produced = True
                    yield item
                return
            except EngineUnavailableError:
                if produced or i == len(order) - 1:
                    raise
            finally:
                await _aclose(iterator)

    async def health(self) -> bool:
        """True when at least one replica answers."""
        results = await asyncio.gather(*(engine_health(r) for r in self.replicas))
        return any(results)

    async def aclose(self) -> None:
        for replica in self.replicas:
            await engine_aclose(replica)


class MeteredEngine:
    """Counts calls, latency, tokens and outcomes of ``inner`` under the ``model`` label."""

    def __init__(self, inner: Engine, metrics: Metrics, model: str):
        self.inner = inner
        self.metrics = metrics
        self.model = model

    def __repr__(self) -> str:
        return f"MeteredEngine({self.inner!r})"

    def _record(self, started: float, outcome: str, result: GenerateResult | None) -> None:
        m = self.metrics
        m.engine_calls.labels(model=self.model, outcome=outcome).inc()
        m.engine_latency.labels(model=self.model).observe(time.perf_counter() - started)
        if result is not None:
            m.prompt_tokens.labels(model=self.model).inc(result.usage.prompt_tokens)
            m.completion_tokens.labels(model=self.model).inc(result.usage.completion_tokens)

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        started = time.perf_counter()
        try:
            result = await self.inner.generate(request)
        except asyncio.CancelledError:
            self._record(started, "cancelled", None)
            raise
        except Exception:
            self._record(started, "error", None)
            raise
        self._record(started, "ok", result)
        return result

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        started = time.perf_counter()
        result: GenerateResult | None = None
        outcome = "cancelled"
        iterator = self.inner.stream(request)
        try:
            async for item in iterator:
                if isinstance(item, GenerateResult):
                    result = item
                yield item
            outcome = "ok" if result is not None else "error"
        except asyncio.CancelledError:
            raise
        except Exception:
            outcome = "error"
            raise
        finally:
            await _aclose(iterator)
            self._record(started, outcome, result)

    async def health(self) -> bool:
        return await engine_health(self.inner)

    async def aclose(self) -> None:
        await engine_aclose(self.inner)


async def engine_health(engine: Any) -> bool:
    """Ask an engine's optional ``health()``; engines without one count as healthy."""
    check = getattr(engine, "health", None)
    if check is None:
        return True
    try:
        return bool(await check())
    except Exception:
        return False


async def engine_aclose(engine: Any) -> None:
    """Call an engine's optional ``aclose()``."""
    close = getattr(engine, "aclose", None)
    if close is not None:
        await close()


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


__all__ = ["MeteredEngine", "ReplicaEngine", "engine_aclose", "engine_health"]
