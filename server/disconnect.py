"""Cancel work when the HTTP client goes away, by awaiting the ASGI disconnect message.

Once the request body has been read, the next ASGI ``receive()`` returns only when the
client disconnects (``{"type": "http.disconnect"}``), so :func:`until_disconnect` races
the work against that message instead of polling.

>>> import asyncio
>>> async def receive():  # a client that never leaves
...     await asyncio.Event().wait()
>>> async def work():
...     return 42
>>> asyncio.run(until_disconnect(receive, work()))
42
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from server.errors import ClientDisconnectedError

__all__ = ["until_disconnect"]

log = logging.getLogger("ponder.server")
T = TypeVar("T")


Receive = Callable[[], Awaitable[Mapping[str, Any]]]
"""An ASGI ``receive`` (Starlette's ``request.receive``)."""


async def _disconnected(receive: Receive) -> None:
    """Return when the client has gone (messages other than a disconnect are skipped)."""
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


async def until_disconnect(receive: Receive, work: Awaitable[T]) -> T:
    """Await ``work`` in a task; cancel it and raise :class:`ClientDisconnectedError` if
    the client goes away first (work that finished wins a tie)."""
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    watcher: asyncio.Future[None] = asyncio.ensure_future(_disconnected(receive))
    both: set[asyncio.Future[Any]] = {task, watcher}
    try:
        await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
        if not task.done() and watcher.exception() is not None:
            await asyncio.wait({task})  # receive() failed: nothing left to watch
        if task.done():
            return task.result()
        log.info("client disconnected; cancelling the run")
        raise ClientDisconnectedError("the client closed the connection")
    finally:
        for pending in (task, watcher):
            if not pending.done():
                pending.cancel()
        await asyncio.wait(both)
