"""The completion routes answered without FastAPI's routing (server/app/fast_path.py): the
same answers and the same errors as the FastAPI routes, which see only what is not a
valid request."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import Message, Receive, Scope, Send

from server.app.fast_path import CompletionRoutes
from tests.server.conftest import build_app, chat_body


class RouterSpy:
    """Counts the requests that reach FastAPI's router."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self.paths: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.router, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.paths.append(f"{scope['method']} {scope['path']}")
        await self.router(scope, receive, send)


def spied(app: FastAPI, *, fast: bool = True) -> RouterSpy:
    """Spy on ``app``'s router (before its first request); ``fast=False`` takes the
    completion routes out, leaving the FastAPI routes alone."""
    if not fast:
        app.user_middleware = [m for m in app.user_middleware if m.cls is not CompletionRoutes]
    spy = RouterSpy(app.router)
    app.router = spy  # type: ignore[assignment]
    return spy


@asynccontextmanager
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ponder.test") as c:
        yield c


def stable(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("id", "created")}


async def test_valid_requests_never_reach_fastapis_router() -> None:
    app, engine = build_app()
    spy = spied(app)
    async with client(app) as c:
        chat = await c.post("/v1/chat/completions", json=chat_body())
        text = await c.post(
            "/v1/completions",
            content=json.dumps({"model": "m", "prompt": "2+2="}),
            headers={"Content-Type": "Application/JSON; charset=utf-8"},
        )
        models = await c.get("/v1/models")
    assert chat.status_code == text.status_code == models.status_code == 200
    assert chat.json()["choices"][0]["message"]["content"].endswith("\\boxed{4}")
    assert text.json()["choices"][0]["text"].endswith("\\boxed{4}")
    assert chat.headers["x-request-id"] and len(engine.requests) == 2
    assert spy.paths == ["GET /v1/models"]


async def test_answers_and_errors_are_the_fastapi_routes_own() -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("/v1/chat/completions", {"json": chat_body(n=2, temperature=0.5)}),
        ("/v1/completions", {"json": {"model": "m", "prompt": ["1+1=", "2+2="]}}),
        ("/v1/chat/completions", {"json": chat_body(model="nope")}),  # 404 from Serving
        ("/v1/chat/completions", {"json": chat_body(scaffold="gsr(n=0)")}),
        ("/v1/chat/completions", {"json": {"model": "m", "messages": []}}),  # validation
        ("/v1/chat/completions", {"json": [1, 2]}),
        ("/v1/chat/completions", {"content": b"{not json"}),
        ("/v1/chat/completions", {"content": b"\xff\xfe", "headers": {"Content-Type": "x/y"}}),
        ("/v1/chat/completions", {"content": json.dumps(chat_body()), "headers": {}}),
        ("/v1/completions", {"content": b""}),
        ("/v1/completions", {"content": b'{"model": "m", "prompt": NaN}'}),
    ]
    answers: dict[bool, list[tuple[int, Any]]] = {}
    routed: dict[bool, list[str]] = {}
    for fast in (True, False):
        app, _ = build_app()
        spy = spied(app, fast=fast)
        async with client(app) as c:
            answers[fast] = []
            for path, kw in cases:
                kw.setdefault("headers", {"Content-Type": "application/json"})
                reply = await c.post(path, **kw)
                answers[fast].append((reply.status_code, stable(reply.json())))
        routed[fast] = spy.paths
    assert answers[True] == answers[False]
    assert [status for status, _ in answers[True]] == [200, 200, 404, 400] + [400] * 7
    # The valid requests (even those Serving refuses) never reached the router.
    assert len(routed[True]) == len(cases) - 4 and len(routed[False]) == len(cases)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_a_client_gone_mid_body_is_passed_on_as_it_came(path: str) -> None:
    """The messages read so far reach the FastAPI app in order (FastAPI decides)."""
    app, engine = build_app()
    spy = spied(app)
    messages: list[Message] = [
        {"type": "http.request", "body": b'{"model": "m", ', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        return messages.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    await app(scope, receive, send)
    assert spy.paths == [f"POST {path}"] and not messages and not engine.requests
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 400
