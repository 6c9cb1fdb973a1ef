r"""Graders: was a response right? One grading for ``ponder eval``, training rewards and the
experiments, so a reward and the eval metric cannot drift.

- :class:`MathGrader` (default): the final answer against the reference through
  math-verify, in a process pool with a time limit per item
  (:class:`scaffolds.evaluation.answer_pool.AnswerChecker`).
- :class:`ExactGrader`: normalized string equality (for tasks math-verify would
  over-interpret, e.g. labels).
- :class:`JudgeGrader`: a judge model at an OpenAI-compatible URL scores the response
  0-7 against a rubric (as QED-Nano grades proofs); ``correct`` means the score reaches
  ``pass_score``. The judge's prompt (:func:`judge_prompt`: :data:`JUDGE_TEMPLATE` with
  :data:`DEFAULT_RUBRIC`) and the reading of its reply (:func:`parse_score`) are the ones
  the training rubric reward uses.

The first two read a response's final answer in their ``answer_format``
(:data:`~scaffolds.evaluation.answers.AnswerFormat`): ``lenient`` (the default, as
training rewards read: the last ``\boxed{}``, "the answer is", ``####``, the last
number), ``boxed`` (only the last ``\boxed{}`` after the thinking; none is no answer), or
a reference's reader (``boxed_anywhere``, ``answer_is``, ``after_answer_marker``). The
thinking ends at their ``thinking`` markers' end (``</think>`` unless told: a served
model's own, for one that thinks inside its text).

A grader answers ``Grade(correct=None)`` when there is nothing to grade against.

>>> import asyncio
>>> async def demo() -> list[bool | None]:
...     grader = MathGrader(inline=True)
...     p = ProblemRow("p1", "Half of one?", "1/2")
...     out = [(await grader.grade(p, t)).correct for t in ("so \\boxed{0.5}", "no idea")]
...     await grader.aclose()
...     return out
>>> asyncio.run(demo())
[True, False]
>>> strict = ExactGrader(answer_format="boxed")
>>> asyncio.run(strict.grade(ProblemRow("p", "1+1=", "2"), "The final answer is 2.")).note
'no answer'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from string import Template
from typing import Any, Protocol

from scaffolds.dependencies import require
from scaffolds.evaluation.answer_pool import AnswerChecker
from scaffolds.evaluation.answers import (
    AnswerFormat,
    ThinkingMarkers,
    normalize_answer,
)
from scaffolds.evaluation.problems import ProblemRow

__all__ = [
    "DEFAULT_RUBRIC",
    "JUDGE_TEMPLATE",
    "AnswerReader",
    "ExactGrader",
    "Grade",
    "Grader",
    "JudgeGrader",
    "MathGrader",
    "judge_prompt",
    "parse_score",
]


@dataclass(frozen=True)
class Grade:
    correct: bool | None
    score: float | None = None
    note: str | None = None


class Grader(Protocol):
    """What the runner needs from a grader."""

    name: str
    per_step: bool
    """Cheap enough to grade every intermediate answer (RC's per-step curve)."""

    @property
    def answer_format(self) -> AnswerFormat | None:
        """How it reads a response's final answer (None: it reads none, as a judge)."""
        ...

    async def grade(self, problem: ProblemRow, text: str, answer: str | None = None) -> Grade:
        """Grade ``text`` (its extracted ``answer`` when the caller has one)."""
        ...

    async def aclose(self) -> None: ...


def _as_boxed(answer: str) -> str:
    """``answer`` wrapped so re-extraction returns it unchanged (when braces balance)."""
    depth = 0
    for char in answer:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth < 0:
            return answer
    return "\\boxed{" + answer + "}" if depth == 0 else answer


class AnswerReader:
    """What a grader that reads answers itself shares: a response's final answer in its
    ``answer_format``, after its ``thinking`` markers.

    >>> ExactGrader(answer_format="boxed").read(r"<think>\\boxed{3}</think>So \\boxed{4}.")
    '4'
    """

    answer_format: AnswerFormat
    thinking: ThinkingMarkers

    def __init__(
        self, *, answer_format: AnswerFormat = "lenient", thinking: ThinkingMarkers | None = None
    ) -> None:
        self.answer_format = answer_format
        self.thinking = thinking or ThinkingMarkers()

    def read(self, text: str) -> str | None:
        """The final answer of ``text`` in this grader's format, after its thinking."""
        return self.thinking.answer(text, self.answer_format)


class MathGrader(AnswerReader):
    """math-verify equivalence of the extracted answer and the reference."""

    name = "math"
    per_step = True

    def __init__(
        self,
        *,
        workers: int = 2,
        timeout_s: float = 10.0,
        inline: bool = False,
        answer_format: AnswerFormat = "lenient",
        thinking: ThinkingMarkers | None = None,
    ) -> None:
        super().__init__(answer_format=answer_format, thinking=thinking)
        self.checker = AnswerChecker(max_workers=workers, timeout_s=timeout_s, inline=inline)

    async def grade(self, problem: ProblemRow, text: str, answer: str | None = None) -> Grade:
        if problem.answer is None:
            return Grade(None)
        answer = answer if answer is not None else self.read(text)
        if answer is None or not answer.strip():
            return Grade(False, note="no answer")
        return Grade(await self.checker.grade(problem.answer, _as_boxed(answer)))

    async def cluster(self, answers: Sequence[str | None]) -> list[list[int]]:
        return await self.checker.cluster(answers)

    def close(self) -> None:
        """Stop the answer pool (from synchronous code, such as a trainer's reward)."""
        self.checker.close()

    async def aclose(self) -> None:
        self.close()


class ExactGrader(AnswerReader):
    """Normalized string equality of the extracted answer and the reference.

    >>> import asyncio
    >>> asyncio.run(ExactGrader().grade(ProblemRow("p", "?", "Paris"), "Answer: Paris")).correct
    True
    """

    name = "exact"
    per_step = True

    async def grade(self, problem: ProblemRow, text: str, answer: str | None = None) -> Grade:
        if problem.answer is None:
            return Grade(None)
        answer = answer if answer is not None else self.read(text)
        if answer is None:
            return Grade(False, note="no answer")
        gold = normalize_answer(problem.answer)
        return Grade(bool(gold) and normalize_answer(answer) == gold)

    async def aclose(self) -> None:
        return None


DEFAULT_RUBRIC = """\
7: complete and rigorous; 6: correct with a minor slip; 5-4: the right idea with gaps;
3-1: partial progress (useful lemmas, a correct special case); 0: wrong or no progress."""

JUDGE_TEMPLATE = """\
You grade a solution to a math problem on a scale of 0 to $max_score.

## Problem
$problem

## Reference solution or answer
$reference

## Marking scheme
$rubric

## Solution to grade
$response

Check every step. Penalize unjustified claims. Then give the score as <score>N</score>."""
"""The judge's prompt, a :class:`string.Template` (``$problem``, ``$reference``,
``$rubric``, ``$response``, ``$max_score``)."""


def judge_prompt(
    problem: str,
    reference: str | None,
    response: str,
    *,
    rubric: str = DEFAULT_RUBRIC,
    max_score: float = 7.0,
    template: str = JUDGE_TEMPLATE,
) -> str:
    """The judge's prompt for one response (``(none given)`` when there is no reference).

    >>> judge_prompt("Show P.", None, "P.", rubric="7: right").splitlines()[0]
    'You grade a solution to a math problem on a scale of 0 to 7.'
    """
    return Template(template).safe_substitute(
        problem=problem,
        reference=reference or "(none given)",
        rubric=rubric,
        response=response,
        max_score=f"{max_score:g}",
    )


_SCORE_TAG = re.compile(r"<score>\s*(\d+(?:\.\d+)?)\s*</score>", re.IGNORECASE)
_SCORE_WORD = re.compile(r"score\s*[:=]?\s*\**\s*(\d+(?:\.\d+)?)\s*(?:/\s*7)?", re.IGNORECASE)


def parse_score(text: str, top: float = 7.0) -> float | None:
    """The judge's score: the last ``<score>N</score>``, else the last "score: N".

    >>> parse_score("fine... <score>6</score>"), parse_score("Score: 3/7"), parse_score("?")
    (6.0, 3.0, None)
    """
    for pattern in (_SCORE_TAG, _SCORE_WORD):
        found = pattern.findall(text)
        if found:
            value = float(found[-1])
            return value if 0 <= value <= top else None
    return None


class JudgeGrader:
    """An LLM judge scoring 0-7 with a rubric; ``correct`` iff score >= ``pass_score``."""

    name = "judge"
    per_step = False
    answer_format: AnswerFormat | None = None  # it reads the whole response

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        rubric: str = DEFAULT_RUBRIC,
        pass_score: float = 7.0,
        max_retries: int = 3,
        timeout_s: float = 600.0,
    ) -> None:
        require("eval", "the judge grader", modules=("openai",))
        from openai import AsyncOpenAI

        self.model = model
        self.rubric = rubric
        self.pass_score = pass_score
        self.client = AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "none",
            max_retries=max_retries,
            timeout=timeout_s,
        )

    async def grade(self, problem: ProblemRow, text: str, answer: str | None = None) -> Grade:
        reference = problem.solution or problem.answer
        prompt = judge_prompt(problem.problem, reference, text, rubric=self.rubric)
        try:
            reply: Any = await self.client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": prompt}],
                temperature=0.0,
            )
        except Exception as err:  # an unreachable judge leaves the sample ungraded
            return Grade(None, note=f"judge failed: {type(err).__name__}: {err}")
        verdict = (reply.choices[0].message.content or "") if reply.choices else ""
        score = parse_score(verdict)
        if score is None:
            return Grade(None, note="judge gave no score")
        return Grade(score >= self.pass_score, score=score)

    async def aclose(self) -> None:
        await self.client.close()
