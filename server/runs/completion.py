"""Completion shaping: a finished run as an OpenAI completion object or SSE chunks.

A run's answer is a chat completion (or text completion) object: the chat completions
API sends it as is, and the Responses and Messages APIs reshape it.

>>> new_completion_id("chat").startswith("chatcmpl-"), new_completion_id("completions")[:5]
(True, 'cmpl-')
>>> usage_json(Usage(prompt_tokens=3, completion_tokens=4, calls=2))["total_tokens"]
7
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi.responses import JSONResponse

from scaffolds import fastjson
from scaffolds.core.run import RunResult
from scaffolds.core.solution import Solution
from scaffolds.core.trace import StepFinished, StepStarted, TraceRecorder
from scaffolds.engines.protocol import Usage
from scaffolds.spec.build import spec_string
from server.runs.planning import RunPlan
from server.runs.request import Endpoint
from server.runs.streaming import finished_reasoning, sse_event

__all__ = [
    "ChunkMaker",
    "FastJSONResponse",
    "answer_choices",
    "chunk_object",
    "completion_body",
    "completion_object",
    "delta_choice",
    "engine_fields",
    "finish_reasons",
    "new_completion_id",
    "ponder_extra",
    "reasoning_tokens",
    "usage_json",
]


def usage_json(usage: Usage, reasoning_tokens: int | None = None) -> dict[str, Any]:
    """OpenAI usage plus cached and reasoning tokens and Ponder's ``engine_calls``.

    ``reasoning_tokens`` defaults to what the engines reported as reasoning.
    """
    reasoning = usage.reasoning_tokens if reasoning_tokens is None else reasoning_tokens
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
        "engine_calls": usage.calls,
    }


def completion_object(
    endpoint: Endpoint,
    *,
    completion_id: str,
    created: int,
    model: str,
    choices: Sequence[Mapping[str, Any]],
    usage: Usage,
    extra: Mapping[str, Any] | None = None,
    reasoning_tokens: int | None = None,
) -> dict[str, Any]:
    """A whole (non-streamed) completion object. ``choices`` hold text, reasoning, finish_reason
    and the engine's own fields of the answer (``extra``: logprobs, a message's
    tool_calls...), which go in unchanged beside Ponder's."""
    out_choices: list[dict[str, Any]] = []
    for index, choice in enumerate(choices):
        own = dict(choice.get("extra") or {})
        if endpoint == "chat":
            mine = own.pop("message", None) or {}
            content = choice["text"]
            if not content and "tool_calls" in mine:
                content = None  # as the engine sent it: a tool call has no text
            message: dict[str, Any] = {"role": "assistant", "content": content, **mine}
            if choice.get("reasoning"):
                message["reasoning_content"] = choice["reasoning"]
                message["reasoning"] = choice["reasoning"]
            body_choice = {"index": index, "message": message}
        else:
            body_choice = {"index": index, "text": choice["text"]}
        body_choice |= {"finish_reason": choice["finish_reason"], "logprobs": None, **own}
        out_choices.append(body_choice)
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion" if endpoint == "chat" else "text_completion",
        "created": created,
        "model": model,
        "choices": out_choices,
        "usage": usage_json(usage, reasoning_tokens),
    }
    if extra:
        body.update(extra)
    return body


def chunk_object(
    endpoint: Endpoint,
    *,
    completion_id: str,
    created: int,
    model: str,
    choices: Sequence[dict[str, Any]],
    usage: Usage | None = None,
    extra: Mapping[str, Any] | None = None,
    reasoning_tokens: int | None = None,
) -> dict[str, Any]:
    """One SSE chunk; ``choices`` come from :func:`delta_choice`."""
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk" if endpoint == "chat" else "text_completion",
        "created": created,
        "model": model,
        "choices": list(choices),
    }
    if usage is not None:
        body["usage"] = usage_json(usage, reasoning_tokens)
    if extra:
        body.update(extra)
    return body


