"""The deadline of a streamed Responses pass-through when the engine is ahead of its
reader: every event already here, so waiting for the next one never gives a timeout the
chance to fire. A stub of the engine's calls, no server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from scaffolds.engines.protocol import SamplingParams
from scaffolds.errors import DeadlineExceededError
from scaffolds.problem import Budget
from scaffolds.strategies.single import Single
from server.api.responses.engine_passthrough import EngineResponse
from server.api.responses.protocol import ResponsesRequest
from server.pool.engine_responses import EngineResponses
from server.runs.planning import RunPlan
from server.store.response_store import ResponseStore

DEADLINE_S = 0.05
EVENTS = 100
HANDLING_S = 0.01
"""What the reader spends on each event: the stream would take EVENTS times that."""


class EngineAhead:
    """An engine's Responses calls whose stream has every event here already."""

    def __init__(self) -> None:
        self.sent = 0
        self.closed = False

    def absent(self, exc: BaseException) -> bool:
        return False

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        response = {"id": "resp_e", "status": "in_progress", "output": []}
        try:
            yield {"type": "response.created", "response": response}
            for _ in range(EVENTS):
                time.sleep(HANDLING_S)  # noqa: ASYNC251 (the reader is busy: no turn of the loop)
                self.sent += 1
                yield {"type": "response.output_text.delta", "delta": "x"}
            yield {"type": "response.completed", "response": response | {"status": "completed"}}
        finally:
            self.closed = True


async def test_past_its_deadline_a_stream_ends_though_its_engine_is_ahead() -> None:
    engine = EngineAhead()
    plan = SimpleNamespace(
        budget=Budget(timeout_s=DEADLINE_S), params=SamplingParams(), strategy=Single(), effort=None
    )
    call = EngineResponse(
        cast(EngineResponses, engine),
        ResponseStore("sqlite+aiosqlite:///:memory:", max_age_s=60, max_count=10),
        ResponsesRequest(model="m", input="hi", stream=True, store=False),
        [],
        cast(RunPlan, plan),
        "resp_1",
    )
    started = asyncio.get_running_loop().time()
    assert await call.open()
    events: list[bytes] = []
    with pytest.raises(DeadlineExceededError):
        async for event in call.stream():
            events.append(event)
    took = asyncio.get_running_loop().time() - started
    # It ended at the deadline (a few events past it at most), not after the engine's
    # whole stream, and closed the engine's stream (for an HTTP engine, its connection).
    assert engine.closed and engine.sent < EVENTS / 2
    assert took < EVENTS * HANDLING_S / 2
    assert not any(b"response.completed" in event for event in events)
