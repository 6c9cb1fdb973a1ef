"""``abstraction(m, n)``: abstraction-then-solve (RLAD, arXiv 2510.02263).

Sample m short abstractions (general hints with none of the problem's own numbers) in
one engine request, solve n times conditioned on each (the solver sees the note as a
cheat sheet, then the problem), and vote over all m x n answers. With
``notes_per_call=p`` each sample of that request writes p notes at once (headed
``### Note 1``, ``### Note 2``...), so the request asks for ceil(m / p) samples; the
note budget ``abstraction_tokens`` defaults to 1024 tokens per note asked.

>>> Abstraction(m=4, n=2).max_calls()
5
>>> split_notes("### Note 1\\nCarry the ten.\\n### Note 2: Check\\nAdd back.", "### Note")
['Carry the ten.', 'Check\\nAdd back.']
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole
from scaffolds.core.solution import Solution
from scaffolds.errors import BudgetExhaustedError
from scaffolds.fanout import gather_within_budget
from scaffolds.problem import Problem, StepPrompt
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

PROPOSE_MANY_TEMPLATE = Template(
    "abstraction_propose_many",
    "### Problem\n$problem\n\n"
    "### Instructions\n"
    "Do not solve this problem. Write $count different short notes that would help "
    "someone solve problems of this kind: each names a useful technique, fact or common "
    "pitfall, describes it in general terms, and illustrates it with a small example of "
    "your own. Use none of this problem's own numbers or objects. Start each note on a "
    "line of its own that reads `### Note 1`, `### Note 2` and so on, and keep each "
    "under 150 words.",
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
COMPACT_PROPOSE_MANY_TEMPLATE = Template("abstraction_propose_many", "$problem@$count")

PROMPT_SETS = (
    PromptSet.of(
        "default",
        PROPOSE_TEMPLATE,
        SOLVE_TEMPLATE,
        PROPOSE_MANY_TEMPLATE,
        abstraction_note_heading="### Note",
    ),
    PromptSet.of(
        "compact",
        COMPACT_PROPOSE_TEMPLATE,
        COMPACT_SOLVE_TEMPLATE,
        COMPACT_PROPOSE_MANY_TEMPLATE,
        abstraction_note_heading="#",
    ),
)

TOKENS_PER_NOTE = 1024
"""The note budget per note asked, when ``abstraction_tokens`` is not set."""


def split_notes(text: str, heading: str) -> list[str]:
    """The notes of a text that wrote several, each begun by a line starting with
    ``heading`` (its number and a colon dropped); the whole text if it has no heading."""
    pattern = rf"(?m)^[ \t]*{re.escape(heading)}[ \t]*\d*[ \t]*[:.]?[ \t]*"
    notes = [part.strip() for part in re.split(pattern, text)[1:] if part.strip()]
    return notes or ([text.strip()] if text.strip() else [])


def propose_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem -> the prompt asking for an abstraction (a note); with ``state["count"]``,
    for that many notes at once."""
    templates = ctx.templates(Abstraction)
    if "count" in state:
        template = templates.template("abstraction_propose_many")
        return ctx.render(template, problem, count=str(state["count"]))
    return ctx.render(templates.template("abstraction_propose"), problem)


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
        ctx,
        problem,
        {},
        label="1 abstractions",
        max_tokens=limits.max_tokens,
        role=StepRole(helper=True),
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
    "abstraction_propose",
    "abstraction",
    ("abstraction_propose", "abstraction_propose_many"),
    propose_prompt,
    rows=_note_row,
)
SOLVE = StepBuilder(
    "abstraction_solve",
    "generate",
    ("abstraction_solve", "solve"),
    solve_prompt,
    ("abstraction",),
    _one_note,
    accepts=_reads_a_note,
)


class Abstraction(Strategy):
    name: ClassVar[str] = "abstraction"
    summary: ClassVar[str] = "Abstraction-then-solve: m hints, n solutions per hint, vote."
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = PROMPT_SETS
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (PROPOSE, SOLVE)
    helper_models: ClassVar[tuple[str, ...]] = ("abstractor",)

    m: int = Field(default=4, ge=1, le=64)
    n: int = Field(default=2, ge=1, le=64)
    abstraction_tokens: int | None = Field(default=None, ge=1)
    """Each abstraction call's cap (default: 1024 tokens per note it asks for)."""
    notes_per_call: int = Field(default=1, ge=1, le=64)
    """Notes each abstraction sample writes at once (one request of ceil(m / this))."""
    solver: Strategy = Single()
    abstractor: str | None = None
    """The served model that writes the abstractions (default: the model's helper
    model, else the model itself, with its thinking turned off)."""

    def needed_templates(self) -> frozenset[str]:
        many = self.notes_per_call > 1
        return frozenset(
            ("abstraction_propose_many" if many else "abstraction_propose", "abstraction_solve")
        )

    async def _notes(self, problem: Problem, ctx: Context) -> list[tuple[str, tuple[str, int]]]:
        """The m notes, each with the (step id, sample) that wrote it."""
        per_call = self.notes_per_call
        made = await PROPOSE.generate(
            ctx,
            problem,
            {"count": per_call} if per_call > 1 else {},
            label=f"{self.m} abstractions",
            n=math.ceil(self.m / per_call),
            max_tokens=self.abstraction_tokens or TOKENS_PER_NOTE * per_call,
            role=StepRole(helper=True, model=self.abstractor),
        )
        heading = ctx.templates(Abstraction).text("abstraction_note_heading")
        notes = [
            (note, (made.step_id, i))
            for i, sample in enumerate(made.completions)
            for note in (split_notes(sample.text, heading) if per_call > 1 else [sample.text])
        ]
        if len(notes) < self.m:
            ctx.note(
                "abstraction_notes", {"asked": self.m, "written": len(notes)}, step_id=made.step_id
            )
        return notes[: self.m]

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        notes = await self._notes(problem, ctx)
        batches = await gather_within_budget(
            *(
                self.solver.solve_many(
                    conditioned(ctx, problem, note, source),
                    ctx.child(f"abstraction {i}", parent=source),
                    self.n,
                    label="solution",
                )
                for i, (note, source) in enumerate(notes, start=1)
            )
        )
        solutions = [
            s for batch in batches if not isinstance(batch, BudgetExhaustedError) for s in batch
        ]
        if not solutions:
            raise next(b for b in batches if isinstance(b, BudgetExhaustedError))
        return await pick_by_vote(solutions, ctx, expected=len(notes) * self.n)

    def max_calls(self) -> int:
        return 1 + self.m * self.solver.max_calls_many(self.n)

    def max_samples(self) -> int:
        calls = math.ceil(self.m / self.notes_per_call)
        return calls + self.m * self.solver.max_samples_many(self.n)
