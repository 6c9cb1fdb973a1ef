"""``self_refine(max_rounds)``: Self-Refine (arXiv 2303.17651).

Generate with the inner solver; ask for step-by-step feedback; stop when the feedback
says the solution is correct, otherwise rewrite it with the feedback; at most
``max_rounds`` rounds. A budget cut returns the latest solution, marked cut short.
``history=true`` keeps every earlier (solution, feedback) pair in the feedback and
refine prompts from round 2 on, as the reference code's growing prompt does.

Each step may sample at its own temperature (``solve_temperature``,
``feedback_temperature``, ``refine_temperature``; unset: the request's). The reference
(madaan/self-refine ``src/gsm/run.py``) samples the first solution at its
``--temperature``, 0.0 by default (lines 21, 104), and the feedback at 0.7 (line 27);
its feedback call also writes the fixed program, so its refinement is sampled at 0.7
too. ``answer="refined"`` answers as the reference does: with the solution written
after the last feedback, even one that says the solution is correct (its loop stops on
"it is correct" after the call that wrote ``solution_fixed``, lines 39-45, and the row's
answer is the last log's ``solution_fixed``, line 65); ``"judged"`` (the default)
answers with the solution the feedback judged correct, with no further call.

>>> SelfRefine(max_rounds=2).max_calls()
5
>>> str(SelfRefine(max_rounds=4, history=True))
'self_refine(max_rounds=4, history=true)'
>>> str(SelfRefine(solve_temperature=0, feedback_temperature=0.7, answer="refined"))
'self_refine(solve_temperature=0.0, feedback_temperature=0.7, answer="refined")'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole, StepSampling
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
    solve_temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """The first solution's temperature (default: the request's; the reference: 0.0).
    Only with a ``single`` solver, whose one call it sets."""
    feedback_temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """The feedback steps' temperature (default: the request's; the reference: 0.7)."""
    refine_temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """The refine steps' temperature (default: the request's; the reference writes its
    fix in the feedback call, at 0.7)."""
    answer: Literal["judged", "refined"] = "judged"
    """The answer once the feedback says correct: that solution (``judged``), or
    (``refined``, the reference's) the solution one more refine step writes after that
    feedback, as the reference answers with the program its "it is correct" call wrote."""

    @model_validator(mode="after")
    def _solve_temperature_needs_single(self) -> SelfRefine:
        if self.solve_temperature is not None and not isinstance(self.solver, Single):
            raise ValueError(
                f"solve_temperature sets a single solver's call; set the temperature of "
                f"solver={self.solver.name} in its own spec, or leave solve_temperature unset"
            )
        return self

    def needed_templates(self) -> frozenset[str]:
        plain = frozenset(("self_refine_feedback", "self_refine_refine"))
        if not self.history:
            return plain
        return plain | {f"{name}_history" for name in plain} | {"self_refine_round"}

    async def _first(self, problem: Problem, ctx: Context) -> Solution:
        """The first solution: the solver's, at ``solve_temperature`` when it is set (the
        single solver's one call, as :class:`Single` makes it)."""
        if self.solve_temperature is None or not isinstance(self.solver, Single):
            return await self.solver.solve(problem, ctx)
        step = await DIRECT.generate(
            ctx,
            problem,
            {"prompt": self.solver.prompt},
            label="answer",
            max_tokens=self.solver.max_tokens,
            sampling=StepSampling(temperature=self.solve_temperature),
            role=StepRole(final=True, force_answer=True),
        )
        return Solution.from_step(step)

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        current = await self._first(problem, ctx.child("initial solution"))
        marker = ctx.templates(SelfRefine).text("self_refine_correct_marker")
        feedback_sampling = StepSampling(temperature=self.feedback_temperature)
        refine_sampling = StepSampling(temperature=self.refine_temperature)
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
                    sampling=feedback_sampling,
                    role=StepRole(helper=True, model=self.critic),
                )
                verdict = feedback.first.text
                correct = says_correct(verdict, marker)
                if correct and self.answer == "judged":
                    return current
                state["feedback"] = verdict
                rounds.append((state["solution"], verdict))
                step = await REFINE.generate(
                    ctx,
                    problem,
                    state,
                    (feedback.step_id, 0),
                    label=f"refine {round_no}",
                    sampling=refine_sampling,
                    role=StepRole(force_answer=True),
                )
            except BudgetExhaustedError:
                return current.marked_cut_short()
            current = Solution.from_step(step)
            if correct:  # answer="refined": the fix written after "correct" is the answer
                return current
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
