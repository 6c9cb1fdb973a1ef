"""``single`` on ``POST /v1/responses`` answered by the engine's own ``/v1/responses``.

Ponder keeps the ids and the conversations: the engine gets ``store: false`` and the
whole conversation as ``input`` (the stored turns of ``previous_response_id`` as items,
then the request's), never a ``previous_response_id``; its response (or each event's)
comes back with Ponder's ``resp_...`` id, the caller's model name and Ponder's field
(``ponder.engine_api: "responses"``), and is stored as
a scaffold run's would be, so one conversation may go on through ``single`` and a
scaffold in turn. The engine's output items (its ``reasoning``, ``message`` and
``function_call`` items) and usage pass through as they are.

>>> history_items([{"role": "user", "content": "2+2?"},
...                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1",
...                 "type": "function", "function": {"name": "add", "arguments": "{}"}}]},
...                {"role": "tool", "tool_call_id": "c1", "content": "4"}])[1:]
[{'type': 'function_call', 'call_id': 'c1', 'name': 'add', 'arguments': '{}'}, \
{'type': 'function_call_output', 'call_id': 'c1', 'output': '4'}]
>>> output_messages([{"type": "reasoning", "summary": []}, {"type": "message",
...     "content": [{"type": "output_text", "text": "4"}]}])
[{'role': 'assistant', 'content': '4'}]
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from scaffolds import fastjson
from scaffolds.engines.protocol import Usage
from scaffolds.errors import DeadlineExceededError
from scaffolds.spec.build import spec_string
from server.api.responses.protocol import ResponsesRequest, input_messages
from server.pool.engine_responses import EngineResponses, usage_from_responses_body
from server.runs.planning import RunPlan
from server.runs.request import PONDER_FIELDS
from server.store.response_store import ResponseStore, StoredResponse

__all__ = ["EngineResponse", "history_items", "output_messages"]

T = TypeVar("T")

NOT_SENT = frozenset({"model", "previous_response_id", "store", "stream", "input", *PONDER_FIELDS})
"""Request fields the engine never gets as the caller sent them (Ponder's own never)."""


def history_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A stored conversation (chat messages) as Responses ``input`` items."""
    items: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": m.get("tool_call_id"),
                    "output": m.get("content") or "",
                }
            )
            continue
        if m.get("content") or not m.get("tool_calls"):
            items.append({"role": m["role"], "content": m.get("content") or ""})
        for call in m.get("tool_calls") or ():
            function = call.get("function") or {}
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments") or "",
                }
            )
    return items


def output_messages(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An engine's output items as the chat message a follow-up's conversation holds."""
    text = "".join(
        str(part.get("text", ""))
        for item in output
        if item.get("type") == "message"
        for part in item.get("content") or ()
        if part.get("type") == "output_text"
    )
    message: dict[str, Any] = {"role": "assistant", "content": text}
    calls = [
        {
            "id": item.get("call_id"),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": item.get("arguments") or ""},
        }
        for item in output
        if item.get("type") == "function_call"
    ]
    if calls:
        message["tool_calls"] = calls
    return [message]


class EngineResponse:
    """One Responses request answered by the engine (a :class:`~server.runs.wire.DirectCall`)."""

    def __init__(
        self,
        calls: EngineResponses,
        store: ResponseStore,
        req: ResponsesRequest,
        history: list[dict[str, Any]],
        plan: RunPlan,
        response_id: str,
    ):
        self.calls, self.store, self.req, self.history = calls, store, req, history
        self.id = response_id
        self._budget_binds = False
        self.request_body = self._engine_body(plan)
        self.ponder: dict[str, Any] = {
            "scaffold": spec_string(plan.strategy),
            "cut_reason": None,
            "engine_api": "responses",
        }
        if plan.effort is not None:
            self.ponder["effort"] = plan.effort.to_json()
        self.timeout_s = plan.budget.timeout_s
        self._finished: Callable[[Usage, str | None], None] | None = None
        self._deadline: float | None = None
        self._result: dict[str, Any] = {}
        self._events: AsyncIterator[dict[str, Any]] | None = None
        self._first: dict[str, Any] = {}

    def _engine_body(self, plan: RunPlan) -> dict[str, Any]:
        req = self.req
        body = {k: v for k, v in req.model_dump(exclude_none=True).items() if k not in NOT_SENT}
        given = (
            req.input if isinstance(req.input, list) else [{"role": "user", "content": req.input}]
        )
        body["input"] = history_items(self.history) + given
        effort = plan.effort
        if effort is not None and effort.source != "passthrough" and "reasoning" in body:
            reasoning = {k: v for k, v in body.pop("reasoning").items() if k != "effort"}
            body |= {"reasoning": reasoning} if reasoning else {}  # the policy answered it
        body["store"] = False
        params = plan.params
        defaults = {
            "max_output_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        body |= {k: v for k, v in defaults.items() if v is not None and k not in body}
        if (cap := plan.budget.max_tokens) is not None:  # the budget (the server's cap)
            asked = body.get("max_output_tokens")
            self._budget_binds = asked is None or cap < asked
            body["max_output_tokens"] = cap if asked is None else min(asked, cap)
        return body

    async def open(self, finished: Callable[[Usage, str | None], None] | None = None) -> bool:
        """Make the engine call (a stream: up to its first event); False when the engine
        has no ``/v1/responses`` (remembered in auto), so the request is run instead.
        ``finished`` gets the usage and cut reason of the engine's response once it is
        complete or incomplete (before it is returned or its terminal event sent).

        The cut reason (``ponder.cut_reason``) is a run's: ``"tokens"`` when the budget's
        ``max_tokens`` (here the server's ``--max-budget-tokens``; a request's own budget
        makes it a run), not the request's ``max_output_tokens``, bounded the call and the
        engine stopped on it, else null.

        The run's deadline (the plan's ``budget.timeout_s``, the server's
        ``--max-budget-timeout`` at most) starts now and bounds the whole call, its
        stream to the last event too: past it the call is cancelled and
        :class:`DeadlineExceededError` raised (a 504, or a stream's failed event), as a
        run of ``single`` ends when its deadline passes before its answer."""
        self._finished = finished
        if self.timeout_s is not None:
            self._deadline = asyncio.get_running_loop().time() + self.timeout_s
        try:
            if self.req.stream:
                self._events = self.calls.stream(self.request_body)
                self._first = await self._in_time(anext(self._events))
            else:
                self._result = await self._in_time(self.calls.create(self.request_body))
        except Exception as exc:
            if self._events is not None:
                await _aclose(self._events)
            if self.calls.absent(exc):
                return False
            raise
        return True

    async def _in_time(self, work: Awaitable[T]) -> T:
        """``work`` before the deadline (cancelled at it)."""
        timeout = asyncio.timeout_at(self._deadline)
        try:
            async with timeout:
                return await work
        except TimeoutError:
            if not timeout.expired():
                raise
            raise _past_deadline() from None

    async def _next_event(self) -> dict[str, Any] | None:
        """The stream's next event before the deadline; past it, none, even one that has
        already arrived (a timeout fires only while the stream waits, and an engine ahead
        of its reader leaves nothing to wait for)."""
        assert self._events is not None
        if self._deadline is not None and asyncio.get_running_loop().time() >= self._deadline:
            raise _past_deadline()
        return await self._in_time(anext(self._events, None))

    def _ours(self, response: dict[str, Any]) -> dict[str, Any]:
        req = self.req
        fields = {
            "id": self.id,
            "model": req.model,
            "store": req.store,
            "ponder": self.ponder,
            "previous_response_id": req.previous_response_id,
        }
        out = response | fields
        if isinstance(out.get("usage"), dict):
            out["usage"] = out["usage"] | {"engine_calls": 1}
        return out

    async def _stored(self, response: dict[str, Any]) -> dict[str, Any]:
        details = response.get("incomplete_details") or {}
        if self._budget_binds and details.get("reason") == "max_output_tokens":
            self.ponder = self.ponder | {"cut_reason": "tokens"}
        body = self._ours(response)
        finished = body.get("status") in ("completed", "incomplete")
        if finished and self._finished is not None:
            self._finished(usage_from_responses_body(response), self.ponder["cut_reason"])
        if self.req.store and finished:
            conversation = self.history + input_messages(self.req.input)
            conversation += output_messages(body.get("output") or [])
            await self.store.put(StoredResponse(self.id, time.time(), body, conversation))
        return body

    async def body(self) -> dict[str, Any]:
        """The whole response (after :meth:`open`)."""
        return await self._stored(self._result)

    async def stream(self) -> AsyncIterator[bytes]:
        """The engine's events as SSE, with Ponder's id (after :meth:`open`)."""
        assert self._events is not None
        event: dict[str, Any] | None = self._first
        try:
            while event is not None:
                if isinstance(event.get("response"), dict):
                    response = event["response"]
                    if event.get("type") in ("response.completed", "response.incomplete"):
                        body = await self._stored(response)
                        # named by its status, as OpenAI does (vLLM says completed)
                        event = event | {"type": f"response.{body.get('status', 'completed')}"}
                    else:
                        body = self._ours(response)
                    event = event | {"response": body}
                head = b"event: " + str(event.get("type")).encode()
                yield head + b"\ndata: " + fastjson.dumps(event) + b"\n\n"
                event = await self._next_event()
        finally:
            await _aclose(self._events)


def _past_deadline() -> DeadlineExceededError:
    return DeadlineExceededError("the deadline passed before any answer was ready")


async def _aclose(events: AsyncIterator[Any]) -> None:
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()
