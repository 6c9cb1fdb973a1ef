"""``abstraction(m, n)``: abstraction-then-solve (RLAD, arXiv 2510.02263).

Sample m short abstractions (general hints with none of the problem's own numbers) in
one engine request, solve n times conditioned on each (the solver sees the note as a
cheat sheet, then the problem), and vote over all m x n answers.

>>> Abstraction(m=4, n=2).max_calls()
5
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from scaffolds.core.context import Context, Problem, StepPrompt
from scaffolds.core.errors import BudgetExhaustedError
from scaffolds.core.fanout import gather_within_budget
from scaffolds.core.solution import Solution
from scaffolds.prompts import PromptSet, Template
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.single import Single
from scaffolds.strategies.steps import ContextLimits, Parent, RowInputs, StepBuilder, TracedStep

# This strategy's templates, one part per prompt set.
PROPOSE_TEMPLATE = Template(
    "abstraction_propose",
    "### Problem\n$problem\n\n"
    "### Instructions\n"
    "Do not solve this problem. Write one short note that would help someone solve "
    "problems of this kind: name a useful technique, fact or common pitfall, describe "
    "it in general terms, and illustrate it with a small example of your own. Use none "
    "of this problem's own numbers or objects. Keep the note under 150 words.",
)

SOLVE_TEMPLATE = Template(
    "abstraction_solve",
    "### Cheat sheet\n$abstraction\n\n"
    "### Problem\n$problem\n\n"
    "### Instructions\n"
    "The cheat sheet describes a general idea that may help; use it where it applies. "
    "Reason step by step, and end with your final answer within \\boxed{}.",
)

COMPACT_PROPOSE_TEMPLATE = Template("abstraction_propose", "$problem@")
COMPACT_SOLVE_TEMPLATE = Template("abstraction_solve", "$abstraction;$problem")

PROMPT_SETS = (
    PromptSet.of("default", PROPOSE_TEMPLATE, SOLVE_TEMPLATE),
    PromptSet.of("compact", COMPACT_PROPOSE_TEMPLATE, COMPACT_SOLVE_TEMPLATE),
)


def propose_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem -> the prompt asking for abstractions (notes)."""
    return ctx.render(ctx.templates(Abstraction).template("abstraction_propose"), problem)


def conditioned(ctx: Context, problem: Problem, note: str, parent: Parent) -> Problem:
    """The problem with ``note`` as its cheat sheet (a solver sees it as the problem)."""
    template = ctx.templates(Abstraction).template("abstraction_solve")
    text = template.render(abstraction=note, problem=problem.text)
    fields = {"abstraction": note, "problem": problem.text}
    return Problem(text, problem.history, origin=StepPrompt(text, template.name, fields, *parent))


def solve_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem + ``state["abstraction"]`` -> the conditioned problem, as asked."""
    return ctx.render_problem(conditioned(ctx, problem, state["abstraction"], parent))


async def _one_note(
    ctx: Context, problem: Problem, known: dict[str, Any], limits: ContextLimits
) -> dict[str, Any]:
    if "abstraction" in known:
        return known
    proposed = await PROPOSE.generate(
        ctx, problem, {}, label="1 abstractions", max_tokens=limits.max_tokens, helper=True
    )
    return {"abstraction": proposed.first.text}


def _note_row(step: TracedStep, sample: int, inputs: RowInputs) -> dict[str, Any] | None:
    """Kept when solutions that read the note are right often enough (``min_accuracy``)."""
    solves = inputs.view.descendants(step.step_id, sample)
    grades = [inputs.grade(text) for solve in solves for text in solve.texts]
    known = [g for g in grades if g is not None]
    accuracy = sum(known) / len(known) if known else None
    if accuracy is None or accuracy < inputs.options.get("min_accuracy", 0.5) or accuracy <= 0:
        return None
    return {"correct": True, "accuracy": accuracy}


def _reads_a_note(step: TracedStep, inputs: RowInputs) -> bool:
    """A pass-through solve of a conditioned problem, or one in the solve template."""
    parent = inputs.view.get(step.started.parent_step)
    return step.template == "abstraction_solve" or (
        parent is not None and parent.template == "abstraction_propose"
    )


PROPOSE = StepBuilder(
    "abstraction_propose", "abstraction", ("abstraction_propose",), propose_prompt,
    rows=_note_row,
)  # fmt: skip
SOLVE = StepBuilder(
    "abstraction_solve", "generate", ("abstraction_solve", "solve"), solve_prompt,
    ("abstraction",), _one_note, "abstraction_solve", accepts=_reads_a_note,
)  # fmt: skip


class Abstraction(Strategy):
    name: ClassVar[str] = "abstraction"
    summary: ClassVar[str] = "Abstraction-then-solve: m hints, n solutions per hint, vote."
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = PROMPT_SETS
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (PROPOSE, SOLVE)
    helper_models: ClassVar[tuple[str, ...]] = ("abstractor",)

    m: int = Field(default=4, ge=1, le=64)
    n: int = Field(default=2, ge=1, le=64)
    abstraction_tokens: int = Field(default=512, ge=1)
    solver: Strategy = Single()
    abstractor: str | None = None
    """The served model that writes the abstractions (default: the model's helper
    model, else the model itself, with its thinking turned off)."""

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        notes = await PROPOSE.generate(
            ctx,
            problem,
            {},
            label=f"{self.m} abstractions",
            n=self.m,
            max_tokens=self.abstraction_tokens,
            helper=True,
            model=self.abstractor,
        )
        sources = [(notes.step_id, i) for i in range(len(notes.completions))]
        batches = await gather_within_budget(
            *(
                self.solver.solve_many(
                    conditioned(ctx, problem, note.text, source),
                    ctx.child(f"abstraction {i}", parent=source),
                    self.n,
                    label="solution",
                )
                for i, (note, source) in enumerate(
                    zip(notes.completions, sources, strict=True), start=1
                )
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
