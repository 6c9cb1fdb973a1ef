"""``majority(k)``: self-consistency. Draw k solutions, return the most common answer.

``weight="verifier"``: a verifier scores the k solutions and equivalent answers pool
their scores (:func:`scaffolds.verifiers.scoring.pick_by_weight`); if the budget runs out
before it, the plain vote decides.

>>> str(Majority(k=5))
'majority(k=5)'
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from scaffolds.core.context import Context
from scaffolds.core.solution import Solution
from scaffolds.core.tool_calls import vote_groups
from scaffolds.errors import BudgetExhaustedError
from scaffolds.problem import Problem
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.single import Single
from scaffolds.verifiers.scoring import pick_by_weight, score, verifier_for


class Majority(Strategy):
    name: ClassVar[str] = "majority"
    summary: ClassVar[str] = "Self-consistency: k solutions, majority vote over their answers."
    votes_tool_calls: ClassVar[bool] = True

    helper_models: ClassVar[tuple[str, ...]] = ("verifier",)

    k: int = Field(default=8, ge=1, le=1024)
    solver: Strategy = Single()
    weight: Literal["count", "verifier"] = "count"
    """What a vote weighs: each sample one (``count``), or its verifier score."""
    verifier: str | None = None
    """With ``weight="verifier"``: the served model that verifies (default: the
    verifier configured for the model)."""

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        if self.weight == "verifier":
            verifier = verifier_for(ctx, self.verifier, "scaffold.weight")
        samples = await self.solver.solve_many(problem, ctx.child("samples"), self.k)
        if self.weight == "count" or len(samples) == 1:
            return await pick_by_vote(samples, ctx, expected=self.k)
        try:
            verdicts = await score(ctx, verifier, problem, [s.text for s in samples])
        except BudgetExhaustedError:
            return await pick_by_vote(samples, ctx, expected=self.k + 1)
        chosen = await pick_by_weight(samples, verdicts.scores, ctx)
        cut = len(samples) < self.k or any(s.cut_short for s in samples)
        return chosen.marked_cut_short() if cut else chosen

    def max_calls(self) -> int:
        verify = self.k if self.weight == "verifier" else 0  # a request per sample, at most
        return self.solver.max_calls_many(self.k) + verify

    def max_samples(self) -> int:
        return self.solver.max_samples_many(self.k) + (self.k if self.weight == "verifier" else 0)


async def pick_by_vote(samples: list[Solution], ctx: Context, *, expected: int) -> Solution:
    """The sample whose answer won the vote; cut short if samples are missing or cut."""
    if any(s.tool_call for s in samples):  # tool calls vote by call (core.tool_calls)
        winner: int | None = (await vote_groups(samples, ctx))[0][0]
    else:
        winner = await ctx.vote([s.answer for s in samples])
    chosen = samples[0 if winner is None else winner]
    cut = len(samples) < expected or any(s.cut_short for s in samples)
    return chosen.marked_cut_short() if cut else chosen
