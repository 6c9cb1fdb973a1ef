"""Shared pieces of the reliability suite: Ponder over fake engines, a connection dropper.

Every server here listens on loopback and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import Scope

from server.app.app import create_app
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.ponder import wait_for_answer_pool
from testing.threaded import serving_in_thread
from tests.server.conftest import parse_sse

KEY = "sk-reliability-caller-key-7f3a9c"
"""The caller's key: it must never reach an engine or a log line."""
ENGINE_KEY = "engine-own-key-41d2"
MODEL = "m"


def ponder_settings(*engines: FakeEngineHandle | str, **overrides: Any) -> Settings:
    urls = tuple(e if isinstance(e, str) else e.base_url for e in engines)
    fields: dict[str, Any] = {
        "model": MODEL,
        "engines": urls,
        "engine_model": "fake-model",
        "api_keys": (KEY,),
        "engine_max_retries": 3,
        "engine_health_interval_s": 0,
        **overrides,
    }
    return Settings(**fields)


@contextlib.contextmanager
def serving_ponder(settings: Settings) -> Iterator[tuple[str, FastAPI]]:
    """Ponder on a loopback port in a thread: ``(root URL, app)``."""
    app = create_app(settings)
    with serving_in_thread(app) as url:
        wait_for_answer_pool(app)
        yield url, app


@pytest.fixture
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig()) as handle:
        yield handle


def chat(content: str = "What is 2+2?", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], **extra}


def auth(key: str = KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def client(url: str, timeout: float = 60.0) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
    return httpx.AsyncClient(base_url=url, headers=auth(), timeout=timeout, limits=limits)


def assert_openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The response is ``status`` with the OpenAI error shape; returns its ``error``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"].strip()
    return dict(error)


def chat_post_scope(*headers: tuple[bytes, bytes]) -> Scope:
    """The ASGI scope of ``POST /v1/chat/completions`` with a JSON body, for driving an app
    by hand (``await app(scope, receive, send)``) where a client cannot misbehave enough."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }


def assert_answered(response: httpx.Response, stream: bool) -> None:
    """A 200 with an answer: content, or a stream that ends in ``[DONE]`` with no error."""
    assert response.status_code == 200, response.text
    if stream:
        chunks = parse_sse(response.text)
        assert chunks[-1] == "[DONE]" and not any("error" in c for c in chunks[:-1])
    else:
        assert response.json()["choices"][0]["message"]["content"]


async def eventually(predicate: Callable[[], bool], within: float = 10.0) -> bool:
    """Poll ``predicate`` until it holds; False after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


class ConnectionDropper:
    """A TCP front for an engine that closes the first ``drop`` connections unanswered.

    Later connections are piped to ``target_port``. A client sees the dropped ones as
    "server disconnected without sending a response": a connection error.
    """

    def __init__(self, target_port: int, drop: int):
        self.target_port = target_port
        self.left_to_drop = drop
        self.dropped = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ConnectionDropper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.left_to_drop > 0:
                self.left_to_drop -= 1
                self.dropped += 1
                conn.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            upstream.settimeout(None)
            conn.settimeout(None)
            self._sockets += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
