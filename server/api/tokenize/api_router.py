"""vLLM's ``POST /tokenize`` and ``POST /detokenize``, with vLLM's bodies and answers: their
handlers and routes (:data:`ROUTES`, which :mod:`server.app.routes` mounts). Passed to the
model's engine when it is vLLM, computed with the model's tokenizer when it runs in this
process (:mod:`server.pool.tokenizers`). ``model`` names a served model (an alias too);
left out, the first the client key may use (one outside its ``models`` allow-list is the
404 of a model not served). (Anthropic's ``count_tokens`` is the Messages API's:
:mod:`server.api.messages.api_router`.)

Both need a key as ``/v1`` does. Example::

    curl -s localhost:8000/tokenize -H 'Authorization: Bearer sk-...' \\
      -d '{"model": "qwen3-4b", "prompt": "What is 17 * 23?"}'
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from pydantic import Field, model_validator

from server.routing import TOKENIZER_ERRORS, Route, client_key_of, tokenizers_of
from server.runs.request import _Open

__all__ = ["ROUTES", "DetokenizeRequest", "TokenizeRequest", "detokenize", "tokenize"]


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


def _engine_body(req: _Open) -> dict[str, Any]:
    """What the caller set, without ``model`` (the engine gets its own name)."""
    return {k: v for k, v in req.model_dump(exclude_unset=True).items() if k != "model"}


async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
    tokenizer = tokenizers_of(request).of(body.model, client_key_of(request).limits)
    return await tokenizer.tokenize(_engine_body(body))


async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
    tokenizer = tokenizers_of(request).of(body.model, client_key_of(request).limits)
    return await tokenizer.detokenize(_engine_body(body))


ROUTES: tuple[Route, ...] = (
    Route(
        "post",
        "/tokenize",
        tokenize,
        "vLLM's tokenize",
        ("vllm",),
        ok="Tokenized",
        errors=TOKENIZER_ERRORS,
    ),
    Route(
        "post",
        "/detokenize",
        detokenize,
        "vLLM's detokenize",
        ("vllm",),
        ok="Detokenized",
        errors=TOKENIZER_ERRORS,
    ),
)
"""vLLM's tokenize and detokenize."""
