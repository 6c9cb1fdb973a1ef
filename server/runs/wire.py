"""The wire formats besides chat completions: how a finished run, or a live one, is
written for the Responses API and Anthropic's Messages API.

:meth:`Serving.handle <server.runs.handler.Serving.handle>` plans, admits, runs and
cancels a request the same way for every API; a :class:`WireFormat` only shapes the
answer: the whole body of finished runs, the SSE bytes of a live run (its trace event
batches in, its final result awaited at the end), and an error met once a stream began.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from scaffolds.core.run import RunResult
from scaffolds.core.trace import TraceEvent, TraceRecorder
from scaffolds.engines.protocol import Usage
from server.errors import APIError
from server.runs.planning import RunPlan

__all__ = ["DirectCall", "LiveRun", "WireFormat"]


class LiveRun:
    """A streamed run as a wire format reads it: its event batches as they come, then
    its result (its task: cancelled when the stream ends first), and the recorder (for
    ``return_trace``)."""

    def __init__(
        self,
        batches: AsyncIterator[list[TraceEvent]],
        result: asyncio.Future[RunResult],
        recorder: TraceRecorder,
    ):
        self.batches = batches
        self.result = result
        self.recorder = recorder


class DirectCall(Protocol):
    """A request an engine answers in the wire format's own API, with no scaffold run
    (``single`` on an engine's own ``/v1/responses``)."""

    async def open(self, finished: Callable[[Usage, str | None], None]) -> bool:
        """Start the engine call; False when the engine lacks the API (the request is
        then run as any other). ``finished`` gets the call's usage and cut reason (a
        run's ``cut_reason``) once its answer is complete (or incomplete), before the
        caller sees its end, as a run's metrics are recorded when it finishes."""
        ...

    async def body(self) -> Any:
        """The API's whole body (not streamed)."""
        ...

    def stream(self) -> AsyncIterator[bytes]:
        """The SSE body (streamed)."""
        ...


class WireFormat(Protocol):
    """One API's shapes for :meth:`Serving.handle`."""

    label: str
    """The ``endpoint`` label of the request metrics."""

    async def body(self, plan: RunPlan, runs: list[tuple[RunResult, TraceRecorder]]) -> Any:
        """The API's whole body of finished runs."""
        ...

    def stream(self, plan: RunPlan, run: LiveRun) -> AsyncIterator[bytes]:
        """The SSE body of a live run, up to and including its last event."""
        ...

    def stream_error(self, error: APIError) -> bytes:
        """The SSE event that ends a stream that failed."""
        ...

    def direct(self, plan: RunPlan) -> DirectCall | None:
        """The engine call that answers ``plan`` without a run, if any."""
        ...
