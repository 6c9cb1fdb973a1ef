"""OpenAI's chat completions: the handler of ``POST /v1/chat/completions``, which hands the
parsed request to :class:`~server.runs.handler.Serving`, and its route (:data:`ROUTES`,
which :mod:`server.app.routes` mounts; a handler has no docstring: FastAPI would put it in
the OpenAPI document).

``/v1/*`` is behind Bearer auth (see :mod:`server.app.auth`). Example::

    curl -s localhost:8000/v1/chat/completions -H 'Authorization: Bearer sk-...' \\
      -d '{"model": "qwen3-4b+gsr4", "messages": [{"role": "user", "content": "2+2?"}]}'
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from server.routing import Route, client_key_of, serving_of
from server.runs.request import ChatCompletionRequest

__all__ = ["ROUTES", "chat_completions"]


async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    return await serving_of(request).handle(
        "chat", body, request.receive, key=client_key_of(request)
    )


ROUTES: tuple[Route, ...] = (
    Route(
        "post",
        "/v1/chat/completions",
        chat_completions,
        "Chat completion through a scaffold",
        ("openai",),
        ok="ChatCompletion",
        runs=True,
        fast="chat",
    ),
)
"""The chat completions route."""
