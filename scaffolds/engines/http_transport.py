"""The engine client's HTTP transport for its calls: aiohttp when it is installed.

Measured on Ponder's own stack (``benchmarks/proxy_overhead.py --tools floor
--floor-clients httpx,httpcore,aiohttp``), a pass-through over aiohttp costs about a
quarter of the CPU per request of one over httpx, whose pool walk and request models
dominate a cheap call. :class:`AiohttpTransport` sends one engine call and hands back a
response with the few members of ``httpx.Response`` that :class:`OpenAIEngine` reads
(``status_code``, ``is_success``, ``headers``, ``aread``, ``aiter_lines``, ``aclose``),
and raises httpx's exception classes, so retries, timeouts and error mapping stay one
code path whichever transport runs. Without aiohttp (:func:`aiohttp_available` is
False) the engine keeps using httpx.

Timeouts are httpx's: ``connect`` bounds opening the connection, ``read`` bounds each
wait for bytes (a stream may run for hours as long as tokens keep coming). Closing a
response that was not read to its end closes its connection, so the engine sees the
client go away, as with httpx.

Proxies come from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``), looked
up once per engine origin and session rather than on every call (aiohttp's ``trust_env``
reads the environment and ``~/.netrc`` in a thread for each request, which cost more CPU
than the rest of a pass-through call); httpx, too, reads them once, when its client is
made. As with httpx, ``~/.netrc`` does not add credentials to engine calls.

>>> transport = AiohttpTransport(connect_timeout=5.0, read_timeout=600.0)
>>> transport.closed
True
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from scaffolds import fastjson

if TYPE_CHECKING:
    import aiohttp

__all__ = ["AiohttpTransport", "FastResponse", "aiohttp_available", "dumps"]


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


class FastResponse:
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
        self, *, connect_timeout: float, read_timeout: float, max_connections: int = 0
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
    ) -> FastResponse:
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
        return FastResponse(response)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()


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
