"""OpenAI's text completions: the handler of ``POST /v1/completions``, which hands the
parsed request to :class:`~server.runs.handler.Serving`, and its route (:data:`ROUTES`,
which :mod:`server.app.routes` mounts). The request model,
:class:`~server.runs.request.CompletionRequest`, is the run path's, as chat's is.

``/v1/*`` is behind Bearer auth (see :mod:`server.app.auth`). Example::

    curl -s localhost:8000/v1/completions -H 'Authorization: Bearer sk-...' \\
      -d '{"model": "qwen3-4b+gsr4", "prompt": "Q: 2+2?\\nA:"}'
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from server.routing import Route, client_key_of, serving_of
from server.runs.request import CompletionRequest

__all__ = ["ROUTES", "completions"]


async def completions(body: CompletionRequest, request: Request) -> Response:
    return await serving_of(request).handle(
        "completions", body, request.receive, key=client_key_of(request)
    )


ROUTES: tuple[Route, ...] = (
    Route(
        "post",
        "/v1/completions",
        completions,
        "Text completion through a scaffold",
        ("openai",),
        ok="TextCompletion",
        runs=True,
        fast="completions",
    ),
)
"""The text completions route."""
