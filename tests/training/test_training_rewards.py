"""Rewards graded on edge cases: answer forms, missing data, chat completions, judges."""

from __future__ import annotations

import asyncio
import threading

import pytest

from scaffolds.evaluation.grading import parse_score
from training.rewards import (
    CorrectnessReward,
    RubricReward,
    boxed_reward,
    completion_text,
    run_sync,
)

CASES = [
    # (gold, completion, reward)
    ("4", "so \\boxed{4}", 1.0),
    ("0.5", "the half is \\boxed{\\frac{1}{2}}", 1.0),
    ("\\frac{3}{4}", "\\boxed{0.75}", 1.0),
    ("1000", "#### 1,000", 1.0),
    ("72", "She earns 9 * 8 = 72 dollars.", 1.0),
    ("7", "\\boxed{\\boxed{7}}", 1.0),
    ("13", "<think>maybe \\boxed{12}</think>So it is 13.", 1.0),
    ("4", "first \\boxed{4} then \\boxed{5}", 0.0),  # the last box counts
    ("4", "the sum is \\boxed{", 0.0),  # a truncated box is no answer
    ("4", "\\boxed{4", 1.0),  # ... but serving falls back to the last number, and so do we
    ("(1,2)", "\\boxed{[1,2)}", 0.0),
    ("4", "", 0.0),
    ("4", "   ", 0.0),
    ("x^2", "The final answer is $x^2$.", 1.0),
]


@pytest.mark.parametrize(("gold", "completion", "expected"), CASES)
def test_correctness_inline(gold: str, completion: str, expected: float) -> None:
    reward = CorrectnessReward(inline=True)
    assert reward(completions=[completion], answer=[gold]) == [expected]


def test_correctness_missing_gold_chat_and_scalar_columns() -> None:
    reward = CorrectnessReward(inline=True)
    chat = [[{"role": "assistant", "content": "\\boxed{4}"}], None, "\\boxed{4}"]
    assert reward(completions=chat, answer=["4", "4", ""]) == [1.0, 0.0, None]
    assert reward(completions=["\\boxed{2}", "\\boxed{3}"], answer="2") == [1.0, 0.0]
    assert reward(completions=["\\boxed{2}"]) == [None]  # no answer column at all
    other = CorrectnessReward(inline=True, answer_key="target")
    assert other(completions=["\\boxed{2}"], target=["2"], answer=["9"]) == [1.0]


def test_correctness_in_the_process_pool_off_the_main_thread() -> None:
    """The pool grades safely from a worker thread (math-verify's signals are main-only)."""
    results: list[list[float | None]] = []
    with CorrectnessReward(workers=1, timeout_s=30.0) as reward:

        def grade() -> None:
            results.append(
                reward(completions=["\\boxed{\\frac{1}{2}}", "\\boxed{3}"], answer=["0.5", "2"])
            )

        thread = threading.Thread(target=grade)
        thread.start()
        thread.join(60)
    assert results == [[1.0, 0.0]]


def test_correctness_under_a_running_event_loop() -> None:
    reward = CorrectnessReward(inline=True)

    async def inside() -> list[float | None]:
        return reward(completions=["\\boxed{1}"], answer=["1"])

    assert asyncio.run(inside()) == [1.0]


def test_run_sync_reraises() -> None:
    async def boom() -> None:
        raise KeyError("x")

    async def inside() -> None:
        run_sync(boom())

    with pytest.raises(KeyError):
        asyncio.run(inside())


def test_boxed_reward_and_completion_text() -> None:
    assert boxed_reward(["\\boxed{1}", "\\boxed{ }", "1", None]) == [1.0, 0.0, 0.0, 0.0]
    assert completion_text([{"role": "assistant", "content": None}]) == ""
    assert completion_text({"content": "x"}) == "x"


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("<score>7</score>", 7.0),
        ("<SCORE> 3.5 </SCORE>", 3.5),
        ("first <score>2</score>, revised <score>4</score>", 4.0),
        ("Score: 5/7", 5.0),
        ("**Score**: 6", None),  # markdown around the word is not a grade
        ("<score>8</score>", None),
        ("<score>-1</score>", None),
        ("I cannot grade this.", None),
    ],
)
def test_parse_score(reply: str, score: float | None) -> None:
    assert parse_score(reply) == score


def test_rubric_reward_normalizes_and_passes_the_row() -> None:
    seen: list[str] = []

    def judge(prompt: str) -> str:
        seen.append(prompt)
        return "<score>7</score>" if "good proof" in prompt else "<score>0</score>"

    reward = RubricReward(judge, rubric="7 if complete")
    scores = reward(
        completions=["good proof", [{"role": "assistant", "content": "bad"}]],
        prompts=["Prove P.", "Prove P."],
        solution=["the reference proof", None],
        answer=[None, "42"],
    )
    assert scores == [1.0, 0.0]
    assert "Prove P." in seen[0] and "the reference proof" in seen[0] and "7 if complete" in seen[0]
    assert "42" in seen[1]


def test_rubric_reward_async_judge_failures_and_missing_grades() -> None:
    async def judge(prompt: str) -> str:
        if "raise" in prompt:
            raise RuntimeError("judge down")
        return "no grade here" if "silent" in prompt else "<score>3.5</score>"

    reward = RubricReward(judge, max_score=7)
    assert reward(completions=["x", "raise", "silent"], problem="P") == [0.5, None, None]
