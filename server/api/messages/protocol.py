"""Anthropic's Messages wire format (``POST /v1/messages``) and the request as the chat
completion Ponder runs.

``system`` becomes the system message; content blocks become chat messages (``text``
joined, ``tool_use`` as the assistant's tool calls, ``tool_result`` as tool messages);
``max_tokens``, ``stop_sequences`` and ``tools`` (``input_schema`` as the parameters)
become their chat fields, and ``tool_choice`` its chat value (``any`` is ``required``).
Ponder's own fields (:class:`~server.runs.request.PonderFields`) work as on chat
completions.

>>> req = MessagesRequest.model_validate({"model": "m", "max_tokens": 64, "system": "Brief.",
...     "messages": [{"role": "user", "content": [{"type": "text", "text": "2+2?"}]}]})
>>> chat = chat_from_messages(req)
>>> [(m.role, m.content) for m in chat.messages], chat.max_tokens
([('system', 'Brief.'), ('user', '2+2?')], 64)
>>> STOP_REASONS["tool_calls"], STOP_REASONS["length"]
('tool_use', 'max_tokens')
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from scaffolds.errors import InvalidRequestError
from server.runs.request import ChatCompletionRequest, EffortAsk, PonderFields, _Open, chat_request

__all__ = ["STOP_REASONS", "MessagesRequest", "chat_from_messages", "chat_messages"]

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
"""Chat finish reasons as Anthropic's stop reasons (anything else is ``end_turn``)."""

MESSAGES_ONLY = frozenset(
    {
        "messages",
        "system",
        "max_tokens",
        "stop_sequences",
        "tools",
        "tool_choice",
        "thinking",
        "metadata",
        "container",
        "mcp_servers",
        "service_tier",
        "context_management",
    }
)
"""Fields read here (or only accepted); every other field the caller sets goes on as a
chat field (``top_k``, vLLM's extras)."""


class AnthropicMessage(_Open):
    role: str
    content: str | list[dict[str, Any]]


class _MessagesFields(_Open):
    """Anthropic's fields of a Messages request."""

    model: str
    max_tokens: int = Field(ge=1)
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = Field(
        default=None,
        description='Anthropic: extended thinking, {"type": "enabled", "budget_tokens": N}. '
        "On a model with an effort policy the budget selects the cheapest level whose budget "
        "covers it, whose scaffold runs with N as its budget of generated tokens (the "
        "answer's ponder.effort says which ran and why); a scaffold named in the request "
        "(its scaffold field, or a spec or alias in its model) wins over it. Otherwise it is "
        "not sent on (chat completions have no such field).",
    )
    metadata: dict[str, Any] | None = None

    def effort_ask(self) -> EffortAsk | None:
        """The effort an enabled ``thinking`` asks for: its budget (None: none asked).

        >>> MessagesRequest(model="m", max_tokens=9, messages=[{"role": "user", "content": "x"}],
        ...     thinking={"type": "enabled", "budget_tokens": 2048}).effort_ask().budget_tokens
        2048
        """
        thinking = self.thinking or {}
        if thinking.get("type") != "enabled":
            return None
        budget = thinking.get("budget_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise InvalidRequestError(
                "thinking.budget_tokens: must be a positive integer when thinking is enabled",
                param="thinking.budget_tokens",
            )
        return EffortAsk("thinking.budget_tokens", budget_tokens=budget)


class MessagesRequest(PonderFields, _MessagesFields):
    """``POST /v1/messages``; unknown fields go on to the engine as on chat."""


def _text(blocks: Any, param: str) -> str:
    if isinstance(blocks, str):
        return blocks
    texts = []
    for index, block in enumerate(blocks or ()):
        if not isinstance(block, dict) or block.get("type") != "text":
            kind = block.get("type") if isinstance(block, dict) else None
            raise InvalidRequestError(
                f"{param}.{index}: only text blocks are supported here (got {kind!r})",
                param=f"{param}.{index}",
            )
        texts.append(str(block.get("text", "")))
    return "".join(texts)


def chat_messages(req: MessagesRequest) -> list[dict[str, Any]]:
    """The system prompt and the messages as chat messages.

    >>> req = MessagesRequest.model_validate({"model": "m", "max_tokens": 8, "messages": [
    ...     {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
    ...      "name": "f", "input": {"a": 1}}]},
    ...     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
    ...      "content": "ok"}]}]})
    >>> [(m["role"], m.get("tool_calls", [{}])[0].get("id"), m.get("content")) for m in
    ...  chat_messages(req)]
    [('assistant', 't1', None), ('tool', None, 'ok')]
    """
    out: list[dict[str, Any]] = []
    if req.system:
        out.append({"role": "system", "content": _text(req.system, "system")})
    for i, message in enumerate(req.messages):
        param = f"messages.{i}.content"
        if message.role not in ("user", "assistant"):
            raise InvalidRequestError(
                f"messages.{i}.role: must be user or assistant", param=f"messages.{i}.role"
            )
        if isinstance(message.content, str):
            out.append({"role": message.role, "content": message.content})
            continue
        texts: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for j, block in enumerate(message.content):
            kind = block.get("type")
            if kind == "text":
                texts.append(block)
            elif kind in ("thinking", "redacted_thinking"):
                continue  # a scaffold's steps are not replayed into the next turn
            elif kind == "tool_use" and message.role == "assistant":
                arguments = json.dumps(block.get("input") or {})
                function = {"name": block.get("name"), "arguments": arguments}
                calls.append({"id": block.get("id"), "type": "function", "function": function})
            elif kind == "tool_result" and message.role == "user":
                result = _text(block.get("content"), f"{param}.{j}.content")
                results.append(
                    {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": result}
                )
            else:
                raise InvalidRequestError(
                    f"{param}.{j}: {kind!r} blocks are not supported in a {message.role} message",
                    param=f"{param}.{j}",
                )
        text = _text(texts, param)
        if calls:
            out.append({"role": "assistant", "content": text or None, "tool_calls": calls})
            continue
        out += results
        if texts or not results:
            out.append({"role": message.role, "content": text})
    return out


def _tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    out = []
    for tool in tools:
        function = {"name": tool.get("name"), "parameters": tool.get("input_schema") or {}}
        if tool.get("description"):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: dict[str, Any] | None) -> Any:
    kind = (choice or {}).get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice and choice.get("name")}}
    return {"any": "required", "auto": "auto", "none": "none"}.get(kind or "")


def chat_from_messages(req: MessagesRequest) -> ChatCompletionRequest:
    """The chat completion that answers the Messages request ``req``."""
    fields = {
        "model": req.model,
        "messages": chat_messages(req),
        "max_tokens": req.max_tokens,
        "stream": req.stream,
        "stream_options": {"include_usage": True} if req.stream else None,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "stop": req.stop_sequences,
        **req.ponder_fields(),
    }
    optional = {"tools": _tools(req.tools), "tool_choice": _tool_choice(req.tool_choice)}
    chat = chat_request("Messages", req, MESSAGES_ONLY, fields, optional)
    return chat.with_effort(req.effort_ask())
