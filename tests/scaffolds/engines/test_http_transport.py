"""The transports of OpenAIEngine on raw loopback servers: what the fake engine cannot do
(bytes split anywhere, a server that stops mid-body or goes silent).

Both transports meet one interface and answer alike (the ``transport`` tests below); the
engine's behaviours over them (retries, timeouts, cancellation, streams) run over both
in test_openai_http.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from scaffolds.engines.http_transport import (
    AiohttpTransport,
    EngineTransport,
    HttpxTransport,
    TransportResponse,
    aiohttp_available,
)
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
    assert isinstance(eng._transport, AiohttpTransport)
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


# -- one interface, two transports: the same answers ----------------------------------


@pytest.fixture(params=["aiohttp", "httpx"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[EngineTransport]:
    """Each transport behind the one interface the engine talks to."""
    made: EngineTransport
    if request.param == "aiohttp":
        made = AiohttpTransport(connect_timeout=5.0, read_timeout=60.0)
    else:
        made = HttpxTransport(connect_timeout=5.0, read_timeout=60.0, shards=1)
    assert isinstance(made, EngineTransport)
    try:
        yield made
    finally:
        await made.aclose()


@asynccontextmanager
async def answering(reply: bytes) -> AsyncIterator[tuple[str, list[bytes]]]:
    """A loopback server answering every request with ``reply``; yields its URL and the
    request bodies it got."""
    bodies: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = [h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")]
        size = int(length[0].split(b":")[1]) if length else 0
        bodies.append(await reader.readexactly(size))
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/completions", bodies
    finally:
        server.close()
        await server.wait_closed()


async def test_a_json_body_goes_out_and_comes_back(transport: EngineTransport) -> None:
    sent = {"model": "m", "prompt": "2+2 ✓", "n": 2}
    async with answering(completion("4")) as (url, bodies):
        response = await transport.send("POST", url, sent, {"Authorization": "Bearer k"})
        assert isinstance(response, TransportResponse)
        assert (response.status_code, response.is_success) == (200, True)
        assert response.headers["content-type"] == "application/json"
        data = json.loads(await response.aread())
        await response.aclose()
    assert data["choices"][0]["text"] == "4"
    assert [json.loads(b) for b in bodies] == [sent]


async def test_an_sse_stream_is_read_line_by_line(transport: EngineTransport) -> None:
    body = "data: Hel\r\n\r\n: a comment\ndata: lo ✓\r\n\r\ndata: [DONE]\n\n".encode()

    async def handler(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for i in range(0, len(body), 5):  # lines, CRLFs and UTF-8 cut anywhere
            writer.write(body[i : i + 5])
            await writer.drain()
            await asyncio.sleep(0)

    async with raw_server(handler) as url:
        response = await transport.send("POST", url, {"stream": True}, {})
        lines = [line async for line in response.aiter_lines()]
        await response.aclose()
    assert lines == ["data: Hel", "", ": a comment", "data: lo ✓", "", "data: [DONE]", ""]


@pytest.mark.parametrize("status", [404, 503])
async def test_a_failed_status_is_an_unread_response(
    transport: EngineTransport, status: int
) -> None:
    error = b'{"error": {"message": "no"}}'
    head = f"HTTP/1.1 {status} No\r\nRetry-After: 2\r\nContent-Length: {len(error)}"
    async with answering(f"{head}\r\nConnection: close\r\n\r\n".encode() + error) as (url, _):
        response = await transport.send("POST", url, {}, {})
        assert (response.status_code, response.is_success) == (status, False)
        assert response.headers.get("retry-after") == "2"
        assert await response.aread() == error
        await response.aclose()


async def test_a_refused_connection_is_httpxs_connect_error(transport: EngineTransport) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        with pytest.raises(httpx.ConnectError) as caught:
            await transport.send("POST", f"http://127.0.0.1:{port}/v1/completions", {}, {})
    assert type(caught.value) is httpx.ConnectError


async def test_a_cancelled_stream_releases_its_connection(transport: EngineTransport) -> None:
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + sse(delta("a"))[: -len(b"data: [DONE]\n\n")])
        await writer.drain()
        with contextlib.suppress(ConnectionError):
            await reader.read()  # b"" once the client closes its end
        closed.set()

    async with raw_server(handler) as url:
        response = await transport.send("POST", url, {"stream": True}, {})
        first = asyncio.Event()

        async def read() -> None:
            async for _ in response.aiter_lines():
                first.set()

        reader = asyncio.ensure_future(read())
        await asyncio.wait_for(first.wait(), 10)
        reader.cancel()  # the engine silent, the reader waits: cancelled there
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await response.aclose()
        await asyncio.wait_for(closed.wait(), 10)
