"""Anthropic's Messages API: the handlers of ``POST /v1/messages`` and
``POST /v1/messages/count_tokens``, and their routes (:data:`ROUTES`, which
:mod:`server.app.routes` mounts).

``/v1/messages`` runs the same scaffolds, budgets and cancellation as chat completions
(planned as one: :meth:`Serving.handle <server.runs.handler.Serving.handle>` with the
:class:`~server.api.messages.serving.MessagesFormat`). ``count_tokens`` is Anthropic's
count of a Messages request's input (``{"input_tokens": N}``): its system prompt,
messages and tools as the model's chat template renders them for one call (a scaffold's
steps add their own prompts to that), with the model's tokenizer
(:mod:`server.pool.tokenizers`). Example::

    curl -s localhost:8000/v1/messages -H 'x-api-key: sk-...' \\
      -d '{"model": "qwen3-4b", "max_tokens": 512,
           "messages": [{"role": "user", "content": "2+2?"}]}'
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import Field

from server.api.messages.protocol import MessagesRequest, chat_from_messages
from server.api.messages.serving import MessagesFormat
from server.routing import TOKENIZER_ERRORS, Route, client_key_of, serving_of, tokenizers_of

__all__ = ["ROUTES", "CountTokensRequest", "count_tokens", "create_message"]


class CountTokensRequest(MessagesRequest):
    """Anthropic's ``count_tokens``: a Messages request without ``max_tokens``."""

    max_tokens: int = Field(default=1, ge=1, description="ignored")


async def create_message(body: MessagesRequest, request: Request) -> Response:
    wire = MessagesFormat(body)
    return await serving_of(request).handle(
        "chat", wire.chat(), request.receive, wire, key=client_key_of(request)
    )


async def count_tokens(body: CountTokensRequest, request: Request) -> dict[str, int]:
    chat = chat_from_messages(body)
    fields: dict[str, Any] = {
        "messages": [m.model_dump(exclude_none=True) for m in chat.messages],
        "add_generation_prompt": True,
    }
    if tools := (chat.model_extra or {}).get("tools"):
        fields["tools"] = tools
    tokenizer = tokenizers_of(request).of(body.model, client_key_of(request).limits)
    counted = await tokenizer.tokenize(fields)
    return {"input_tokens": int(counted["count"])}


ROUTES: tuple[Route, ...] = (
    Route(
        "post",
        "/v1/messages",
        create_message,
        "An Anthropic message through a scaffold",
        ("anthropic",),
        ok="Message",
        runs=True,
    ),
    Route(
        "post",
        "/v1/messages/count_tokens",
        count_tokens,
        "Count a message's input tokens",
        ("anthropic",),
        ok="TokenCount",
        errors=TOKENIZER_ERRORS,
    ),
)
"""The Messages API's routes."""
