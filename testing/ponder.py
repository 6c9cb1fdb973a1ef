"""Ponder itself on loopback, for tests and benchmarks that call it over real HTTP, and
the openai SDK's client of it.

>>> import httpx
>>> from server.settings import Settings
>>> with running_ponder(Settings(model="m", engines=("http://engine.invalid/v1",))) as url:
...     httpx.get(f"{url}/health").status_code, openai_client(url).base_url.path
(200, '/v1/')
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import openai

from server.app.app import create_app
from server.settings import Settings
from testing.threaded import serving_in_thread

__all__ = ["openai_client", "running_ponder", "wait_for_answer_pool"]


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


def openai_client(
    url: str, key: str = "unused", *, max_retries: int = 0, timeout: float = 300
) -> openai.OpenAI:
    """The openai SDK's client of the Ponder at ``url`` (its root, as
    :func:`running_ponder` yields it) with ``key`` (any key where the server has none).
    By default it never retries, so a test sees each answer as the server gave it, and
    waits up to 300 s for one (a slow CI machine, never a test's measure of speed).

    >>> client = openai_client("http://127.0.0.1:8000", "sk-alice", timeout=5)
    >>> str(client.base_url), client.api_key, client.max_retries, client.timeout
    ('http://127.0.0.1:8000/v1/', 'sk-alice', 0, 5)
    """
    return openai.OpenAI(
        base_url=f"{url}/v1", api_key=key, max_retries=max_retries, timeout=timeout
    )
