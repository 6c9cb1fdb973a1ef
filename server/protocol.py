"""The OpenAI wire format: request models and response/chunk builders.

Request models accept fields they do not know (``extra="allow"``), as OpenAI clients
send new ones all the time; the serving layer logs their names. Ponder's own fields are
``scaffold`` (a spec string or JSON object), ``budget``, ``return_trace`` and
``stream_trace``.

>>> req = ChatCompletionRequest.model_validate(
...     {"model": "m", "messages": [{"role": "user", "content": "2+2?"}], "metadata": {}}
... )
>>> req.unknown_fields(), req.requested_max_tokens()
(['metadata'], None)
>>> usage_json(Usage(prompt_tokens=3, completion_tokens=4, calls=2))["total_tokens"]
7
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from scaffolds.engine import Usage

MAX_N = 128
"""The most choices one request may ask for."""

SAMPLING_PASSTHROUGH = (
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "top_k",
    "min_p",
    "ignore_eos",
    "logit_bias",
)
"""Extra sampling fields handed to the engine verbatim when a request sets them."""


class _Open(BaseModel):
    """A request model that keeps unknown fields (and can list them)."""

    model_config = ConfigDict(extra="allow")

    def unknown_fields(self) -> list[str]:
        return sorted(self.model_extra or {})


class StreamOptions(_Open):
    include_usage: bool = False


class BudgetRequest(BaseModel):
    """Ponder's per-request budget; the server caps each limit with its own."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int | None = Field(default=None, ge=1, description="generated tokens, all calls")
    max_calls: int | None = Field(default=None, ge=1, description="engine calls")
    timeout_s: float | None = Field(default=None, gt=0, description="wall-clock seconds")


class ChatMessage(_Open):
    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class _CommonRequest(_Open):
    model: str
    n: int = Field(default=1, ge=1, le=MAX_N)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    scaffold: str | dict[str, Any] | None = Field(
        default=None,
        description='Ponder: the scaffold spec, e.g. "gsr(n=4)" or {"name": "gsr", "n": 4}',
    )
    budget: BudgetRequest | None = Field(default=None, description="Ponder: per-request budget")
    return_trace: bool = Field(default=False, description="Ponder: add the run's trace")
    stream_trace: bool = Field(
        default=False,
        description="Ponder: on a stream, also send every trace event as a chunk with no "
        'choices and a "ponder": {"event": ...} field',
    )

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def sampling_extra(self) -> dict[str, Any]:
        """Extra engine sampling fields the caller set (see :data:`SAMPLING_PASSTHROUGH`)."""
        out: dict[str, Any] = {}
        extra = self.model_extra or {}
        for name in SAMPLING_PASSTHROUGH:
            value = (
                getattr(self, name, None) if name in type(self).model_fields else extra.get(name)
            )
            if value is not None:
                out[name] = value
        return out


class ChatCompletionRequest(_CommonRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_CommonRequest):
    prompt: str | list[str]

    def prompt_text(self) -> str | None:
        """The single prompt, or None when the request holds several."""
        if isinstance(self.prompt, str):
            return self.prompt
        return self.prompt[0] if len(self.prompt) == 1 else None


# -- responses ------------------------------------------------------------------------------
def usage_json(usage: Usage) -> dict[str, Any]:
    """OpenAI usage plus cached tokens and Ponder's ``engine_calls``."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "engine_calls": usage.calls,
    }


Endpoint = Literal["chat", "completions"]


def completion_object(
    endpoint: Endpoint,
    *,
    response_id: str,
    created: int,
    model: str,
    choices: Sequence[Mapping[str, Any]],
    usage: Usage,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A whole (non-streamed) response. ``choices`` hold text, reasoning, finish_reason."""
    out_choices: list[dict[str, Any]] = []
    for index, choice in enumerate(choices):
        if endpoint == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": choice["text"]}
            if choice.get("reasoning"):
                message["reasoning_content"] = choice["reasoning"]
                message["reasoning"] = choice["reasoning"]
            out_choices.append(
                {
                    "index": index,
                    "message": message,
                    "finish_reason": choice["finish_reason"],
                    "logprobs": None,
                }
            )
        else:
            out_choices.append(
                {
                    "index": index,
                    "text": choice["text"],
                    "finish_reason": choice["finish_reason"],
                    "logprobs": None,
                }
            )
    body: dict[str, Any] = {
        "id": response_id,
        "object": "chat.completion" if endpoint == "chat" else "text_completion",
        "created": created,
        "model": model,
        "choices": out_choices,
        "usage": usage_json(usage),
    }
    if extra:
        body.update(extra)
    return body


def chunk_object(
    endpoint: Endpoint,
    *,
    response_id: str,
    created: int,
    model: str,
    choices: Sequence[dict[str, Any]],
    usage: Usage | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One SSE chunk; ``choices`` come from :func:`delta_choice`."""
    body: dict[str, Any] = {
        "id": response_id,
        "object": "chat.completion.chunk" if endpoint == "chat" else "text_completion",
        "created": created,
        "model": model,
        "choices": list(choices),
    }
    if usage is not None:
        body["usage"] = usage_json(usage)
    if extra:
        body.update(extra)
    return body


def delta_choice(
    endpoint: Endpoint,
    index: int,
    *,
    content: str | None = None,
    reasoning: str | None = None,
    role: bool = False,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    """One choice of a chunk: a content and/or reasoning delta, or a finish reason.

    Reasoning goes in both fields vLLM has used (``reasoning_content`` and ``reasoning``).
    """
    if endpoint == "chat":
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
        if content is not None:
            delta["content"] = content
        if reasoning is not None:
            delta["reasoning_content"] = reasoning
            delta["reasoning"] = reasoning
        return {"index": index, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
    choice: dict[str, Any] = {
        "index": index,
        "text": content or "",
        "finish_reason": finish_reason,
        "logprobs": None,
    }
    if reasoning is not None:
        choice["reasoning_content"] = reasoning
        choice["reasoning"] = reasoning
    return choice


def model_card(model_id: str, *, owned_by: str = "ponder", **extra: Any) -> dict[str, Any]:
    """One entry of ``GET /v1/models``."""
    return {
        "id": model_id,
        "object": "model",
        "created": int(time.time()),
        "owned_by": owned_by,
        **extra,
    }
