"""Every route of the API (:data:`ROUTES`), composed from the routes each API declares
beside its handlers (``ROUTES`` in ``server/api/<api>/api_router.py``, each a
:class:`~server.routing.Route`): one line per API. The rest is derived from this list:
the routes the app mounts (:func:`api_router`), the completion routes the fast path
answers (:mod:`server.app.fast_path`) and the OpenAPI document's answers and errors
(:mod:`server.app.openapi`). Adding an API is its folder under ``server/api`` and its line
here.

The order is the OpenAPI document's order of paths.

>>> [(r.fast, r.path, r.request.__name__) for r in ROUTES if r.fast]
[('chat', '/v1/chat/completions', 'ChatCompletionRequest'), \
('completions', '/v1/completions', 'CompletionRequest')]
>>> route("get", "/v1/models/{model_id}").errors
(404,)
"""

from __future__ import annotations

from fastapi import APIRouter

from server.api.chat_completions import api_router as chat_completions
from server.api.completions import api_router as completions
from server.api.messages import api_router as messages
from server.api.models import api_router as models
from server.api.ops import api_router as ops
from server.api.responses import api_router as responses
from server.api.tokenize import api_router as tokenize
from server.routing import Route

__all__ = ["ROUTES", "api_router", "route"]

ROUTES: tuple[Route, ...] = (
    *chat_completions.ROUTES,
    *completions.ROUTES,
    *models.ROUTES,
    *responses.ROUTES,
    *messages.ROUTES,
    *tokenize.ROUTES,
    *ops.ROUTES,
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
