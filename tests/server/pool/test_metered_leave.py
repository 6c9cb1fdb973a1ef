"""A consumer that leaves a metered engine stream: its sequences are given back and the
call recorded as cancelled at once, whatever the engine is doing; the engine stream's
close is bounded, and an HTTP engine's connection is closed, not waited on.

The benchmark ``benchmarks/client_leave.py`` times the same moments on vLLM-CPU under load.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from scaffolds.engines.http_transport import aiohttp_available
from scaffolds.engines.messages import chat
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import (
    Completion,
    EngineDelta,
    GenerateRequest,
    GenerateResult,
    SamplingParams,
    StreamItem,
    Usage,
)
from server.pool.metered import MeteredEngine
from server.telemetry.metrics import Metrics

WITHIN = 60.0
"""A bound only, for what happens at once: a test that passes never waits for it."""


class HangingClose:
    """An engine whose stream yields one delta, then, closed, never finishes closing (an
    engine client whose close waits on a starved engine) until :attr:`let_go` is set."""

    def __init__(self) -> None:
        self.closing = asyncio.Event()
        self.let_go = asyncio.Event()

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        return GenerateResult((Completion("a"),), Usage(calls=1))

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        try:
            yield EngineDelta(0, "a")
            await asyncio.Event().wait()  # the engine writes nothing more
        finally:
            self.closing.set()
            await self.let_go.wait()


def cancelled(metered: MeteredEngine) -> float:
    counter = metered.metrics.engine_calls.labels(model="m", outcome="cancelled")
    value: float = counter._value.get()
    return value


async def test_a_left_stream_frees_its_sequences_and_is_recorded_before_its_close_ends() -> None:
    engine = HangingClose()
    metered = MeteredEngine(engine, Metrics(), "m", max_sequences=8)
    stream = metered.stream(GenerateRequest(chat("hi"), SamplingParams(n=2)))
    assert isinstance(await anext(stream), EngineDelta)
    assert metered.gate.in_flight == 2
    closing = asyncio.ensure_future(stream.aclose())  # the consumer leaves
    async with asyncio.timeout(WITHIN):
        await engine.closing.wait()  # the engine's close has begun, and hangs
    assert metered.gate.in_flight == 0  # given back while the close still waits
    assert cancelled(metered) == 1  # and recorded
    assert not closing.done()
    engine.let_go.set()
    async with asyncio.timeout(WITHIN):
        await closing


async def test_a_close_that_never_ends_is_given_up_after_its_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = HangingClose()  # never let go
    metered = MeteredEngine(engine, Metrics(), "m", close_s=0.01)
    stream = metered.stream(GenerateRequest(chat("hi")))
    await anext(stream)
    with caplog.at_level(logging.WARNING, logger="ponder.engine_calls"):
        async with asyncio.timeout(WITHIN):
            await stream.aclose()
    assert "did not close in 0.01 s" in caplog.text
    assert (metered.gate.in_flight, cancelled(metered)) == (0, 1)


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
async def test_a_consumer_cancelled_mid_stream_drops_the_engine_connection_at_once(
    transport: str,
) -> None:
    # A real engine client over loopback, its engine silent after one delta (starved):
    # cancelling the consumer closes the connection (the engine sees it go) and frees the
    # call at once, without waiting for the engine to write or close anything.
    if transport == "aiohttp" and not aiohttp_available():
        pytest.skip("aiohttp is not installed")
    gone = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        writer.write(b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n')
        await writer.drain()
        with contextlib.suppress(ConnectionError):
            await reader.read()  # b"" once Ponder closes its end; the engine never writes
        gone.set()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    inner = OpenAIEngine(f"http://127.0.0.1:{port}/v1", "m", max_retries=0, transport=transport)
    metered = MeteredEngine(inner, Metrics(), "m")
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in metered.stream(GenerateRequest(chat("hi"))):
            first.set()

    try:
        consumer: asyncio.Task[Any] = asyncio.ensure_future(consume())
        async with asyncio.timeout(WITHIN):
            await first.wait()
        consumer.cancel()  # the run of a client that left
        async with asyncio.timeout(WITHIN):
            await asyncio.wait({consumer})
            await gone.wait()
        assert consumer.cancelled()
        assert (metered.gate.in_flight, cancelled(metered)) == (0, 1)
    finally:
        await inner.aclose()
        server.close()
        await server.wait_closed()
