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

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pydantic import Field

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole
from scaffolds.core.solution import Solution
from scaffolds.errors import BudgetExhaustedError
from scaffolds.problem import Problem, StepPrompt
from scaffolds.prompts import PromptSet, Template
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.single import DIRECT, Single
from scaffolds.strategies.steps import (
    ContextLimits,
    Parent,
    RowInputs,
    StepBuilder,
    TracedStep,
    render_candidates,
)

# This strategy's templates, one part per prompt set.
REFINE_TEMPLATE = Template(
    "gsr_refine",
    "### Problem\n$problem\n\n"
    "### Candidate solutions\n$candidates\n\n"
    "### Instructions\n"
    "Above are $count candidate solutions to the problem, written independently; any "
    "of them may be wrong. Compare them and check their reasoning, then write one "
    "complete solution that is better than each of them: keep what is right and repair "
    "what is wrong. If none of them is right, solve the problem yourself from scratch. "
    "Reason step by step, and end with your final answer within \\boxed{}.",
)

COMPACT_REFINE_TEMPLATE = Template("gsr_refine", "$problem[$candidates]")

PROMPT_SETS = (
    PromptSet.of("default", REFINE_TEMPLATE),
    PromptSet.of("compact", COMPACT_REFINE_TEMPLATE),
)


def refine_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem + ``state["candidates"]`` (texts) -> the refine step's prompt."""
    return render_candidates(ctx, ctx.templates(GSR), "gsr_refine", problem, state, parent)


async def _draw_candidates(
    ctx: Context, problem: Problem, known: dict[str, Any], limits: ContextLimits
) -> dict[str, Any]:
    if "candidates" in known:
        return known
    step = await DIRECT.generate(
        ctx,
        problem,
        {},
        label="candidate",
        n=limits.samples,
        max_tokens=limits.max_tokens,
    )
    return {"candidates": [ctx.shown(c.text) for c in step.completions]}


def _refine_row(step: TracedStep, sample: int, inputs: RowInputs) -> dict[str, Any] | None:
    """Kept when the refinement is right (``gsr_keep``: all, all_wrong, some_right).

    With ``gsr_borrow`` (right solutions the same model wrote for this problem, maybe
    none), a wrong refinement still makes a row: its target is a right candidate it read,
    else the first borrowed solution (solving afresh). Its ``target`` says which
    (``candidate`` or ``borrowed``; a right refinement's row has none).
    """
    candidates = step.fields["candidates"]
    grades = [inputs.grade(c) for c in candidates]
    right = None if None in grades else sum(bool(g) for g in grades)
    keep = inputs.options.get("gsr_keep", "all")
    if (keep == "all_wrong" and right != 0) or (keep == "some_right" and not right):
        return None
    row = {"correct": True, "candidates_correct": right, "num_candidates": len(grades)}
    if inputs.grade(step.texts[sample]):
        return row
    borrowed = inputs.options.get("gsr_borrow")
    if borrowed is None:
        return None
    shown = [c for c, g in zip(candidates, grades, strict=True) if g]
    if shown:
        return row | {"target": "candidate", "completion_text": shown[0]}
    if borrowed:
        return row | {"target": "borrowed", "completion_text": borrowed[0]}
    return None


REFINE = StepBuilder(
    "gsr_refine",
    "refine",
    ("gsr_refine",),
    build=refine_prompt,
    state=("candidates",),
    make_state=_draw_candidates,
    rows=_refine_row,
)


async def refine_over(
    ctx: Context, problem: Problem, candidates: Sequence[Solution], *, model: str | None = None
) -> Solution:
    """The refine step over ``candidates`` (the step gsr ends with; ``auto(hard="refine")``
    takes it too): the model reads the problem and each candidate's shown text and writes
    the answer (``model``: the served model that writes it, default the run's). Its parent
    is the candidates' step when they share one. Raises
    :class:`~scaffolds.errors.BudgetExhaustedError` when the budget has no room for it."""
    sources = {c.step_id for c in candidates}
    parent = (sources.pop(), None) if len(sources) == 1 else (None, None)
    shown = [ctx.shown(c.text) for c in candidates]
    step = await REFINE.generate(
        ctx,
        problem,
        {"candidates": shown},
        parent,
        label="refine",
        role=StepRole(final=True, force_answer=True, model=model),
    )
    return Solution.from_step(step)


class GSR(Strategy):
    name: ClassVar[str] = "gsr"
    summary: ClassVar[str] = "Generative self-refinement: n candidates, then one refine over all."
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = PROMPT_SETS
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (REFINE,)
    helper_models: ClassVar[tuple[str, ...]] = ("refiner",)

    n: int = Field(default=4, ge=1, le=256)
    solver: Strategy = Single()
    refiner: str | None = None
    """The served model that writes the refinement (default: the model itself; thinking
    stays on, since the refinement is the answer)."""

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        candidates = await self.solver.solve_many(
            problem, ctx.child("candidates"), self.n, label="candidate"
        )
        try:
            refined = await refine_over(ctx, problem, candidates, model=self.refiner)
        except BudgetExhaustedError:
            return await pick_by_vote(candidates, ctx, expected=self.n + 1)
        return refined.marked_cut_short() if len(candidates) < self.n else refined

    def max_calls(self) -> int:
        return self.solver.max_calls_many(self.n) + 1

    def max_samples(self) -> int:
        return self.solver.max_samples_many(self.n) + 1
