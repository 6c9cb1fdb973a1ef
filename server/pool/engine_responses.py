"""A served model's engine's own ``/v1/responses``, through the same layers as its other
calls: the replica choice, failover and breakers of
:class:`~server.pool.replica_engine.ReplicaEngine`, and the metering of
:class:`~server.pool.metered.MeteredEngine` (calls, latency, tokens).

:class:`EngineResponses` also remembers whether the engine has the API: with the model's
``responses_api`` ``"auto"``, the first call answered 404 or 405 marks it absent (every
later request is built on chat completions); ``"on"`` never marks it; ``"off"`` is never
built (:func:`engine_responses` is None then, as for an engine that is not HTTP).

>>> from scaffolds.engines.mock import MockEngine
>>> engine_responses(MockEngine(lambda r: "4"), "auto") is None
True
>>> from scaffolds.engines.openai_http import OpenAIEngine
>>> engine_responses(OpenAIEngine("http://e/v1", "m"), "off") is None
True
>>> calls = engine_responses(OpenAIEngine("http://e/v1", "m"), "auto")
>>> calls.usable, calls.absent(EngineRejectedError("no route", status=404)), calls.usable
(True, True, False)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any

from scaffolds.core.errors import EngineRejectedError
from scaffolds.engines.openai_responses import (
    TERMINAL_EVENTS,
    create_response,
    responses_capable,
    stream_response,
)
from scaffolds.engines.protocol import Engine, GenerateRequest, GenerateResult, Usage
from server.pool.metered import MeteredEngine
from server.pool.replica_engine import ReplicaEngine

__all__ = ["EngineResponses", "engine_responses", "responses_usage"]

_ANY = GenerateRequest("")
"""What a replica is picked for: no affinity (the least busy replica)."""


def _leaves(engine: Any) -> list[Any]:
    if isinstance(engine, MeteredEngine):
        return _leaves(engine.inner)
    if isinstance(engine, ReplicaEngine):
        return [leaf for r in engine.replicas for leaf in _leaves(r.engine)]
    return [engine]


def engine_responses(engine: Engine, mode: str) -> EngineResponses | None:
    """The Responses calls of ``engine`` (its metered, replicated form), or None when
    ``mode`` is ``"off"`` or some replica is not an HTTP engine."""
    if mode == "off" or not all(responses_capable(leaf) for leaf in _leaves(engine)):
        return None
    return EngineResponses(engine, mode)


def responses_usage(body: dict[str, Any] | None) -> Usage:
    """A Responses ``usage`` as Ponder's :class:`Usage` of one call.

    >>> responses_usage({"usage": {"input_tokens": 5, "output_tokens": 7,
    ...                            "input_tokens_details": {"cached_tokens": 2}}})
    Usage(prompt_tokens=5, completion_tokens=7, cached_tokens=2, calls=1, reasoning_tokens=0)
    """
    usage = (body or {}).get("usage") or {}
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
    thought = (usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0
    return Usage(
        prompt_tokens=int(usage.get("input_tokens") or 0),
        completion_tokens=int(usage.get("output_tokens") or 0),
        cached_tokens=int(cached),
        calls=1,
        reasoning_tokens=int(thought),
    )


class EngineResponses:
    """One served model's engine Responses calls (see the module docstring)."""

    def __init__(self, engine: Engine, mode: str):
        self.engine = engine
        self.mode = mode
        self.missing = False

    @property
    def usable(self) -> bool:
        """Whether a request should try the engine's own API."""
        return self.mode == "on" or not self.missing

    def absent(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the engine has no ``/v1/responses`` (remembered in auto)."""
        if self.mode != "auto" or not isinstance(exc, EngineRejectedError):
            return False
        if exc.status in (404, 405):
            self.missing = True
        return self.missing

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """One response from the engine."""
        started = time.perf_counter()
        try:
            result: dict[str, Any] = await self._routed(lambda leaf: create_response(leaf, body))
        except BaseException as exc:
            self._record(started, exc, None)
            raise
        self._record(started, None, result)
        return result

    async def stream(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """The engine's events. The replica is chosen (and failed over) until the first
        event arrives; a stream that has begun is never restarted."""
        started = time.perf_counter()
        final: dict[str, Any] | None = None
        error: BaseException | None = asyncio.CancelledError()
        events: AsyncGenerator[dict[str, Any], None] | None = None
        try:
            first, events = await self._routed(lambda leaf: _opened(stream_response(leaf, body)))
            yield first
            async for event in events:
                if event.get("type") in TERMINAL_EVENTS:
                    final = event.get("response")
                yield event
            error = None
        except BaseException as exc:
            error = exc
            raise
        finally:
            if events is not None:
                await events.aclose()
            self._record(started, error, final)

    async def _routed(self, call: Any) -> Any:
        inner = self.engine.inner if isinstance(self.engine, MeteredEngine) else self.engine
        if isinstance(inner, ReplicaEngine):
            return await inner._routed(_ANY, call)
        return await call(inner)

    def _record(
        self, started: float, error: BaseException | None, body: dict[str, Any] | None
    ) -> None:
        if not isinstance(self.engine, MeteredEngine):
            return
        outcome = "ok" if error is None else "error"
        if isinstance(error, asyncio.CancelledError):
            outcome = "cancelled"
        result = GenerateResult((), responses_usage(body)) if body is not None else None
        self.engine._record(started, outcome, result)


async def _opened(
    events: AsyncGenerator[dict[str, Any], None],
) -> tuple[dict[str, Any], AsyncGenerator[dict[str, Any], None]]:
    """The first event of ``events`` and the rest (closed here when the first fails)."""
    try:
        return await anext(events), events
    except BaseException:
        await events.aclose()
        raise
