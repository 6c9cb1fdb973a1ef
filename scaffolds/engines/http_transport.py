"""How the engine client sends its calls: one interface, in httpx's shape, and two transports.

:class:`OpenAIEngine <scaffolds.engines.openai_http.OpenAIEngine>` talks to an
:class:`EngineTransport` (``send`` one request, ``aclose``), whose ``send`` hands back an
unread :class:`TransportResponse`: the few members of ``httpx.Response`` the engine reads
(``status_code``, ``is_success``, ``headers``, ``aread``, ``aiter_lines``, ``aclose``).
Both transports raise httpx's exception classes, so retries, timeouts and error mapping
stay one code path whichever transport runs; the engine picks one when it is made.

- :class:`AiohttpTransport`, when aiohttp is installed (:func:`aiohttp_available`).
  Measured on Ponder's own stack (``benchmarks/proxy_overhead.py --tools floor
  --floor-clients httpx,httpcore,aiohttp``), a pass-through over aiohttp costs about a
  quarter of the CPU per request of one over httpx, whose pool walk and request models
  dominate a cheap call. Its responses are :class:`AiohttpResponse`.
- :class:`HttpxTransport` otherwise, or over an ``httpx.AsyncClient`` passed in (an
  ``httpx.MockTransport`` in tests); its responses are ``httpx.Response`` itself.

Timeouts are httpx's: ``connect`` bounds opening the connection, ``read`` bounds each
wait for bytes (a stream may run for hours as long as tokens keep coming). Closing a
response that was not read to its end closes its connection, so the engine sees the
client go away.

Proxies come from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``): over
aiohttp looked up once per engine origin and session rather than on every call
(aiohttp's ``trust_env`` reads the environment and ``~/.netrc`` in a thread for each
request, which cost more CPU than the rest of a pass-through call); httpx reads them
once, when its client is made. ``~/.netrc`` does not add credentials to engine calls.

>>> transport = AiohttpTransport(connect_timeout=5.0, read_timeout=600.0)
>>> transport.closed
True
>>> HttpxTransport(connect_timeout=5.0, read_timeout=600.0, shards=2).timeout
Timeout(connect=5.0, read=600.0, write=600.0, pool=600.0)
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import httpx

from scaffolds import fastjson

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "POOL_SHARDS",
    "AiohttpResponse",
    "AiohttpTransport",
    "EngineTransport",
    "HttpxTransport",
    "TransportResponse",
    "aiohttp_available",
    "dumps",
]


@runtime_checkable
class TransportResponse(Protocol):
    """One engine response, unread: what the engine client reads of ``httpx.Response``.

    ``aread`` and ``aiter_lines`` raise httpx's exceptions; ``aclose`` releases the
    connection (closed, when the body was not read to its end)."""

    @property
    def status_code(self) -> int: ...

    @property
    def is_success(self) -> bool: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def aread(self) -> bytes: ...

    def aiter_lines(self) -> AsyncIterator[str]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class EngineTransport(Protocol):
    """Sends the engine client's calls; failures raise httpx's exceptions."""

    async def send(
        self, method: str, url: str, body: Any, headers: Mapping[str, str]
    ) -> TransportResponse:
        """Send one request (``body`` as JSON unless None); the response is unread."""
        ...

    async def aclose(self) -> None:
        """Close the connections this transport opened."""
        ...


def aiohttp_available() -> bool:
    """Whether aiohttp can be imported here."""
    return importlib.util.find_spec("aiohttp") is not None


def dumps(body: Any) -> bytes:
    """A JSON body, compact UTF-8 as httpx's ``json=`` writes it (orjson when installed)."""
    return fastjson.dumps(body)


def _mapped(exc: BaseException, *, connecting: bool) -> httpx.TransportError:
    """An aiohttp (or OS) failure as the httpx exception the engine client handles."""
    import aiohttp

    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, aiohttp.ConnectionTimeoutError) or (
        connecting and isinstance(exc, TimeoutError)
    ):
        return httpx.ConnectTimeout(detail)
    if isinstance(exc, TimeoutError):
        return httpx.ReadTimeout(detail)
    if isinstance(exc, aiohttp.ClientConnectorError) or connecting:
        return httpx.ConnectError(detail)
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return httpx.RemoteProtocolError(detail)
    return httpx.ReadError(detail)


LOOP_TURN_S = 0.005
"""The longest a stream's lines are read without giving the event loop a turn."""

_FAILURES: tuple[type[BaseException], ...] = (OSError, TimeoutError)


def _failures() -> tuple[type[BaseException], ...]:
    import aiohttp

    return (aiohttp.ClientError, *_FAILURES)


