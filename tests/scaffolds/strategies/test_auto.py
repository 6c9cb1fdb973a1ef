"""``auto`` on MockEngine: the pilot places each prompt, the run stops or draws more,
within the request's budget, and the trace records the decision."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scaffolds.core.run import RunResult, run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepNote
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message
from scaffolds.errors import SpecError
from scaffolds.problem import Budget, Problem
from scaffolds.spec.build import build_strategy
from scaffolds.strategies import Auto, Strategy

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))


async def run(strategy: Strategy, handler: Any, **kwargs: Any) -> tuple[MockEngine, RunResult]:
    engine = MockEngine(handler)
    return engine, await run_scaffold(strategy, PROBLEM, engine, RunSettings(**kwargs))


def requests_of(*answers: list[str]) -> Callable[[GenerateRequest], list[str]]:
    """Request i answers with ``answers[i]`` (boxed), cycled to its ``n``."""
    pending = iter(answers)

    def handler(request: GenerateRequest) -> list[str]:
        wave = next(pending)
        return [f"\\boxed{{{wave[i % len(wave)]}}}" for i in range(request.params.n)]

    return handler


def allocation(result: RunResult) -> dict[str, Any]:
    [note] = [e for e in result.events if isinstance(e, StepNote) and e.kind == "allocation"]
    return dict(note.values)


async def test_a_unanimous_pilot_stops() -> None:
    engine, result = await run(Auto(), requests_of(["5"]))
    assert [r.params.n for r in engine.requests] == [4]
    assert result.solutions[0].answer == "5" and not result.cut_short
    note = allocation(result)
    assert (note["agreement"], note["tier"], note["planned"], note["samples"]) == (
        1.0,
        "stop",
        4,
        4,
    )
    assert note["reason"] == "settled" and note["leader"] == "5"


async def test_a_mostly_agreeing_pilot_draws_up_to_mid_k() -> None:
    engine, result = await run(Auto(), requests_of(["5", "5", "5", "6"], ["5"]))
    assert [r.params.n for r in engine.requests] == [4, 4]
    note = allocation(result)
    assert (note["agreement"], note["tier"], note["samples"]) == (0.75, "mid", 8)
    assert result.solutions[0].answer == "5"


async def test_a_split_pilot_draws_max_k_and_the_vote_counts_every_sample() -> None:
    # The pilot leans to 1 (2 of 4); the 12 more say 2: the majority of all 16 is 2.
    engine, result = await run(Auto(), requests_of(["1", "1", "2", "3"], ["2"]))
    assert [r.params.n for r in engine.requests] == [4, 12]
    note = allocation(result)
    assert (note["agreement"], note["tier"], note["planned"], note["samples"]) == (
        0.5,
        "max",
        16,
        16,
    )
    assert note["reason"] == "planned" and note["thresholds"] == {"stop": 1.0, "mid": 0.75}
    assert result.solutions[0].answer == "2" and not result.cut_short


async def test_thresholds_are_parameters() -> None:
    # stop=0.75 settles the same 3-of-4 pilot that the default sends to mid_k.
    engine, result = await run(Auto(stop=0.75, mid=0.5), requests_of(["5", "5", "5", "6"]))
    assert [r.params.n for r in engine.requests] == [4]
    assert allocation(result)["tier"] == "stop"


async def test_the_budget_is_respected() -> None:
    # Room for the pilot's call only: the split pilot plans 16 and votes over its 4.
    engine, result = await run(
        Auto(), requests_of(["1", "1", "2", "3"], ["2"]), budget=Budget(max_calls=1)
    )
    assert len(engine.requests) == 1
    assert result.usage.calls == 1
    note = allocation(result)
    assert (note["planned"], note["samples"], note["reason"]) == (16, 4, "budget")
    assert result.solutions[0].answer == "1" and result.cut_short


async def test_the_token_budget_caps_what_the_draws_generate() -> None:
    budget = 60
    _, result = await run(Auto(), requests_of(["1", "2"], ["2"]), budget=Budget(max_tokens=budget))
    assert result.usage.completion_tokens <= budget
    assert allocation(result)["tier"] == "max"


def test_the_spec_and_its_bounds() -> None:
    strategy = build_strategy("auto(pilot=2, stop=1.0, mid=0.5, mid_k=4, max_k=6)")
    assert isinstance(strategy, Auto)
    assert str(strategy) == "auto(pilot=2, mid=0.5, mid_k=4, max_k=6)"
    assert (strategy.max_calls(), strategy.max_samples()) == (2, 6)
    with pytest.raises(SpecError, match=r"auto\.max_k: must be at least mid_k=8"):
        build_strategy("auto(max_k=6)")
    with pytest.raises(SpecError, match=r"auto\.mid: must be at most stop=0\.5"):
        build_strategy("auto(stop=0.5)")
