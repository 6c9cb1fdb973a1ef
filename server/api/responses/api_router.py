"""OpenAI's Responses API: the handlers of ``/v1/responses`` (create, retrieve, delete) and
of a stored response's input items, and their routes (:data:`ROUTES`, which
:mod:`server.app.routes` mounts).

A response runs the same scaffolds, budgets and cancellation as chat completions (planned
as one: :meth:`Serving.handle <server.runs.handler.Serving.handle>` with the
:class:`~server.api.responses.serving.ResponsesFormat`).
``GET /v1/responses/{id}/input_items`` lists a stored response's input items, in OpenAI's
list shape (:mod:`server.api.responses.input_items`); a 404 as ``GET /v1/responses/{id}``.
Example::

    curl -s localhost:8000/v1/responses -H 'Authorization: Bearer sk-...' \\
      -d '{"model": "qwen3-4b+gsr4", "input": "What is 17 * 23?"}'
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Query, Request
from fastapi.responses import Response

from scaffolds.errors import NotFoundError
from server.api.responses.input_items import MAX_LIMIT, input_items_page
from server.api.responses.protocol import ResponsesRequest
from server.api.responses.serving import prepare
from server.routing import Route, client_key_of, serving_of, store_of
from server.store.response_store import StoredResponse

__all__ = ["ROUTES", "create_response", "delete_response", "get_response", "list_input_items"]


async def create_response(body: ResponsesRequest, request: Request) -> Response:
    wire = await prepare(store_of(request), body)
    return await serving_of(request).handle(
        "chat", wire.chat(), request.receive, wire, key=client_key_of(request)
    )


def _not_found(response_id: str) -> NotFoundError:
    return NotFoundError(f"no stored response with id {response_id!r}", param="id")


async def _stored(request: Request, response_id: str) -> StoredResponse:
    stored = await store_of(request).get(response_id)
    if stored is None:
        raise _not_found(response_id)
    return stored


async def get_response(response_id: str, request: Request) -> dict[str, Any]:
    return (await _stored(request, response_id)).body


async def delete_response(response_id: str, request: Request) -> dict[str, Any]:
    if not await store_of(request).delete(response_id):
        raise _not_found(response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}


async def list_input_items(
    response_id: str,
    request: Request,
    limit: int = Query(default=20, ge=1, le=MAX_LIMIT),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> dict[str, Any]:
    stored = await _stored(request, response_id)
    return input_items_page(stored, limit=limit, order=order, after=after)


ROUTES: tuple[Route, ...] = (
    Route(
        "post",
        "/v1/responses",
        create_response,
        "A response through a scaffold",
        ("responses",),
        ok="Response",
        runs=True,
    ),
    Route(
        "get",
        "/v1/responses/{response_id}",
        get_response,
        "A stored response",
        ("responses",),
        ok="Response",
        errors=(404, 503),
    ),
    Route(
        "delete",
        "/v1/responses/{response_id}",
        delete_response,
        "Forget a stored response",
        ("responses",),
        ok="ResponseDeleted",
        errors=(404, 503),
    ),
    Route(
        "get",
        "/v1/responses/{response_id}/input_items",
        list_input_items,
        "A stored response's input items",
        ("responses",),
        ok="InputItemList",
        errors=(400, 404, 503),
    ),
)
"""The Responses API's routes."""
