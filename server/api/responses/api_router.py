"""The APIs agents and SDKs use besides chat: OpenAI's Responses and Anthropic's Messages.

Both run the same scaffolds, budgets and cancellation as chat completions (they are
planned as one: :meth:`Serving.handle <server.runs.handler.Serving.handle>` with
their own :class:`~server.runs.wire.WireFormat`). Example::

    curl -s localhost:8000/v1/responses -H 'Authorization: Bearer sk-...' \\
      -d '{"model": "qwen3-4b+gsr4", "input": "What is 17 * 23?"}'
    curl -s localhost:8000/v1/messages -H 'x-api-key: sk-...' \\
      -d '{"model": "qwen3-4b", "max_tokens": 512,
           "messages": [{"role": "user", "content": "2+2?"}]}'
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from scaffolds.errors import NotFoundError
from server.api.messages.protocol import MessagesRequest
from server.api.messages.serving import MessagesFormat
from server.api.responses.protocol import ResponsesRequest
from server.api.responses.serving import prepare
from server.runs.handler import Serving

__all__ = ["agent_router"]


def _serving(request: Request) -> Serving:
    serving: Serving = request.app.state.serving
    return serving


def agent_router() -> APIRouter:
    """``/v1/responses`` (create, retrieve, delete) and ``/v1/messages``."""
    router = APIRouter(prefix="/v1")

    @router.post("/responses", summary="A response through a scaffold", tags=["responses"])
    async def create_response(body: ResponsesRequest, request: Request) -> Response:
        serving = _serving(request)
        wire = await prepare(serving.responses, body)
        return await serving.handle("chat", wire.chat(), request.receive, wire)

    @router.get("/responses/{response_id}", summary="A stored response", tags=["responses"])
    async def get_response(response_id: str, request: Request) -> dict[str, Any]:
        stored = await _serving(request).responses.get(response_id)
        if stored is None:
            raise NotFoundError(f"no stored response with id {response_id!r}", param="id")
        return stored.body

    @router.delete(
        "/responses/{response_id}", summary="Forget a stored response", tags=["responses"]
    )
    async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
        if not await _serving(request).responses.delete(response_id):
            raise NotFoundError(f"no stored response with id {response_id!r}", param="id")
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    @router.post("/messages", summary="An Anthropic message through a scaffold", tags=["anthropic"])
    async def create_message(body: MessagesRequest, request: Request) -> Response:
        wire = MessagesFormat(body)
        return await _serving(request).handle("chat", wire.chat(), request.receive, wire)

    return router
