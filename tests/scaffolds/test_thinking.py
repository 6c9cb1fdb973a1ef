"""Scaffolds against a model that thinks before it answers (a MockEngine that behaves as
vLLM with a reasoning parser does; the same through real vLLM is in
tests/scaffolds/engines/test_vllm_thinking.py)."""

from __future__ import annotations

import pytest

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.thinking import HelperModel, Routing, Thinking
from scaffolds.core.trace import StepNote, StepStarted
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message
from scaffolds.errors import InvalidRequestError
from scaffolds.problem import Budget, Problem
from scaffolds.spec.build import build_strategy
from scaffolds.strategies.steps import TraceView
from tests.scaffolds.scripted import step_of
from tests.scaffolds.thinking_engine import THOUGHT, ThinkingModel

PROBLEM = Problem.from_messages((Message("user", "What is 3+4?"),))


def says(request: GenerateRequest) -> str:
    kind = step_of(request)
    if kind == "summary":
        return "I added 3 and 4 and got 7."
    if kind == "abstraction":
        return "Add the ones, then carry."
    return "The sum is \\boxed{7}"


def started(result_events: list, template: str) -> list[StepStarted]:
    return [e for e in result_events if isinstance(e, StepStarted) and e.template == template]


async def test_rc_summaries_cut_mid_thought_carry_the_thinking_and_say_so() -> None:
    model = ThinkingModel(says, think=400)
    spec = build_strategy("rc(steps=3, reasoning_tokens=500, summary_tokens=300)")
    result = await run_scaffold(spec, PROBLEM, MockEngine(model))
    continues = started(result.events, "rc_reasoning_continue")
    assert len(continues) == 2
    for step in continues:
        summary = step.fields["summary"] if step.fields else ""
        assert summary.strip() and summary.split()[0] == THOUGHT
    notes = [e for e in result.events if isinstance(e, StepNote) and e.kind == "helper_text"]
    assert len(notes) == 2 and all(n.values["samples"] == {"0": "reasoning"} for n in notes)
    assert result.solutions[0].answer == "7"


async def test_helper_steps_turn_thinking_off_the_configured_way() -> None:
    model = ThinkingModel(says, think=400)
    routing = Routing(Thinking.of("qwen3"))
    spec = build_strategy("rc(steps=2, reasoning_tokens=500, summary_tokens=300)")
    result = await run_scaffold(spec, PROBLEM, MockEngine(model), RunSettings(routing=routing))
    [step] = started(result.events, "rc_reasoning_continue")
    assert step.fields and step.fields["summary"] == "I added 3 and 4 and got 7."
    off = [r for r in model.requests if r.params.extra.get("chat_template_kwargs")]
    assert [step_of(r) for r in off] == ["summary"]
    assert off[0].params.extra["chat_template_kwargs"] == {"enable_thinking": False}
    assert not any(isinstance(e, StepNote) and e.kind == "helper_text" for e in result.events)

    model = ThinkingModel(says, think=400)
    routing = Routing(Thinking.of("gpt-oss"))
    await run_scaffold(
        build_strategy("abstraction(m=2, n=1)"),
        PROBLEM,
        MockEngine(model),
        RunSettings(routing=routing),
    )
    lowered = [step_of(r) for r in model.requests if r.params.extra.get("reasoning_effort")]
    assert lowered == ["abstraction"]


async def test_abstraction_notes_are_never_empty_in_the_solve_prompts() -> None:
    model = ThinkingModel(says, think=400)
    spec = build_strategy("abstraction(m=2, n=1, abstraction_tokens=100)")
    result = await run_scaffold(spec, PROBLEM, MockEngine(model))
    solves = [e for e in result.events if isinstance(e, StepStarted) and e.kind == "generate"]
    assert len(solves) == 2
    for step in solves:
        assert step.fields and step.fields["abstraction"].startswith(THOUGHT)
        assert "### Cheat sheet" in step.prompt and THOUGHT in step.prompt


async def test_a_helper_step_can_run_on_another_served_model() -> None:
    thinker = ThinkingModel(says, think=400)
    instruct = MockEngine(lambda request: "I added 3 and 4 and got 7.")
    routing = Routing(models={"instruct": HelperModel(instruct)})
    spec = build_strategy(
        'rc(steps=2, reasoning_tokens=500, summary_tokens=300, summarizer="instruct")'
    )
    result = await run_scaffold(spec, PROBLEM, MockEngine(thinker), RunSettings(routing=routing))
    assert [step_of(r) for r in instruct.requests] == ["summary"]
    assert "summary" not in [step_of(r) for r in thinker.requests]
    [step] = started(result.events, "rc_reasoning_continue")
    assert step.fields and step.fields["summary"] == "I added 3 and 4 and got 7."

    # The model's default helper model serves every helper step a spec does not route.
    helper = MockEngine(lambda request: "VERDICT: CORRECT")
    routing = Routing(helper="instruct", models={"instruct": HelperModel(helper)})
    thinker = ThinkingModel(says, think=10)
    await run_scaffold(
        build_strategy("self_refine(max_rounds=1)"),
        PROBLEM,
        MockEngine(thinker),
        RunSettings(routing=routing),
    )
    assert [step_of(r) for r in helper.requests] == ["feedback"]

    with pytest.raises(InvalidRequestError, match="nope"):
        await run_scaffold(
            build_strategy('rc(steps=2, summarizer="nope")'),
            PROBLEM,
            MockEngine(ThinkingModel(says, think=1)),
        )


