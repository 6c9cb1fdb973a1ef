"""``rc(steps, reasoning_tokens, summary_tokens)``: Reasoning Cache (arXiv 2602.03773).

Each sample loops: reason (at most ``reasoning_tokens``) from the problem and the
current summary, then summarize (at most ``summary_tokens``) the problem, the previous
summary and the latest chunk, and reason again from the new summary; ``steps``
reasoning chunks in all. The answer is the last chunk's. Every chunk's answer is in the
trace, which gives accuracy against tokens spent.

Unlike the paper's lock-step loop, each sample advances on its own: a fast sample
never waits for a slow one. The first chunks of k samples share one prompt, so they go
to the engine as ONE request with ``n=k``. An inner ``solver`` (if given) writes the
first attempt instead of the plain first reasoning step.

>>> RC(steps=3).max_calls()
5
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from scaffolds.answers import extract_answer
from scaffolds.context import Context, Problem, gather_within_budget
from scaffolds.engine import Completion
from scaffolds.errors import BudgetExhaustedError
from scaffolds.strategies.base import Solution, Strategy, keep_finished


class RC(Strategy):
    name: ClassVar[str] = "rc"
    summary: ClassVar[str] = "Reasoning Cache: reason, summarize, continue from the summary."
    batches_samples: ClassVar[bool] = True

    steps: int = Field(default=4, ge=1, le=64)
    reasoning_tokens: int = Field(default=16384, ge=1)
    summary_tokens: int = Field(default=2048, ge=1)
    solver: Strategy | None = None

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        [solution] = await self.solve_many(problem, ctx, 1)
        return solution

    async def solve_many(
        self, problem: Problem, ctx: Context, k: int, label: str = "sample"
    ) -> list[Solution]:
        first = await self._first_attempts(problem, ctx, k)
        if k == 1:
            return [await self._continue(problem, ctx, first[0])]
        results = await gather_within_budget(
            *(
                self._continue(problem, ctx.child(f"{label} {i}"), attempt)
                for i, attempt in enumerate(first, start=1)
            )
        )
        return keep_finished(results)

    async def _first_attempts(self, problem: Problem, ctx: Context, k: int) -> list[Solution]:
        if self.solver is not None:
            return await self.solver.solve_many(problem, ctx.child("first attempt"), k)
        step = await ctx.generate(
            ctx.prompt(ctx.prompts.rc_reasoning_start, problem),
            kind="reasoning",
            label="reasoning 1",
            n=k,
            max_tokens=self.reasoning_tokens,
            final=self.steps == 1,
            force_answer=True,
        )
        return [_as_solution(c, step.step_id, step.cut_short) for c in step.completions]

    async def _continue(self, problem: Problem, ctx: Context, attempt: Solution) -> Solution:
        prompts = ctx.prompts
        summary = prompts.rc_no_summary
        for turn in range(2, self.steps + 1):
            try:
                summary_step = await ctx.generate(
                    ctx.prompt(
                        prompts.rc_summary,
                        problem,
                        summary=summary,
                        attempt=summarizable(attempt),
                    ),
                    kind="summary",
                    label=f"summary {turn - 1}",
                    max_tokens=self.summary_tokens,
                )
                summary = summary_step.first.text
                step = await ctx.generate(
                    ctx.prompt(
                        prompts.rc_reasoning_continue,
                        problem,
                        summary=summary,
                    ),
                    kind="reasoning",
                    label=f"reasoning {turn}",
                    max_tokens=self.reasoning_tokens,
                    final=turn == self.steps,
                    force_answer=True,
                )
            except BudgetExhaustedError:
                return attempt.marked_cut_short()
            attempt = _as_solution(step.first, step.step_id, step.cut_short)
        return attempt

    def max_calls(self) -> int:
        return self.max_calls_many(1)

    def max_calls_many(self, k: int) -> int:
        first = 1 if self.solver is None else self.solver.max_calls_many(k)
        return first + k * 2 * (self.steps - 1)

    def max_samples(self) -> int:
        return self.max_samples_many(1)

    def max_samples_many(self, k: int) -> int:
        first = k if self.solver is None else self.solver.max_samples_many(k)
        return first + k * 2 * (self.steps - 1)


def summarizable(attempt: Solution) -> str:
    """What of a reasoning chunk gets summarized: for thinking models, the thinking."""
    if attempt.reasoning:
        return attempt.reasoning
    head, sep, _ = attempt.text.partition("</think>")
    return head if sep else attempt.text


def _as_solution(completion: Completion, step_id: str, cut_short: bool) -> Solution:
    return Solution(
        completion.text,
        extract_answer(completion.text),
        step_id=step_id,
        reasoning=completion.reasoning,
        cut_short=cut_short,
    )
