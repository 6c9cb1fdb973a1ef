"""Issue 38's paper-faithful options on a scripted engine: strict (boxed) answers, RC's
reference layout, self-refine's history and RLAD's several notes per call. Each test
checks the engine calls (count, n, what each prompt carries) and the chosen answer
against values worked out by hand from the reference's rule."""

from __future__ import annotations

import pytest

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.thinking import Routing, Thinking
from scaffolds.core.trace import StepFinished, StepStarted
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message, SamplingParams
from scaffolds.errors import SpecError
from scaffolds.evaluation.answers import ThinkingMarkers
from scaffolds.problem import Budget, Problem
from scaffolds.spec.build import build_strategy
from scaffolds.strategies import RC, Majority
from tests.scaffolds.thinking_engine import ThinkingModel

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))

# Five samples of one request. Lenient reading: 3, 4, 3, 4, 3 (3 wins, three votes).
# Boxed reading (the last \boxed{} after the thinking only): -, 4, -, 4, - (4 wins).
MIXED = [
    "The answer is 3",
    "so \\boxed{4}",
    "#### 3",
    "first \\boxed{5}, then \\boxed{4}",
    "<think>\\boxed{3}</think>It is 3.",
]


@pytest.mark.parametrize(
    ("answer_format", "votes", "winner"),
    [
        ("lenient", ("3", "4", "3", "4", "3"), 0),
        ("boxed", (None, "4", None, "4", None), 1),
    ],
)
async def test_the_answer_format_decides_what_votes(
    answer_format: str, votes: tuple[str | None, ...], winner: int
) -> None:
    engine = MockEngine(lambda r: MIXED)
    result = await run_scaffold(
        Majority(k=5),
        PROBLEM,
        engine,
        RunSettings(answer_format=answer_format),  # type: ignore[arg-type]
    )
    assert [r.params.n for r in engine.requests] == [5]
    [finished] = [e for e in result.events if isinstance(e, StepFinished)]
    assert finished.answers == votes
    assert result.solutions[0].text == MIXED[winner]
    assert result.solutions[0].answer == votes[winner]


async def test_boxed_without_any_box_is_no_answer() -> None:
    engine = MockEngine(lambda r: ["it is 42", "42"])
    result = await run_scaffold(Majority(k=2), PROBLEM, engine, RunSettings(answer_format="boxed"))
    assert result.solutions[0].answer is None


async def test_boxed_reads_only_after_the_models_own_thinking_marker() -> None:
    routing = Routing(Thinking(declared=True, markers=ThinkingMarkers(end="<|end_think|>")))
    texts = ["\\boxed{1}<|end_think|>so \\boxed{2}", "<think>\\boxed{1} still thinking"]
    engine = MockEngine(lambda r: texts)
    result = await run_scaffold(
        Majority(k=2), PROBLEM, engine, RunSettings(answer_format="boxed", routing=routing)
    )
    [finished] = [e for e in result.events if isinstance(e, StepFinished)]
    assert finished.answers == ("2", None)


async def test_a_cut_sample_without_a_box_is_forced_to_answer_when_boxed() -> None:
    def reply(request: GenerateRequest) -> str:
        if "Time is up" in request.prompt_text():
            return "\\boxed{7}"
        return "the answer: 7 and then I check it again"

    # The budget (6 tokens, 1 held back for a forced answer) cuts the chunk at "the
    # answer: 7 and then": an answer to a lenient reading, none to a boxed one, which so
    # gets the forced-answer call (its 1 token writes \boxed{7}).
    for answer_format, calls, answer in (("lenient", 1, "7 and then"), ("boxed", 2, "7")):
        engine = MockEngine(reply)
        settings = RunSettings(budget=Budget(max_tokens=6), answer_format=answer_format)  # type: ignore[arg-type]
        result = await run_scaffold(
            build_strategy("rc(steps=1, reasoning_tokens=64)"), PROBLEM, engine, settings
        )
        assert [r.params.max_tokens for r in engine.requests] == [5, 1][:calls]
        assert result.solutions[0].answer == answer


# -- Reasoning Cache: the reference's layout (IanYHWu/rc inference/, CMU-AIRe/QED-Nano) --


def rc_reply(request: GenerateRequest) -> str | list[str]:
    text = request.prompt_text()
    if "### Existing summary" in text:
        return "I tried 40." if "chunk one" in text else "I tried 41."
    if request.params.n == 2:
        return ["chunk one \\boxed{40}", "chunk uno \\boxed{41}"]
    return "chunk two \\boxed{42}" if "I tried 40." in text else "chunk dos \\boxed{43}"


