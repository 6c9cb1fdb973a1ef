"""Thin routers: parse the request, hand it to :class:`~server.runs.handler.Serving`.

``/v1/*`` is behind Bearer auth (see :mod:`server.app.auth`); ``/health``, ``/ready`` and
``/metrics`` are open. Example::

    curl -s localhost:8000/v1/chat/completions -H 'Authorization: Bearer sk-...' \\
      -d '{"model": "qwen3-4b+gsr4", "messages": [{"role": "user", "content": "2+2?"}]}'
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from scaffolds.errors import NotFoundError
from server.runs.handler import Serving
from server.runs.request import ChatCompletionRequest, CompletionRequest
from server.telemetry.metrics import CONTENT_TYPE, Metrics


def _serving(request: Request) -> Serving:
    serving: Serving = request.app.state.serving
    return serving


def api_router() -> APIRouter:
    """The OpenAI-compatible ``/v1`` routes."""
    router = APIRouter(prefix="/v1", tags=["openai"])

    @router.post("/chat/completions", summary="Chat completion through a scaffold")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        return await _serving(request).handle("chat", body, request.receive)

    @router.post("/completions", summary="Text completion through a scaffold")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        return await _serving(request).handle("completions", body, request.receive)

    @router.get("/models", summary="Served models and scaffold aliases")
    async def list_models(request: Request) -> dict[str, Any]:
        return {"object": "list", "data": _serving(request).model_cards()}

    @router.get("/models/{model_id:path}", summary="One model or alias")
    async def get_model(model_id: str, request: Request) -> dict[str, Any]:
        for card in _serving(request).model_cards():
            if card["id"] == model_id:
                return card
        raise NotFoundError(f"the model {model_id!r} does not exist", param="model")

    return router


def ops_router() -> APIRouter:
    """Liveness, readiness and metrics (no auth)."""
    router = APIRouter(tags=["operations"])

    @router.get("/health", summary="Liveness: the process answers")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/ready", summary="Readiness: every model has a reachable engine")
    async def ready(request: Request) -> JSONResponse:
        ok, detail = await _serving(request).readiness()
        return JSONResponse(detail, status_code=200 if ok else 503)

    @router.get("/metrics", summary="Prometheus metrics")
    async def metrics(request: Request) -> Response:
        registry: Metrics = request.app.state.metrics
        return Response(registry.render(), media_type=CONTENT_TYPE)

    return router
