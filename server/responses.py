"""Response shaping: a finished run as an OpenAI completion object or SSE chunks.

>>> response_id("chat").startswith("chatcmpl-"), response_id("completions")[:5]
(True, 'cmpl-')
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse

from scaffolds import fastjson
from scaffolds.run import RunResult
from scaffolds.spec import spec_string
from scaffolds.strategies.base import Solution
from scaffolds.trace import StepFinished, TraceRecorder
from server.planning import RunPlan
from server.protocol import Endpoint, chunk_object, completion_object
from server.streaming import ChoiceRouter, sse_event

__all__ = [
    "ChunkMaker",
    "FastJSONResponse",
    "finish_reasons",
    "response_body",
    "response_extra",
    "response_id",
]


class FastJSONResponse(JSONResponse):
    """A JSON response written by :mod:`scaffolds.fastjson` (orjson when installed)."""

    def render(self, content: Any) -> bytes:
        return fastjson.dumps(content)


def response_id(endpoint: Endpoint) -> str:
    """A fresh OpenAI-style response id for ``endpoint``."""
    prefix = "chatcmpl" if endpoint == "chat" else "cmpl"
    return f"{prefix}-{uuid.uuid4().hex}"


def response_extra(plan: RunPlan, result: RunResult, recorder: TraceRecorder) -> dict[str, Any]:
    """Ponder's own response fields: the scaffold run, its cut reason, the trace if asked."""
    extra: dict[str, Any] = {
        "ponder": {"scaffold": spec_string(plan.strategy), "cut_reason": result.cut_reason}
    }
    if plan.return_trace:
        extra["trace"] = recorder.to_json()
    return extra


def response_body(plan: RunPlan, result: RunResult, recorder: TraceRecorder) -> dict[str, Any]:
    """The whole (non-streamed) completion object of a finished run."""
    router = ChoiceRouter(plan.n)
    for event in result.events:
        router.feed(event)
    reasons = finish_reasons(result)
    choices = [
        {"text": s.text, "reasoning": router.reasoning(i) or None, "finish_reason": reasons[i]}
        for i, s in enumerate(result.solutions)
    ]
    return completion_object(
        plan.endpoint,
        response_id=response_id(plan.endpoint),
        created=int(time.time()),
        model=plan.model,
        choices=choices,
        usage=result.usage,
        extra=response_extra(plan, result, recorder),
    )


class ChunkMaker:
    """The SSE chunks of one streamed response (one id and creation time for all)."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.id = response_id(plan.endpoint)
        self.created = int(time.time())

    def __call__(self, choices: list[dict[str, Any]], **kw: Any) -> bytes:
        return sse_event(
            chunk_object(
                self.plan.endpoint,
                response_id=self.id,
                created=self.created,
                model=self.plan.model,
                choices=choices,
                **kw,
            )
        )


def finish_reasons(result: RunResult) -> list[str]:
    """Per choice: ``length`` when the solution was cut short or its completion truncated."""
    steps = {e.step_id: e for e in result.events if isinstance(e, StepFinished)}
    return [
        _finish_reason(solution, choice, steps) for choice, solution in enumerate(result.solutions)
    ]


def _finish_reason(solution: Solution, choice: int, steps: Mapping[str, StepFinished]) -> str:
    if solution.cut_short:
        return "length"
    step = steps.get(solution.step_id or "")
    if step is None or not step.finish_reasons:
        return "stop"
    index = next((i for i, t in enumerate(step.texts) if t == solution.text), None)
    if index is None:
        index = choice if choice < len(step.finish_reasons) else 0
    return "length" if step.finish_reasons[index] == "length" else "stop"
