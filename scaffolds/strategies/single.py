"""``single``: one sample, the pass-through baseline.

``solve_many(k)`` sends ONE engine request with ``n=k``, so every strategy that draws
several samples through ``single`` shares the prompt's prefill.

>>> str(Single())
'single'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole
from scaffolds.core.solution import Solution
from scaffolds.problem import Problem, StepPrompt
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.steps import ContextLimits, RowInputs, StepBuilder, TracedStep


def solve_prompt(
    ctx: Context,
    problem: Problem,
    state: Mapping[str, Any],
    /,
    parent: tuple[str | None, int | None] = (None, None),
) -> StepPrompt:
    """The problem as asked, or in the solve template when ``state["prompt"]`` is "solve"."""
    if state.get("prompt") == "solve":
        return ctx.render(ctx.prompts.template("solve"), problem, parent=parent)
    return ctx.render_problem(problem)


async def _no_state(
    ctx: Context, problem: Problem, known: dict[str, Any], limits: ContextLimits
) -> dict[str, Any]:
    return {}


def _asks_the_problem(step: TracedStep, inputs: RowInputs) -> bool:
    return step.kind in ("generate", "candidate", "solve") and (
        step.fields.get("problem") == inputs.problem
    )


DIRECT = StepBuilder(
    "direct",
    "generate",
    (None, "solve"),
    build=solve_prompt,
    make_state=_no_state,
    accepts=_asks_the_problem,
)
"""A solution of the problem as asked: kept when correct."""


class Single(Strategy):
    name: ClassVar[str] = "single"
    summary: ClassVar[str] = (
        "One sample: the caller's prompt, passed through (or the solve template)."
    )
    batches_samples: ClassVar[bool] = True
    passes_through: ClassVar[bool] = True
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (DIRECT,)

    prompt: Literal["raw", "solve"] = "raw"
    """``raw`` sends the problem as given; ``solve`` wraps it in the solve template."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Cap on this call's tokens (default: the request's ``max_tokens``)."""

    async def solve_many(
        self, problem: Problem, ctx: Context, k: int, label: str = "sample"
    ) -> list[Solution]:
        step = await DIRECT.generate(
            ctx,
            problem,
            {"prompt": self.prompt},
            label="answer" if k == 1 else label,
            n=k,
            max_tokens=self.max_tokens,
            role=StepRole(final=True, force_answer=True),
        )
        return [Solution.from_step(step, i) for i in range(len(step.completions))]

    def max_calls(self) -> int:
        return 1

    def max_calls_many(self, k: int) -> int:
        return 1

    def max_samples(self) -> int:
        return 1
