"""``GET /v1/responses/{id}/input_items``: a stored response's input, as OpenAI lists it.

A stored response's input is every item the model read for it: the earlier turns its
``previous_response_id`` chain carried (their inputs and outputs) and its own ``input``.
The store keeps that conversation as chat messages ending with the response's output
(one assistant message: :class:`~server.store.response_store.StoredResponse`), so the
input is the conversation without its last message, as Responses items (``message``,
``function_call``, ``function_call_output``), each with an id fixed by the response and
its place. The list is OpenAI's: ``object: "list"``, ``data``, ``first_id``,
``last_id``, ``has_more``; ``order`` (``desc``, the default, newest first, or ``asc``),
``after`` (an item id: the page starts after it) and ``limit`` (1 to 100, default 20).

>>> from server.store.response_store import StoredResponse
>>> stored = StoredResponse("resp_ab", 0.0, {}, [
...     {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
...     {"role": "user", "content": "times 3?"}, {"role": "assistant", "content": "12"}])
>>> page = input_items_page(stored, limit=2, order="asc")
>>> [(i["role"], i["content"][0]["type"]) for i in page["data"]], page["has_more"]
([('user', 'input_text'), ('assistant', 'output_text')], True)
>>> later = input_items_page(stored, limit=2, order="asc", after=page["last_id"])
>>> [i["content"][0]["text"] for i in later["data"]], later["has_more"]
(['times 3?'], False)
"""

from __future__ import annotations

from typing import Any, Literal

from scaffolds.errors import InvalidRequestError
from server.api.responses.engine_passthrough import history_items
from server.store.response_store import StoredResponse

__all__ = ["MAX_LIMIT", "input_items", "input_items_page"]

MAX_LIMIT = 100
"""The most items one page holds (OpenAI's bound)."""

_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def input_items(stored: StoredResponse) -> list[dict[str, Any]]:
    """Every input item of ``stored``, oldest first."""
    key = stored.id.removeprefix("resp_")
    items = []
    for index, item in enumerate(history_items(stored.conversation[:-1])):
        kind = item.get("type", "message")
        full: dict[str, Any] = {"id": f"{_PREFIXES[kind]}_{key}_{index}", "type": kind}
        if kind == "message":
            role = item["role"]
            part = "output_text" if role == "assistant" else "input_text"
            content: dict[str, Any] = {"type": part, "text": item["content"]}
            if role == "assistant":
                content["annotations"] = []
            full |= {"role": role, "status": "completed", "content": [content]}
        else:
            full |= {k: v for k, v in item.items() if k != "type"} | {"status": "completed"}
        items.append(full)
    return items


def input_items_page(
    stored: StoredResponse,
    *,
    limit: int = 20,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> dict[str, Any]:
    """One page of :func:`input_items` in OpenAI's list shape; a 400 naming ``after``
    when it is not one of the response's items."""
    items = input_items(stored)
    if order == "desc":
        items.reverse()
    start = 0
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise InvalidRequestError(
                f"after: {after!r} is not an input item of response {stored.id!r}", param="after"
            )
        start = ids.index(after) + 1
    data = items[start : start + limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": start + limit < len(items),
    }
