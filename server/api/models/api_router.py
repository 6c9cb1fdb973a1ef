"""OpenAI's models: the handlers of ``GET /v1/models`` (the served models and scaffold
aliases) and ``GET /v1/models/{id}`` (one of them), from the cards
:meth:`Serving.model_cards <server.runs.handler.Serving.model_cards>` gives, and their
routes (:data:`ROUTES`, which :mod:`server.app.routes` mounts).

A client key whose ``models`` allow-list leaves a model out does not see it: the list
omits it, and its card is the same 404 as a model that does not exist (as is a run of it:
:meth:`~server.pool.served_models.ServedModels.resolve`).

``/v1/*`` is behind Bearer auth (see :mod:`server.app.auth`). Example::

    curl -s localhost:8000/v1/models -H 'Authorization: Bearer sk-...'
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from server.pool.served_models import model_not_found
from server.routing import Route, client_key_of, serving_of

__all__ = ["ROUTES", "get_model", "list_models"]


async def list_models(request: Request) -> dict[str, Any]:
    return {"object": "list", "data": serving_of(request).model_cards(client_key_of(request))}


async def get_model(model_id: str, request: Request) -> dict[str, Any]:
    for card in serving_of(request).model_cards(client_key_of(request)):
        if card["id"] == model_id:
            return card
    raise model_not_found(model_id)


ROUTES: tuple[Route, ...] = (
    Route(
        "get",
        "/v1/models",
        list_models,
        "Served models and scaffold aliases",
        ("openai",),
        ok="ModelList",
    ),
    Route(
        "get",
        "/v1/models/{model_id:path}",
        get_model,
        "One model or alias",
        ("openai",),
        ok="Model",
        errors=(404,),
    ),
)
"""The model list and the model card."""
