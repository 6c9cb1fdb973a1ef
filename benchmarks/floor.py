"""The floor of the proxy benchmarks: the least a proxy on Ponder's stack can do.

uvicorn with the same defaults as ``ponder serve`` (httptools, uvloop, access log off),
a bare ASGI callable, and one engine HTTP client: it forwards the body as it came and
relays the answer's bytes, with no parsing, validation, logs or metrics. The client is
chosen on the command line, so the same floor also compares HTTP clients side by side:
``httpx`` (8 pools, as OpenAIEngine used it), ``httpcore`` (its connection pool without
httpx's models), ``aiohttp`` (when importable).

    python -m benchmarks.floor PORT ENGINE_URL [httpx|httpcore|aiohttp]
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import uvicorn

Forward = Callable[[str, bytes], Awaitable[tuple[int, str, AsyncIterator[bytes]]]]


def httpx_client() -> tuple[Forward, Callable[[], Awaitable[None]]]:
    import httpx

    limits = httpx.Limits(max_connections=128, max_keepalive_connections=32)
    pools = [httpx.AsyncClient(timeout=600, limits=limits) for _ in range(8)]
    turn = itertools.count()

    async def forward(url: str, body: bytes) -> tuple[int, str, AsyncIterator[bytes]]:
        client = pools[next(turn) % 8]
        headers = {"content-type": "application/json"}
        request = client.build_request("POST", url, content=body, headers=headers)
        response = await client.send(request, stream=True)

        async def pieces() -> AsyncIterator[bytes]:
            try:
                async for piece in response.aiter_raw():
                    yield piece
            finally:
                await response.aclose()

        return response.status_code, response.headers.get("content-type", ""), pieces()

    async def close() -> None:
        for pool in pools:
            await pool.aclose()

    return forward, close


def httpcore_client() -> tuple[Forward, Callable[[], Awaitable[None]]]:
    import httpcore

    pool = httpcore.AsyncConnectionPool(max_connections=1024, max_keepalive_connections=256)

    async def forward(url: str, body: bytes) -> tuple[int, str, AsyncIterator[bytes]]:
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        cm = pool.stream("POST", url, headers=headers, content=body)
        response = await cm.__aenter__()
        kind = next((v.decode() for k, v in response.headers if k.lower() == b"content-type"), "")

        async def pieces() -> AsyncIterator[bytes]:
            try:
                async for piece in response.aiter_stream():
                    yield piece
            finally:
                await cm.__aexit__(None, None, None)

        return response.status, kind, pieces()

    return forward, pool.aclose


def aiohttp_client() -> tuple[Forward, Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1024))

    async def forward(url: str, body: bytes) -> tuple[int, str, AsyncIterator[bytes]]:
        headers = {"content-type": "application/json"}
        response = await session.post(url, data=body, headers=headers)

        async def pieces() -> AsyncIterator[bytes]:
            try:
                async for piece in response.content.iter_any():
                    yield piece
            finally:
                response.release()

        return response.status, response.headers.get("content-type", ""), pieces()

    return forward, session.close


CLIENTS = {"httpx": httpx_client, "httpcore": httpcore_client, "aiohttp": aiohttp_client}


def make_app(engine: str, client: str) -> Callable[..., Awaitable[None]]:
    state: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    state["forward"], state["close"] = CLIENTS[client]()
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await state["close"]()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        url = engine + scope["path"].removeprefix("/v1")
        status, kind, pieces = await state["forward"](url, body)
        start: dict[str, Any] = {"type": "http.response.start", "status": status}
        if kind.startswith("text/event-stream"):
            start["headers"] = [(b"content-type", kind.encode())]
            await send(start)
            async for piece in pieces:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        data = b"".join([piece async for piece in pieces])
        length = b"%d" % len(data)
        start["headers"] = [(b"content-type", kind.encode()), (b"content-length", length)]
        await send(start)
        await send({"type": "http.response.body", "body": data})

    return app


if __name__ == "__main__":
    port, engine = int(sys.argv[1]), sys.argv[2].rstrip("/")
    app = make_app(engine, sys.argv[3] if len(sys.argv) > 3 else "httpx")
    uvicorn.run(app, host="127.0.0.1", port=port, access_log=False, log_level="warning")
