"""``gsr(n)``: generative self-refinement (arXiv 2509.00084).

N candidates in parallel (one engine request when the solver is ``single``), then one
call that reads the problem and every candidate and writes a better solution, solving
from scratch if all candidates are wrong. If the budget runs out before the refine
call, the candidates' majority answer is returned, marked cut short.

>>> str(GSR(n=4))
'gsr'
>>> GSR(n=4).max_calls()
2
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from scaffolds.answers import extract_answer
from scaffolds.context import Context, Problem
from scaffolds.errors import BudgetExhaustedError
from scaffolds.strategies.base import Solution, Strategy
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.single import Single


class GSR(Strategy):
    name: ClassVar[str] = "gsr"
    summary: ClassVar[str] = "Generative self-refinement: n candidates, then one refine over all."

    n: int = Field(default=4, ge=1, le=256)
    solver: Strategy = Single()

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        candidates = await self.solver.solve_many(
            problem, ctx.child("candidates"), self.n, label="candidate"
        )
        prompts = ctx.prompts
        prompt = ctx.prompt(
            prompts.gsr_refine,
            problem,
            candidates=prompts.candidates([c.text for c in candidates]),
            count=str(len(candidates)),
        )
        try:
            step = await ctx.generate(
                prompt, kind="refine", label="refine", final=True, force_answer=True
            )
        except BudgetExhaustedError:
            return await pick_by_vote(candidates, ctx, expected=self.n + 1)
        refined = step.first
        return Solution(
            refined.text,
            extract_answer(refined.text),
            step_id=step.step_id,
            reasoning=refined.reasoning,
            cut_short=step.cut_short or len(candidates) < self.n,
        )

    def max_calls(self) -> int:
        return self.solver.max_calls_many(self.n) + 1

    def max_samples(self) -> int:
        return self.solver.max_samples_many(self.n) + 1
