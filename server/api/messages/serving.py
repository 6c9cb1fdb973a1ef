"""``POST /v1/messages``: a scaffold run shaped as an Anthropic message or event stream.

The run is the chat completion :func:`~server.api.messages.protocol.chat_from_messages` makes
of the request. Its content is a ``thinking`` block per scaffold step (the steps' text
as the chat stream's reasoning carries it), then the answer as a ``text`` block and its
tool calls as ``tool_use`` blocks. Streamed, the same blocks arrive through Anthropic's
events (``message_start``, ``content_block_start``, ``content_block_delta``...,
``message_delta``, ``message_stop``), each as ``event: <type>`` and ``data: <json>``.

>>> from server.runs.streaming import Piece
>>> out = BlockBuilder()
>>> events = out.piece(Piece(0, "reasoning", "a", key=("s1", 0)))
>>> events += out.piece(Piece(0, "reasoning", "b", key=("s2", 0)))
>>> events += out.piece(Piece(0, "content", "4"))
>>> events += out.finish()
>>> [(b["type"], b.get("thinking") or b.get("text")) for b in out.blocks]
[('thinking', 'a'), ('thinking', 'b'), ('text', '4')]
>>> [e["type"] for e in events[-3:]]
['content_block_start', 'content_block_delta', 'content_block_stop']
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

from scaffolds.core.run import RunResult
from scaffolds.core.trace import TraceRecorder
from server.api.messages.protocol import STOP_REASONS, MessagesRequest, chat_from_messages
from server.errors import APIError
from server.runs.completion import finish_reasons, ponder_extra
from server.runs.event_wire import PieceBuilder, build_finished, build_live, named_event
from server.runs.planning import RunPlan
from server.runs.request import ChatCompletionRequest
from server.runs.streaming import Piece
from server.runs.wire import LiveRun

__all__ = ["BlockBuilder", "MessagesFormat"]


class BlockBuilder(PieceBuilder):
    """Anthropic content blocks built from routed pieces, and the events that build them."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._key: Any = None

    def _reasoning(self, piece: Piece) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        text = piece.text
        if self._open is None or self._open["type"] != "thinking" or piece.key != self._key:
            events += self._start({"type": "thinking", "thinking": "", "signature": ""})
            self._key = piece.key
            text = text.lstrip("\n")
        return events + self._delta({"type": "thinking_delta", "thinking": text})

    def _content(self, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != "text":
            events += self._start({"type": "text", "text": ""})
        return events + self._delta({"type": "text_delta", "text": text})

    def _start(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._stop()
        self.blocks.append(block)
        self._open = block
        start = {
            "type": "content_block_start",
            "index": len(self.blocks) - 1,
            "content_block": dict(block),
        }
        return [*events, start]

    def _delta(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        assert self._open is not None
        field = "thinking" if delta["type"] == "thinking_delta" else "text"
        self._open[field] += delta[field]
        return [{"type": "content_block_delta", "index": len(self.blocks) - 1, "delta": delta}]

    def _stop(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": len(self.blocks) - 1}]

    def finish(self) -> list[dict[str, Any]]:
        """Close the open block; the answer's text block (even empty, unless the answer is
        a tool call) and its tool calls as ``tool_use`` blocks."""
        events = self._stop()
        if not self.calls and not any(b["type"] == "text" for b in self.blocks):
            events += self._start({"type": "text", "text": ""}) + self._stop()
        for entry in self.calls.entries():
            arguments = entry.get("arguments") or "{}"
            block_id = entry.get("id") or f"toolu_{secrets.token_hex(12)}"
            block = {"type": "tool_use", "id": block_id, "name": entry.get("name", ""), "input": {}}
            events += self._start(block)
            delta = {"type": "input_json_delta", "partial_json": arguments}
            events.append(
                {"type": "content_block_delta", "index": len(self.blocks) - 1, "delta": delta}
            )
            try:
                block["input"] = json.loads(arguments)
            except ValueError:
                block["input"] = {}
            events += self._stop()
        return events


class MessagesFormat:
    """Anthropic's Messages API as a :class:`~server.runs.wire.WireFormat`."""

    label = "messages"

    def __init__(self, req: MessagesRequest):
        self.req = req
        self.id = f"msg_{secrets.token_hex(12)}"

    def chat(self) -> ChatCompletionRequest:
        """The chat completion request this message runs."""
        return chat_from_messages(self.req)

    def message(self, content: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        body = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.req.model,
            "content": content,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return body | fields

    async def body(self, plan: RunPlan, runs: list[tuple[RunResult, TraceRecorder]]) -> Any:
        result, recorder = runs[0]
        out = BlockBuilder()
        build_finished(out, plan, result)
        out.finish()
        return self.message(
            out.blocks,
            stop_reason=STOP_REASONS.get(finish_reasons(result)[0], "end_turn"),
            usage=_usage(result),
            **ponder_extra(plan, result, recorder),
        )

    async def stream(self, plan: RunPlan, run: LiveRun) -> AsyncIterator[bytes]:
        yield named_event({"type": "message_start", "message": self.message([])})
        out = BlockBuilder()
        async for chunk in build_live(plan, run, out, named_event, "ponder_trace"):
            yield chunk
        result = await run.result
        reason = STOP_REASONS.get(finish_reasons(result)[0], "end_turn")
        end = b"".join(named_event(e) for e in out.finish())
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": None},
            "usage": _usage(result),
            **ponder_extra(plan, result, run.recorder),
        }
        yield end + named_event(delta) + named_event({"type": "message_stop"})

    def direct(self, plan: RunPlan) -> None:
        """Messages are always answered by a run."""
        return None

    def stream_error(self, error: APIError) -> bytes:
        error_event = {"type": "error", "error": {"type": error.type, "message": error.message}}
        return named_event(error_event)


def _usage(result: RunResult) -> dict[str, Any]:
    """Anthropic usage: input tokens besides those read from the cache, and Ponder's
    ``engine_calls``."""
    u = result.usage
    return {
        "input_tokens": u.prompt_tokens - u.cached_tokens,
        "cache_read_input_tokens": u.cached_tokens,
        "output_tokens": u.completion_tokens,
        "engine_calls": u.calls,
    }
