"""``rc(steps, reasoning_tokens, summary_tokens)``: Reasoning Cache (arXiv 2602.03773).

Each sample loops: reason (at most ``reasoning_tokens``; None: no cap of its own, as
QED-Nano, bounded by the context) from the problem and the current summary, then
summarize (at most ``summary_tokens``) the problem, the previous summary and the latest
chunk, and reason again from the new summary; ``steps`` reasoning chunks in all; the
answer is the last chunk's. Each sample advances on its own (unlike the paper's
lock-step loop); the first chunks of k samples go to the engine as ONE request with
``n=k``. An inner ``solver`` (if given) writes the first attempt.

``template="pair"`` reasons from a start template, then from a continue template that
carries the summary; ``template="one"`` uses one template (``rc_reasoning``) for every
step, its summary section empty on step 1, as the reference code lays it out.
``summarizer_thinking="off"`` writes summaries with the summarizer's thinking off;
``"same"`` lets it think as it does when reasoning (the reference's setting).

>>> RC(steps=3).max_calls()
5
>>> str(RC(template="one", summarizer_thinking="same", reasoning_tokens=None))
'rc(reasoning_tokens=null, template="one", summarizer_thinking="same")'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole
from scaffolds.core.solution import Solution
from scaffolds.errors import BudgetExhaustedError
from scaffolds.fanout import gather_within_budget
from scaffolds.problem import Problem, StepPrompt
from scaffolds.prompts import PromptSet, Template
from scaffolds.strategies.base import Strategy, keep_finished
from scaffolds.strategies.steps import ContextLimits, Parent, RowInputs, StepBuilder, TracedStep

# This strategy's templates, one part per prompt set.
REASONING_START_TEMPLATE = Template(
    "rc_reasoning_start",
    "### Problem\n$problem\n\n"
    "### Instructions\n"
    "Solve the problem. Reason step by step, and end with your final answer "
    "within \\boxed{}.",
)

REASONING_CONTINUE_TEMPLATE = Template(
    "rc_reasoning_continue",
    "### Problem\n$problem\n\n"
    "### Summary of an earlier attempt\n$summary\n\n"
    "### Instructions\n"
    "The summary above describes earlier work on this problem and may contain mistakes. "
    "Improve on it: check its steps and results; if it is correct, confirm it by a "
    "different argument; if something is wrong, repair it or try another approach; if "
    "it stops before the end, carry it on. Reason step by step, and end with your final "
    "answer within \\boxed{}.",
)

SUMMARY_TEMPLATE = Template(
    "rc_summary",
    "### Problem\n$problem\n\n"
    "### Existing summary\n$summary\n\n"
    "### Latest attempt\n$attempt\n\n"
    "### Instructions\n"
    "Write an updated summary of the work on this problem. Describe the strategy, the "
    "facts and results used, the checks made and the key calculations, and relate it to "
    "the existing summary: keep what still stands and say what the latest attempt "
    "changed. Write as the person who did the work, in the first person, in at most two "
    "paragraphs of plain prose with no headers. Include only reasoning that appears in "
    "the latest attempt or the existing summary; do not work anything out anew.",
)

REASONING_TEMPLATE = Template(
    "rc_reasoning",
    "### Problem\n$problem\n\n"
    "### Summary of an earlier attempt\n$summary\n\n"
    "### Instructions\n"
    "If the summary section above is empty, solve the problem from the start. Otherwise "
    "it describes earlier work on this problem, which may contain mistakes: improve on "
    "it (check its steps, confirm a correct result by another argument, repair what is "
    "wrong or try another approach, carry on where it stopped). Reason step by step, and "
    "end with your final answer within \\boxed{}.",
)

NO_SUMMARY_TEMPLATE = "(none: this is the first attempt)"

COMPACT_REASONING_START_TEMPLATE = Template("rc_reasoning_start", "$problem")
COMPACT_REASONING_CONTINUE_TEMPLATE = Template("rc_reasoning_continue", "$problem|$summary>")
COMPACT_SUMMARY_TEMPLATE = Template("rc_summary", "$problem|$summary|$attempt#")
COMPACT_REASONING_TEMPLATE = Template("rc_reasoning", "$problem|$summary>")
COMPACT_NO_SUMMARY_TEMPLATE = ""

PROMPT_SETS = (
    PromptSet.of(
        "default",
        REASONING_START_TEMPLATE,
        REASONING_CONTINUE_TEMPLATE,
        SUMMARY_TEMPLATE,
        REASONING_TEMPLATE,
        rc_no_summary=NO_SUMMARY_TEMPLATE,
        rc_first_summary="",
    ),
    PromptSet.of(
        "compact",
        COMPACT_REASONING_START_TEMPLATE,
        COMPACT_REASONING_CONTINUE_TEMPLATE,
        COMPACT_SUMMARY_TEMPLATE,
        COMPACT_REASONING_TEMPLATE,
        rc_no_summary=COMPACT_NO_SUMMARY_TEMPLATE,
        rc_first_summary="",
    ),
)


def reasoning_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem (+ ``state["summary"]``, if any) -> a reasoning chunk's prompt; with
    ``state["template"] == "one"``, ``rc_reasoning``, whose summary on step 1 is the
    set's ``rc_first_summary`` text (empty, as the reference's)."""
    templates = ctx.templates(RC)
    if state.get("template") == "one":
        summary = state.get("summary", templates.text("rc_first_summary"))
        return ctx.render(
            templates.template("rc_reasoning"), problem, parent=parent, summary=summary
        )
    if "summary" not in state:
        return ctx.render(templates.template("rc_reasoning_start"), problem, parent=parent)
    template = templates.template("rc_reasoning_continue")
    return ctx.render(template, problem, parent=parent, summary=state["summary"])


