"""``abstraction(m, n)``: abstraction-then-solve (RLAD, arXiv 2510.02263).

Sample m short abstractions (general hints with none of the problem's own numbers) in
one engine request, solve n times conditioned on each (the solver sees the note as a
cheat sheet, then the problem), and vote over all m x n answers.

>>> Abstraction(m=4, n=2).max_calls()
5
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from scaffolds.context import Context, Problem, gather_within_budget
from scaffolds.errors import BudgetExhaustedError
from scaffolds.strategies.base import Solution, Strategy
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.single import Single


class Abstraction(Strategy):
    name: ClassVar[str] = "abstraction"
    summary: ClassVar[str] = "Abstraction-then-solve: m hints, n solutions per hint, vote."

    m: int = Field(default=4, ge=1, le=64)
    n: int = Field(default=2, ge=1, le=64)
    abstraction_tokens: int = Field(default=512, ge=1)
    solver: Strategy = Single()

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        prompts = ctx.prompts
        notes = await ctx.generate(
            ctx.prompt(prompts.abstraction_propose, problem),
            kind="abstraction",
            label=f"{self.m} abstractions",
            n=self.m,
            max_tokens=self.abstraction_tokens,
        )
        conditioned = [
            Problem(
                prompts.abstraction_solve.render(abstraction=note.text, problem=problem.text),
                problem.history,
            )
            for note in notes.completions
        ]
        batches = await gather_within_budget(
            *(
                self.solver.solve_many(p, ctx.child(f"abstraction {i}"), self.n, label="solution")
                for i, p in enumerate(conditioned, start=1)
            )
        )
        solutions = [
            s for batch in batches if not isinstance(batch, BudgetExhaustedError) for s in batch
        ]
        if not solutions:
            raise next(b for b in batches if isinstance(b, BudgetExhaustedError))
        return await pick_by_vote(solutions, ctx, expected=self.m * self.n)

    def max_calls(self) -> int:
        return 1 + self.m * self.solver.max_calls_many(self.n)

    def max_samples(self) -> int:
        return self.m + self.m * self.solver.max_samples_many(self.n)
