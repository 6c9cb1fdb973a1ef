"""``self_refine(max_rounds)``: Self-Refine (arXiv 2303.17651).

Generate with the inner solver; ask for step-by-step feedback; stop when the feedback
says the solution is correct, otherwise rewrite it with the feedback; at most
``max_rounds`` rounds. A budget cut returns the latest solution, marked cut short.

>>> SelfRefine(max_rounds=2).max_calls()
5
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from scaffolds.answers import extract_answer
from scaffolds.context import Context, Problem
from scaffolds.errors import BudgetExhaustedError
from scaffolds.strategies.base import Solution, Strategy
from scaffolds.strategies.single import Single


class SelfRefine(Strategy):
    name: ClassVar[str] = "self_refine"
    summary: ClassVar[str] = "Self-Refine: solve, get feedback, refine until judged correct."

    max_rounds: int = Field(default=3, ge=1, le=32)
    solver: Strategy = Single()

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        current = await self.solver.solve(problem, ctx.child("initial solution"))
        prompts = ctx.prompts
        for round_no in range(1, self.max_rounds + 1):
            try:
                feedback = await ctx.generate(
                    ctx.prompt(
                        prompts.self_refine_feedback,
                        problem,
                        solution=current.text,
                    ),
                    kind="feedback",
                    label=f"feedback {round_no}",
                )
                verdict = feedback.first.text
                if says_correct(verdict, prompts.self_refine_correct_marker):
                    return current
                step = await ctx.generate(
                    ctx.prompt(
                        prompts.self_refine_refine,
                        problem,
                        solution=current.text,
                        feedback=verdict,
                    ),
                    kind="refine",
                    label=f"refine {round_no}",
                    force_answer=True,
                )
            except BudgetExhaustedError:
                return current.marked_cut_short()
            refined = step.first
            current = Solution(
                refined.text,
                extract_answer(refined.text),
                step_id=step.step_id,
                reasoning=refined.reasoning,
                cut_short=step.cut_short,
            )
        return current

    def max_calls(self) -> int:
        return self.solver.max_calls() + 2 * self.max_rounds

    def max_samples(self) -> int:
        return self.solver.max_samples() + 2 * self.max_rounds


def says_correct(feedback: str, marker: str) -> bool:
    """True if the feedback's last non-empty line carries the "correct" verdict.

    >>> says_correct("Step 1 fine.\\nVERDICT: CORRECT", "VERDICT: CORRECT")
    True
    >>> says_correct("VERDICT: INCORRECT", "VERDICT: CORRECT")
    False
    """
    lines = [line.strip().strip("`*") for line in feedback.splitlines() if line.strip()]
    return bool(lines) and marker.lower() in lines[-1].lower()
