"""The SSE bodies of a streamed request: a chat or completions stream, and another API's
(Responses, Anthropic Messages) over the same live run or the engine's own stream.

:func:`start_live` runs the plan in a task of its own, into a live recorder, up to its
first answer (a run refused before it answers is the request's HTTP error, as vLLM
answers before its stream starts); each body then writes what the recorder's events say
as they arrive, cancels the run when the client leaves, and reports the request's final
status to ``observe`` once (499 when the client left).
:class:`~server.runs.handler.Serving` is their only caller.

>>> import asyncio
>>> from scaffolds.engines.mock import MockEngine
>>> from server.runs.handler import Serving
>>> from server.settings import Settings
>>> from server.runs.request import ChatCompletionRequest
>>> serving = Serving.build(Settings(model="m", engines=("http://unused/v1",)),
...                         engines={"m": MockEngine(lambda r: "4")})
>>> req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "2+2?"}],
...                             stream=True)
>>> plan = serving.plan("chat", req)
>>> settings = serving.run_settings(plan)
>>> async def body() -> bytes:
...     live = await start_live(lambda recorder: serving._run(plan, settings, recorder))
...     return b"".join([out async for out in chat_sse(plan, live, lambda status: None)])
>>> asyncio.run(body()).count(b"data: "), b'"content":"4"' in asyncio.run(body())
(4, True)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from scaffolds.core.run import RunResult
from scaffolds.core.trace import StepFinished, StepNote, StepStarted, TraceEvent, TraceRecorder
from server.errors import APIError, api_error
from server.runs.completion import (
    ChunkMaker,
    delta_choice,
    finish_reasons,
    ponder_extra,
    reasoning_tokens,
)
from server.runs.planning import RunPlan
from server.runs.streaming import ChoiceRouter, sse_event, stream_event_json
from server.runs.wire import DirectCall, LiveRun, WireFormat

log = logging.getLogger("ponder.server")

RunOnce = Callable[[TraceRecorder], Awaitable[RunResult]]
"""Runs the request's plan, its events going to the given recorder."""

__all__ = ["RunOnce", "chat_sse", "start_live", "wire_sse"]


async def start_live(run: RunOnce, *, every_event: bool = False) -> LiveRun:
    """Start ``run`` into a live recorder and wait for its first answer (see
    :func:`_answers`), or its end without one. A run that fails before it answers, for
    the request's fault (a 4xx: its prompt past the model's context, an engine's 400 on
    the first call), raises that error here, before the stream's 200 is sent, as vLLM
    answers; any other failure is left to the stream's error event, as once it began.
    Cancelled (the client left), the run is cancelled too. The events read here are the
    returned run's first batch. ``every_event`` (a ``stream_trace`` request, whose every
    trace event is its stream's content, as the playground draws a step once it starts):
    any event is an answer."""
    recorder = TraceRecorder(live=True)
    batches = recorder.subscribe_batches()
    task = asyncio.ensure_future(run(recorder))
    seen: list[TraceEvent] = []
    try:
        async for batch in batches:
            seen += batch
            if every_event or any(_answers(event) for event in batch):
                break
        else:  # the run ended (its recorder closed) before it answered
            await asyncio.wait({task})
            failure = None if task.cancelled() else task.exception()
            if isinstance(failure, Exception) and api_error(failure).status < 500:
                raise failure
    except BaseException:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
        raise
    return LiveRun(_then(seen, batches), task, recorder)


def _answers(event: TraceEvent) -> bool:
    """Whether ``event`` says the run has begun to answer: any event but a step's start,
    the end of a step no engine call answered (an engine's refusal, a prompt that left
    no room in the model's context) and a note (what the run concluded or was told, such
    as the ``effort`` note a run's trace opens with).

    >>> from scaffolds.core.trace import StepDelta
    >>> from scaffolds.engines.protocol import Usage
    >>> _answers(StepStarted("s1", "run", "candidate", "c")), _answers(StepDelta("s1", 0, "4"))
    (False, True)
    >>> _answers(StepFinished("s1", (), (), (), Usage(), error="EngineRejectedError"))
    False
    """
    if isinstance(event, StepFinished):
        return event.usage.calls > 0
    return not isinstance(event, StepStarted | StepNote)


