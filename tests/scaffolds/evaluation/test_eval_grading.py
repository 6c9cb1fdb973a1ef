"""Graders (math-verify in its pool, exact, judge) and the report's statistics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from clients.eval.report import pass_at_k, summarize
from scaffolds.evaluation.grading import ExactGrader, JudgeGrader, MathGrader, parse_score
from scaffolds.evaluation.problems import ProblemRow
from testing.fake_engine import FakeEngineConfig, fake_engine

CASES = [
    ("\\frac{1}{2}", "so \\boxed{\\frac{1}{2}}", True),
    ("0.5", "it is \\boxed{\\dfrac12}", True),
    ("\\frac{3}{4}", "\\boxed{0.75}", True),
    ("\\frac{1}{3}", "\\boxed{0.33}", False),
    ("\\{1, 2\\}", "\\boxed{\\{2, 1\\}}", True),
    ("\\{1,2\\}", "\\boxed{\\{1,3\\}}", False),
    ("(1,2)", "\\boxed{[1,2)}", False),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3, \\pi/2)}", True),
    ("\\frac{\\sqrt{3}}{2}", "\\boxed{\\frac{\\sqrt3}{2}}", True),
    ("x^2+1", "\\boxed{1+x^2}", True),
    ("1,000", "\\boxed{1000}", True),
    ("3", "first \\boxed{2}, on second thought \\boxed{3}", True),
    ("5", "<think>\\boxed{4}</think>The answer is \\boxed{5}.", True),
    ("18", "She makes 18 dollars.", True),
    ("18", "I don't know.", False),
    ("18", "", False),
]


@pytest.fixture(scope="module")
def math_grader() -> Iterator[MathGrader]:
    grader = MathGrader(workers=1)  # the real process pool, with its time limit
    yield grader
    grader.checker.close()


@pytest.mark.parametrize(("gold", "text", "expected"), CASES)
async def test_math_grader(math_grader: MathGrader, gold: str, text: str, expected: bool) -> None:
    grade = await math_grader.grade(ProblemRow("p", "?", gold), text)
    assert grade.correct is expected
    if not text or "know" in text:
        assert grade.note == "no answer"


async def test_no_reference_means_ungraded() -> None:
    for grader in (MathGrader(inline=True), ExactGrader()):
        assert (await grader.grade(ProblemRow("p", "?"), "\\boxed{1}")).correct is None
        await grader.aclose()


async def test_exact_grader_does_not_do_math() -> None:
    grader = ExactGrader()
    problem = ProblemRow("p", "?", "\\frac{1}{2}")
    assert (await grader.grade(problem, "\\boxed{\\dfrac{1}{2}}")).correct is True
    assert (await grader.grade(problem, "\\boxed{0.5}")).correct is False


def test_parse_score() -> None:
    assert parse_score("Good. <score>7</score>") == 7.0
    assert parse_score("<score>3</score> then <score>5</score>") == 5.0
    assert parse_score("**Score: 4/7**") == 4.0
    assert parse_score("<score>9</score>") is None
    assert parse_score("no verdict") is None


async def test_judge_grader_scores_against_a_judge_url() -> None:
    seen: list[str] = []

    def judge(body: dict[str, Any]) -> list[str]:
        prompt = body["messages"][-1]["content"]
        seen.append(prompt)
        return ["The proof is fine. <score>7</score>" if "QED" in prompt else "<score>2</score>"]

    async with fake_engine(FakeEngineConfig(respond=judge)) as engine:
        grader = JudgeGrader(engine.base_url, "judge", rubric="7 iff complete", max_retries=0)
        problem = ProblemRow("p", "Prove it.", None, solution="Reference proof.")
        good = await grader.grade(problem, "Step 1... QED")
        bad = await grader.grade(problem, "It is obvious.")
        await grader.aclose()
    assert (good.correct, good.score) == (True, 7.0)
    assert (bad.correct, bad.score) == (False, 2.0)
    assert "Reference proof." in seen[0] and "7 iff complete" in seen[0]


async def test_unreachable_judge_leaves_the_sample_ungraded() -> None:
    grader = JudgeGrader("http://127.0.0.1:9/v1", "judge", max_retries=0, timeout_s=5)
    grade = await grader.grade(ProblemRow("p", "Prove it."), "proof")
    await grader.aclose()
    assert grade.correct is None and grade.note and "judge failed" in grade.note


def test_pass_at_k() -> None:
    assert pass_at_k(8, 0, 4) == 0.0
    assert pass_at_k(8, 8, 1) == 1.0
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 4)


def _record(pid: str, sample: int, answer: str | None, correct: bool, **extra: Any) -> Any:
    usage = {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30, "engine_calls": 2}
    return {
        "scaffold": "s",
        "id": pid,
        "sample": sample,
        "extracted": answer,
        "correct": correct,
        "usage": usage,
        "latency_s": 1.0 + sample,
        **extra,
    }


async def test_summary_statistics(math_grader: MathGrader) -> None:
    records = [
        # p1: gold 1/2, samples 0.5, 7, 1/2, 7 -> 2 of 4 right; the vote ties, first wins
        _record("p1", 0, "0.5", True),
        _record("p1", 1, "7", False),
        _record("p1", 2, "\\frac{1}{2}", True),
        _record("p1", 3, "7", False, cut_short=True),
        # p2: always 3 (wrong), never right
        *[_record("p2", i, "3", False) for i in range(4)],
        {"scaffold": "s", "id": "p2", "sample": 4, "error": "APIConnectionError: down"},
    ]
    report = await summarize(records, math_grader.cluster, info={"model": "m"})
    [s] = report["scaffolds"]
    assert report["model"] == "m"
    assert (s["problems"], s["samples"], s["errors"], s["cut_off"]) == (2, 8, 1, 1)
    assert s["accuracy"] == pytest.approx(0.25)
    assert s["pass_at"]["1"] == pytest.approx(0.25)
    assert s["pass_at"]["4"] == pytest.approx(0.5)
    assert s["maj_at"]["1"] == pytest.approx(0.25)
    assert s["maj_at"]["4"] == pytest.approx(0.5)  # p1's vote: {0.5, 1/2} vs {7, 7}, tie
    assert (s["prompt_tokens"], s["completion_tokens"], s["engine_calls"]) == (10, 20, 2)
    assert s["latency_s"]["p50"] == pytest.approx(2.5)
