"""The server's listening socket, taken before anything slow starts.

``ponder serve`` binds and listens on its port first, then starts its embedded engines
(minutes on a CPU), then serves on the socket it already holds. A port that is taken fails
the command at once, not after the engines have loaded, and nothing started in between (an
engine, another server) can take the port meanwhile: a bound socket alone would not stop
another ``SO_REUSEADDR`` bind, a listening one does. A client that connects early waits in
the backlog until the app serves. Port 0 asks the system for a free one; the socket says
which.

>>> with bind_listener("127.0.0.1", 0) as sock:
...     port = sock.getsockname()[1]
...     port > 0
True
>>> with bind_listener("127.0.0.1", 0) as sock:  # doctest: +ELLIPSIS
...     with bind_listener("127.0.0.1", sock.getsockname()[1]):
...         pass
Traceback (most recent call last):
...
scaffolds.errors.InvalidRequestError: 127.0.0.1:... is in use: ...
"""

from __future__ import annotations

import errno
import socket

from scaffolds.errors import InvalidRequestError

__all__ = ["bind_listener", "listener_url"]


def bind_listener(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening, as uvicorn would bind it
    (``backlog`` is uvicorn's default).

    Raises :class:`InvalidRequestError` (``param="port"`` or ``"host"``) when the address
    is taken or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restarts beside TIME_WAIT
    try:
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as err:
        sock.close()
        taken = err.errno == errno.EADDRINUSE
        reason = "is in use" if taken else "cannot be bound"
        raise InvalidRequestError(
            f"{host}:{port} {reason}: {err.strerror or err}", param="port" if taken else "host"
        ) from None
    sock.set_inheritable(True)  # uvicorn's workers are started with it
    return sock


def listener_url(sock: socket.socket) -> str:
    """The base URL a client reaches a bound socket at (a wildcard host as loopback).

    >>> with bind_listener("0.0.0.0", 0) as sock:
    ...     listener_url(sock).startswith("http://127.0.0.1:")
    True
    """
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
