"""Ponder itself on loopback, for tests and benchmarks that call it over real HTTP.

>>> import httpx
>>> from server.settings import Settings
>>> with running_ponder(Settings(model="m", engines=("http://engine.invalid/v1",))) as url:
...     httpx.get(f"{url}/health").status_code
200
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from server.app.app import create_app
from server.settings import Settings
from testing.threaded import serving_in_thread

__all__ = ["running_ponder", "wait_for_answer_pool"]


@contextlib.contextmanager
def running_ponder(settings: Settings) -> Iterator[str]:
    """Serve ``create_app(settings)`` with uvicorn on a free loopback port, in a thread.

    Yields the server's root URL (``http://127.0.0.1:PORT``) once its answer pool is no
    longer warming (as ``/ready`` waits for it).
    """
    app = create_app(settings)
    with serving_in_thread(app) as url:
        wait_for_answer_pool(app)
        yield url


def wait_for_answer_pool(app: Any, timeout_s: float = 120.0) -> None:
    """Wait until a started app's answer pool is no longer warming (it warms in the
    background after the server starts)."""
    deadline = time.monotonic() + timeout_s
    while app.state.serving.voter.state == "starting":
        if time.monotonic() > deadline:
            raise RuntimeError(f"the answer pool did not warm in {timeout_s:.0f} s")
        time.sleep(0.02)
