"""App middleware limits: a request body size limit, and the process's open files.

:class:`BodySizeLimit` is ASGI middleware that counts body bytes as they stream in
(``Content-Length`` is only an early shortcut) and answers 413 past ``max_bytes``;
:func:`raise_open_file_limit` lifts the soft limit on open files to the hard one.
(Admission, the bounded run queue, is the run path's: :mod:`server.runs.admission`.)

>>> raise_open_file_limit() >= 1
True
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import BodyTooLargeError, api_error

if TYPE_CHECKING:
    from server.telemetry.metrics import Metrics


def raise_open_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; the new soft limit.

    Each client connection and each engine call in flight holds a socket: a thousand
    concurrent runs fanning out to an engine need several thousand, past the common
    default soft limit of 1,024 (vLLM raises its own the same way).

    >>> raise_open_file_limit() >= 1
    True
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft


class BodySizeLimit:
    """ASGI middleware: 413 in the OpenAI error shape when a body passes ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int, metrics: Metrics | None = None):
        self.app = app
        self.max_bytes = max_bytes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._reject(send)
                    return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLargeError(self.max_bytes)
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, watching_send)
        except BodyTooLargeError:
            if started:
                raise
            await self._reject(send)

    async def _reject(self, send: Send) -> None:
        error = api_error(BodyTooLargeError(self.max_bytes))
        if self.metrics is not None:
            self.metrics.rejected.labels(reason=error.code or "413").inc()
        body = json.dumps(error.body()).encode()
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})