async def test_rc_one_template_has_an_empty_summary_on_step_one() -> None:
    engine = MockEngine(rc_reply)
    strategy = RC(steps=2, template="one", reasoning_tokens=64, summary_tokens=16)
    result = await run_scaffold(Majority(k=2, solver=strategy), PROBLEM, engine)
    # 1 request of n=2 first chunks, then per sample one summary and one chunk: 5 calls.
    assert [r.params.n for r in engine.requests] == [2, 1, 1, 1, 1]
    starts = [e for e in result.events if isinstance(e, StepStarted)]
    reasoning = [s for s in starts if s.kind == "reasoning"]
    assert [s.template for s in reasoning] == ["rc_reasoning"] * 3
    first = engine.requests[0].prompt_text()
    assert "### Summary of an earlier attempt\n\n\n### Instructions" in first
    later = sorted(
        r.prompt_text() for r in engine.requests[1:] if "### Existing" not in r.prompt_text()
    )
    assert "### Summary of an earlier attempt\nI tried 40.\n" in later[0]
    assert "### Summary of an earlier attempt\nI tried 41.\n" in later[1]
    assert sorted(r.params.max_tokens or 0 for r in engine.requests) == [16, 16, 64, 64, 64]
    # Two final chunks, 42 and 43: a tie, which the first sample (42) wins.
    assert result.solutions[0].answer == "42"


async def test_rc_without_a_reasoning_cap_leaves_each_chunk_to_the_context() -> None:
    engine = MockEngine(lambda r: "x \\boxed{1}")
    strategy = RC(steps=2, reasoning_tokens=None, summary_tokens=16)
    await run_scaffold(strategy, PROBLEM, engine)
    assert [r.params.max_tokens for r in engine.requests] == [None, 16, None]
    engine = MockEngine(lambda r: "x \\boxed{1}")
    await run_scaffold(
        strategy, PROBLEM, engine, RunSettings(params=SamplingParams(max_tokens=100))
    )
    assert [r.params.max_tokens for r in engine.requests] == [100, 16, 100]


async def test_a_requests_max_tokens_leaves_a_steps_own_limit_alone() -> None:
    # An eval harness's max_tokens=5 limits the calls no step limits; rc's own do not shrink.
    engine = MockEngine(lambda r: "x \\boxed{1}")
    strategy = RC(steps=2, reasoning_tokens=64, summary_tokens=16)
    await run_scaffold(strategy, PROBLEM, engine, RunSettings(params=SamplingParams(max_tokens=5)))
    assert [r.params.max_tokens for r in engine.requests] == [64, 16, 64]
    await run_scaffold(
        strategy,
        PROBLEM,
        engine,
        RunSettings(params=SamplingParams(max_tokens=5), budget=Budget(max_tokens=20)),
    )
    # The run's budget does cap them: 20 in all (less what it keeps for a forced answer).
    capped = [r.params.max_tokens or 0 for r in engine.requests[3:]]
    assert all(0 < c <= 20 for c in capped), capped


@pytest.mark.parametrize(("setting", "off_requests"), [("off", 1), ("same", 0)])
async def test_rc_summarizer_thinking(setting: str, off_requests: int) -> None:
    model = ThinkingModel(lambda r: "I added and got \\boxed{42}.", think=5)
    strategy = RC(steps=2, summarizer_thinking=setting)  # type: ignore[arg-type]
    await run_scaffold(
        strategy, PROBLEM, MockEngine(model), RunSettings(routing=Routing(Thinking.of("qwen3")))
    )
    assert len(model.requests) == 3
    off = [r for r in model.requests if r.params.extra.get("chat_template_kwargs")]
    assert len(off) == off_requests
    summary = model.requests[1]
    assert "### Existing summary" in summary.prompt_text()
    # Either way the next chunk reads the summary's answer part, never its thinking.
    assert "### Summary of an earlier attempt\nI added and got" in model.requests[2].prompt_text()


def test_rc_options_parse_round_trip_and_name_the_bad_field() -> None:
    spec = 'rc(steps=3, reasoning_tokens=null, template="one", summarizer_thinking="same")'
    strategy = build_strategy(spec)
    assert isinstance(strategy, RC) and strategy.reasoning_tokens is None
    assert build_strategy(str(strategy)) == strategy
    assert build_strategy(strategy.to_spec()) == strategy
    for bad, field in (
        ('rc(template="two")', "template"),
        ('rc(summarizer_thinking="on")', "summarizer_thinking"),
    ):
        with pytest.raises(SpecError) as err:
            build_strategy(bad)
        assert err.value.param == field


# -- Self-Refine with history (madaan/self-refine src/gsm/: the prompt keeps every round) --

S0, S1, S2 = "first \\boxed{41}", "second \\boxed{40}", "third \\boxed{42}"
F1, F2 = "Step 2 is wrong.\nVERDICT: INCORRECT", "Step 3 is wrong.\nVERDICT: INCORRECT"


def refine_reply(request: GenerateRequest) -> str:
    text = request.prompt_text()
    if "### Proposed solution" in text:  # feedback on the solution after that header
        proposed = text.split("### Proposed solution\n", 1)[1]
        return {S0: F1, S1: F2}.get(proposed.split("\n\n###", 1)[0], "VERDICT: CORRECT")
    if "### Previous solution" in text:
        return S1 if f"### Previous solution\n{S0}" in text else S2
    return S0


