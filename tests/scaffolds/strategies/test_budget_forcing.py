"""budget_forcing: "Wait" continues the same assistant message until min_tokens."""

from __future__ import annotations

import asyncio

import pytest

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepFinished, StepStarted
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import Completion, GenerateRequest, Message
from scaffolds.errors import SpecError
from scaffolds.problem import Budget, Problem
from scaffolds.spec.build import build_strategy, spec_string
from scaffolds.strategies import BudgetForcing, Majority
from scaffolds.strategies.budget_forcing import CONTINUE
from scaffolds.strategies.steps import render_step
from tests.scaffolds.scripted import cancel_checking_calls

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))
WAIT = "\n\nWait"


def replies(*texts: str) -> MockEngine:
    """An engine answering its calls with ``texts`` in order (the last one repeats)."""
    queue = list(texts)

    def handler(request: GenerateRequest) -> str:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return MockEngine(handler)


def test_spec_parses_and_bounds_calls() -> None:
    strategy = build_strategy("budget_forcing(min_tokens=100, waits=3)")
    assert strategy == BudgetForcing(min_tokens=100, waits=3)
    assert build_strategy(spec_string(strategy)) == strategy
    # The first call, three cues and the answer after the closed thinking.
    assert (strategy.max_calls(), strategy.max_samples()) == (5, 5)
    assert Majority(k=4, solver=strategy).max_calls() == 1 + 4 * 4
    with pytest.raises(SpecError) as info:
        build_strategy("budget_forcing(waits=-1)")
    assert info.value.param == "waits"


async def test_an_early_end_is_reopened_with_wait_in_the_same_message() -> None:
    engine = replies("six sevens \\boxed{42}", "let me check again \\boxed{42}")
    result = await run_scaffold(BudgetForcing(min_tokens=20, waits=1), PROBLEM, engine)
    first, second = engine.requests
    assert not first.continue_final and first.prompt == PROBLEM.raw_prompt
    assert second.continue_final
    assert second.prompt[:-1] == PROBLEM.raw_prompt  # type: ignore[index]
    assert second.prompt[-1] == Message("assistant", "six sevens \\boxed{42}" + WAIT)  # type: ignore[index]
    text = "six sevens \\boxed{42}" + WAIT + "let me check again \\boxed{42}"
    assert result.solutions[0].text == text and result.solutions[0].answer == "42"
    started = [e for e in result.events if isinstance(e, StepStarted)]
    assert [(e.kind, e.label, e.template) for e in started] == [
        ("generate", "answer", None),
        ("continue", "wait 1", "budget_forcing_wait"),
    ]
    assert started[1].parent_step == started[0].step_id and started[1].sample == 0
    assert result.solutions[0].step_id == started[1].step_id
    # Usage counts every continuation's tokens.
    assert result.usage.calls == 2
    assert result.usage.completion_tokens == 3 + 5


async def test_waits_stop_at_the_limit_or_once_min_tokens_are_spent() -> None:
    engine = replies("short \\boxed{1}")
    result = await run_scaffold(BudgetForcing(min_tokens=1000, waits=2), PROBLEM, engine)
    assert len(engine.requests) == 3
    assert result.solutions[0].text.count("Wait") == 2
    engine = replies("one two three four five \\boxed{1}", "more")
    result = await run_scaffold(BudgetForcing(min_tokens=7, waits=5), PROBLEM, engine)
    assert len(engine.requests) == 2  # 6 tokens, then 1 more makes 7: no third call


async def test_enough_tokens_at_once_means_no_continuation() -> None:
    engine = replies("a b c d \\boxed{2}")
    result = await run_scaffold(BudgetForcing(min_tokens=3), PROBLEM, engine)
    assert len(engine.requests) == 1
    assert result.solutions[0].text == "a b c d \\boxed{2}"


async def test_wait_goes_before_the_end_of_thinking() -> None:
    engine = replies("<think>six sevens</think>The answer is \\boxed{42}", "yes</think>\\boxed{42}")
    result = await run_scaffold(BudgetForcing(min_tokens=50, waits=1), PROBLEM, engine)
    partial = engine.requests[1].prompt[-1].content  # type: ignore[index]
    assert partial == "<think>six sevens" + WAIT
    assert result.solutions[0].text == "<think>six sevens" + WAIT + "yes</think>\\boxed{42}"


async def test_separate_reasoning_is_reopened_as_thinking() -> None:
    calls: list[GenerateRequest] = []

    def handler(request: GenerateRequest) -> list[Completion]:
        calls.append(request)
        if len(calls) == 1:
            return [Completion("\\boxed{41}", reasoning="six sevens", completion_tokens=3)]
        return [Completion("\\boxed{42}", reasoning=" no, 42", completion_tokens=4)]

    result = await run_scaffold(BudgetForcing(min_tokens=50, waits=1), PROBLEM, MockEngine(handler))
    assert calls[1].prompt[-1] == Message("assistant", "<think>\nsix sevens" + WAIT)  # type: ignore[index]
    solution = result.solutions[0]
    assert (solution.text, solution.reasoning) == ("\\boxed{42}", "six sevens" + WAIT + " no, 42")


