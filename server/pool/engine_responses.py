"""A served model's engine's own ``/v1/responses``, through the same layers as its other
calls: the replica choice, failover and breakers of
:class:`~server.pool.replica_engine.ReplicaEngine`, and the metering of
:class:`~server.pool.metered.MeteredEngine` (its sequence gate; calls, latency, tokens). A
stream holds its replica lease and its sequence until its last event, as a chat stream does.

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

from collections.abc import AsyncIterator
from typing import Any, cast

from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.openai_responses import (
    TERMINAL_EVENTS,
    create_response,
    responses_capable,
    stream_response,
)
from scaffolds.engines.protocol import Engine, GenerateRequest, GenerateResult, Usage
from scaffolds.errors import EngineRejectedError
from server.pool.metered import MeteredEngine, engine_leaves
from server.pool.replica_engine import ReplicaEngine

__all__ = ["EngineResponses", "engine_responses", "usage_from_responses_body"]

_ANY = GenerateRequest("")
"""What a replica is picked for: no affinity (the least busy replica)."""


def engine_responses(engine: Engine, mode: str) -> EngineResponses | None:
    """The Responses calls of ``engine`` (its metered, replicated form), or None when
    ``mode`` is ``"off"`` or some replica is not an HTTP engine."""
    if mode == "off" or not all(responses_capable(leaf) for leaf in engine_leaves(engine)):
        return None
    return EngineResponses(engine, mode)


def usage_from_responses_body(body: dict[str, Any] | None) -> Usage:
    """A Responses ``usage`` as Ponder's :class:`Usage` of one call.

    >>> usage_from_responses_body({"usage": {"input_tokens": 5, "output_tokens": 7,
    ...                                      "input_tokens_details": {"cached_tokens": 2}}})
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

        async def call() -> dict[str, Any]:
            inner = _inner(self.engine)
            if isinstance(inner, ReplicaEngine):
                return await inner._routed(_ANY, lambda leaf: create_response(_http(leaf), body))
            return await create_response(_http(inner), body)

        if isinstance(self.engine, MeteredEngine):
            return await self.engine.metered(call, 1, _result)
        return await call()

    def stream(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The engine's events. The replica is chosen (and failed over) until the first
        event arrives; a stream that has begun is never restarted. Its replica lease and
        its sequence in the gate are held until its last event, an error or the caller
        closing it (as a chat stream's are)."""

        def events() -> AsyncIterator[dict[str, Any]]:
            inner = _inner(self.engine)
            if isinstance(inner, ReplicaEngine):
                return inner.routed_stream(_ANY, lambda leaf: stream_response(_http(leaf), body))
            return stream_response(_http(inner), body)

        if isinstance(self.engine, MeteredEngine):
            return self.engine.metered_stream(events, 1, _terminal_result)
        return events()


def _inner(engine: Engine) -> Any:
    return engine.inner if isinstance(engine, MeteredEngine) else engine


def _http(leaf: Engine) -> OpenAIEngine:
    """A replica's engine, an HTTP one (:func:`engine_responses` built only over those)."""
    return cast(OpenAIEngine, leaf)


def _result(body: dict[str, Any]) -> GenerateResult:
    return GenerateResult((), usage_from_responses_body(body))


def _terminal_result(event: dict[str, Any]) -> GenerateResult | None:
    """The usage of a stream's terminal event (None for any other event)."""
    if event.get("type") not in TERMINAL_EVENTS:
        return None
    return _result(event.get("response") or {})
