"""A client that leaves an SSE stream whose events keep coming: the body stops and is
closed, so the run under it is cancelled, however busy the engine (issue 55).

On vLLM-CPU under load, Starlette's cancel of the body's task never landed (anyio delivers
it only while the task waits on a future not yet done, and a busy run wakes it before each
delivery), and uvicorn drops writes to a client that left: the run and its engine call
went on to their end. Here a producer emits an event on every turn of the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

from scaffolds.core.trace import StepDelta, TraceRecorder
from server.runs.streaming import SSEResponse

WITHIN = 60.0
"""A bound only: a test that passes ends as soon as the body is closed."""

SCOPE = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "method": "GET"}
"""What uvicorn (httptools or h11) gives: ASGI 2.3, so Starlette listens for the disconnect."""


class LeavingClient:
    """uvicorn's ``receive`` and ``send`` for a client that leaves after ``writes`` body
    writes; past that, writes are dropped without an error, as uvicorn drops them."""

    def __init__(self, writes: int) -> None:
        self.writes = writes
        self.sent: list[MutableMapping[str, Any]] = []
        self.gone = asyncio.Event()
        self.dropped = 0

    async def receive(self) -> MutableMapping[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if self.gone.is_set():
            self.dropped += 1
            return
        self.sent.append(message)
        if message["type"] == "http.response.body" and len(self.sent) > self.writes:
            self.gone.set()


async def test_a_client_that_leaves_a_busy_stream_stops_it_and_cancels_its_run() -> None:
    recorder = TraceRecorder(live=True)
    batches = recorder.subscribe_batches()

    async def produce() -> None:  # a busy engine: an event on every turn of the loop
        while True:
            recorder.emit(StepDelta("s1", 0, "a"))
            await asyncio.sleep(0)

    run = asyncio.ensure_future(produce())

    async def body() -> AsyncIterator[bytes]:
        try:
            async for batch in batches:
                yield b"data: " + b"a" * len(batch) + b"\n\n"
        finally:
            run.cancel()  # as chat_sse cancels its run

    closed = asyncio.Event()
    client = LeavingClient(writes=3)
    response = SSEResponse(body(), on_close=closed.set)
    try:
        async with asyncio.timeout(WITHIN):
            await response(SCOPE, client.receive, client.send)
            await asyncio.wait({run})
    finally:
        run.cancel()
    assert closed.is_set() and run.cancelled()
    assert client.gone.is_set()
