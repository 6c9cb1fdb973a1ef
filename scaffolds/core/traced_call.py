"""One engine call of a run, traced and accounted: its :class:`StepStarted` event, the
call (streamed into :class:`StepDelta` events when the trace is live) under the run's
deadline, then :class:`StepFinished` (with an error name if it failed) and its usage
charged to the run's ledger.

>>> import asyncio
>>> from scaffolds.engines.protocol import GenerateRequest
>>> from scaffolds.engines.mock import MockEngine
>>> from scaffolds.problem import Budget
>>> ledger, recorder = Ledger.start(Budget()), TraceRecorder()
>>> started = StepStarted(step_id="run:1", parent_id="run", kind="generate", label="try")
>>> call = traced_call(MockEngine(lambda r: "7"), GenerateRequest("3+4="), started,
...                    recorder=recorder, ledger=ledger)
>>> asyncio.run(call).completions[0].text, [e.type for e in recorder.events], ledger.usage.calls
('7', ['step_started', 'step_finished'], 1)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

from scaffolds.core.ledger import Ledger
from scaffolds.core.trace import StepDelta, StepFinished, StepStarted, TraceRecorder
from scaffolds.engines.protocol import Engine, EngineDelta, GenerateRequest, GenerateResult, Usage
from scaffolds.errors import DeadlineExceededError, EngineError
from scaffolds.evaluation.answers import extract_answer

__all__ = ["step_failures_traced", "traced_call"]


async def traced_call(
    engine: Engine,
    request: GenerateRequest,
    started: StepStarted,
    *,
    recorder: TraceRecorder,
    ledger: Ledger,
    answer_of: Callable[[str], str | None] = extract_answer,
) -> GenerateResult:
    """Call ``engine`` with the step's trace events around it; account its usage.
    ``answer_of`` reads each sample's answer for the trace (the run's answer format).

    A call still running at the run's deadline raises :class:`DeadlineExceededError`.
    """
    step_id = started.step_id
    recorder.emit(started)
    with step_failures_traced(step_id, recorder, ledger):
        result = await _call(engine, request, step_id, recorder, ledger)
    ledger.charge(result.usage, started.choice)
    completions = result.completions
    recorder.emit(
        StepFinished(
            step_id,
            texts=tuple(c.text for c in completions),
            answers=tuple(answer_of(c.text) for c in completions),
            finish_reasons=tuple(c.finish_reason for c in completions),
            usage=result.usage,
            reasonings=tuple(c.reasoning for c in completions),
            token_ids=tuple(c.token_ids for c in completions),
            logprobs=tuple(c.logprobs for c in completions),
            prompt_token_ids=result.prompt_token_ids,
            completion_tokens=tuple(c.completion_tokens for c in completions),
            extras=tuple(c.extra for c in completions),
        )
    )
    return result


async def _call(
    engine: Engine,
    request: GenerateRequest,
    step_id: str,
    recorder: TraceRecorder,
    ledger: Ledger,
) -> GenerateResult:
    async with asyncio.timeout_at(ledger.loop_deadline()):
        if not recorder.live:
            return await engine.generate(request)
        result: GenerateResult | None = None
        async for item in engine.stream(request):
            if isinstance(item, EngineDelta):
                recorder.emit(
                    StepDelta(step_id, item.index, item.text, item.reasoning, extra=item.extra)
                )
            else:
                result = item
        if result is None:
            raise EngineError("the engine's stream ended without a result")
        return result


@contextlib.contextmanager
def step_failures_traced(step_id: str, recorder: TraceRecorder, ledger: Ledger) -> Iterator[None]:
    """Around a step's call: a failure ends the step in the trace (``StepFinished`` with
    the error's name) and propagates; the run's deadline (a ``TimeoutError``) cuts the
    run and is raised as :class:`DeadlineExceededError`.

    >>> from scaffolds.problem import Budget
    >>> ledger, recorder = Ledger.start(Budget()), TraceRecorder()
    >>> try:
    ...     with step_failures_traced("run:1", recorder, ledger):
    ...         raise TimeoutError
    ... except DeadlineExceededError:
    ...     [e.error for e in recorder.events], ledger.cut_reason
    (['TimeoutError'], 'time')
    """
    try:
        yield
    except BaseException as exc:
        recorder.emit(StepFinished(step_id, (), (), (), Usage(), error=type(exc).__name__))
        if isinstance(exc, TimeoutError):
            ledger.cut("time")
            raise DeadlineExceededError() from exc
        raise