def summary_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem + ``state["summary"]`` (or none yet) + ``state["attempt"]`` -> a summary's prompt."""
    templates = ctx.templates(RC)
    summary = state.get("summary", templates.text("rc_no_summary"))
    template = templates.template("rc_summary")
    return ctx.render(template, problem, parent=parent, summary=summary, attempt=state["attempt"])


async def _first_summary(
    ctx: Context, problem: Problem, known: dict[str, Any], limits: ContextLimits
) -> dict[str, Any]:
    if "summary" in known:
        return known
    chunk = await REASONING.generate(
        ctx, problem, {}, label="reasoning 1", max_tokens=limits.max_tokens
    )
    attempt = Solution(chunk.first.text, None, chunk.step_id, chunk.first.reasoning)
    thought = ctx.thought(attempt.text, attempt.reasoning)
    made = await SUMMARY.generate(
        ctx,
        problem,
        {"attempt": thought},
        attempt.source,
        label="summary 1",
        max_tokens=limits.summary_tokens or limits.max_tokens,
        role=StepRole(helper=True),
    )
    return {"summary": made.first.text}


def _reasoning_row(step: TracedStep, sample: int, inputs: RowInputs) -> dict[str, Any] | None:
    if not inputs.grade(step.texts[sample]):
        return None
    summary = step.fields.get("summary", inputs.prompts.text("rc_no_summary"))
    return {"correct": True, "has_summary": bool(summary)}


def _summary_row(step: TracedStep, sample: int, inputs: RowInputs) -> dict[str, Any] | None:
    """Kept when the chunk reasoned from it is right (``rc_summaries="all"``: always)."""
    after = [s for s in inputs.view.children(step.step_id, sample) if s.kind == "reasoning"]
    grades = [inputs.grade(chunk) for chunk in after[0].texts] if after else [None]
    correct = None if None in grades else any(grades)
    if inputs.options.get("rc_summaries", "next_correct") != "all" and not correct:
        return None
    return {"correct": correct}


_PAIR = ("rc_reasoning_start", "rc_reasoning_continue")

REASONING = StepBuilder(
    "rc_reasoning",
    "reasoning",
    ("rc_reasoning_start", "rc_reasoning_continue", "rc_reasoning"),
    reasoning_prompt,
    ("summary",),
    _first_summary,
    mode="rc_continue",  # the GRPO mode continues a summary; the SFT rows are rc_reasoning
    rows=_reasoning_row,
)
SUMMARY = StepBuilder(
    "rc_summary",
    "summary",
    ("rc_summary",),
    summary_prompt,
    ("summary", "attempt"),
    rows=_summary_row,
)


