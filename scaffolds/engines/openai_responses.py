"""An OpenAI-compatible engine's own Responses API (``POST {base_url}/responses``).

Calls go through the engine's client, retries and error mapping, as its chat calls do:
a 404 or 405 is an :class:`~scaffolds.errors.EngineRejectedError` with that status
(the engine has no such route), a dead engine an ``EngineUnavailableError``. The body is
sent as given, with the engine's own model name. A stream yields each event as a dict
and fails with ``EngineUnavailableError`` when it ends before a terminal event.

>>> from scaffolds.engines.openai_http import OpenAIEngine
>>> responses_capable(OpenAIEngine("http://e/v1", "m")), responses_capable(object())
(True, False)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import httpx

from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.errors import EngineUnavailableError

__all__ = ["TERMINAL_EVENTS", "create_response", "responses_capable", "stream_response"]

TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
"""The events that end a Responses stream."""


def responses_capable(engine: object) -> bool:
    """Whether ``engine`` is one this module can call (an HTTP engine)."""
    return isinstance(engine, OpenAIEngine)


async def create_response(engine: OpenAIEngine, body: dict[str, Any]) -> dict[str, Any]:
    """One Responses object from the engine."""
    data = await engine._request_json("POST", "/responses", {**body, "model": engine.model})
    if not isinstance(data, dict) or not isinstance(data.get("output"), list):
        raise engine.parser.malformed("a response without an 'output' list")
    return data


async def stream_response(
    engine: OpenAIEngine, body: dict[str, Any]
) -> AsyncGenerator[dict[str, Any], None]:
    """The engine's Responses events, up to and including the terminal one."""
    sent = {**body, "model": engine.model, "stream": True}
    response = await engine._open("POST", "/responses", sent)
    ended = False
    try:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue  # event names and blank separators: the type is in the data
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            event = engine.parser.decode(payload)
            if not isinstance(event, dict):
                raise engine.parser.malformed("a Responses event that is not an object")
            yield event
            if event.get("type") in TERMINAL_EVENTS:
                ended = True
                break
    except httpx.HTTPError as exc:
        raise engine._retry.error(exc, attempts=1, started=True) from exc
    finally:
        await response.aclose()
    if not ended:
        raise EngineUnavailableError(
            f"the Responses stream from engine {engine.base_url} ended before it finished"
        )