class AiohttpResponse:
    """One engine response over aiohttp, read as ``httpx.Response`` would be."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code: int = response.status
        self.headers: Mapping[str, str] = response.headers
        self._done = False

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    async def aread(self) -> bytes:
        try:
            data: bytes = await self._response.read()
        except _failures() as exc:
            raise _mapped(exc, connecting=False) from exc
        self._done = True
        return data

    async def aiter_lines(self) -> AsyncIterator[str]:
        """The body's lines as they arrive, without their line endings.

        aiohttp hands over everything already received without giving the event loop a
        turn, so a reader slower than its engine (hundreds of KiB buffered) would hold the
        loop for as long as it takes to handle them all: no timer, cancellation or client
        disconnect could reach it, and the engine never saw it leave. Every ``LOOP_TURN_S``
        of reading and handling, the loop gets a turn."""
        loop = asyncio.get_running_loop()
        turn_at = loop.time() + LOOP_TURN_S
        rest = b""
        try:
            async for piece in self._response.content.iter_any():
                lines = (rest + piece).split(b"\n")
                rest = lines.pop()
                for line in lines:
                    yield line.rstrip(b"\r").decode(errors="replace")
                    if loop.time() >= turn_at:
                        await asyncio.sleep(0)
                        turn_at = loop.time() + LOOP_TURN_S
        except _failures() as exc:
            raise _mapped(exc, connecting=False) from exc
        self._done = True
        if rest:
            yield rest.rstrip(b"\r").decode(errors="replace")

    async def aclose(self) -> None:
        """Release the connection: back to the pool when read to its end, else closed."""
        if self._done:
            self._response.release()
        else:
            self._response.close()


class AiohttpTransport:
    """Sends engine calls over one aiohttp session (made on first use, in its loop).

    ``max_connections`` of 0 (the default) puts no cap on the pool: a call never waits
    for a connection, so the pool is never what limits an engine's batch (the caller
    bounds its calls; ``ponder serve`` does by sequences in flight)."""

    def __init__(
        self, *, connect_timeout: float, read_timeout: float | None, max_connections: int = 0
    ) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._proxies: dict[str, dict[str, Any]] = {}  # origin -> proxy arguments

    @property
    def closed(self) -> bool:
        return self._session is None or bool(self._session.closed)

    def _ready_session(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            timeout = aiohttp.ClientTimeout(
                total=None, sock_connect=self.connect_timeout, sock_read=self.read_timeout
            )
            connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=0)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=timeout, raise_for_status=False
            )
            self._loop = loop
            self._proxies = {}
        return self._session

    def _proxy(self, url: str) -> dict[str, Any]:
        """The proxy arguments for a call to ``url``: its origin's, found once per session
        by aiohttp's own rules for the environment's proxies (as ``trust_env`` applies them)."""
        end = url.find("/", url.find("//") + 2)
        origin = url if end < 0 else url[:end]
        found = self._proxies.get(origin)
        if found is None:
            found = self._proxies[origin] = _env_proxy(origin)
        return found

    async def send(
        self, method: str, url: str, body: Any, headers: Mapping[str, str]
    ) -> AiohttpResponse:
        """Send one request (``body`` as JSON unless None); the response is unread."""
        session = self._ready_session()
        data = None if body is None else dumps(body)
        sent = {"Content-Type": "application/json", **headers} if data is not None else headers
        try:
            response = await session.request(
                method, url, data=data, headers=sent, **self._proxy(url)
            )
        except _failures() as exc:
            raise _mapped(exc, connecting=_connecting(exc)) from exc
        return AiohttpResponse(response)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()


POOL_SHARDS = 8
"""httpx connection pools per engine by default: httpcore walks every connection of a pool
on each request, so smaller pools cost less at high concurrency (benchmarks/pool_shards.py).

The pools hold as many connections as there are calls in flight, all kept alive: the
connection pool is never what limits a GPU engine's batch. What bounds the calls is the
caller (``ponder serve`` holds each model's engine calls to its sequences in flight,
:mod:`server.pool.sequences`; every call carries at least one)."""


class HttpxTransport:
    """Sends engine calls over httpx: the ``client`` passed in (used as is, never closed
    here), else ``shards`` clients of its own in turn, made on first use.

    httpcore's pool walks every connection it holds on each request, so one pool's cost
    grows with the concurrency; several smaller pools keep each walk short."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        read_timeout: float | None,
        shards: int = POOL_SHARDS,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self.shards = shards
        self._client = client
        self._pool: list[httpx.AsyncClient] = []
        self._turn = itertools.count()

    @property
    def client(self) -> httpx.AsyncClient:
        """The client for the next call: the one passed in, else the next of the pool."""
        if self._client is not None:
            return self._client
        if not self._pool:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            self._pool = [
                httpx.AsyncClient(timeout=self.timeout, limits=limits) for _ in range(self.shards)
            ]
        return self._pool[next(self._turn) % self.shards]

    async def send(
        self, method: str, url: str, body: Any, headers: Mapping[str, str]
    ) -> httpx.Response:
        """Send one request (``body`` as JSON unless None); the response is unread."""
        client = self.client
        request = client.build_request(
            method, url, json=body, headers=headers, timeout=self.timeout
        )
        return await client.send(request, stream=True)

    async def aclose(self) -> None:
        """Close the clients this transport made (a second call does nothing)."""
        pool, self._pool = self._pool, []
        for client in pool:
            await client.aclose()


def _env_proxy(origin: str) -> dict[str, Any]:
    """``proxy``/``proxy_auth`` for ``origin`` from the environment, or none."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    try:
        proxy, auth = get_env_proxy_for_url(URL(origin))
    except LookupError:
        return {}
    return {"proxy": proxy, "proxy_auth": auth}


def _connecting(exc: BaseException) -> bool:
    """Whether a failure before any response happened while opening the connection."""
    import aiohttp

    return isinstance(exc, aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError)
