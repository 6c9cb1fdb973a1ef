"""self_refine: each step's own sampling, and the answer taken as madaan/self-refine
takes it (``src/gsm/run.py`` at commit 9a206d4).

The reference's GSM loop (run.py:16-51): the first program from ``GSMInit`` at the
run's ``--temperature`` (run.py:21; default 0.0, run.py:104), then ``GSMFeedback`` at
0.7 (run.py:27), one call that writes the feedback and the fixed program
(feedback.py:26-48); the loop stops when the feedback says "it is correct" (run.py:44)
and the answer is the last log's ``solution_fixed`` (run.py:65), the program that the
"it is correct" call wrote.
"""

from __future__ import annotations

import pytest

from scaffolds.core.run import RunResult, run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import GenerateRequest, Message, SamplingParams
from scaffolds.errors import SpecError
from scaffolds.problem import Problem
from scaffolds.spec.build import build_strategy
from scaffolds.strategies import Majority, SelfRefine
from scaffolds.strategies.self_refine import CORRECT_MARKER_TEMPLATE

PROBLEM = Problem.from_messages((Message("user", "What is 6*7?"),))
REFERENCE = (
    "self_refine(max_rounds=4, history=true, solve_temperature=0.0, feedback_temperature=0.7, "
    'refine_temperature=0.7, answer="refined")'
)


class Script:
    """Answers by step: the first solution, feedback texts in turn, refinements in turn;
    records each request."""

    def __init__(self, feedback: list[str], refined: list[str]) -> None:
        self.feedback, self.refined = list(feedback), list(refined)
        self.requests: list[GenerateRequest] = []

    def __call__(self, request: GenerateRequest) -> str:
        self.requests.append(request)
        prompt = request.prompt_text()
        if "### Feedback on it" in prompt:
            return self.refined.pop(0)
        if "### Proposed solution" in prompt:
            return self.feedback.pop(0)
        return "6*7 = 41, so \\boxed{41}"

    def temperatures(self) -> list[float | None]:
        return [r.params.temperature for r in self.requests]


async def run(strategy: SelfRefine, script: Script, temperature: float = 1.0) -> RunResult:
    settings = RunSettings(params=SamplingParams(temperature=temperature))
    return await run_scaffold(strategy, PROBLEM, MockEngine(script), settings)


WRONG = "Step 1 is wrong: 6*7 is 42.\nVERDICT: INCORRECT"
RIGHT = f"Every step holds.\n{CORRECT_MARKER_TEMPLATE}"


def test_the_references_setting_parses_and_round_trips() -> None:
    strategy = build_strategy(REFERENCE)
    assert strategy == SelfRefine(
        max_rounds=4,
        history=True,
        solve_temperature=0.0,
        feedback_temperature=0.7,
        refine_temperature=0.7,
        answer="refined",
    )
    assert build_strategy(str(strategy)) == strategy
    for bad, field in [
        ("feedback_temperature=2.5", "feedback_temperature"),
        ('answer="first"', "answer"),
    ]:
        with pytest.raises(SpecError) as info:
            build_strategy(f"self_refine({bad})")
        assert info.value.param == field


def test_solve_temperature_needs_a_single_solver() -> None:
    with pytest.raises(SpecError, match="solve_temperature"):
        build_strategy("self_refine(solve_temperature=0, solver=majority(k=2))")
    assert SelfRefine(solver=Majority(k=2)).solve_temperature is None


async def test_each_step_samples_at_its_own_temperature() -> None:
    """run.py:21 and :104: the first program at temperature 0.0; run.py:27: the
    feedback (and the fix it writes) at 0.7. The request's own 1.0 is left to nothing."""
    script = Script([WRONG, RIGHT], ["6*7 = 42, so \\boxed{42}"])
    strategy = build_strategy(
        "self_refine(max_rounds=3, solve_temperature=0, feedback_temperature=0.7, "
        "refine_temperature=0.7)"
    )
    assert isinstance(strategy, SelfRefine)
    result = await run(strategy, script)
    # solve, feedback 1, refine 1, feedback 2 (correct): the judged answer, no fifth call.
    assert script.temperatures() == [0.0, 0.7, 0.7, 0.7]
    assert result.solutions[0].answer == "42"


async def test_unset_temperatures_leave_the_requests_own() -> None:
    script = Script([WRONG, RIGHT], ["\\boxed{42}"])
    await run(SelfRefine(max_rounds=3), script, temperature=0.6)
    assert script.temperatures() == [0.6] * 4


async def test_refined_answers_with_the_fix_written_after_it_is_correct() -> None:
    """run.py:44-47 and :65: the loop breaks on "it is correct", and the answer is that
    same call's ``solution_fixed``, not the program the feedback judged. Ponder's feedback
    and fix are two calls, so ``answer="refined"`` takes one more refine step after the
    "correct" feedback and answers with it."""
    script = Script([RIGHT], ["rewritten: \\boxed{43}"])
    result = await run(SelfRefine(max_rounds=4, answer="refined"), script)
    assert len(script.requests) == 3  # solve, feedback (correct), refine
    refine = script.requests[-1].prompt_text()
    assert "6*7 = 41" in refine and CORRECT_MARKER_TEMPLATE in refine
    assert result.solutions[0].text == "rewritten: \\boxed{43}"
    assert result.solutions[0].answer == "43"


async def test_judged_answers_with_the_solution_the_feedback_judged() -> None:
    script = Script([RIGHT], [])
    result = await run(SelfRefine(max_rounds=4), script)
    assert len(script.requests) == 2
    assert result.solutions[0].answer == "41"


async def test_refined_ends_at_max_rounds_with_the_last_fix_as_the_reference() -> None:
    """run.py:34 bounds the loop at ``max_attempts`` feedback calls; run.py:65 answers
    with the last one's fix: with every feedback wrong and 2 rounds, the second fix."""
    script = Script([WRONG, WRONG], ["\\boxed{40}", "\\boxed{39}"])
    strategy = SelfRefine(max_rounds=2, answer="refined")
    result = await run(strategy, script)
    assert len(script.requests) == 1 + 2 * 2 == strategy.max_calls()
    assert result.solutions[0].answer == "39"
