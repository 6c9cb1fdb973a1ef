"""``self_refine(max_rounds)``: Self-Refine (arXiv 2303.17651).

Generate with the inner solver; ask for step-by-step feedback; stop when the feedback
says the solution is correct, otherwise rewrite it with the feedback; at most
``max_rounds`` rounds. A budget cut returns the latest solution, marked cut short.
``history=true`` keeps every earlier (solution, feedback) pair in the feedback and
refine prompts from round 2 on, as the reference code's growing prompt does.

>>> SelfRefine(max_rounds=2).max_calls()
5
>>> str(SelfRefine(max_rounds=4, history=True))
'self_refine(max_rounds=4, history=true)'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole
from scaffolds.core.solution import Solution
from scaffolds.errors import BudgetExhaustedError
from scaffolds.problem import Problem, StepPrompt
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

HISTORY_SECTION = "### Earlier attempts and the feedback on each\n$history\n\n"

FEEDBACK_HISTORY_TEMPLATE = Template(
    "self_refine_feedback_history",
    FEEDBACK_TEMPLATE.text.replace(
        "### Proposed solution", HISTORY_SECTION + "### Proposed solution"
    ),
)

REFINE_HISTORY_TEMPLATE = Template(
    "self_refine_refine_history",
    REFINE_TEMPLATE.text.replace(
        "### Previous solution", HISTORY_SECTION + "### Previous solution"
    ),
)

ROUND_TEMPLATE = Template(
    "self_refine_round",
    "#### Attempt $index\n$solution\n\n#### Feedback on attempt $index\n$feedback",
)

CORRECT_MARKER_TEMPLATE = "VERDICT: CORRECT"

COMPACT_FEEDBACK_TEMPLATE = Template("self_refine_feedback", "$problem$solution?")
COMPACT_REFINE_TEMPLATE = Template("self_refine_refine", "$problem$solution?$feedback>")
COMPACT_FEEDBACK_HISTORY_TEMPLATE = Template(
    "self_refine_feedback_history", "$history;$problem$solution?"
)
COMPACT_REFINE_HISTORY_TEMPLATE = Template(
    "self_refine_refine_history", "$history;$problem$solution?$feedback>"
)
COMPACT_ROUND_TEMPLATE = Template("self_refine_round", "$solution?$feedback")
COMPACT_CORRECT_MARKER_TEMPLATE = "ok"

PROMPT_SETS = (
    PromptSet.of(
        "default",
        FEEDBACK_TEMPLATE,
        REFINE_TEMPLATE,
        FEEDBACK_HISTORY_TEMPLATE,
        REFINE_HISTORY_TEMPLATE,
        ROUND_TEMPLATE,
        self_refine_correct_marker=CORRECT_MARKER_TEMPLATE,
        self_refine_round_separator="\n\n",
    ),
    PromptSet.of(
        "compact",
        COMPACT_FEEDBACK_TEMPLATE,
        COMPACT_REFINE_TEMPLATE,
        COMPACT_FEEDBACK_HISTORY_TEMPLATE,
        COMPACT_REFINE_HISTORY_TEMPLATE,
        COMPACT_ROUND_TEMPLATE,
        self_refine_correct_marker=COMPACT_CORRECT_MARKER_TEMPLATE,
        self_refine_round_separator=";",
    ),
)


def feedback_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem + ``state["solution"]`` (+ ``state["history"]``: earlier (solution,
    feedback) pairs) -> the feedback step's prompt."""
    return _render(ctx, "self_refine_feedback", problem, state, parent, solution=state["solution"])


def refine_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem + ``state["solution"]`` + ``state["feedback"]`` (+ ``state["history"]``)
    -> the refine step's prompt."""
    solution, feedback = state["solution"], state["feedback"]
    return _render(
        ctx, "self_refine_refine", problem, state, parent, solution=solution, feedback=feedback
    )


def _render(
    ctx: Context,
    name: str,
    problem: Problem,
    state: Mapping[str, Any],
    parent: Parent,
    **fields: Any,
) -> StepPrompt:
    """Template ``name``, or its ``_history`` form carrying the earlier rounds if any."""
    templates = ctx.templates(SelfRefine)
    rounds: list[tuple[str, str]] = list(state.get("history") or ())
    if not rounds:
        return ctx.render(templates.template(name), problem, parent=parent, **fields)
    one = templates.template("self_refine_round")
    history = templates.text("self_refine_round_separator").join(
        one.render(index=str(i), solution=s, feedback=f) for i, (s, f) in enumerate(rounds, 1)
    )
    values = {"history": [list(pair) for pair in rounds]}
    template = templates.template(f"{name}_history")
    return ctx.render(template, problem, values=values, parent=parent, history=history, **fields)


async def _solution_and_feedback(
    ctx: Context, problem: Problem, known: dict[str, Any], limits: ContextLimits
) -> dict[str, Any]:
    state, limit = dict(known), limits.max_tokens
    if "solution" not in state:
        first = await DIRECT.generate(ctx, problem, {}, label="answer", max_tokens=limit)
        state["solution"] = ctx.shown(first.first.text)
    if "feedback" not in state:
        said = await FEEDBACK.generate(
            ctx, problem, state, label="feedback 1", max_tokens=limit, role=StepRole(helper=True)
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
    "self_refine_feedback",
    "feedback",
    ("self_refine_feedback", "self_refine_feedback_history"),
    feedback_prompt,
    ("solution",),
    rows=_feedback_row,
)
REFINE = StepBuilder(
    "self_refine_refine",
    "refine",
    ("self_refine_refine", "self_refine_refine_history"),
    refine_prompt,
    ("solution", "feedback"),
    _solution_and_feedback,
    rows=_refine_row,
)


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
    history: bool = False
    """Keep every earlier (solution, feedback) pair in the prompts (the reference's)."""

    def needed_templates(self) -> frozenset[str]:
        plain = frozenset(("self_refine_feedback", "self_refine_refine"))
        if not self.history:
            return plain
        return plain | {f"{name}_history" for name in plain} | {"self_refine_round"}

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        current = await self.solver.solve(problem, ctx.child("initial solution"))
        marker = ctx.templates(SelfRefine).text("self_refine_correct_marker")
        rounds: list[tuple[str, str]] = []
        for round_no in range(1, self.max_rounds + 1):
            try:
                state: dict[str, Any] = {"solution": ctx.shown(current.text)}
                if self.history:
                    state["history"] = tuple(rounds)
                feedback = await FEEDBACK.generate(
                    ctx,
                    problem,
                    state,
                    current.source,
                    label=f"feedback {round_no}",
                    role=StepRole(helper=True, model=self.critic),
                )
                verdict = feedback.first.text
                if says_correct(verdict, marker):
                    return current
                state["feedback"] = verdict
                rounds.append((state["solution"], verdict))
                step = await REFINE.generate(
                    ctx,
                    problem,
                    state,
                    (feedback.step_id, 0),
                    label=f"refine {round_no}",
                    role=StepRole(force_answer=True),
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
