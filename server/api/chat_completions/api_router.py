"""The OpenAI routes' handlers (chat and text completions, models) and the operations
routes' (health, readiness, metrics): each parses its request and hands it to
:class:`~server.runs.handler.Serving`. :mod:`server.app.routes` lists them with their
paths (a handler has no docstring: FastAPI would put it in the OpenAPI document).

``/v1/*`` is behind Bearer auth (see :mod:`server.app.auth`); ``/health``, ``/ready`` and
``/metrics`` are open. Example::

    curl -s localhost:8000/v1/chat/completions -H 'Authorization: Bearer sk-...' \\
      -d '{"model": "qwen3-4b+gsr4", "messages": [{"role": "user", "content": "2+2?"}]}'
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from scaffolds.errors import NotFoundError
from server.runs.handler import Serving
from server.runs.request import ChatCompletionRequest, CompletionRequest
from server.telemetry.metrics import CONTENT_TYPE, Metrics

__all__ = [
    "chat_completions",
    "completions",
    "get_model",
    "health",
    "list_models",
    "metrics",
    "ready",
]


def _serving(request: Request) -> Serving:
    serving: Serving = request.app.state.serving
    return serving


async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    return await _serving(request).handle("chat", body, request.receive)


async def completions(body: CompletionRequest, request: Request) -> Response:
    return await _serving(request).handle("completions", body, request.receive)


async def list_models(request: Request) -> dict[str, Any]:
    return {"object": "list", "data": _serving(request).model_cards()}


async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    for card in _serving(request).model_cards():
        if card["id"] == model_id:
            return card
    raise NotFoundError(f"the model {model_id!r} does not exist", param="model")


async def health() -> dict[str, str]:
    return {"status": "ok"}


async def ready(request: Request) -> JSONResponse:
    ok, detail = await _serving(request).readiness()
    return JSONResponse(detail, status_code=200 if ok else 503)


async def metrics(request: Request) -> Response:
    registry: Metrics = request.app.state.metrics
    return Response(registry.render(), media_type=CONTENT_TYPE)
