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
    """Await ``work`` in this task; cancel it and raise :class:`ClientDisconnectedError` if
    the client goes away first.

    ``work`` runs in the caller's task, not one of its own: only the watcher is a task,
    and a disconnect cancels the caller (as ``asyncio.timeout`` does), so a request that
    finishes costs one task and no ``asyncio.wait`` (issue 23). A cancel that comes from
    elsewhere stays a plain cancel.
    """
    current = asyncio.current_task()
    if current is None:
        raise RuntimeError("until_disconnect must run in a task")
    left = over = False

    def client_left(watcher: asyncio.Future[None]) -> None:
        nonlocal left
        if watcher.cancelled() or watcher.exception() is not None:
            return  # receive() failed: nothing left to watch, the work goes on
        if not over:  # a disconnect after the work finished changes nothing
            left = True
            current.cancel()

    watcher = asyncio.ensure_future(_disconnected(receive))
    watcher.add_done_callback(client_left)
    try:
        result = await work
    except asyncio.CancelledError:
        if not left or current.uncancel() > 0:
            raise  # a cancel from elsewhere
    else:
        if not left:
            return result
        current.uncancel()  # the work swallowed the cancel: its client is gone all the same
    finally:
        over = True
        watcher.cancel()
    log.info("client disconnected; cancelling the run")
    raise ClientDisconnectedError("the client closed the connection")
