"""The routes clients expect beside the ones that run scaffolds.

* ``GET /v1/responses/{id}/input_items``: a stored response's input items, in OpenAI's
  list shape (:mod:`server.api.responses.input_items`); a 404 as ``GET /v1/responses/{id}``.
* ``POST /v1/messages/count_tokens``: Anthropic's count of a Messages request's input
  (``{"input_tokens": N}``): its system prompt, messages and tools as the model's chat
  template renders them for one call (a scaffold's steps add their own prompts to that).
* vLLM's ``POST /tokenize`` and ``POST /detokenize``, with vLLM's bodies and answers:
  passed to the model's engine when it is vLLM, computed with the model's tokenizer when
  it runs in this process (:mod:`server.pool.tokenizers`). ``model`` names a served model
  (an alias too); left out, the first.
* ``GET /version``: Ponder's version in ``version`` (as vLLM's ``{"version": ...}``), and
  per base model in ``engines`` its engine's kind and version (a vLLM engine's own
  ``/version``).

``/tokenize`` and ``/detokenize`` need a key as ``/v1`` does; ``/version`` is open, as
``/health`` is. Example::

    curl -s localhost:8000/tokenize -H 'Authorization: Bearer sk-...' \\
      -d '{"model": "qwen3-4b", "prompt": "What is 17 * 23?"}'
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import Field, model_validator

from scaffolds.core.errors import NotFoundError
from server.api.messages.protocol import MessagesRequest, chat_request
from server.api.responses.input_items import MAX_LIMIT, input_items_page
from server.pool.tokenizers import Tokenizers
from server.runs.handler import Serving
from server.runs.request import _Open

__all__ = ["CountTokensRequest", "DetokenizeRequest", "TokenizeRequest", "companion_router"]


class TokenizeRequest(_Open):
    """vLLM's ``/tokenize``: a ``prompt`` (its completion form) or ``messages`` (chat)."""

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_special_tokens: bool | None = Field(
        default=None, description="default: true for a prompt, false for messages"
    )
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    return_token_strs: bool | None = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("send either prompt or messages")
        return self


class DetokenizeRequest(_Open):
    """vLLM's ``/detokenize``."""

    model: str | None = None
    tokens: list[int]


class CountTokensRequest(MessagesRequest):
    """Anthropic's ``count_tokens``: a Messages request without ``max_tokens``."""

    max_tokens: int = Field(default=1, ge=1, description="ignored")


def _serving(request: Request) -> Serving:
    serving: Serving = request.app.state.serving
    return serving


def _tokenizers(request: Request) -> Tokenizers:
    tokenizers: Tokenizers = request.app.state.tokenizers
    return tokenizers


def _engine_body(req: _Open) -> dict[str, Any]:
    """What the caller set, without ``model`` (the engine gets its own name)."""
    return {k: v for k, v in req.model_dump(exclude_unset=True).items() if k != "model"}


def companion_router() -> APIRouter:
    """The routes of the module docstring."""
    router = APIRouter()

    @router.get(
        "/v1/responses/{response_id}/input_items",
        summary="A stored response's input items",
        tags=["responses"],
    )
    async def list_input_items(
        response_id: str,
        request: Request,
        limit: int = Query(default=20, ge=1, le=MAX_LIMIT),
        order: Literal["asc", "desc"] = "desc",
        after: str | None = None,
    ) -> dict[str, Any]:
        stored = await _serving(request).responses.get(response_id)
        if stored is None:
            raise NotFoundError(f"no stored response with id {response_id!r}", param="id")
        return input_items_page(stored, limit=limit, order=order, after=after)

    @router.post(
        "/v1/messages/count_tokens", summary="Count a message's input tokens", tags=["anthropic"]
    )
    async def count_tokens(body: CountTokensRequest, request: Request) -> dict[str, int]:
        chat = chat_request(body)
        fields: dict[str, Any] = {
            "messages": [m.model_dump(exclude_none=True) for m in chat.messages],
            "add_generation_prompt": True,
        }
        if tools := (chat.model_extra or {}).get("tools"):
            fields["tools"] = tools
        counted = await _tokenizers(request).of(body.model).tokenize(fields)
        return {"input_tokens": int(counted["count"])}

    @router.post("/tokenize", summary="vLLM's tokenize", tags=["vllm"])
    async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
        return await _tokenizers(request).of(body.model).tokenize(_engine_body(body))

    @router.post("/detokenize", summary="vLLM's detokenize", tags=["vllm"])
    async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
        return await _tokenizers(request).of(body.model).detokenize(_engine_body(body))

    @router.get("/version", summary="Ponder's version, and each engine's", tags=["operations"])
    async def version(request: Request) -> dict[str, Any]:
        engines = await _tokenizers(request).versions()
        return {"version": request.app.version, "engines": engines}

    return router
