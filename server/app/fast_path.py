"""The completion routes without FastAPI's per-request machinery.

``POST /v1/chat/completions`` and ``POST /v1/completions`` are most of what the server
answers, and on ``single`` FastAPI's routing, dependency solving and exception
middleware cost about as much CPU as the scaffold run around the engine call.
:class:`CompletionRoutes` sits inside the request-id, auth and body-size middleware (so
those still apply) and answers those two routes itself: the body read as the ASGI
messages come, parsed as FastAPI parses it, validated by the same pydantic models, then
:meth:`Serving.handle <server.runs.handler.Serving.handle>` and its response, as the FastAPI
routes in :mod:`server.api.chat_completions.api_router` and
:mod:`server.api.completions.api_router` do. Anything off the happy path
before the request is valid (no JSON content type, a body that is not a JSON object, a
validation error, a client gone mid-body) goes on to the FastAPI app with the messages read
so far replayed, so every such error is the FastAPI route's own, to the byte. Which routes
it answers, as which endpoint, with which request model: those of
:data:`server.app.routes.ROUTES` marked ``fast``.

>>> sorted(fast_routes(ROUTES))
['/v1/chat/completions', '/v1/completions']
>>> fast_routes(ROUTES)["/v1/chat/completions"][0]
'chat'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from scaffolds import fastjson
from scaffolds.errors import PonderError
from server.app.routes import ROUTES
from server.errors import api_error, error_response
from server.routing import Route, client_key_of
from server.runs.handler import Serving
from server.runs.planning import AnyRequest
from server.runs.request import ChatCompletionRequest, CompletionRequest, Endpoint
from server.telemetry.metrics import Metrics

__all__ = ["CompletionRoutes", "fast_routes"]

RUN_REQUESTS = (ChatCompletionRequest, CompletionRequest)
"""The request models of the routes the fast path may answer."""
FastRoute = tuple[Endpoint, Callable[[Any], AnyRequest]]
"""A route the fast path answers: its endpoint, and its request model's validation."""


def fast_routes(routes: Iterable[Route]) -> Mapping[str, FastRoute]:
    """The routes of ``routes`` marked ``fast``, by path."""
    out: dict[str, FastRoute] = {}
    for route in routes:
        if route.fast is None:
            continue
        request = route.request
        if route.method != "post" or request is None or not issubclass(request, RUN_REQUESTS):
            raise ValueError(f"{route.path}: the fast path answers a POST of a completion")
        out[route.path] = (route.fast, request.model_validate)
    return out


class CompletionRoutes:
    """ASGI middleware answering the fast routes of ``routes`` itself (:func:`fast_routes`);
    everything else goes to ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        serving: Serving,
        metrics: Metrics | None = None,
        routes: Iterable[Route] = ROUTES,
    ):
        self.app = app
        self.serving = serving
        self.metrics = metrics
        self.routes = fast_routes(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = None
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            route = self.routes.get(scope["path"])
        if route is None:
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        body = b""
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # the client left mid-body: FastAPI says what that is
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        endpoint, validate = route
        req = _valid(scope, messages, body, validate)
        if req is None:
            await self.app(scope, _replaying(messages, receive), send)
            return
        try:
            key = client_key_of(Request(scope))  # as the auth middleware left it
            response = await self.serving.handle(endpoint, req, receive, key=key)
        except PonderError as exc:  # as server.errors' handler for them answers
            response = error_response(api_error(exc), exc, self.metrics)
        await response(scope, receive, send)


def _valid(
    scope: Scope, messages: list[Message], body: bytes, validate: Callable[[Any], AnyRequest]
) -> AnyRequest | None:
    """The request when it is a complete, valid JSON object sent as application/json."""
    if not body or messages[-1]["type"] != "http.request":
        return None
    content_type = next((v for k, v in scope["headers"] if k == b"content-type"), None)
    if content_type is None:
        return None
    if content_type.split(b";")[0].strip().lower() != b"application/json":
        return None
    try:
        data = fastjson.loads(body)  # what json.loads reads, as Starlette's request.json()
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        return validate(data)
    except ValidationError:
        return None


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives ``messages`` again, then the client's own."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