async def test_a_helper_step_that_writes_nothing_leaves_a_placeholder() -> None:
    engine = MockEngine(lambda r: "" if step_of(r) == "summary" else "\\boxed{7}")
    result = await run_scaffold(build_strategy("rc(steps=2)"), PROBLEM, engine)
    [step] = started(result.events, "rc_reasoning_continue")
    assert step.fields and step.fields["summary"] == "(this step wrote nothing)"


async def test_a_budget_cut_mid_thought_closes_the_thinking_and_answers_after_it() -> None:
    model = ThinkingModel(says, think=300)
    result = await run_scaffold(
        build_strategy("single"),
        PROBLEM,
        MockEngine(model),
        RunSettings(budget=Budget(max_tokens=200)),
    )
    solution = result.solutions[0]
    assert solution.text == "The sum is \\boxed{7}" and solution.answer == "7"
    assert solution.reasoning and solution.reasoning.split()[0] == THOUGHT
    assert "Time is up" not in solution.text
    forced = model.requests[-1]
    assert forced.continue_final and not isinstance(forced.prompt, str)
    assert [m.role for m in forced.prompt] == ["user", "assistant"]
    message = forced.prompt[-1].content
    assert message.startswith("<think>" + THOUGHT) and message.endswith("answer.\n</think>")
    assert solution.cut_short and result.cut_reason == "tokens"


async def test_a_text_prompt_cut_mid_thought_is_closed_in_the_text() -> None:
    thinking = "<think>" + " ".join(["7 plus 3"] * 20)
    engine = MockEngine(lambda r: thinking if "</think>" not in r.prompt_text() else "7")
    result = await run_scaffold(
        build_strategy("single"),
        Problem.from_text("3+4="),
        engine,
        RunSettings(budget=Budget(max_tokens=20), prompts="compact"),
    )
    cut = engine.requests[0].params.max_tokens
    assert cut is not None and cut < 20
    sent = " ".join(thinking.split()[:cut])
    assert engine.requests[-1].prompt == f"3+4={sent}</think>"
    assert result.solutions[0].text == f"{sent}</think>7"
    assert result.solutions[0].answer == "7"


async def test_candidates_carry_the_part_after_the_thinking() -> None:
    def reply(request: GenerateRequest) -> str:
        if step_of(request) == "gsr_refine":
            return "\\boxed{7}"
        return "<think>3 and 4 make 7</think>So \\boxed{7}"

    engine = MockEngine(reply)
    result = await run_scaffold(build_strategy("gsr(n=2)"), PROBLEM, engine)
    [refine] = started(result.events, "gsr_refine")
    assert refine.fields and refine.fields["candidates"] == ["So \\boxed{7}"] * 2
    assert "make 7" not in refine.prompt


async def test_an_aggregation_on_another_model_is_forced_to_answer_there() -> None:
    own = MockEngine(lambda r: "\\boxed{7}")
    other_model = ThinkingModel(says, think=300)
    routing = Routing(models={"other": HelperModel(MockEngine(other_model))})
    result = await run_scaffold(
        build_strategy('gsr(n=2, refiner="other")'),
        PROBLEM,
        own,
        RunSettings(budget=Budget(max_tokens=200), routing=routing),
    )
    assert [step_of(r) for r in own.requests] == ["solve"]
    assert len(other_model.requests) == 2 and other_model.requests[-1].continue_final
    assert result.solutions[0].text == "The sum is \\boxed{7}"


async def test_the_trace_carries_what_a_replaced_helper_step_passed_on() -> None:
    model = ThinkingModel(says, think=400)
    spec = build_strategy("rc(steps=2, reasoning_tokens=500, summary_tokens=300)")
    result = await run_scaffold(spec, PROBLEM, MockEngine(model))
    [step] = started(result.events, "rc_reasoning_continue")
    view = TraceView(result.events)
    [summary] = [s for s in view.steps if s.kind == "summary"]
    assert summary.texts == ("",) and step.fields
    assert summary.substitutes == {0: step.fields["summary"]}
    assert summary.used(0) == step.fields["summary"] and THOUGHT in summary.used(0)
    chunks = [s for s in view.steps if s.kind == "reasoning"]
    assert [(c.substitutes, c.used(0)) for c in chunks] == [({}, "The sum is \\boxed{7}")] * 2

    engine = MockEngine(lambda r: "" if step_of(r) == "summary" else "\\boxed{7}")
    result = await run_scaffold(build_strategy("rc(steps=2)"), PROBLEM, engine)
    [summary] = [s for s in TraceView(result.events).steps if s.kind == "summary"]
    assert summary.substitutes == {0: "(this step wrote nothing)"}
