"""``rsa(n, k, rounds)``: recursive self-aggregation (arXiv 2509.26626).

A population of ``n`` solutions comes from one ``n``-sample request (through the
solver). Each of ``rounds`` rounds runs ``n`` aggregation calls at once; each reads
``k`` members drawn without replacement (from :meth:`Context.rng`, so a seeded run
draws the same) and writes one member of the next population. The answer is the
majority of the last population. Each aggregation step records the members it read
(``fields["members"]``: ``[step id, sample]`` pairs) and its ``round``. If the budget
runs out during a round, the members it did write replace their predecessors and the
vote is over that population, marked cut short.

>>> RSA(n=4, k=2, rounds=2).max_calls()
9
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pydantic import Field, model_validator

from scaffolds.core.context import Context, Problem, StepPrompt
from scaffolds.core.fanout import gather_within_budget
from scaffolds.core.solution import Solution
from scaffolds.prompts import PromptSet, Template
from scaffolds.strategies.base import FieldValueError, Strategy
from scaffolds.strategies.gsr import REFINE
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.single import Single
from scaffolds.strategies.steps import Parent, RowInputs, StepBuilder, TracedStep

# This strategy's templates, one part per prompt set.
AGGREGATE_TEMPLATE = Template(
    "rsa_aggregate",
    "### Problem\n$problem\n\n"
    "### Attempts to combine\n$candidates\n\n"
    "### Instructions\n"
    "The $count attempts above were written separately, and each of them may contain "
    "errors. Read them critically: find the steps they agree on, check those, and find "
    "where and why they disagree. Then write one self-contained solution that takes the "
    "sound ideas from the attempts and fixes their mistakes; where every attempt goes "
    "wrong, work the problem out on your own. Do not refer to the attempts in your "
    "solution. Reason step by step, and end with your final answer within \\boxed{}.",
)

COMPACT_AGGREGATE_TEMPLATE = Template("rsa_aggregate", "$problem($candidates)")

PROMPT_SETS = (
    PromptSet.of("default", AGGREGATE_TEMPLATE),
    PromptSet.of("compact", COMPACT_AGGREGATE_TEMPLATE),
)


def aggregate_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem + ``state["candidates"]`` (texts; ``members`` and ``round`` recorded) ->
    an aggregation step's prompt."""
    templates = ctx.templates(RSA)
    candidates = list(state["candidates"])
    extra = {key: state[key] for key in ("members", "round") if key in state}
    return ctx.render(
        templates.template("rsa_aggregate"),
        problem,
        values={"candidates": candidates, **extra},
        parent=parent,
        candidates=templates.candidates(candidates),
        count=str(len(candidates)),
    )


def _aggregate_row(step: TracedStep, sample: int, inputs: RowInputs) -> dict[str, Any] | None:
    """Kept when the aggregated solution is right (however many members were)."""
    grades = [inputs.grade(c) for c in step.fields["candidates"]]
    if not inputs.grade(step.texts[sample]):
        return None
    right = None if None in grades else sum(bool(g) for g in grades)
    extra = {"round": step.fields["round"]} if "round" in step.fields else {}
    return {"correct": True, "candidates_correct": right, "num_candidates": len(grades), **extra}


AGGREGATE = StepBuilder(
    "rsa_aggregate",
    "aggregate",
    ("rsa_aggregate",),
    build=aggregate_prompt,
    state=("candidates",),
    make_state=REFINE.make_state,  # k candidates from the policy, as GSR's refine has
    mode="rsa_aggregate",
    rows=_aggregate_row,
)


class RSA(Strategy):
    name: ClassVar[str] = "rsa"
    summary: ClassVar[str] = (
        "Recursive self-aggregation: a population of n, each round n calls fold k into one."
    )
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = PROMPT_SETS
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (AGGREGATE,)
    helper_models: ClassVar[tuple[str, ...]] = ("aggregator",)

    n: int = Field(default=16, ge=1, le=256)
    """Population size (and aggregation calls per round)."""
    k: int = Field(default=4, ge=1, le=64)
    """Members each aggregation reads (at most ``n``)."""
    rounds: int = Field(default=3, ge=0, le=64)
    solver: Strategy = Single()
    aggregator: str | None = None
    """The served model that aggregates (default: the model itself; thinking stays on)."""

    @model_validator(mode="after")
    def _k_fits(self) -> RSA:
        if self.k > self.n:
            raise FieldValueError("k", self.k, f"must be at most n={self.n}")
        return self

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        population = await self.solver.solve_many(
            problem, ctx.child("population"), self.n, label="member"
        )
        rng = ctx.rng("rsa members")
        for round_ in range(1, self.rounds + 1):
            scope = ctx.child(f"round {round_}")
            size = min(self.k, len(population))
            draws = [rng.sample(range(len(population)), size) for _ in range(self.n)]
            results = await gather_within_budget(
                *(
                    self._aggregate(problem, scope.child(f"member {i}"), population, d, round_)
                    for i, d in enumerate(draws, start=1)
                )
            )
            fresh = [r if isinstance(r, Solution) else None for r in results]
            if None in fresh:  # the budget ran out in this round
                kept = [new or old for new, old in zip(fresh, population, strict=False)]
                kept += [new for new in fresh[len(population) :] if new is not None]
                return (await pick_by_vote(kept, ctx, expected=self.n)).marked_cut_short()
            population = [r for r in fresh if r is not None]
        return await pick_by_vote(population, ctx, expected=self.n)

    async def _aggregate(
        self,
        problem: Problem,
        ctx: Context,
        population: Sequence[Solution],
        draw: Sequence[int],
        round_: int,
    ) -> Solution:
        members = [population[i] for i in draw]
        sources = {m.step_id for m in members}
        parent = (sources.pop(), None) if len(sources) == 1 else (None, None)
        state = {
            "candidates": [ctx.shown(m.text) for m in members],
            "members": [list(m.source) for m in members],
            "round": round_,
        }
        step = await AGGREGATE.generate(
            ctx,
            problem,
            state,
            parent,
            label="aggregate",
            force_answer=True,
            model=self.aggregator,
        )
        return Solution.from_step(step)

    def max_calls(self) -> int:
        return self.solver.max_calls_many(self.n) + self.n * self.rounds

    def max_samples(self) -> int:
        return self.solver.max_samples_many(self.n) + self.n * self.rounds
