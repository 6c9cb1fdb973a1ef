"""Every route of the API, listed once (:data:`ROUTES`): its method and path, its handler
in its API's folder (``server/api/<api>/api_router.py``; the request model is the type of
the handler's ``body``), its summary and tags, and what it answers. The rest is derived
from this list: the routes the app mounts (:func:`api_router`), the completion routes the
fast path answers (:mod:`server.app.fast_path`) and the OpenAPI document's answers and
errors (:mod:`server.app.openapi`). Adding an API is its folder under ``server/api`` and
its lines here.

The order is the OpenAPI document's order of paths.

>>> [(r.fast, r.path, r.request.__name__) for r in ROUTES if r.fast]
[('chat', '/v1/chat/completions', 'ChatCompletionRequest'), \
('completions', '/v1/completions', 'CompletionRequest')]
>>> route("get", "/v1/models/{model_id}").errors
(404,)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, get_type_hints

from fastapi import APIRouter
from pydantic import BaseModel
from starlette.routing import compile_path

from server.api.chat_completions import api_router as openai_api
from server.api.messages import api_router as messages_api
from server.api.responses import api_router as responses_api
from server.api.tokenize import api_router as tokenize_api
from server.runs.request import Endpoint

__all__ = ["ROUTES", "Route", "api_router", "route"]

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


ROUTES: tuple[Route, ...] = (
    Route(
        "post",
        "/v1/chat/completions",
        openai_api.chat_completions,
        "Chat completion through a scaffold",
        ("openai",),
        ok="ChatCompletion",
        runs=True,
        fast="chat",
    ),
    Route(
        "post",
        "/v1/completions",
        openai_api.completions,
        "Text completion through a scaffold",
        ("openai",),
        ok="TextCompletion",
        runs=True,
        fast="completions",
    ),
    Route(
        "get",
        "/v1/models",
        openai_api.list_models,
        "Served models and scaffold aliases",
        ("openai",),
        ok="ModelList",
    ),
    Route(
        "get",
        "/v1/models/{model_id:path}",
        openai_api.get_model,
        "One model or alias",
        ("openai",),
        ok="Model",
        errors=(404,),
    ),
    Route(
        "post",
        "/v1/responses",
        responses_api.create_response,
        "A response through a scaffold",
        ("responses",),
        ok="Response",
        runs=True,
    ),
    Route(
        "get",
        "/v1/responses/{response_id}",
        responses_api.get_response,
        "A stored response",
        ("responses",),
        ok="Response",
        errors=(404, 503),
    ),
    Route(
        "delete",
        "/v1/responses/{response_id}",
        responses_api.delete_response,
        "Forget a stored response",
        ("responses",),
        ok="ResponseDeleted",
        errors=(404, 503),
    ),
    Route(
        "post",
        "/v1/messages",
        messages_api.create_message,
        "An Anthropic message through a scaffold",
        ("anthropic",),
        ok="Message",
        runs=True,
    ),
    Route(
        "get",
        "/v1/responses/{response_id}/input_items",
        responses_api.list_input_items,
        "A stored response's input items",
        ("responses",),
        ok="InputItemList",
        errors=(400, 404, 503),
    ),
    Route(
        "post",
        "/v1/messages/count_tokens",
        messages_api.count_tokens,
        "Count a message's input tokens",
        ("anthropic",),
        ok="TokenCount",
        errors=TOKENIZER_ERRORS,
    ),
    Route(
        "post",
        "/tokenize",
        tokenize_api.tokenize,
        "vLLM's tokenize",
        ("vllm",),
        ok="Tokenized",
        errors=TOKENIZER_ERRORS,
    ),
    Route(
        "post",
        "/detokenize",
        tokenize_api.detokenize,
        "vLLM's detokenize",
        ("vllm",),
        ok="Detokenized",
        errors=TOKENIZER_ERRORS,
    ),
    Route(
        "get",
        "/version",
        tokenize_api.version,
        "Ponder's version, and each engine's",
        ("operations",),
        ok="Version",
    ),
    Route(
        "get",
        "/health",
        openai_api.health,
        "Liveness: the process answers",
        ("operations",),
        ok="Health",
    ),
    Route(
        "get",
        "/ready",
        openai_api.ready,
        "Readiness: every model has a reachable engine",
        ("operations",),
        ok="Readiness",
        errors=(503,),
        not_ready=True,
    ),
    Route(
        "get",
        "/metrics",
        openai_api.metrics,
        "Prometheus metrics",
        ("operations",),
        text=True,
    ),
)
"""Every route, in the order the app mounts them."""


def route(method: str, openapi_path: str) -> Route | None:
    """The route of ``method`` and the path as the OpenAPI document writes it, if listed."""
    return next((r for r in ROUTES if r.method == method and r.openapi_path == openapi_path), None)


def api_router(routes: tuple[Route, ...] = ROUTES) -> APIRouter:
    """A router with ``routes`` mounted, in their order."""
    router = APIRouter()
    for r in routes:
        router.add_api_route(
            r.path, r.handler, methods=[r.method.upper()], summary=r.summary, tags=list(r.tags)
        )
    return router
