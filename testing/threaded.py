"""Serve an ASGI app with uvicorn in a background thread, on a loopback port.

Tests, benchmarks and the fake engine all need a real server they can start and stop
from synchronous code; this is the one way they do it.

>>> import httpx
>>> from fastapi import FastAPI
>>> app = FastAPI()
>>> _ = app.get("/ping")(lambda: "pong")
>>> with serving_in_thread(app) as url:
...     httpx.get(f"{url}/ping").json()
'pong'
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn


@contextlib.contextmanager
def serving_in_thread(
    app: Any,
    *,
    port: int = 0,
    on_stop: Callable[[], None] | None = None,
    start_timeout: float = 120.0,
    **uvicorn_options: Any,
) -> Iterator[str]:
    """Yield ``http://127.0.0.1:PORT`` while uvicorn serves ``app``; stop it on exit.

    ``port`` 0 picks a free port (pass a stopped server's port to bring it back there);
    ``on_stop`` runs just before the server is told to exit.
    """
    options: dict[str, Any] = {
        "log_config": None,
        "access_log": False,
        "timeout_graceful_shutdown": 2,
    }
    options.update(uvicorn_options)
    server = uvicorn.Server(uvicorn.Config(app, **options))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    bound = sock.getsockname()[1]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise RuntimeError(f"the server on port {bound} did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{bound}"
    finally:
        if on_stop is not None:
            on_stop()
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
