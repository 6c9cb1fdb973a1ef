"""``majority(k)``: self-consistency. Draw k solutions, return the most common answer.

>>> str(Majority(k=5))
'majority(k=5)'
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from scaffolds.core.context import Context, Problem
from scaffolds.core.solution import Solution
from scaffolds.core.tool_calls import vote_groups
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.single import Single


class Majority(Strategy):
    name: ClassVar[str] = "majority"
    summary: ClassVar[str] = "Self-consistency: k solutions, majority vote over their answers."
    votes_tool_calls: ClassVar[bool] = True

    k: int = Field(default=8, ge=1, le=1024)
    solver: Strategy = Single()

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        samples = await self.solver.solve_many(problem, ctx.child("samples"), self.k)
        return await pick_by_vote(samples, ctx, expected=self.k)

    def max_calls(self) -> int:
        return self.solver.max_calls_many(self.k)

    def max_samples(self) -> int:
        return self.solver.max_samples_many(self.k)


async def pick_by_vote(samples: list[Solution], ctx: Context, *, expected: int) -> Solution:
    """The sample whose answer won the vote; cut short if samples are missing or cut."""
    if any(s.tool_call for s in samples):  # tool calls vote by call (core.tool_calls)
        winner: int | None = (await vote_groups(samples, ctx))[0][0]
    else:
        winner = await ctx.vote([s.answer for s in samples])
    chosen = samples[0 if winner is None else winner]
    cut = len(samples) < expected or any(s.cut_short for s in samples)
    return chosen.marked_cut_short() if cut else chosen
