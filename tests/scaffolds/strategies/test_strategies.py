"""Each strategy's call graph, prompts, composition and budget behaviour, on MockEngine."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepFinished, StepStarted
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import Message, SamplingParams
from scaffolds.errors import DeadlineExceededError
from scaffolds.problem import Budget, Problem
from scaffolds.strategies import (
    GSR,
    RC,
    Abstraction,
    BestOfN,
    Majority,
    SelfRefine,
    Single,
    Strategy,
)
from tests.scaffolds.scripted import Script, cancel_checking_calls, wait_in_flight

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))


async def run(strategy: Strategy, script: Script, **kwargs: object):
    engine = MockEngine(script)
    result = await run_scaffold(strategy, PROBLEM, engine, RunSettings(**kwargs))  # type: ignore[arg-type]
    return engine, result


async def test_single_passes_the_prompt_through_in_one_call() -> None:
    engine, result = await run(Single(), Script(solve="it is \\boxed{42}"))
    assert len(engine.requests) == 1
    assert engine.requests[0].prompt == PROBLEM.raw_prompt
    assert result.solutions[0].answer == "42"
    assert result.usage.calls == 1


async def test_single_with_n_choices_is_one_request() -> None:
    engine, result = await run(Single(), Script(solve=["\\boxed{1}", "\\boxed{2}"]), n=2)
    assert [r.params.n for r in engine.requests] == [2]
    assert [s.answer for s in result.solutions] == ["1", "2"]


async def test_majority_votes_over_one_batched_request() -> None:
    answers = ["\\boxed{41}", "\\boxed{42}", "\\boxed{42}", "\\boxed{7}", "\\boxed{42}"]
    engine, result = await run(Majority(k=5), Script(solve=answers))
    assert [r.params.n for r in engine.requests] == [5]
    assert result.solutions[0].answer == "42"
    assert not result.cut_short


async def test_gsr_generates_candidates_in_one_request_then_refines() -> None:
    candidates = [f"candidate text {i} \\boxed{{{i}}}" for i in range(4)]
    script = Script(solve=candidates, gsr_refine="merged \\boxed{42}")
    engine, result = await run(GSR(n=4), script)
    assert script.kinds == ["solve", "gsr_refine"]
    assert engine.requests[0].params.n == 4
    refine_prompt = engine.requests[1].prompt_text()
    assert refine_prompt.startswith("### Problem\nWhat is 6*7?")
    for i, text in enumerate(candidates, start=1):
        assert f"#### Candidate {i}\n{text}" in refine_prompt
    assert "Above are 4 candidate solutions" in refine_prompt
    assert result.solutions[0].answer == "42"
    started = [e for e in result.events if isinstance(e, StepStarted)]
    assert [e.final for e in started] == [False, True]


async def test_gsr_out_of_calls_before_refine_returns_the_vote_cut_short() -> None:
    script = Script(solve=["\\boxed{3}", "\\boxed{5}", "\\boxed{5}"])
    _, result = await run(GSR(n=3), script, budget=Budget(max_calls=1))
    assert script.kinds == ["solve"]
    assert result.solutions[0].answer == "5"
    assert result.solutions[0].cut_short
    assert result.cut_reason == "calls"


async def test_best_of_n_takes_the_judges_pick() -> None:
    script = Script(solve=["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"], judge="best is \\boxed{3}")
    _, result = await run(BestOfN(n=3), script)
    assert script.kinds == ["solve", "judge"]
    assert result.solutions[0].answer == "3"


async def test_best_of_n_falls_back_to_a_vote_on_an_unreadable_pick() -> None:
    script = Script(solve=["\\boxed{1}", "\\boxed{2}", "\\boxed{2}"], judge="no idea")
    _, result = await run(BestOfN(n=3), script)
    assert result.solutions[0].answer == "2"


async def test_self_refine_stops_when_feedback_says_correct() -> None:
    script = Script(solve="\\boxed{42}", feedback="Step 1 is right.\nVERDICT: CORRECT")
    _, result = await run(SelfRefine(max_rounds=3), script)
    assert script.kinds == ["solve", "feedback"]
    assert result.solutions[0].answer == "42"


async def test_self_refine_refines_with_the_feedback_up_to_max_rounds() -> None:
    script = Script(
        solve="first \\boxed{41}",
        feedback="Step 2 multiplies wrong.\nVERDICT: INCORRECT",
        refine="fixed \\boxed{42}",
    )
    engine, result = await run(SelfRefine(max_rounds=2), script)
    assert script.kinds == ["solve", "feedback", "refine", "feedback", "refine"]
    refine_prompt = engine.requests[2].prompt_text()
    assert "first \\boxed{41}" in refine_prompt
    assert "Step 2 multiplies wrong." in refine_prompt
    assert result.solutions[0].answer == "42"
    assert result.usage.calls == SelfRefine(max_rounds=2).max_calls()


async def test_rc_alternates_reasoning_and_summaries_with_the_problem_first() -> None:
    script = Script(
        rc_start="chunk one \\boxed{40}",
        summary="I tried 40.",
        rc_continue="chunk two \\boxed{42}",
    )
    engine, result = await run(RC(steps=3, reasoning_tokens=64, summary_tokens=16), script)
    assert script.kinds == ["rc_start", "summary", "rc_continue", "summary", "rc_continue"]
    for request in engine.requests:
        assert request.prompt_text().startswith("### Problem\nWhat is 6*7?")
    first_summary, second_summary = engine.requests[1], engine.requests[3]
    assert "chunk one" in first_summary.prompt_text()
    assert "(none: this is the first attempt)" in first_summary.prompt_text()
    assert "I tried 40." in second_summary.prompt_text()
    assert "chunk two" in second_summary.prompt_text()
    assert "I tried 40." in engine.requests[2].prompt_text()
    assert [r.params.max_tokens for r in engine.requests] == [64, 16, 64, 16, 64]
    answers = [e.answers for e in result.events if isinstance(e, StepFinished)]
    assert answers[0] == ("40",) and answers[-1] == ("42",)
    assert result.solutions[0].answer == "42"


async def test_rc_summarizes_the_thinking_of_thinking_models() -> None:
    script = Script(rc_start="I think hard</think>so \\boxed{1}", summary="s")
    engine, _ = await run(RC(steps=2), script)
    summary_prompt = engine.requests[1].prompt_text()
    assert "I think hard" in summary_prompt and "so \\boxed{1}" not in summary_prompt


async def test_rc_samples_advance_independently() -> None:
    # The slow summary ends once the fast sample's next reasoning has ended (not after a
    # fixed sleep, which a stalled machine outlasts); in lockstep it would wait in vain.
    order: list[str] = []
    fast_reasoned = asyncio.Event()

    async def handler(request):  # type: ignore[no-untyped-def]
        text = request.prompt_text()
        if "Solve the problem." in text:
            return ["slow start", "fast start"]
        name = "slow" if "slow" in text else "fast"
        kind = "summary" if "### Existing summary" in text else "reasoning"
        order.append(f"{name} {kind} begins")
        if name == "slow" and kind == "summary":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fast_reasoned.wait(), 10)
        order.append(f"{name} {kind} ends")
        if name == "fast" and kind == "reasoning":
            fast_reasoned.set()
        return f"{name} {kind} \\boxed{{1}}"

    engine = MockEngine(handler)
    await run_scaffold(Majority(k=2, solver=RC(steps=2)), PROBLEM, engine)
    assert engine.requests[0].params.n == 2
    assert order.index("fast reasoning ends") < order.index("slow summary ends")


async def test_abstraction_conditions_each_batch_of_solutions_on_one_note() -> None:
    notes = ["NOTE-A: products of tens", "NOTE-B: repeated addition"]
    script = Script(
        abstraction=notes, abstraction_solve=["\\boxed{42}", "\\boxed{41}", "\\boxed{42}"]
    )
    engine, result = await run(Abstraction(m=2, n=3), script)
    assert [r.params.n for r in engine.requests] == [2, 3, 3]
    solve_prompts = [r.prompt_text() for r in engine.requests[1:]]
    assert sorted(p.split("\n")[1] for p in solve_prompts) == notes
    for prompt in solve_prompts:
        assert "What is 6*7?" in prompt
    assert "6*7" not in engine.requests[0].prompt_text().split("### Instructions")[1]
    assert result.solutions[0].answer == "42"


@pytest.mark.parametrize(
    "strategy",
    [
        GSR(n=2, solver=RC(steps=2)),
        Majority(k=3, solver=GSR(n=2)),
        SelfRefine(max_rounds=2, solver=BestOfN(n=2)),
        Abstraction(m=2, n=2, solver=SelfRefine(max_rounds=1)),
        RC(steps=3, solver=GSR(n=2)),
        BestOfN(n=3, solver=Majority(k=2)),
    ],
    ids=str,
)
async def test_compositions_stay_within_their_call_bound(strategy: Strategy) -> None:
    script = Script(feedback="VERDICT: INCORRECT")
    engine, result = await run(strategy, script)
    assert 1 <= len(engine.requests) <= strategy.max_calls()
    assert len(engine.requests) <= sum(r.params.n for r in engine.requests)
    assert sum(r.params.n for r in engine.requests) <= strategy.max_samples()
    assert result.usage.calls == len(engine.requests)
    steps = [e for e in result.events if isinstance(e, StepFinished)]
    assert sum((s.usage for s in steps), start=type(result.usage)()) == result.usage
    for step in steps:  # each sample's own count, adding up to the step's
        assert len(step.completion_tokens) == len(step.texts)
        assert sum(step.completion_tokens) == step.usage.completion_tokens
    assert result.solutions[0].answer == "42"


@pytest.mark.parametrize(
    ("strategy", "samples"),
    [
        (Majority(k=8), 8),
        (GSR(n=4), 5),
        (BestOfN(n=3), 4),
        (RC(steps=3), 5),
        (Abstraction(m=2, n=3), 8),
        (SelfRefine(max_rounds=2), 5),
        (Majority(k=4, solver=GSR(n=4)), 20),
    ],
    ids=str,
)
async def test_sample_bound_is_what_a_full_run_generates(strategy: Strategy, samples: int) -> None:
    engine, _ = await run(strategy, Script(feedback="VERDICT: INCORRECT"))
    assert strategy.max_samples() == samples
    assert sum(r.params.n for r in engine.requests) == samples


async def test_gsr_over_rc_batches_first_chunks_and_refines_once() -> None:
    script = Script()
    engine, _ = await run(GSR(n=2, solver=RC(steps=2)), script)
    assert script.kinds[0] == "rc_start" and engine.requests[0].params.n == 2
    assert sorted(script.kinds[1:5]) == ["rc_continue", "rc_continue", "summary", "summary"]
    assert script.kinds[5:] == ["gsr_refine"]


async def test_n_choices_run_independently_and_are_tagged() -> None:
    _, result = await run(GSR(n=2), Script(), n=3)
    assert len(result.solutions) == 3
    choices = {e.choice for e in result.events if isinstance(e, StepStarted)}
    assert choices == {0, 1, 2}
    assert result.usage.calls == 6


async def test_token_budget_clamps_calls_and_forces_an_answer() -> None:
    rambling = " ".join(["step"] * 500)
    script = Script(solve=rambling)

    def handler(request):  # type: ignore[no-untyped-def]
        if "Time is up" in request.prompt_text():
            return "\\boxed{42}"
        return script(request)

    engine = MockEngine(handler)
    result = await run_scaffold(
        Single(),
        PROBLEM,
        engine,
        RunSettings(budget=Budget(max_tokens=200), params=SamplingParams(max_tokens=1000)),
    )
    assert engine.requests[0].params.max_tokens is not None
    assert engine.requests[0].params.max_tokens <= 200
    assert len(engine.requests) == 2
    solution = result.solutions[0]
    assert solution.answer == "42" and solution.cut_short
    assert result.usage.completion_tokens <= 200
    assert result.cut_reason == "tokens"


async def test_a_budget_cut_sample_that_needs_no_forced_answer_still_reports_tokens() -> None:
    """The budget ends the only call (200 of 500 tokens, held back 48: 152 granted) after
    an answer was written, so no forced answer is asked; the run is still cut by tokens."""
    engine = MockEngine(Script(solve="\\boxed{42} " + " ".join(["more"] * 500)))
    result = await run_scaffold(
        Single(), PROBLEM, engine, RunSettings(budget=Budget(max_tokens=200))
    )
    assert [r.params.max_tokens for r in engine.requests] == [152]
    assert result.solutions[0].cut_short and result.cut_reason == "tokens"


async def test_exhausted_budget_before_any_answer_gives_an_empty_cut_choice() -> None:
    script = Script(abstraction="note")
    _, result = await run(Abstraction(m=2, n=2), script, budget=Budget(max_calls=1))
    assert result.solutions[0].text == "" and result.solutions[0].cut_short


async def test_deadline_with_no_answer_raises() -> None:
    engine = MockEngine(Script(), delay=5)
    with pytest.raises(DeadlineExceededError):
        await run_scaffold(GSR(n=2), PROBLEM, engine, RunSettings(budget=Budget(timeout_s=0.1)))
    assert engine.in_flight == 0


async def test_deadline_after_candidates_returns_them_cut_short() -> None:
    calls = 0

    async def handler(request):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls > 1:
            await asyncio.sleep(5)
        return "\\boxed{42}"

    result = await run_scaffold(
        GSR(n=2), PROBLEM, MockEngine(handler), RunSettings(budget=Budget(timeout_s=0.3))
    )
    assert result.solutions[0].answer == "42" and result.solutions[0].cut_short
    assert result.cut_reason == "time"


async def test_cancelling_a_run_cancels_every_engine_call_under_it() -> None:
    engine = MockEngine(Script(), delay=30)
    task = asyncio.create_task(run_scaffold(Majority(k=3, solver=GSR(n=2)), PROBLEM, engine))
    await wait_in_flight(engine, 3)
    await cancel_checking_calls(task, engine, 3)


async def test_seeded_runs_are_deterministic_and_calls_get_distinct_seeds() -> None:
    async def seeds() -> list[int | None]:
        engine = MockEngine(Script())
        await run_scaffold(
            Majority(k=2, solver=GSR(n=2)),
            PROBLEM,
            engine,
            RunSettings(params=SamplingParams(seed=7)),
        )
        return sorted(r.params.seed or 0 for r in engine.requests)

    first, second = await seeds(), await seeds()
    assert first == second
    assert len(set(first)) == len(first)
