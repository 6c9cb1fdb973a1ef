"""Chat prompts as :class:`~scaffolds.engines.protocol.Message` tuples: built from text,
or read from OpenAI-style message dicts (a request's ``messages``).

>>> [m.role for m in chat("What is 2+2?", system="Answer briefly.")]
['system', 'user']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scaffolds.engines.protocol import Message
from scaffolds.errors import InvalidRequestError

__all__ = ["chat", "messages_from_openai"]


def chat(*contents: str, system: str | None = None) -> tuple[Message, ...]:
    """Build a user-turn chat prompt: ``chat("hi")`` -> ``(Message("user", "hi"),)``."""
    messages: list[Message] = []
    if system is not None:
        messages.append(Message("system", system))
    messages.extend(Message("user", text) for text in contents)
    return tuple(messages)


def messages_from_openai(raw: Sequence[Mapping[str, Any]]) -> tuple[Message, ...]:
    """Convert OpenAI-style message dicts (string or text-part content) to :class:`Message`,
    keeping an assistant turn's ``tool_calls`` and a tool turn's ``tool_call_id``.

    >>> call = {"id": "c1", "type": "function",
    ...         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    >>> turns = messages_from_openai([{"role": "assistant", "content": None, "tool_calls": [call]},
    ...                               {"role": "tool", "tool_call_id": "c1", "content": "19C"}])
    >>> [m.to_openai() for m in turns] == [
    ...     {"role": "assistant", "content": None, "tool_calls": [call]},
    ...     {"role": "tool", "content": "19C", "tool_call_id": "c1"}]
    True
    """
    out: list[Message] = []
    for i, item in enumerate(raw):
        role = item.get("role")
        if role not in ("system", "user", "assistant", "tool", "developer"):
            raise InvalidRequestError(f"unknown role {role!r}", param=f"messages.{i}.role")
        content = item.get("content")
        if content is None:
            text = ""
        elif isinstance(content, str):
            text = content
        elif isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if not isinstance(part, Mapping) or part.get("type") != "text":
                    raise InvalidRequestError(
                        "only text content parts are supported",
                        param=f"messages.{i}.content.{j}",
                    )
                parts.append(str(part.get("text", "")))
            text = "".join(parts)
        else:
            raise InvalidRequestError(
                "content must be a string or a list of parts", param=f"messages.{i}.content"
            )
        calls = item.get("tool_calls") or ()
        if calls and (role != "assistant" or not isinstance(calls, list)):
            raise InvalidRequestError(
                "tool_calls: a list, in an assistant message", param=f"messages.{i}.tool_calls"
            )
        call_id = item.get("tool_call_id")
        out.append(Message(role, text, tuple(calls), None if call_id is None else str(call_id)))
    return tuple(out)
