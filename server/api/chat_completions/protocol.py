"""The OpenAI wire format: request models and response/chunk builders.

Request models accept fields they do not know (``extra="allow"``), as OpenAI clients
send new ones all the time; the serving layer logs their names and passes them on to the
engine (:meth:`passthrough`). Ponder's own fields are ``scaffold`` (a spec string or JSON
object), ``budget``, ``return_trace`` and ``stream_trace``.

>>> req = ChatCompletionRequest.model_validate(
...     {"model": "m", "messages": [{"role": "user", "content": "2+2?"}], "metadata": {},
...      "logprobs": True, "budget": {"max_calls": 2}}
... )
>>> req.unknown_fields(), req.requested_max_tokens(), req.passthrough()
(['logprobs', 'metadata'], None, {'metadata': {}, 'logprobs': True})
>>> usage_json(Usage(prompt_tokens=3, completion_tokens=4, calls=2))["total_tokens"]
7
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from scaffolds.engines.protocol import Usage

MAX_N = 128
"""The most choices one request may ask for."""

MODELED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "prompt",
        "n",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "stream",
        "stream_options",
    }
)
"""Request fields Ponder reads itself (and sends on to every engine call it makes)."""

PONDER_FIELDS = frozenset(
    {"scaffold", "budget", "return_trace", "stream_trace", "answer_format", "reference"}
)
"""Ponder's own request fields; never sent to an engine."""


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
    answer_format: Literal["boxed", "lenient"] | None = Field(
        default=None,
        description='Ponder: how answers are read for votes: "boxed" (the last \\boxed{} '
        'after the thinking only) or "lenient"; default: the model\'s answer_format',
    )
    return_trace: bool = Field(default=False, description="Ponder: add the run's trace")
    stream_trace: bool = Field(
        default=False,
        description="Ponder: on a stream, also send every trace event as a chunk with no "
        'choices and a "ponder": {"event": ...} field',
    )
    reference: str | None = Field(
        default=None,
        description="Ponder: the problem's known answer (ponder eval sends it); never shown "
        "to the model; a scaffold's trace may score its intermediate answers against it",
    )

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def passthrough(self) -> dict[str, Any]:
        """Every field the caller set beyond :data:`MODELED_FIELDS` and Ponder's own, as
        given (OpenAI's ``logprobs``, ``tools``, ``response_format``..., vLLM's extras)."""
        return self.model_dump(exclude_unset=True, exclude=set(MODELED_FIELDS | PONDER_FIELDS))


class ChatCompletionRequest(_CommonRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_CommonRequest):
    prompt: str | list[str]
    """One prompt, or several: each is its own run (choices ``prompt_index * n + i``);
    through ``single``, their calls are one engine request (:mod:`scaffolds.engines.coalesce`)."""


# -- responses ------------------------------------------------------------------------------
def usage_json(usage: Usage, reasoning_tokens: int | None = None) -> dict[str, Any]:
    """OpenAI usage plus cached and reasoning tokens and Ponder's ``engine_calls``.

    ``reasoning_tokens`` defaults to what the engines reported as reasoning.
    """
    reasoning = usage.reasoning_tokens if reasoning_tokens is None else reasoning_tokens
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
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
    reasoning_tokens: int | None = None,
) -> dict[str, Any]:
    """A whole (non-streamed) response. ``choices`` hold text, reasoning, finish_reason
    and the engine's own fields of the answer (``extra``: logprobs, a message's
    tool_calls...), which go in unchanged beside Ponder's."""
    out_choices: list[dict[str, Any]] = []
    for index, choice in enumerate(choices):
        own = dict(choice.get("extra") or {})
        if endpoint == "chat":
            mine = own.pop("message", None) or {}
            content = choice["text"]
            if not content and "tool_calls" in mine:
                content = None  # as the engine sent it: a tool call has no text
            message: dict[str, Any] = {"role": "assistant", "content": content, **mine}
            if choice.get("reasoning"):
                message["reasoning_content"] = choice["reasoning"]
                message["reasoning"] = choice["reasoning"]
            body_choice = {"index": index, "message": message}
        else:
            body_choice = {"index": index, "text": choice["text"]}
        body_choice |= {"finish_reason": choice["finish_reason"], "logprobs": None, **own}
        out_choices.append(body_choice)
    body: dict[str, Any] = {
        "id": response_id,
        "object": "chat.completion" if endpoint == "chat" else "text_completion",
        "created": created,
        "model": model,
        "choices": out_choices,
        "usage": usage_json(usage, reasoning_tokens),
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
    reasoning_tokens: int | None = None,
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
        body["usage"] = usage_json(usage, reasoning_tokens)
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
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One choice of a chunk: a content and/or reasoning delta, or a finish reason.

    Reasoning goes in both fields vLLM has used (``reasoning_content`` and ``reasoning``).
    ``extra`` is the engine chunk's own fields (its ``logprobs``; under ``"delta"``, a
    chat delta's ``tool_calls``), passed on unchanged.
    """
    own = dict(extra or {})
    if endpoint == "chat":
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
        if content is not None and (content or "tool_calls" not in own.get("delta", {})):
            delta["content"] = content
        if reasoning is not None:
            delta["reasoning_content"] = reasoning
            delta["reasoning"] = reasoning
        delta |= own.pop("delta", None) or {}
        choice = {"index": index, "delta": delta}
    else:
        choice = {"index": index, "text": content or ""}
        if reasoning is not None:
            choice["reasoning_content"] = reasoning
            choice["reasoning"] = reasoning
    return choice | {"finish_reason": finish_reason, "logprobs": None, **own}


def model_card(model_id: str, *, owned_by: str = "ponder", **extra: Any) -> dict[str, Any]:
    """One entry of ``GET /v1/models``."""
    return {
        "id": model_id,
        "object": "model",
        "created": int(time.time()),
        "owned_by": owned_by,
        **extra,
    }
