"""What the wire formats of named SSE events (Responses, Anthropic Messages) share: the
event bytes, the tool calls an answer accumulates, the builder that turns routed pieces
into an API's output, and how a finished run or a live one is fed to it.

Each API keeps its own: its event names and object shapes (a builder's
``_reasoning``/``_content``/``finish``, its response object), and what opens and ends its
stream.

>>> named_event({"type": "message_stop"})
b'event: message_stop\\ndata: {"type":"message_stop"}\\n\\n'
>>> calls = ToolCalls()
>>> calls.add({"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a"'}})
>>> calls.add({"index": 0, "function": {"arguments": ": 1}"}})
>>> calls.entries()
[{'id': 'c1', 'name': 'f', 'arguments': '{"a": 1}'}]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from scaffolds import fastjson
from scaffolds.core.run import RunResult
from server.runs.completion import engine_fields
from server.runs.planning import RunPlan
from server.runs.streaming import ChoiceRouter, Piece, finished_reasoning, stream_event_json
from server.runs.wire import LiveRun

__all__ = ["PieceBuilder", "ToolCalls", "build_finished", "build_live", "named_event"]


def named_event(event: dict[str, Any]) -> bytes:
    """One SSE event named by its ``type``: ``event: <type>`` and ``data: <json>``."""
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + fastjson.dumps(event) + b"\n\n"


class ToolCalls:
    """An answer's tool calls, put together from chat tool call deltas (a stream's) or
    whole calls (a finished answer's), by their index."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, Any]] = {}

    def add(self, call: dict[str, Any]) -> None:
        """One chat tool call delta (``index``, ``id``, ``function``'s name and arguments)."""
        entry = self._calls.setdefault(int(call.get("index", len(self._calls))), {})
        function = call.get("function") or {}
        if call.get("id"):
            entry["id"] = call["id"]
        if function.get("name"):
            entry["name"] = function["name"]
        entry["arguments"] = entry.get("arguments", "") + (function.get("arguments") or "")

    def entries(self) -> list[dict[str, Any]]:
        """Each call (its ``id`` when given, ``name``, ``arguments``), by index."""
        return [entry for _, entry in sorted(self._calls.items())]

    def __bool__(self) -> bool:
        return bool(self._calls)


class PieceBuilder(ABC):
    """One API's output built from routed pieces (:class:`~server.runs.streaming.Piece`),
    and the events that build it: reasoning and content as the API writes them, the tool
    call deltas in a piece's engine fields gathered in :attr:`calls`."""

    def __init__(self) -> None:
        self.calls = ToolCalls()

    def piece(self, piece: Piece) -> list[dict[str, Any]]:
        """The events of one routed piece (and the tool call deltas in its engine fields)."""
        events: list[dict[str, Any]] = []
        if piece.kind == "reasoning":
            events += self._reasoning(piece)
        elif piece.text:
            events += self._content(piece.text)
        for call in ((piece.extra or {}).get("delta") or {}).get("tool_calls") or ():
            self.calls.add(call)
        return events

    def tool_calls(self, calls: Iterable[dict[str, Any]]) -> None:
        """A finished answer's chat tool calls (non-streamed)."""
        for index, call in enumerate(calls):
            self.calls.add({"index": index, **call})

    @abstractmethod
    def _reasoning(self, piece: Piece) -> list[dict[str, Any]]:
        """The events of a reasoning piece."""

    @abstractmethod
    def _content(self, text: str) -> list[dict[str, Any]]:
        """The events of some of the answer's text."""


def build_finished(builder: PieceBuilder, plan: RunPlan, result: RunResult) -> None:
    """A finished run's answer (its first choice) into ``builder``: its steps' reasoning
    (:func:`~server.runs.streaming.finished_reasoning`), the solution's text and the
    tool calls of the engine generation that is the answer."""
    for piece in finished_reasoning(result.events, plan.n):
        builder.piece(piece)
    solution = result.solutions[0]
    if solution.text:
        builder.piece(Piece(0, "content", solution.text))
    message = (engine_fields(result)[0] or {}).get("message") or {}
    builder.tool_calls(message.get("tool_calls") or ())


async def build_live(
    plan: RunPlan,
    run: LiveRun,
    builder: PieceBuilder,
    write: Callable[[dict[str, Any]], bytes],
    trace_type: str,
) -> AsyncIterator[bytes]:
    """A live run's events into ``builder``, written by ``write`` as they arrive (one
    write for what arrived together), each trace event first as a ``trace_type`` event
    when the plan streams its trace; up to the run's last event (its result is then
    awaited by the caller)."""
    router = ChoiceRouter(plan.n)
    async for batch in run.batches:
        chunk = b""
        for event in batch:
            if plan.stream_trace:
                chunk += write({"type": trace_type, "event": stream_event_json(event)})
            for piece in router.feed(event):
                chunk += b"".join(write(e) for e in builder.piece(piece))
        if chunk:
            yield chunk