async def test_a_text_prompt_continues_as_a_completion() -> None:
    engine = replies("7 \\boxed{7}", "yes \\boxed{7}")
    problem = Problem.from_text("3+4=")
    result = await run_scaffold(BudgetForcing(min_tokens=10, waits=1), problem, engine)
    assert engine.requests[1].prompt == "3+4=7 \\boxed{7}" + WAIT
    assert result.solutions[0].text == "7 \\boxed{7}" + WAIT + "yes \\boxed{7}"


async def test_length_and_the_message_cap_end_the_waits() -> None:
    engine = replies("a b c d e f g h \\boxed{1}")
    await run_scaffold(BudgetForcing(min_tokens=100, max_tokens=5), PROBLEM, engine)
    assert len(engine.requests) == 1  # cut at the cap: finish_reason "length"
    assert engine.requests[0].params.max_tokens == 5
    engine = replies("a b \\boxed{1}", "c d e f g h")
    strategy = BudgetForcing(min_tokens=100, max_tokens=6, waits=3)
    await run_scaffold(strategy, PROBLEM, engine)
    assert [r.params.max_tokens for r in engine.requests] == [6, 3]


async def test_the_call_budget_stops_the_waits_with_the_answer_so_far() -> None:
    engine = replies("first \\boxed{1}", "then \\boxed{2}")
    result = await run_scaffold(
        BudgetForcing(min_tokens=100, waits=3),
        PROBLEM,
        engine,
        RunSettings(budget=Budget(max_calls=2)),
    )
    assert len(engine.requests) == 2
    assert result.solutions[0].answer == "2" and result.solutions[0].cut_short
    assert result.cut_reason == "calls"


async def test_a_token_budget_forces_the_answer_after_the_whole_message() -> None:
    def handler(request: GenerateRequest) -> str:
        if "Time is up" in request.prompt_text():
            return "\\boxed{42}"
        return "short" if not request.continue_final else "x " * 50

    engine = MockEngine(handler)
    result = await run_scaffold(
        BudgetForcing(min_tokens=100, waits=1),
        PROBLEM,
        engine,
        RunSettings(budget=Budget(max_tokens=40)),
    )
    kinds = [e.kind for e in result.events if isinstance(e, StepStarted)]
    assert kinds == ["generate", "continue", "force_answer"]
    forced = engine.requests[2].prompt
    assert [m.role for m in forced] == ["user", "assistant", "user"]  # type: ignore[union-attr]
    assert forced[1].content.startswith("short" + WAIT + "x x")  # type: ignore[index]
    assert not engine.requests[2].continue_final
    assert result.solutions[0].answer == "42" and result.solutions[0].cut_short
    finished = [e for e in result.events if isinstance(e, StepFinished)]
    assert result.usage.completion_tokens == sum(e.usage.completion_tokens for e in finished)
    assert result.usage.completion_tokens <= 40


async def test_k_samples_start_in_one_request_and_continue_independently() -> None:
    def handler(request: GenerateRequest) -> list[str] | str:
        if request.params.n == 3:
            return ["a \\boxed{1}", "b c d e f g \\boxed{2}", "h \\boxed{3}"]
        return "more \\boxed{9}"

    engine = MockEngine(handler)
    result = await run_scaffold(
        BudgetForcing(min_tokens=5, waits=1), PROBLEM, engine, RunSettings(n=3)
    )
    assert [r.params.n for r in engine.requests] == [3, 1, 1]
    assert [s.answer for s in result.solutions] == ["9", "2", "9"]
    assert result.usage.calls == 3


async def test_cancelling_the_run_cancels_a_continuation() -> None:
    started = asyncio.Event()

    async def handler(request: GenerateRequest) -> str:
        if request.continue_final:
            started.set()
            await asyncio.sleep(30)
        return "short \\boxed{1}"

    engine = MockEngine(handler)
    task = asyncio.create_task(run_scaffold(BudgetForcing(min_tokens=50), PROBLEM, engine))
    await asyncio.wait_for(started.wait(), 10)
    await cancel_checking_calls(task, engine, 1)


def test_the_continue_step_renders_outside_a_run() -> None:
    step = render_step(CONTINUE, "3+4=", {"partial": "7 Wait"}, prompts="compact")
    assert step.prompt == "3+4=7 Wait" and step.template == "budget_forcing_wait"
    chat = render_step(CONTINUE, "3+4=", {"partial": "7 Wait"}, chat=True)
    assert chat.prompt[-1] == Message("assistant", "7 Wait")  # type: ignore[index]


async def test_composes_as_the_solver_of_majority() -> None:
    def handler(request: GenerateRequest) -> list[str] | str:
        if request.params.n == 3:
            return ["a \\boxed{1}", "b \\boxed{2}", "c \\boxed{2}"]
        return "so \\boxed{2}"

    engine = MockEngine(handler)
    strategy = Majority(k=3, solver=BudgetForcing(min_tokens=3, waits=1))
    result = await run_scaffold(strategy, PROBLEM, engine)
    assert [r.params.n for r in engine.requests] == [3, 1, 1, 1]
    assert result.solutions[0].answer == "2"
    assert result.usage.calls == 4 <= strategy.max_calls()
