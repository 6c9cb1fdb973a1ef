"""The aiohttp transport of OpenAIEngine on raw loopback servers: what the fake engine
cannot do (bytes split anywhere, a server that stops mid-body or goes silent).

The behaviours shared with httpx (retries, timeouts, cancellation, streams) run over both
transports in test_openai_http.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest

from scaffolds.engines.http_transport import AiohttpTransport, aiohttp_available
from scaffolds.engines.messages import chat
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import EngineDelta, GenerateRequest, GenerateResult
from scaffolds.errors import EngineTimeoutError, EngineUnavailableError

pytestmark = pytest.mark.skipif(not aiohttp_available(), reason="aiohttp is not installed")

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[str]:
    """A loopback TCP server answering each connection with ``handler``; yields its /v1 URL."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")  # the request head (bodies are small)
            await handler(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()
        await server.wait_closed()


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def delta(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def engine(url: str, **kw: Any) -> OpenAIEngine:
    eng = OpenAIEngine(url, "m", max_retries=0, transport="aiohttp", **kw)
    assert eng._fast is not None
    return eng


async def test_sse_lines_split_anywhere_are_joined() -> None:
    body = sse(delta("Hel"), delta("lo ✓"), delta("!", "stop"))

    async def handler(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for i in range(0, len(body), 7):  # 7-byte pieces cut lines, CRLFs and UTF-8 alike
            writer.write(body[i : i + 7])
            await writer.drain()
            await asyncio.sleep(0)

    async with raw_server(handler) as url, engine(url) as eng:
        items = [item async for item in eng.stream(GenerateRequest(chat("hi")))]
    texts = [i.text for i in items if isinstance(i, EngineDelta)]
    assert texts == ["Hel", "lo ✓", "!"]
    final = items[-1]
    assert isinstance(final, GenerateResult) and final.completions[0].text == "Hello ✓!"


async def test_a_body_cut_short_is_a_lost_connection() -> None:
    async def handler(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        writer.write(b'Content-Length: 500\r\n\r\n{"choices": [')
        await writer.drain()

    async with raw_server(handler) as url, engine(url) as eng:
        with pytest.raises(EngineUnavailableError, match="lost the connection"):
            await eng.generate(GenerateRequest("p"))


async def test_a_silent_stream_times_out_between_chunks() -> None:
    async def handler(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + sse(delta("a"))[: -len(b"data: [DONE]\n\n")])
        await writer.drain()
        await asyncio.sleep(30)

    async with raw_server(handler) as url, engine(url, read_timeout=0.3) as eng:
        seen: list[object] = []
        with pytest.raises(EngineTimeoutError):
            async for item in eng.stream(GenerateRequest(chat("hi"))):
                seen.append(item)
    assert len(seen) == 1


async def test_closing_an_unread_stream_closes_its_connection() -> None:
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + sse(delta("a"))[: -len(b"data: [DONE]\n\n")])
        await writer.drain()
        await reader.read()  # returns b"" once the client closes its end
        closed.set()

    async with raw_server(handler) as url, engine(url) as eng:
        stream = eng.stream(GenerateRequest(chat("hi")))
        assert isinstance(await anext(stream), EngineDelta)
        await stream.aclose()
        await asyncio.wait_for(closed.wait(), 10)


async def test_a_reader_behind_its_engine_still_gives_the_loop_turns() -> None:
    # An engine far ahead of its reader: ~500 KiB of lines buffered, which aiohttp hands
    # over without a turn of the event loop. A timeout (a deadline; a client's disconnect
    # cancels the same way) still reaches the reader within a few lines, and closing the
    # stream closes its connection, so the engine sees its client leave.
    closed = asyncio.Event()
    line = b"data: " + b"x" * 94 + b"\n"

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + line * 5000)  # not drained: the kernel takes what it can
        with contextlib.suppress(ConnectionError):  # a reset: closed with bytes unread
            await reader.read()  # b"" once the client closes its end
        closed.set()

    transport = AiohttpTransport(connect_timeout=5.0, read_timeout=60.0)
    async with raw_server(handler) as url:
        try:
            response = await transport.send("GET", url, None, {})
            await asyncio.sleep(0.2)  # the engine writes ahead while the reader is away
            read = 0
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    async for _ in response.aiter_lines():
                        read += 1
                        time.sleep(0.001)  # noqa: ASYNC251 (the reader's own work on a line)
            await response.aclose()
            await asyncio.wait_for(closed.wait(), 10)
        finally:
            await transport.aclose()
    assert read < 1000  # 5000 lines take the reader 5 s at least


def completion(text: str) -> bytes:
    body = json.dumps({"choices": [{"index": 0, "text": text, "finish_reason": "stop"}]})
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    return f"{head}\r\nConnection: close\r\n\r\n{body}".encode()


@asynccontextmanager
async def recording_server(text: str) -> AsyncIterator[tuple[str, list[str]]]:
    """A loopback server answering every request with a completion of ``text``; yields its
    origin and the request lines it got."""
    lines: list[str] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines.append(head.split(b"\r\n")[0].decode())
            writer.write(completion(text))
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", lines
    finally:
        server.close()
        await server.wait_closed()


async def test_calls_go_through_the_environments_proxy_unless_no_proxy_names_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with (
        recording_server("via proxy") as (proxy, relayed),
        recording_server("direct") as (
            direct,
            received,
        ),
    ):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with engine("http://engine.invalid/v1") as eng:
            for _ in range(2):  # the second call takes the proxy found for the first
                done = await eng.generate(GenerateRequest("p"))
                assert done.completions[0].text == "via proxy"
        assert relayed == ["POST http://engine.invalid/v1/completions HTTP/1.1"] * 2

        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        async with engine(f"{direct}/v1") as eng:
            done = await eng.generate(GenerateRequest("p"))
        assert done.completions[0].text == "direct"
        assert received == ["POST /v1/completions HTTP/1.1"] and len(relayed) == 2
