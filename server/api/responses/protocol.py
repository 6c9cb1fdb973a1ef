"""The Responses API wire format (``POST /v1/responses``): its request, and the request
as the chat completion Ponder runs.

A Responses request is answered by the same scaffold run as a chat completion: its
``input`` (a string, or message, ``function_call`` and ``function_call_output`` items)
becomes chat messages after the stored conversation of ``previous_response_id``, with
``instructions`` as the system message (not carried over to a follow-up, as OpenAI
does); ``max_output_tokens``, ``text.format`` and function ``tools`` become their chat
fields. Ponder's own fields (:class:`~server.runs.request.PonderFields`) work as on chat
completions.

>>> req = ResponsesRequest.model_validate(
...     {"model": "m", "input": "2+2?", "instructions": "Be brief.", "max_output_tokens": 9})
>>> chat = chat_from_responses(req, history=[])
>>> [m.role for m in chat.messages], chat.max_tokens
(['system', 'user'], 9)
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from scaffolds.errors import InvalidRequestError
from server.runs.request import ChatCompletionRequest, EffortAsk, PonderFields, _Open, chat_request

__all__ = [
    "ResponsesRequest",
    "chat_from_responses",
    "chat_tools",
    "input_messages",
    "responses_usage_json",
]

RESPONSES_ONLY = frozenset(
    {
        "input",
        "instructions",
        "max_output_tokens",
        "previous_response_id",
        "store",
        "text",
        "tools",
        "tool_choice",
        "metadata",
        "reasoning",
        "include",
        "truncation",
        "background",
        "conversation",
        "prompt",
        "service_tier",
        "prompt_cache_key",
        "safety_identifier",
        "user",
        "max_tool_calls",
        "top_logprobs",
    }
)
"""Fields of a Responses request that are not chat fields as they stand (read here or
only echoed); every other field the caller sets goes on as a chat field."""


class _ResponsesFields(_Open):
    """OpenAI's fields of a Responses request."""

    model: str
    input: str | list[dict[str, Any]] = Field(min_length=1)
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    reasoning: dict[str, Any] | None = Field(
        default=None,
        description="OpenAI: reasoning options; its effort (minimal, low, medium, high; Ponder "
        "also takes auto), on a model with an effort policy, selects the scaffold and budget "
        "the policy names for the level (the answer's ponder.effort says which ran and why); "
        "a scaffold named in the request (its scaffold field, or a spec or alias in its "
        "model) wins over it. Otherwise the effort goes to the engine as the chat field "
        "reasoning_effort.",
    )

    def effort_ask(self) -> EffortAsk | None:
        """The effort ``reasoning.effort`` asks for (None: it asks for none).

        >>> ResponsesRequest(model="m", input="x", reasoning={"effort": "low"}).effort_ask().level
        'low'
        """
        effort = (self.reasoning or {}).get("effort")
        if effort is None:
            return None
        if not isinstance(effort, str):
            raise InvalidRequestError(
                "reasoning.effort: must be a string", param="reasoning.effort"
            )
        return EffortAsk("reasoning.effort", level=effort, forward={"reasoning_effort": effort})


class ResponsesRequest(PonderFields, _ResponsesFields):
    """``POST /v1/responses``; unknown fields go on to the engine as on chat."""


def input_messages(value: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Responses ``input`` as chat messages.

    >>> input_messages([{"role": "developer", "content": [{"type": "input_text", "text": "Hi"}]},
    ...                 {"type": "function_call_output", "call_id": "c1", "output": "19C"}])
    [{'role': 'system', 'content': 'Hi'}, {'role': 'tool', 'tool_call_id': 'c1', 'content': '19C'}]
    """
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    out: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise InvalidRequestError(
                    f"input.{index}.role: must be user, assistant, system or developer",
                    param=f"input.{index}.role",
                )
            out.append(
                {
                    "role": "system" if role == "developer" else role,
                    "content": _content(item.get("content"), f"input.{index}.content"),
                }
            )
        elif kind == "function_call":
            call = {
                "id": item.get("call_id") or item.get("id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
            }
            if out and out[-1]["role"] == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _content(output, f"input.{index}")
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
        elif kind == "reasoning":
            continue  # a scaffold's steps are not replayed into the next turn
        else:
            raise InvalidRequestError(
                f"input.{index}.type: {kind!r} is not supported (message, function_call, "
                "function_call_output, reasoning)",
                param=f"input.{index}.type",
            )
    return out


def _content(content: Any, param: str) -> str:
    """Message content: a string, or text parts joined into one."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequestError(f"{param}: must be a string or a list of parts", param=param)
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text"):
            raise InvalidRequestError(
                f"{param}.{index}: only text content parts are supported (got {kind!r})",
                param=f"{param}.{index}",
            )
        texts.append(str(part.get("text", "")))
    return "".join(texts)


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Responses function tools as chat tools (other tool types are refused).

    >>> chat_tools([{"type": "function", "name": "f", "parameters": {"type": "object"}}])
    [{'type': 'function', 'function': {'name': 'f', 'parameters': {'type': 'object'}}}]
    """
    if not tools:
        return None
    out = []
    for index, tool in enumerate(tools):
        if tool.get("type") != "function":
            raise InvalidRequestError(
                f"tools.{index}.type: only function tools are supported (got {tool.get('type')!r})",
                param=f"tools.{index}.type",
            )
        function = {k: v for k, v in tool.items() if k != "type"}
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: str | dict[str, Any] | None) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt.get("type") == "json_schema":
        schema = {k: v for k, v in fmt.items() if k != "type"}
        return {"type": "json_schema", "json_schema": schema}
    return {"type": fmt["type"]}


def chat_from_responses(
    req: ResponsesRequest, history: list[dict[str, Any]]
) -> ChatCompletionRequest:
    """The chat completion that answers the Responses request ``req`` after the stored
    ``history``."""
    messages = list(history) + input_messages(req.input)
    if req.instructions:
        messages.insert(0, {"role": "system", "content": req.instructions})
    fields = {
        "model": req.model,
        "messages": messages,
        "stream": req.stream,
        "stream_options": {"include_usage": True} if req.stream else None,
        "max_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        **req.ponder_fields(),
    }
    optional = {
        "tools": chat_tools(req.tools),
        "tool_choice": _tool_choice(req.tool_choice),
        "parallel_tool_calls": req.parallel_tool_calls,
        "response_format": _response_format(req.text),
    }
    chat = chat_request("Responses", req, RESPONSES_ONLY, fields, optional)
    return chat.with_effort(req.effort_ask())


def responses_usage_json(
    prompt: int, completion: int, *, cached: int, reasoning: int, calls: int
) -> dict[str, Any]:
    """A run's usage as the Responses API's JSON, with Ponder's ``engine_calls`` (the other
    way from reading an engine's Responses usage: :mod:`server.pool.engine_responses`).

    >>> responses_usage_json(5, 7, cached=0, reasoning=3, calls=2)["total_tokens"]
    12
    """
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
        "engine_calls": calls,
    }
