"""``self_refine(max_rounds)``: Self-Refine (arXiv 2303.17651).

Generate with the inner solver; ask for step-by-step feedback; stop when the feedback
says the solution is correct, otherwise rewrite it with the feedback; at most
``max_rounds`` rounds. A budget cut returns the latest solution, marked cut short.

>>> SelfRefine(max_rounds=2).max_calls()
5
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from scaffolds.core.context import Context, Problem, StepPrompt
from scaffolds.core.errors import BudgetExhaustedError
from scaffolds.core.solution import Solution
from scaffolds.prompts import PromptSet, Template
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.single import DIRECT, Single
from scaffolds.strategies.steps import ContextLimits, Parent, RowInputs, StepBuilder, TracedStep

# This strategy's templates, one part per prompt set.
FEEDBACK_TEMPLATE = Template(
    "self_refine_feedback",
    "### Problem\n$problem\n\n"
    "### Proposed solution\n$solution\n\n"
    "### Instructions\n"
    "Check the proposed solution step by step. For each step, say whether it is "
    "correct, and explain any error precisely. Do not write a new solution. End with "
    "one line that reads exactly `VERDICT: CORRECT` if the whole solution and its final "
    "answer are right, or `VERDICT: INCORRECT` otherwise.",
)

REFINE_TEMPLATE = Template(
    "self_refine_refine",
    "### Problem\n$problem\n\n"
    "### Previous solution\n$solution\n\n"
    "### Feedback on it\n$feedback\n\n"
    "### Instructions\n"
    "Write a new, complete solution that fixes every problem the feedback points out. "
    "Reason step by step, and end with your final answer within \\boxed{}.",
)

CORRECT_MARKER_TEMPLATE = "VERDICT: CORRECT"

COMPACT_FEEDBACK_TEMPLATE = Template("self_refine_feedback", "$problem$solution?")
COMPACT_REFINE_TEMPLATE = Template("self_refine_refine", "$problem$solution?$feedback>")
COMPACT_CORRECT_MARKER_TEMPLATE = "ok"

PROMPT_SETS = (
    PromptSet.of(
        "default",
        FEEDBACK_TEMPLATE,
        REFINE_TEMPLATE,
        self_refine_correct_marker=CORRECT_MARKER_TEMPLATE,
    ),
    PromptSet.of(
        "compact",
        COMPACT_FEEDBACK_TEMPLATE,
        COMPACT_REFINE_TEMPLATE,
        self_refine_correct_marker=COMPACT_CORRECT_MARKER_TEMPLATE,
    ),
)


def feedback_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem + ``state["solution"]`` -> the feedback step's prompt."""
    template = ctx.templates(SelfRefine).template("self_refine_feedback")
    return ctx.render(template, problem, parent=parent, solution=state["solution"])


def refine_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem + ``state["solution"]`` + ``state["feedback"]`` -> the refine step's prompt."""
    template = ctx.templates(SelfRefine).template("self_refine_refine")
    solution, feedback = state["solution"], state["feedback"]
    return ctx.render(template, problem, parent=parent, solution=solution, feedback=feedback)


async def _solution_and_feedback(
    ctx: Context, problem: Problem, known: dict[str, Any], limits: ContextLimits
) -> dict[str, Any]:
    state, limit = dict(known), limits.max_tokens
    if "solution" not in state:
        first = await DIRECT.generate(ctx, problem, {}, label="answer", max_tokens=limit)
        state["solution"] = ctx.shown(first.first.text)
    if "feedback" not in state:
        said = await FEEDBACK.generate(
            ctx, problem, state, label="feedback 1", max_tokens=limit, helper=True
        )
        state["feedback"] = said.first.text
    return {"solution": state["solution"], "feedback": state["feedback"]}


def _feedback_row(step: TracedStep, sample: int, inputs: RowInputs) -> dict[str, Any] | None:
    """Kept when its verdict (correct or not) is right."""
    truth = inputs.grade(step.fields["solution"])
    marker = inputs.prompts.text("self_refine_correct_marker")
    if truth is None or says_correct(step.texts[sample], marker) != truth:
        return None
    return {"correct": True, "solution_correct": truth}


def _refine_row(step: TracedStep, sample: int, inputs: RowInputs) -> dict[str, Any] | None:
    if not inputs.grade(step.texts[sample]):
        return None
    return {"correct": True, "previous_correct": inputs.grade(step.fields["solution"])}


FEEDBACK = StepBuilder(
    "self_refine_feedback", "feedback", ("self_refine_feedback",), feedback_prompt, ("solution",),
    rows=_feedback_row,
)  # fmt: skip
REFINE = StepBuilder(
    "self_refine_refine", "refine", ("self_refine_refine",), refine_prompt,
    ("solution", "feedback"), _solution_and_feedback, "self_refine_refine", _refine_row,
)  # fmt: skip


class SelfRefine(Strategy):
    name: ClassVar[str] = "self_refine"
    summary: ClassVar[str] = "Self-Refine: solve, get feedback, refine until judged correct."
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = PROMPT_SETS
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (FEEDBACK, REFINE)
    helper_models: ClassVar[tuple[str, ...]] = ("critic",)

    max_rounds: int = Field(default=3, ge=1, le=32)
    solver: Strategy = Single()
    critic: str | None = None
    """The served model that writes the feedback (default: the model's helper model,
    else the model itself, with its thinking turned off)."""

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        current = await self.solver.solve(problem, ctx.child("initial solution"))
        marker = ctx.templates(SelfRefine).text("self_refine_correct_marker")
        for round_no in range(1, self.max_rounds + 1):
            try:
                state = {"solution": ctx.shown(current.text)}
                feedback = await FEEDBACK.generate(
                    ctx,
                    problem,
                    state,
                    current.source,
                    label=f"feedback {round_no}",
                    helper=True,
                    model=self.critic,
                )
                verdict = feedback.first.text
                if says_correct(verdict, marker):
                    return current
                state["feedback"] = verdict
                step = await REFINE.generate(
                    ctx,
                    problem,
                    state,
                    (feedback.step_id, 0),
                    label=f"refine {round_no}",
                    force_answer=True,
                )
            except BudgetExhaustedError:
                return current.marked_cut_short()
            current = Solution.from_step(step)
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