@pytest.mark.parametrize("history", [False, True])
async def test_self_refine_history_keeps_every_earlier_round(history: bool) -> None:
    engine = MockEngine(refine_reply)
    strategy = build_strategy(f"self_refine(max_rounds=4, history={str(history).lower()})")
    result = await run_scaffold(strategy, PROBLEM, engine)
    # solve, feedback 1, refine 1, feedback 2, refine 2, feedback 3 (correct): 6 calls.
    prompts = [r.prompt_text() for r in engine.requests]
    assert len(prompts) == 6 and all(r.params.n == 1 for r in engine.requests)
    assert result.solutions[0].answer == "42"
    round_1 = f"#### Attempt 1\n{S0}\n\n#### Feedback on attempt 1\n{F1}"
    round_2 = f"#### Attempt 2\n{S1}\n\n#### Feedback on attempt 2\n{F2}"
    earlier = "### Earlier attempts and the feedback on each\n"
    if not history:
        assert not any(earlier in p for p in prompts)
        return
    # Round 1 has no earlier round; feedback 2 and refine 2 carry round 1; feedback 3
    # carries rounds 1 and 2, then the solution it checks.
    assert not any(earlier in p for p in prompts[:3])
    assert f"{earlier}{round_1}\n\n### Proposed solution\n{S1}\n" in prompts[3]
    assert (
        f"{earlier}{round_1}\n\n### Previous solution\n{S1}\n\n### Feedback on it\n{F2}"
        in (prompts[4])
    )
    assert f"{earlier}{round_1}\n\n{round_2}\n\n### Proposed solution\n{S2}\n" in prompts[5]


# -- RLAD: several notes in one abstraction call (no official code: the paper's setup) --

NOTE_SAMPLES = [
    "### Note 1\nAlpha hint.\n### Note 2: Beta\nBeta hint.",
    "### Note 1\nGamma hint.\n\n### Note 2\nDelta hint.",
    "### Note 1\nEpsilon hint.\n### Note 2\nZeta hint.",
]
ANSWER_BY_NOTE = {
    "Alpha hint.": 7,
    "Beta\nBeta hint.": 7,
    "Gamma hint.": 8,
    "Delta hint.": 8,
    "Epsilon hint.": 8,
    "Zeta hint.": 9,
}


def notes_reply(request: GenerateRequest) -> str | list[str]:
    text = request.prompt_text()
    if "Do not solve this problem" in text:
        return NOTE_SAMPLES
    note = text.split("### Cheat sheet\n", 1)[1].split("\n\n### Problem", 1)[0]
    return f"so \\boxed{{{ANSWER_BY_NOTE[note]}}}"


async def test_abstraction_asks_for_several_notes_per_call() -> None:
    engine = MockEngine(notes_reply)
    strategy = build_strategy("abstraction(m=5, n=1, notes_per_call=2)")
    result = await run_scaffold(strategy, PROBLEM, engine)
    first, *solves = engine.requests
    # ceil(5 / 2) = 3 samples of 2 notes each in one request, 1024 tokens per note asked;
    # the sixth note (Zeta) is one too many.
    assert (first.params.n, first.params.max_tokens) == (3, 2048)
    assert "Write 2 different short notes" in first.prompt_text()
    cheat_sheets = sorted(r.prompt_text().split("\n\n### Problem")[0] for r in solves)
    assert cheat_sheets == sorted(f"### Cheat sheet\n{note}" for note in list(ANSWER_BY_NOTE)[:5])
    assert all(r.params.n == 1 for r in solves)
    # Votes 7, 7, 8, 8, 8: 8 wins.
    assert result.solutions[0].answer == "8"
    assert not result.cut_short


async def test_abstraction_notes_budget_defaults_to_1024_per_note() -> None:
    engine = MockEngine(lambda r: "a note \\boxed{1}")
    await run_scaffold(build_strategy("abstraction(m=2, n=1)"), PROBLEM, engine)
    assert (engine.requests[0].params.n, engine.requests[0].params.max_tokens) == (2, 1024)
    assert "Write one short note" in engine.requests[0].prompt_text()


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("self_refine(history=3)", "history"),
        ("abstraction(notes_per_call=0)", "notes_per_call"),
        ("abstraction(abstraction_tokens=0)", "abstraction_tokens"),
    ],
)
def test_new_options_name_the_bad_field(spec: str, field: str) -> None:
    with pytest.raises(SpecError) as err:
        build_strategy(spec)
    assert err.value.param == field


@pytest.mark.parametrize(
    "spec",
    [
        "self_refine(max_rounds=4, history=true)",
        "abstraction(m=5, abstraction_tokens=4096, notes_per_call=4)",
    ],
)
def test_new_options_round_trip(spec: str) -> None:
    strategy = build_strategy(spec)
    assert str(strategy) == spec
    assert build_strategy(strategy.to_spec()) == strategy
