"""The fake engine's ``POST /v1/responses`` (with ``FakeEngineConfig.responses_api``): the
same generation as its chat route, shaped as a Responses object or event stream, as
vLLM serves them (a ``reasoning`` item when there is reasoning, then the ``message``
or a ``function_call``; usage in the Responses shape).

>>> chat_body({"model": "m", "input": [{"role": "user", "content": "hi"},
...            {"type": "function_call_output", "call_id": "c", "output": "4"}],
...            "instructions": "Be brief.", "max_output_tokens": 5})["messages"]
[{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'hi'}, \
{'role': 'tool', 'tool_call_id': 'c', 'content': '4'}]
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from testing.fake_engine.config import FakeEngineConfig, FakeEngineState
from testing.fake_engine.generation import Plan, while_held

__all__ = ["chat_body", "response_events", "response_object"]


def chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """The chat completion a Responses request means (to plan its generation)."""
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    for item in items or []:
        kind = item.get("type", "message")
        if kind == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output")}
            )
        elif kind == "function_call":
            function = {"name": item.get("name"), "arguments": item.get("arguments")}
            call = {"id": item.get("call_id"), "type": "function", "function": function}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            messages.append({"role": item.get("role"), "content": item.get("content")})
    out = {
        "model": body.get("model"),
        "messages": messages,
        "max_tokens": body.get("max_output_tokens"),
    }
    if body.get("tools"):
        out["tools"] = body["tools"]
    return out


def _output(plan: Plan) -> list[dict[str, Any]]:
    sample = plan.samples[0]
    reasoning = "".join(t for k, t in sample.pieces if k == "reasoning")
    content = "".join(t for k, t in sample.pieces if k == "content")
    output: list[dict[str, Any]] = []
    if reasoning:
        output.append(
            {
                "type": "reasoning",
                "id": f"rs_{plan.id}",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": reasoning}],
            }
        )
    if sample.tool_call is not None:
        function = sample.tool_call["function"]
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{plan.id}",
                "call_id": sample.tool_call["id"],
                "name": function["name"],
                "arguments": function["arguments"],
                "status": "completed",
            }
        )
    else:
        output.append(
            {
                "type": "message",
                "id": f"msg_{plan.id}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": content, "annotations": []}],
            }
        )
    return output


def response_object(plan: Plan, status: str | None = None, output: Any = None) -> dict[str, Any]:
    """The whole response (``status``/``output`` given: a stream's first events)."""
    sample = plan.samples[0]
    done = "incomplete" if sample.finish == "length" else "completed"
    usage = plan.usage()
    thought = sum(1 for k, _ in sample.pieces if k == "reasoning")
    body = plan.body
    cut = {"reason": "max_output_tokens"} if (status or done) == "incomplete" else None
    return {
        "id": f"resp_{plan.id}",
        "object": "response",
        "created_at": plan.created,
        "status": status or done,
        "error": None,
        "incomplete_details": cut,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model"),
        "output": _output(plan) if output is None else output,
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store", True),
        "temperature": body.get("temperature"),
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p"),
        "usage": None
        if status
        else {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": plan.cached},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": thought},
            "total_tokens": usage["total_tokens"],
        },
    }


async def response_events(
    plan: Plan, config: FakeEngineConfig, state: FakeEngineState
) -> AsyncIterator[str]:
    """The SSE of a plain message answer: created ... output_text.delta ... completed,
    paced as vLLM sends them: ``response.created`` at once, then (after ``config.hold``)
    each delta after its token's delay. Counted in ``state`` as an open call until it
    ends (``completed``, or ``cancelled`` when the client leaves first)."""
    sequence = 0

    def event(data: dict[str, Any]) -> str:
        nonlocal sequence
        data["sequence_number"] = sequence
        sequence += 1
        return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n"

    state.enter()
    outcome = "cancelled"
    try:
        started = response_object(plan, "in_progress", [])
        yield event({"type": "response.created", "response": started})
        yield event({"type": "response.in_progress", "response": started})
        await while_held(config, state)  # a disconnect cancels this generator
        final = response_object(plan)
        item = final["output"][-1]
        base = {"output_index": 0, "item_id": item["id"]}
        text = "".join(t for k, t in plan.samples[0].pieces if k == "content")
        empty = {"type": "output_text", "text": "", "annotations": []}
        yield event(
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": item | {"status": "in_progress", "content": []},
            }
        )
        yield event(
            {"type": "response.content_part.added", **base, "content_index": 0, "part": empty}
        )
        for (kind, piece), delay in zip(plan.samples[0].pieces, plan.step_delays, strict=False):
            if delay:
                await asyncio.sleep(delay)
            if kind == "content":
                yield event(
                    {
                        "type": "response.output_text.delta",
                        **base,
                        "content_index": 0,
                        "delta": piece,
                        "logprobs": [],
                    }
                )
        yield event(
            {
                "type": "response.output_text.done",
                **base,
                "content_index": 0,
                "text": text,
                "logprobs": [],
            }
        )
        yield event(
            {
                "type": "response.content_part.done",
                **base,
                "content_index": 0,
                "part": empty | {"text": text},
            }
        )
        yield event({"type": "response.output_item.done", "output_index": 0, "item": item})
        final["output"] = [item]
        state.reported_usage.append(plan.usage())
        # vLLM's terminal event, whatever the status
        yield event({"type": "response.completed", "response": final})
        outcome = "completed"
    finally:
        state.leave()
        setattr(state, outcome, getattr(state, outcome) + 1)
