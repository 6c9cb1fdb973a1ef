"""What an API stands on: a route (:class:`Route`: its method and path, its handler, its
summary and tags, and what it answers), and what the app holds for its handlers
(:func:`serving_of`, :func:`tokenizers_of`, :func:`store_of`, :func:`metrics_of`, read
from ``app.state``, which :func:`server.app.app.create_app` fills). Each API declares
its routes beside its handlers (``ROUTES`` in ``server/api/<api>/api_router.py``);
:mod:`server.app.routes` composes them, one line per API, into the mounted routes, the
fast path's table and the OpenAPI document's answers.

>>> async def health() -> dict[str, str]:
...     return {"status": "ok"}
>>> r = Route("get", "/health", health, "Liveness", ("operations",), ok="Health")
>>> r.openapi_path, r.request
('/health', None)
>>> Route("get", "/v1/models/{model_id:path}", health, "One model", ("openai",)).openapi_path
'/v1/models/{model_id}'
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, get_type_hints

from fastapi import Request
from pydantic import BaseModel
from starlette.routing import compile_path

from server.keys import ANONYMOUS, ClientKey
from server.pool.tokenizers import Tokenizers
from server.runs.handler import Serving
from server.runs.request import Endpoint
from server.store.response_store import ResponseStore
from server.telemetry.metrics import Metrics

__all__ = [
    "TOKENIZER_ERRORS",
    "Route",
    "client_key_of",
    "metrics_of",
    "serving_of",
    "store_of",
    "tokenizers_of",
]

TOKENIZER_ERRORS = (404, 502, 503, 504)
"""A tokenizer route's errors: an unknown model; the engine's failure, absence or timeout."""


@dataclass(frozen=True)
class Route:
    """One route: where it is, who answers it, and what the OpenAPI document says of it."""

    method: Literal["get", "post", "delete"]
    path: str
    """As FastAPI takes it (a ``{name:path}`` converter included)."""
    handler: Callable[..., Awaitable[Any]]
    """The API's handler; FastAPI reads its parameters (no docstring: it would become the
    operation's description)."""
    summary: str
    tags: tuple[str, ...]
    ok: str | None = None
    """The schema (in :data:`server.app.openapi.SCHEMAS`) of its 200 answer's JSON body."""
    text: bool = False
    """Its 200 answer is text (``/metrics``)."""
    runs: bool = False
    """It runs a scaffold: a 200 in JSON or, streamed, server-sent events; the errors of a
    run (400, 404, 429, 502, 503, 504)."""
    errors: tuple[int, ...] = ()
    """Error statuses it answers beyond the rules of :func:`server.app.openapi.statuses`."""
    not_ready: bool = False
    """Its 503 is the 200's body, not an error (``/ready``)."""
    fast: Endpoint | None = None
    """The endpoint :mod:`server.app.fast_path` answers it as, when it does (a ``POST``
    of a chat or text completion)."""

    @property
    def request(self) -> type[BaseModel] | None:
        """The model of the request's body: the type of the handler's ``body``."""
        body: type[BaseModel] | None = get_type_hints(self.handler).get("body")
        return body

    @property
    def openapi_path(self) -> str:
        """The path as the OpenAPI document writes it (no converter)."""
        return compile_path(self.path)[1]


def serving_of(request: Request) -> Serving:
    """The app's :class:`~server.runs.handler.Serving` (``app.state.serving``)."""
    serving: Serving = request.app.state.serving
    return serving


def tokenizers_of(request: Request) -> Tokenizers:
    """The app's tokenizers (``app.state.tokenizers``)."""
    tokenizers: Tokenizers = request.app.state.tokenizers
    return tokenizers


def store_of(request: Request) -> ResponseStore:
    """The app's store of responses (``app.state.responses``), seen by the tenant of the
    request's key (:func:`client_key_of`): another tenant's responses are not there."""
    store: ResponseStore = request.app.state.responses
    return store.owned_by(client_key_of(request).owner)


def metrics_of(request: Request) -> Metrics:
    """The app's metrics (``app.state.metrics``)."""
    metrics: Metrics = request.app.state.metrics
    return metrics


def client_key_of(request: Request) -> ClientKey:
    """The key the request was authenticated with (``request.state.client_key``, set by
    the auth middleware), or :data:`~server.keys.ANONYMOUS` when auth is off."""
    key: ClientKey = getattr(request.state, "client_key", ANONYMOUS)
    return key
