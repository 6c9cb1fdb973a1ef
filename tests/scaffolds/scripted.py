"""A MockEngine handler that answers each scaffold step by recognising its template."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import Completion, GenerateRequest

Reply = Callable[[GenerateRequest], str | list[str]]


def partial_of(request: GenerateRequest) -> str:
    """The path a step search asks the model to continue: the chat prompt's trailing
    assistant message, or "" at the root (no assistant message yet).

    >>> from scaffolds.engines.protocol import Message
    >>> ask = Message("user", "What is 12 * 4?")
    >>> partial_of(GenerateRequest([ask, Message("assistant", "12 * 4 =\\n\\n")]))
    '12 * 4 =\\n\\n'
    >>> partial_of(GenerateRequest([ask]))
    ''
    """
    prompt = request.prompt
    assert not isinstance(prompt, str)
    return prompt[-1].content if prompt[-1].role == "assistant" else ""


def tree_engine(tree: Mapping[str, Sequence[Completion]]) -> MockEngine:
    """A MockEngine that continues each path (:func:`partial_of`) with the first ``n`` of
    the steps ``tree`` lists for it.

    >>> engine = tree_engine({"": [Completion("A1", "stop"), Completion("B1", "stop")]})
    >>> from scaffolds.engines.protocol import Message, SamplingParams
    >>> ask = GenerateRequest([Message("user", "?")], SamplingParams(n=1))
    >>> [c.text for c in asyncio.run(engine.generate(ask)).completions]
    ['A1']
    """
    return MockEngine(lambda request: tree[partial_of(request)][: request.params.n])


def step_of(request: GenerateRequest) -> str:
    """Which default-set template produced this prompt."""
    text = request.prompt_text()
    if "### Attempts to combine" in text:
        return "rsa_aggregate"
    if "### Two solutions" in text:
        return "rsa_select"
    if "### Candidate solutions" in text:
        return "judge" if "most likely correct" in text else "gsr_refine"
    if "### Proposed solution" in text:
        return "feedback"
    if "### Feedback on it" in text:
        return "refine"
    if "### Existing summary" in text:
        return "summary"
    if "### Summary of an earlier attempt" in text:
        return "rc_continue"
    if "Do not solve this problem" in text:
        return "abstraction"
    if "### Cheat sheet" in text:
        return "abstraction_solve"
    if text.startswith("### Problem") and "Solve the problem." in text:
        return "rc_start"
    return "solve"


class Script:
    """Answers per step kind; counts calls per kind; default text boxes 42."""

    def __init__(self, **replies: str | list[str] | Reply) -> None:
        self.replies = replies
        self.kinds: list[str] = []

    def __call__(self, request: GenerateRequest) -> str | list[str]:
        kind = step_of(request)
        self.kinds.append(kind)
        reply = self.replies.get(kind, f"{kind} says \\boxed{{42}}")
        if callable(reply):
            return reply(request)
        if isinstance(reply, list) and len(reply) != request.params.n:
            return [reply[i % len(reply)] for i in range(request.params.n)]
        return reply


async def wait_in_flight(engine: MockEngine, calls: int) -> None:
    """Until ``calls`` of ``engine``'s calls are in flight (bounded: 60 s), and checks it."""
    for _ in range(6000):
        await asyncio.sleep(0.01)
        if engine.in_flight == calls:
            break
    assert engine.in_flight == calls


async def cancel_checking_calls(task: asyncio.Task[Any], engine: MockEngine, calls: int) -> None:
    """Cancel the run ``task``, and check that it cancelled its ``calls`` engine calls in
    flight and left none running."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert engine.cancelled == calls and engine.in_flight == 0