def delta_choice(
    endpoint: Endpoint,
    index: int,
    *,
    content: str | None = None,
    reasoning: str | None = None,
    role: bool = False,
    finish_reason: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One choice of a chunk: a content and/or reasoning delta, or a finish reason.

    Reasoning goes in both fields vLLM has used (``reasoning_content`` and ``reasoning``).
    ``extra`` is the engine chunk's own fields (its ``logprobs``; under ``"delta"``, a
    chat delta's ``tool_calls``), passed on unchanged.
    """
    own = dict(extra or {})
    if endpoint == "chat":
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
        if content is not None and (content or "tool_calls" not in own.get("delta", {})):
            delta["content"] = content
        if reasoning is not None:
            delta["reasoning_content"] = reasoning
            delta["reasoning"] = reasoning
        delta |= own.pop("delta", None) or {}
        choice = {"index": index, "delta": delta}
    else:
        choice = {"index": index, "text": content or ""}
        if reasoning is not None:
            choice["reasoning_content"] = reasoning
            choice["reasoning"] = reasoning
    return choice | {"finish_reason": finish_reason, "logprobs": None, **own}


class FastJSONResponse(JSONResponse):
    """An HTTP JSON response written by :mod:`scaffolds.fastjson` (orjson when installed)."""

    def render(self, content: Any) -> bytes:
        return fastjson.dumps(content)


def new_completion_id(endpoint: Endpoint) -> str:
    """A fresh OpenAI-style completion id for ``endpoint`` (``chatcmpl-...``, ``cmpl-...``)."""
    prefix = "chatcmpl" if endpoint == "chat" else "cmpl"
    return f"{prefix}-{secrets.token_hex(16)}"


def ponder_extra(
    plan: RunPlan, result: RunResult, recorder: TraceRecorder | list[TraceRecorder]
) -> dict[str, Any]:
    """Ponder's own fields of an answer body, on every API: the scaffold run, its cut
    reason, what the request's reasoning effort did (when it asked for one), the trace if
    asked (of every run, one after the other, when a request held several prompts)."""
    ponder: dict[str, Any] = {
        "scaffold": spec_string(plan.strategy),
        "cut_reason": result.cut_reason,
    }
    if plan.effort is not None:
        ponder["effort"] = plan.effort.to_json()
    extra: dict[str, Any] = {"ponder": ponder}
    if plan.return_trace:
        recorders = recorder if isinstance(recorder, list) else [recorder]
        extra["trace"] = [event for r in recorders for event in r.to_json()]
    return extra


def completion_body(plan: RunPlan, runs: list[tuple[RunResult, TraceRecorder]]) -> dict[str, Any]:
    """The whole (non-streamed) completion object of finished runs (one per prompt):
    their choices in order, their usage summed."""
    choices: list[dict[str, Any]] = []
    for result, _ in runs:
        choices += answer_choices(plan, result)
    first = runs[0][0]
    usage = sum((result.usage for result, _ in runs[1:]), first.usage)
    cut = next((r.cut_reason for r, _ in runs if r.cut_reason), None)
    merged = RunResult([], usage, [], cut)
    return completion_object(
        plan.endpoint,
        completion_id=new_completion_id(plan.endpoint),
        created=int(time.time()),
        model=plan.model,
        choices=choices,
        usage=usage,
        extra=ponder_extra(plan, merged, [recorder for _, recorder in runs]),
        reasoning_tokens=sum(reasoning_tokens(result) for result, _ in runs),
    )


def answer_choices(plan: RunPlan, result: RunResult) -> list[dict[str, Any]]:
    """A finished run's choices as :func:`completion_object` takes them: each solution's
    text, its reasoning (:func:`~server.runs.streaming.finished_reasoning`: what the
    stream's reasoning carried), finish reason and engine fields."""
    reasoning = [""] * plan.n
    for piece in finished_reasoning(result.events, plan.n):
        reasoning[piece.choice] += piece.text
    reasons = finish_reasons(result)
    fields = engine_fields(result)
    return [
        {
            "text": s.text,
            "reasoning": reasoning[i] or None,
            "finish_reason": reasons[i],
            "extra": fields[i],
        }
        for i, s in enumerate(result.solutions)
    ]


class ChunkMaker:
    """The SSE chunks of one streamed completion (one id and creation time for all).

    A chunk of choices alone (every token's) is the encoded head, shared by all of the
    completion's chunks, and its choices: the same bytes :func:`chunk_object` and
    :func:`sse_event` give, without building and encoding the head again.
    """

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.id = new_completion_id(plan.endpoint)
        self.created = int(time.time())
        # "choices" is a chunk's last field when no usage or extra follows it.
        self._head = sse_event(self._object([]))[: -len(b"[]}\n\n")]

    def __call__(self, choices: list[dict[str, Any]], **kw: Any) -> bytes:
        if not kw:
            return self._head + fastjson.dumps(choices) + b"}\n\n"
        return sse_event(self._object(choices, **kw))

    def _object(self, choices: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
        plan = self.plan
        return chunk_object(
            plan.endpoint,
            completion_id=self.id,
            created=self.created,
            model=plan.model,
            choices=choices,
            **kw,
        )


def finish_reasons(result: RunResult) -> list[str]:
    """Per choice: ``length`` when the run was cut short (``cut_reason`` is set: a limit
    ended it, whatever choice it cut) or the solution was, else the finish reason the
    engine gave its generation (``stop``, ``length``, ``tool_calls``...)."""
    if result.cut_reason:
        return ["length"] * len(result.solutions)
    steps = _finished_steps(result)
    return [
        _finish_reason(solution, choice, steps) for choice, solution in enumerate(result.solutions)
    ]


def reasoning_tokens(result: RunResult) -> int:
    """The run's thinking: every generated token of the steps that do not write the final
    answer, plus what the engines reported as reasoning within the final answer's steps."""
    final = {e.step_id for e in result.events if isinstance(e, StepStarted) and e.final}
    return sum(
        e.usage.reasoning_tokens if e.step_id in final else e.usage.completion_tokens
        for e in result.events
        if isinstance(e, StepFinished)
    )


def _finished_steps(result: RunResult) -> dict[str, StepFinished]:
    return {e.step_id: e for e in result.events if isinstance(e, StepFinished)}


def _sample_of(solution: Solution, step: StepFinished, choice: int) -> int:
    """Which sample of ``step`` the solution is."""
    if solution.sample < len(step.texts) and step.texts[solution.sample] == solution.text:
        return solution.sample
    index = next((i for i, t in enumerate(step.texts) if t == solution.text), None)
    if index is None:
        index = choice if choice < len(step.finish_reasons) else 0
    return index


def engine_fields(result: RunResult) -> list[Any]:
    """Per choice: the engine's own fields of the generation that is its answer (its
    logprobs, a chat message's tool calls under ``"message"``...), when the answer is
    exactly one engine generation; else None."""
    steps = _finished_steps(result)
    return [_generation_fields(solution, steps) for solution in result.solutions]


def _generation_fields(solution: Solution, steps: Mapping[str, StepFinished]) -> Any:
    step = steps.get(solution.step_id or "")
    if step is None or solution.cut_short or not step.extras:
        return None
    sample = solution.sample
    if sample >= len(step.texts) or step.texts[sample] != solution.text:
        return None
    return step.extras[sample] if sample < len(step.extras) else None


def _finish_reason(solution: Solution, choice: int, steps: Mapping[str, StepFinished]) -> str:
    if solution.cut_short:
        return "length"
    step = steps.get(solution.step_id or "")
    if step is None or not step.finish_reasons:
        return "stop"
    return step.finish_reasons[_sample_of(solution, step, choice)] or "stop"