async def _then(
    first: list[TraceEvent], rest: AsyncIterator[list[TraceEvent]]
) -> AsyncIterator[list[TraceEvent]]:
    """``first`` as one batch (when any), then ``rest``'s batches."""
    if first:
        yield first
    async for batch in rest:
        yield batch


async def chat_sse(
    plan: RunPlan, live: LiveRun, observe: Callable[[int], None]
) -> AsyncIterator[bytes]:
    """The SSE body of a chat or completions stream: role chunks, reasoning/content
    deltas, finish, usage, [DONE]. Ponder's fields (``ponder``: the scaffold and
    ``cut_reason``) ride on the usage chunk, else the trace chunk, else, when the run was
    cut, the last finish chunk: a stream always says why it was cut.

    ``live`` is the plan's run, started (:func:`start_live`); ``observe`` records the
    request's final status (499 when the client left)."""
    recorder, batches, task = live.recorder, live.batches, live.result
    router = ChoiceRouter(plan.n)
    chunk = ChunkMaker(plan)
    status = 499
    try:
        if plan.endpoint == "chat":
            for i in range(plan.n):
                yield chunk([delta_choice("chat", i, role=True, content="")])
        async for batch in batches:  # what arrived together goes out in one write
            if out := b"".join(_event_chunks(plan, batch, router, chunk)):
                yield out
        result = await task
        extra = ponder_extra(plan, result, recorder)
        reasons = finish_reasons(result)
        # A cut run says why on its last finish chunk when no usage or trace chunk
        # (which carry Ponder's fields) follows it.
        said = bool(result.cut_reason) and not (plan.include_usage or plan.return_trace)
        for i, reason in enumerate(reasons):
            finish = [delta_choice(plan.endpoint, i, finish_reason=reason)]
            yield chunk(finish, extra=extra) if said and i == len(reasons) - 1 else chunk(finish)
        if plan.include_usage:
            thought = reasoning_tokens(result)
            yield chunk([], usage=result.usage, extra=extra, reasoning_tokens=thought)
        elif plan.return_trace:
            yield chunk([], extra=extra)
        status = 200
    except Exception as exc:
        error = _failure(exc)
        status = error.status
        yield sse_event(error.body())
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
        observe(status)
    yield sse_event("[DONE]")


async def wire_sse(
    plan: RunPlan,
    source: LiveRun | DirectCall,
    observe: Callable[[int], None],
    wire: WireFormat,
) -> AsyncIterator[bytes]:
    """Another API's SSE body over the same live run, started (:func:`start_live`), or
    the engine's own stream (a :class:`DirectCall`), cancellation and status."""
    task: asyncio.Future[RunResult] | None = None
    body: AsyncIterator[bytes] | None = None
    if isinstance(source, LiveRun):
        task, events = source.result, wire.stream(plan, source)
    else:
        body = events = source.stream()
    status = 499
    try:
        async for out in events:
            yield out
        status = 200
    except Exception as exc:
        error = _failure(exc)
        status = error.status
        yield wire.stream_error(error)
    finally:
        if body is not None:
            await body.aclose()  # type: ignore[attr-defined]
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})
        observe(status)


def _failure(exc: Exception) -> APIError:
    """The error a stream ends with, logged when it is the server's or engine's."""
    error = api_error(exc)
    if error.status >= 500:
        log.warning("stream failed: %s (%s)", error.message, type(exc).__name__)
    return error


def _event_chunks(
    plan: RunPlan, events: list[TraceEvent], router: ChoiceRouter, chunk: ChunkMaker
) -> Iterator[bytes]:
    """The SSE chunks of some trace events: each routed piece, and with
    ``stream_trace`` each event itself."""
    for event in events:
        if plan.stream_trace:
            yield chunk([], extra={"ponder": {"event": stream_event_json(event)}})
        for piece in router.feed(event):
            text = piece.text
            if piece.kind == "content":
                choice = delta_choice(plan.endpoint, piece.choice, content=text, extra=piece.extra)
            else:
                choice = delta_choice(plan.endpoint, piece.choice, reasoning=text)
            yield chunk([choice])
