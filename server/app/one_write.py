"""uvicorn's httptools protocol, writing what a response sends in one turn of the event
loop with one socket write.

uvicorn writes a response's status line and headers as soon as the app sends
``http.response.start``, and its body at ``http.response.body``: two ``send`` system
calls for every answer, each one delivering a loopback packet and waking the client.
:class:`OneWriteProtocol` hands the connection a transport that gathers the writes made
in one turn of the loop and passes them on together at the start of the next, so a
response whose head and body are sent back to back leaves in one write. A response that
is complete leaves at once, in the same turn (its task's last step, with no callback
after it: under a burst, a turn of the loop is every other request's step too). Streamed
chunks that arrive turn by turn still leave as they come; closing flushes what is
pending first.

``ponder serve`` runs with it (:func:`server.app.app.serve`) when httptools is installed.

>>> issubclass(OneWriteProtocol, asyncio.Protocol)
True
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["GatheringTransport", "OneWriteProtocol"]


class GatheringTransport:
    """A transport whose writes in one loop turn reach ``transport`` as one write."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._pending is None:
            self._pending = [bytes(data)]
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Pass what was written on now."""
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def get_write_buffer_size(self) -> int:
        pending = sum(len(data) for data in self._pending or ())
        return int(self._transport.get_write_buffer_size()) + pending

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a :class:`GatheringTransport`; a complete
    response is written as soon as its last body message is sent."""

    def connection_made(self, transport: Any) -> None:  # uvloop's is no asyncio.Transport
        self.gathering = GatheringTransport(transport, self.loop)
        gathering: Any = self.gathering  # it passes for the transport it wraps
        super().connection_made(gathering)

    def on_response_complete(self) -> None:
        self.gathering.flush()  # the callback it scheduled finds nothing left to write
        super().on_response_complete()