class RC(Strategy):
    name: ClassVar[str] = "rc"
    summary: ClassVar[str] = "Reasoning Cache: reason, summarize, continue from the summary."
    batches_samples: ClassVar[bool] = True
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = PROMPT_SETS
    scored_steps: ClassVar[tuple[str, ...]] = ("reasoning",)
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (REASONING, SUMMARY)
    helper_models: ClassVar[tuple[str, ...]] = ("summarizer",)

    steps: int = Field(default=4, ge=1, le=64)
    reasoning_tokens: int | None = Field(default=16384, ge=1)
    """Each reasoning chunk's cap; None: none of its own (bounded by the context)."""
    summary_tokens: int = Field(default=2048, ge=1)
    solver: Strategy | None = None
    summarizer: str | None = None
    """The served model that writes the summaries (default: the model's helper model,
    else the model itself, with its thinking turned off)."""
    template: Literal["pair", "one"] = "pair"
    """``pair``: a start template, then a continue template with the summary; ``one``:
    one template for every step, its summary section empty on step 1 (the reference's)."""
    summarizer_thinking: Literal["off", "same"] = "off"
    """``off``: summaries are written with the summarizer's thinking turned off;
    ``same``: with the thinking it reasons with (the reference's setting)."""

    def needed_templates(self) -> frozenset[str]:
        reasoning = ("rc_reasoning",) if self.template == "one" else _PAIR
        return frozenset((*reasoning, "rc_summary"))

    def _state(self, summary: str | None = None) -> dict[str, str]:
        """The reasoning builder's state: the summary (if any) and the template layout."""
        state = {} if summary is None else {"summary": summary}
        return {**state, "template": "one"} if self.template == "one" else state

    async def solve_many(
        self, problem: Problem, ctx: Context, k: int, label: str = "sample"
    ) -> list[Solution]:
        if self.solver is not None:
            first = await self.solver.solve_many(problem, ctx.child("first attempt"), k)
        else:
            step = await REASONING.generate(
                ctx,
                problem,
                self._state(),
                label="reasoning 1",
                n=k,
                max_tokens=self.reasoning_tokens,
                role=StepRole(final=self.steps == 1, force_answer=True),
            )
            first = [Solution.from_step(step, i) for i in range(len(step.completions))]
        if k == 1:
            return [await self._continue(problem, ctx, first[0])]
        results = await gather_within_budget(
            *(
                self._continue(problem, ctx.child(f"{label} {i}"), attempt)
                for i, attempt in enumerate(first, start=1)
            )
        )
        return keep_finished(results)

    async def _continue(self, problem: Problem, ctx: Context, attempt: Solution) -> Solution:
        summary: dict[str, str] = {}
        for turn in range(2, self.steps + 1):
            try:
                thought = ctx.thought(attempt.text, attempt.reasoning)
                made = await SUMMARY.generate(
                    ctx,
                    problem,
                    {**summary, "attempt": thought},
                    attempt.source,
                    label=f"summary {turn - 1}",
                    max_tokens=self.summary_tokens,
                    role=StepRole(
                        helper=True,
                        model=self.summarizer,
                        keep_thinking=self.summarizer_thinking == "same",
                    ),
                )
                summary = {"summary": made.first.text}
                state = self._state(made.first.text)
                step = await REASONING.generate(
                    ctx,
                    problem,
                    state,
                    (made.step_id, 0),
                    label=f"reasoning {turn}",
                    max_tokens=self.reasoning_tokens,
                    role=StepRole(final=turn == self.steps, force_answer=True),
                )
            except BudgetExhaustedError:
                return attempt.marked_cut_short()
            attempt = Solution.from_step(step)
        return attempt

    def max_calls(self) -> int:
        return self.max_calls_many(1)

    def max_calls_many(self, k: int) -> int:
        first = 1 if self.solver is None else self.solver.max_calls_many(k)
        return first + k * 2 * (self.steps - 1)

    def max_samples(self) -> int:
        return self.max_samples_many(1)

    def max_samples_many(self, k: int) -> int:
        first = k if self.solver is None else self.solver.max_samples_many(k)
        return first + k * 2 * (self.steps - 1)
