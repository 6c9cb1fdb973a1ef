"""Ponder itself on loopback, for tests and benchmarks that call it over real HTTP.

>>> import httpx
>>> from server.settings import Settings
>>> with running_ponder(Settings(model="m", engines=("http://engine.invalid/v1",))) as url:
...     httpx.get(f"{url}/health").status_code
200
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from server.http.app import create_app
from server.settings import Settings
from testing.threaded import serving_in_thread

__all__ = ["running_ponder"]


@contextlib.contextmanager
def running_ponder(settings: Settings) -> Iterator[str]:
    """Serve ``create_app(settings)`` with uvicorn on a free loopback port, in a thread.

    Yields the server's root URL (``http://127.0.0.1:PORT``).
    """
    with serving_in_thread(create_app(settings)) as url:
        yield url
