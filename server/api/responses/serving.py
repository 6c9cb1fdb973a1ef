"""``POST /v1/responses``: a scaffold run shaped as a Responses object or event stream.

The run is the chat completion :func:`~server.api.responses.protocol.chat_from_responses` makes of
the request (after the stored conversation of ``previous_response_id``). Its output is a
``reasoning`` item whose summary holds one ``summary_text`` part per scaffold step (the
steps' text as the chat stream's reasoning carries it), then the answer as a ``message``
item, and the answer's tool calls as ``function_call`` items. Streamed, the same items
arrive through the Responses event sequence (``response.created``, ``output_item.added``,
``reasoning_summary_part.added``, ``reasoning_summary_text.delta``..., ``output_text.delta``,
``response.completed``), each event as ``event: <type>`` and ``data: <json>`` with a
``sequence_number``. With ``store`` (the default) the response and its conversation go
to the :class:`~server.store.response_store.ResponseStore`.

>>> from server.runs.streaming import Piece
>>> out = OutputBuilder()
>>> events = out.piece(Piece(0, "reasoning", "a", key=("s1", 0)))
>>> events += out.piece(Piece(0, "reasoning", "b", key=("s2", 0)))
>>> events += out.piece(Piece(0, "content", "4"))
>>> events += out.finish("completed")
>>> [item["type"] for item in out.items], [p["text"] for p in out.items[0]["summary"]]
(['reasoning', 'message'], ['a', 'b'])
>>> events[-1]["type"], events[-1]["item"]["content"][0]["text"]
('response.output_item.done', '4')
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from scaffolds import fastjson
from scaffolds.core.run import RunResult
from scaffolds.core.trace import TraceRecorder
from scaffolds.errors import NotFoundError
from server.api.responses.engine_passthrough import EngineResponse
from server.api.responses.protocol import (
    ResponsesRequest,
    chat_from_responses,
    input_messages,
    responses_usage_json,
)
from server.errors import APIError
from server.runs.completion import finish_reasons, ponder_extra, reasoning_tokens
from server.runs.event_wire import PieceBuilder, build_finished, build_live, named_event
from server.runs.planning import RunPlan
from server.runs.streaming import Piece
from server.runs.wire import LiveRun
from server.store.response_store import ResponseStore, StoredResponse

__all__ = ["OutputBuilder", "ResponsesFormat", "prepare"]


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


class OutputBuilder(PieceBuilder):
    """A Responses output list built from routed pieces, and the events that build it."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._part_key: Any = None

    @property
    def text(self) -> str:
        """The answer: every message item's text."""
        return "".join(
            part["text"]
            for item in self.items
            if item["type"] == "message"
            for part in item["content"]
        )

    def _reasoning(self, piece: Piece) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        item = self._open
        if item is None or item["type"] != "reasoning":
            events += self._close()
            item = {"type": "reasoning", "id": _id("rs"), "summary": [], "status": "in_progress"}
            events += self._add(item)
        index = len(item["summary"]) - 1
        base = {"item_id": item["id"], "output_index": len(self.items) - 1}
        if piece.key != self._part_key or index < 0:
            if index >= 0:
                events += self._close_part(item, index)
            self._part_key = piece.key
            item["summary"].append({"type": "summary_text", "text": ""})
            index += 1
            part = {"type": "summary_text", "text": ""}
            events.append(
                {
                    "type": "response.reasoning_summary_part.added",
                    **base,
                    "summary_index": index,
                    "part": part,
                }
            )
        text = piece.text.lstrip("\n") if not item["summary"][index]["text"] else piece.text
        item["summary"][index]["text"] += text
        events.append(
            {
                "type": "response.reasoning_summary_text.delta",
                **base,
                "summary_index": index,
                "delta": text,
            }
        )
        return events

    def _content(self, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        item = self._open
        base: dict[str, Any]
        if item is None or item["type"] != "message":
            events += self._close()
            item = {
                "type": "message",
                "id": _id("msg"),
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            events += self._add(item)
            base = {"item_id": item["id"], "output_index": len(self.items) - 1}
            item["content"].append({"type": "output_text", "text": "", "annotations": []})
            part = {"type": "output_text", "text": "", "annotations": []}
            events.append(
                {"type": "response.content_part.added", **base, "content_index": 0, "part": part}
            )
        base = {"item_id": item["id"], "output_index": len(self.items) - 1}
        item["content"][0]["text"] += text
        events.append(
            {
                "type": "response.output_text.delta",
                **base,
                "content_index": 0,
                "delta": text,
                "logprobs": [],
            }
        )
        return events

    def _add(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        self.items.append(item)
        self._open = item
        self._part_key = None
        snapshot = fastjson.loads(fastjson.dumps(item))
        return [
            {
                "type": "response.output_item.added",
                "output_index": len(self.items) - 1,
                "item": snapshot,
            }
        ]

    def _close_part(self, item: dict[str, Any], index: int) -> list[dict[str, Any]]:
        base = {"item_id": item["id"], "output_index": len(self.items) - 1, "summary_index": index}
        part = dict(item["summary"][index])
        return [
            {"type": "response.reasoning_summary_text.done", **base, "text": part["text"]},
            {"type": "response.reasoning_summary_part.done", **base, "part": part},
        ]

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        events: list[dict[str, Any]] = []
        output_index = len(self.items) - 1
        if item["type"] == "reasoning":
            if item["summary"]:
                events += self._close_part(item, len(item["summary"]) - 1)
            item["status"] = "completed"
        else:
            base = {"item_id": item["id"], "output_index": output_index, "content_index": 0}
            part = dict(item["content"][0])
            events += [
                {"type": "response.output_text.done", **base, "text": part["text"], "logprobs": []},
                {"type": "response.content_part.done", **base, "part": part},
            ]
            item["status"] = status
        done = fastjson.loads(fastjson.dumps(item))
        events.append(
            {"type": "response.output_item.done", "output_index": output_index, "item": done}
        )
        return events

    def finish(self, status: str) -> list[dict[str, Any]]:
        """Close what is open; the answer's message (even empty, unless the answer is a
        tool call) and its tool calls as ``function_call`` items."""
        events = self._close(status)
        if not self.calls and not any(i["type"] == "message" for i in self.items):
            events += self._content("") + self._close(status)
        for entry in self.calls.entries():
            item = {
                "type": "function_call",
                "id": _id("fc"),
                "call_id": entry.get("id") or _id("call"),
                "name": entry.get("name", ""),
                "arguments": "",
                "status": "in_progress",
            }
            events += self._add(item)
            base = {"item_id": item["id"], "output_index": len(self.items) - 1}
            item["arguments"] = entry.get("arguments", "")
            item["status"] = "completed"
            events += [
                {
                    "type": "response.function_call_arguments.delta",
                    **base,
                    "delta": item["arguments"],
                },
                {
                    "type": "response.function_call_arguments.done",
                    **base,
                    "arguments": item["arguments"],
                    "name": item["name"],
                },
                {
                    "type": "response.output_item.done",
                    "output_index": len(self.items) - 1,
                    "item": dict(item),
                },
            ]
            self._open = None
        return events

    def assistant_messages(self) -> list[dict[str, Any]]:
        """The output as the chat message a follow-up's conversation holds."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        calls = [i for i in self.items if i["type"] == "function_call"]
        if calls:
            message["tool_calls"] = [
                {
                    "id": c["call_id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls
            ]
        return [message]


async def prepare(store: ResponseStore, req: ResponsesRequest) -> ResponsesFormat:
    """The request's format, with the conversation ``previous_response_id`` names
    (a 404 naming it when it was never stored or has expired)."""
    history: list[dict[str, Any]] = []
    if req.previous_response_id:
        previous = await store.get(req.previous_response_id)
        if previous is None:
            raise NotFoundError(
                f"no stored response with id {req.previous_response_id!r}",
                param="previous_response_id",
            )
        history = previous.conversation
    return ResponsesFormat(store, req, history)


class ResponsesFormat:
    """The Responses API's :class:`~server.runs.wire.WireFormat` for one request."""

    label = "responses"

    def __init__(self, store: ResponseStore, req: ResponsesRequest, history: list[dict[str, Any]]):
        self.store = store
        self.req = req
        self.history = history
        self.id = _id("resp")
        self.created = int(time.time())
        self._sequence = 0

    def chat(self) -> Any:
        """The chat completion request this response runs."""
        return chat_from_responses(self.req, self.history)

    def response(self, status: str, output: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        req = self.req
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "model": req.model,
            "output": output,
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": req.previous_response_id,
            "reasoning": req.reasoning,
            "store": req.store,
            "temperature": req.temperature,
            "text": req.text or {"format": {"type": "text"}},
            "tool_choice": req.tool_choice or "auto",
            "tools": req.tools or [],
            "top_p": req.top_p,
            "truncation": "disabled",
            "usage": None,
            "metadata": req.metadata or {},
        }
        return body | fields

    async def _finish(
        self, plan: RunPlan, result: RunResult, recorder: Any, out: OutputBuilder, usage: Any
    ) -> dict[str, Any]:
        status = "incomplete" if finish_reasons(result)[0] == "length" else "completed"
        extra = ponder_extra(plan, result, recorder)
        body = self.response(status, out.items, usage=usage, **extra)
        if self.req.store:
            conversation = self.history + input_messages(self.req.input)
            conversation += out.assistant_messages()
            await self.store.put(StoredResponse(self.id, time.time(), body, conversation))
        return body

    async def body(self, plan: RunPlan, runs: list[tuple[RunResult, TraceRecorder]]) -> Any:
        result, recorder = runs[0]
        out = OutputBuilder()
        build_finished(out, plan, result)
        status = "incomplete" if finish_reasons(result)[0] == "length" else "completed"
        out.finish(status)
        usage = _usage(result, reasoning_tokens(result))
        return await self._finish(plan, result, recorder, out, usage)

    def _sse(self, event: dict[str, Any]) -> bytes:
        """The event as SSE, numbered (its ``sequence_number``)."""
        event["sequence_number"] = self._sequence
        self._sequence += 1
        return named_event(event)

    async def stream(self, plan: RunPlan, run: LiveRun) -> AsyncIterator[bytes]:
        started = self.response("in_progress", [])
        yield self._sse({"type": "response.created", "response": started})
        yield self._sse({"type": "response.in_progress", "response": started})
        out = OutputBuilder()
        async for chunk in build_live(plan, run, out, self._sse, "ponder.trace"):
            yield chunk
        result = await run.result
        status = "incomplete" if finish_reasons(result)[0] == "length" else "completed"
        yield b"".join(self._sse(e) for e in out.finish(status))
        usage = _usage(result, reasoning_tokens(result))
        body = await self._finish(plan, result, run.recorder, out, usage)
        yield self._sse({"type": f"response.{status}", "response": body})

    def direct(self, plan: RunPlan) -> EngineResponse | None:
        """The engine's own ``/v1/responses`` for a strategy that passes through, when the
        model's engine has one and nothing asks for a run's own output (its trace, or a
        ``budget`` of tokens or calls; a ``budget.timeout_s`` bounds the engine call as
        it bounds a run)."""
        calls, req, budget = plan.served.responses, self.req, self.req.budget
        if calls is None or not calls.usable or not plan.strategy.passes_through:
            return None
        if budget is not None and (budget.max_tokens is not None or budget.max_calls is not None):
            return None
        if req.return_trace or req.stream_trace:
            return None
        return EngineResponse(calls, self.store, req, self.history, plan, self.id)

    def stream_error(self, error: APIError) -> bytes:
        failed = self.response(
            "failed", [], error={"code": error.code or error.type, "message": error.message}
        )
        return self._sse({"type": "response.failed", "response": failed})


def _usage(result: RunResult, reasoning: int) -> dict[str, Any]:
    u = result.usage
    return responses_usage_json(
        u.prompt_tokens,
        u.completion_tokens,
        cached=u.cached_tokens,
        reasoning=reasoning,
        calls=u.calls,
    )
