"""The run context: budget enforcement, prompts, live traces and structured concurrency."""

from __future__ import annotations

import asyncio

import pytest

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole
from scaffolds.core.ledger import FORCE_ANSWER_TOKENS
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import StepDelta, StepFinished, StepStarted, TraceRecorder
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import Message, SamplingParams
from scaffolds.errors import (
    BudgetExhaustedError,
    EngineUnavailableError,
    InvalidRequestError,
)
from scaffolds.fanout import gather
from scaffolds.problem import Budget, Problem
from scaffolds.spec.registry import get_prompt_set


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"max_tokens": 0}, "budget.max_tokens"),
        ({"max_calls": -1}, "budget.max_calls"),
        ({"timeout_s": 0}, "budget.timeout_s"),
        ({"timeout_s": float("nan")}, "budget.timeout_s"),
    ],
)
def test_bad_budgets_name_the_parameter(kwargs: dict[str, float], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        Budget(**kwargs)  # type: ignore[arg-type]
    assert info.value.param == param


def test_a_server_cap_tightens_a_request_budget_limit_by_limit() -> None:
    asked = Budget(max_tokens=10_000, max_calls=None, timeout_s=5)
    capped = asked.capped_by(Budget(max_tokens=2_000, max_calls=50, timeout_s=60))
    assert capped == Budget(max_tokens=2_000, max_calls=50, timeout_s=5)


def test_sampling_params_name_the_bad_parameter() -> None:
    with pytest.raises(InvalidRequestError) as info:
        SamplingParams(temperature=3.0)
    assert info.value.param == "temperature"


async def test_call_budget_stops_the_next_call() -> None:
    ctx = Context.root(MockEngine(lambda r: "x"), RunSettings(budget=Budget(max_calls=2)))
    await ctx.generate("a", kind="generate", label="1")
    await ctx.generate("b", kind="generate", label="2")
    with pytest.raises(BudgetExhaustedError) as info:
        await ctx.generate("c", kind="generate", label="3")
    assert info.value.limit == "calls" and ctx.cut_reason == "calls"


async def test_parallel_calls_reserve_their_share_of_the_token_budget() -> None:
    engine = MockEngine(lambda r: " ".join(["w"] * 1000), delay=0.05)
    ctx = Context.root(engine, RunSettings(budget=Budget(max_tokens=300)))
    outcomes = await asyncio.gather(
        *(ctx.generate("p", kind="generate", label=str(i), n=2, max_tokens=100) for i in range(3)),
        return_exceptions=True,
    )
    granted = [r.params.max_tokens for r in engine.requests]
    assert sum(2 * (m or 0) for m in granted) <= 300
    assert ctx.usage.completion_tokens <= 300
    assert any(isinstance(o, BudgetExhaustedError) for o in outcomes)


async def test_text_mode_forced_answer_continues_the_text() -> None:
    def handler(request):  # type: ignore[no-untyped-def]
        if "Time is up" in request.prompt_text():
            return "\\boxed{9}"
        return "a b c d e f g h i j " * 20

    engine = MockEngine(handler)
    ctx = Context.root(
        engine, RunSettings(budget=Budget(max_tokens=FORCE_ANSWER_TOKENS + 60), chat=False)
    )
    step = await ctx.generate(
        "Q:", kind="generate", label="x", max_tokens=500, role=StepRole(force_answer=True)
    )
    forced = engine.requests[1].prompt
    assert isinstance(forced, str) and forced.startswith("Q:a b c") and "Time is up" in forced
    assert step.first.text.endswith("\\boxed{9}") and step.cut_short


@pytest.mark.parametrize("max_tokens", [1, 3])
async def test_a_budget_too_small_to_hold_back_an_answer_still_reports_its_cut(
    max_tokens: int,
) -> None:
    # share // 4 is 0 for a budget of 1 to 3 tokens: nothing is held back for a forced
    # answer, but the budget still bounds the call, so the sample it ends is a cut.
    engine = MockEngine(lambda r: "a b c d e f g h")
    ctx = Context.root(engine, RunSettings(budget=Budget(max_tokens=max_tokens)))
    step = await ctx.generate(
        "Q:", kind="generate", label="x", max_tokens=500, role=StepRole(force_answer=True)
    )
    assert [r.params.max_tokens for r in engine.requests] == [max_tokens]  # no forced call
    assert step.cut_short and ctx.cut_reason == "tokens"
    assert step.first.completion_tokens == max_tokens


async def test_a_budget_that_does_not_bind_is_no_cut() -> None:
    engine = MockEngine(lambda r: "a b c d e f g h")
    ctx = Context.root(engine, RunSettings(budget=Budget(max_tokens=1000)))
    step = await ctx.generate(
        "Q:", kind="generate", label="x", max_tokens=3, role=StepRole(force_answer=True)
    )
    assert step.first.truncated and not step.cut_short and ctx.cut_reason is None


async def test_problem_prompt_passes_chat_and_text_through() -> None:
    chat_problem = Problem.from_messages((Message("system", "S"), Message("user", "U")))
    chat_ctx = Context.root(MockEngine(lambda r: ""), RunSettings(chat=True))
    assert chat_ctx.problem_prompt(chat_problem) == chat_problem.raw_prompt
    text_ctx = Context.root(MockEngine(lambda r: ""), RunSettings(chat=False))
    assert text_ctx.problem_prompt(Problem.from_text("1+1=")) == "1+1="
    rendered = chat_ctx.prompt(
        get_prompt_set("default").template("gsr_refine"), chat_problem, candidates="C", count="1"
    )
    assert isinstance(rendered, tuple) and rendered[0] == Message("system", "S")
    assert rendered[-1].content.startswith("### Problem\nU")


def test_a_problem_needs_a_final_user_turn() -> None:
    with pytest.raises(InvalidRequestError):
        Problem.from_messages((Message("assistant", "hi"),))


async def test_live_recorder_streams_deltas_between_start_and_finish() -> None:
    recorder = TraceRecorder(live=True)
    ctx = Context.root(MockEngine(lambda r: "one two three"), recorder=recorder)
    events = recorder.subscribe()
    await ctx.generate("p", kind="generate", label="x", role=StepRole(final=True))
    recorder.close()
    seen = [e async for e in events]
    assert isinstance(seen[0], StepStarted) and seen[0].final
    assert "".join(e.text for e in seen if isinstance(e, StepDelta)) == "one two three"
    assert isinstance(seen[-1], StepFinished)
    assert not any(isinstance(e, StepDelta) for e in recorder.events)


async def test_gather_surfaces_the_first_error_and_cancels_siblings() -> None:
    cancelled = asyncio.Event()

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def boom() -> None:
        await asyncio.sleep(0.01)
        raise EngineUnavailableError("engine down")

    with pytest.raises(EngineUnavailableError, match="engine down"):
        await gather(slow(), boom())
    assert cancelled.is_set()


async def test_child_scopes_only_stay_final_inside_final_scopes() -> None:
    ctx = Context.root(MockEngine(lambda r: ""))
    assert ctx.child("a", final=True).final
    assert not ctx.child("b").child("c", final=True).final
    assert ctx.child("d", choice=2).child("e").choice == 2


async def test_every_call_of_a_run_carries_the_problems_affinity_key() -> None:
    from scaffolds.core.run import run_scaffold
    from scaffolds.strategies import GSR

    engine = MockEngine(lambda r: "\\boxed{1}")
    first = Problem.from_messages((Message("user", "P1"),))
    await run_scaffold(GSR(n=2), first, engine)
    await run_scaffold(GSR(n=2), Problem.from_messages((Message("user", "P2"),)), engine)
    keys = [r.affinity_key for r in engine.requests]
    assert keys[0] == keys[1] and keys[2] == keys[3] and keys[0] != keys[2]
    assert keys[0] is not None


async def test_a_subscriber_gets_what_arrived_together_as_one_batch_and_waits_for_more() -> None:
    recorder = TraceRecorder(live=True)
    batches = recorder.subscribe_batches()
    got: list[list[str]] = []

    async def consume() -> None:
        async for batch in batches:
            got.append([e.text for e in batch if isinstance(e, StepDelta)])

    consumer = asyncio.ensure_future(consume())
    await asyncio.sleep(0)  # the consumer now waits on an empty buffer
    recorder.emit(StepDelta("s", 0, "a"))
    recorder.emit(StepDelta("s", 0, "b"))
    await asyncio.sleep(0)
    recorder.emit(StepDelta("s", 0, "c"))
    recorder.close()
    await asyncio.wait_for(consumer, timeout=60)
    assert got == [["a", "b"], ["c"]]
