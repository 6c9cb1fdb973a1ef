"""``best_of_n(n)``: n candidates, then a judge picks one.

The LLM judge reads every candidate and names the best by number in ``\\boxed{}``.
If the judge's pick is unreadable, or the budget runs out before it, the candidates'
majority answer wins.

>>> BestOfN(n=4).max_calls()
2
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from scaffolds.answers import extract_answer
from scaffolds.context import Context, Problem
from scaffolds.errors import BudgetExhaustedError
from scaffolds.strategies.base import Solution, Strategy
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.single import Single


class BestOfN(Strategy):
    name: ClassVar[str] = "best_of_n"
    summary: ClassVar[str] = "Best-of-N: n candidates, an LLM judge picks the best one."

    n: int = Field(default=4, ge=1, le=256)
    judge: Literal["llm"] = "llm"
    solver: Strategy = Single()

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        candidates = await self.solver.solve_many(
            problem, ctx.child("candidates"), self.n, label="candidate"
        )
        if len(candidates) == 1:
            return await pick_by_vote(candidates, ctx, expected=self.n)
        prompts = ctx.prompts
        prompt = ctx.prompt(
            prompts.best_of_n_judge,
            problem,
            candidates=prompts.candidates([c.text for c in candidates]),
            count=str(len(candidates)),
        )
        try:
            step = await ctx.generate(prompt, kind="judge", label="judge", temperature=0.0)
        except BudgetExhaustedError:
            return await pick_by_vote(candidates, ctx, expected=self.n + 1)
        pick = parse_pick(step.first.text, len(candidates))
        if pick is None:
            return await pick_by_vote(candidates, ctx, expected=self.n)
        chosen = candidates[pick]
        return chosen.marked_cut_short() if len(candidates) < self.n else chosen

    def max_calls(self) -> int:
        return self.solver.max_calls_many(self.n) + 1


def parse_pick(verdict: str, count: int) -> int | None:
    """The 0-based candidate index a judge named, or None.

    >>> parse_pick("Candidate 2 is right. \\\\boxed{2}", 3)
    1
    >>> parse_pick("\\\\boxed{7}", 3) is None
    True
    """
    answer = extract_answer(verdict)
    if answer is None:
        return None
    digits = "".join(ch for ch in answer if ch.isdigit())
    if not digits or not 1 <= int(digits) <= count:
        return None
    return int(digits) - 1
