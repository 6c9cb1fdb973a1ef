"""``single``: one sample, the pass-through baseline.

``solve_many(k)`` sends ONE engine request with ``n=k``, so every strategy that draws
several samples through ``single`` shares the prompt's prefill.

>>> str(Single())
'single'
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from scaffolds.answers import extract_answer
from scaffolds.context import Context, Problem
from scaffolds.strategies.base import Solution, Strategy


class Single(Strategy):
    name: ClassVar[str] = "single"
    summary: ClassVar[str] = (
        "One sample: the caller's prompt, passed through (or the solve template)."
    )
    batches_samples: ClassVar[bool] = True

    prompt: Literal["raw", "solve"] = "raw"
    """``raw`` sends the problem as given; ``solve`` wraps it in the solve template."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Cap on this call's tokens (default: the request's ``max_tokens``)."""

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        [solution] = await self.solve_many(problem, ctx, 1)
        return solution

    async def solve_many(
        self, problem: Problem, ctx: Context, k: int, label: str = "sample"
    ) -> list[Solution]:
        if self.prompt == "raw":
            prompt = ctx.problem_prompt(problem)
        else:
            prompt = ctx.prompt(ctx.prompts.solve, problem)
        step = await ctx.generate(
            prompt,
            kind="generate",
            label="answer" if k == 1 else label,
            n=k,
            max_tokens=self.max_tokens,
            final=True,
            force_answer=True,
        )
        return [
            Solution(
                c.text,
                extract_answer(c.text),
                step_id=step.step_id,
                reasoning=c.reasoning,
                cut_short=step.cut_short,
            )
            for c in step.completions
        ]

    def max_calls(self) -> int:
        return 1

    def max_calls_many(self, k: int) -> int:
        return 1

    def max_samples(self) -> int:
        return 1
