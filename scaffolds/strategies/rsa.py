"""``rsa(n, k, rounds)``: recursive self-aggregation (arXiv 2509.26626).

A population of ``n`` solutions comes from one ``n``-sample request of the
``rsa_initial`` template (the problem with an instruction to reason step by step and box
the answer, as the RSA reference's data writes each problem), or from ``solver`` when
one is given (``solver=single`` sends the problem as asked). Each of ``rounds`` rounds
runs ``n`` aggregation calls at once; each reads ``k`` members and writes one member of
the next population. ``draw="independent"`` draws each call's members without
replacement (the RSA reference); ``draw="balanced"`` shuffles the population and reads
it in circular blocks at ``k`` distinct offsets, so each member is read exactly ``k``
times a round (QED-Nano). Draws come from :meth:`Context.rng`, so a seeded run draws
the same. ``candidates="answer"`` shows each member's part after its thinking;
``"full"`` its whole output, thinking included, as the RSA reference aggregates.

The answer is the majority of the last population (``select="majority"``), or the
winner of QED-Nano's pairwise tournament (``select="pairwise"``): members are paired
in order, each pair judged by one call, the winners shuffled, until one is left; an
unreadable or tied verdict keeps the pair's second member, as the reference does. The
judge names its pick as a number (``verdict="number"``, the candidates headed 1 and 2)
or as QED-Nano's judge does, a letter (``verdict="letter"``: headed A and B, the first
``\\boxed{A}``, ``\\boxed{B}`` or ``\\boxed{equal}`` read). Each step's system prompt
is a prompt set text (``rsa_initial_system``, ``rsa_aggregate_system``,
``rsa_select_system``; empty: none), as QED-Nano sets one per component.
Each aggregation step records the members it read (``fields["members"]``:
``[step id, sample]`` pairs) and its ``round``. After each round (and after the first
population, round 0) a ``population`` note gives its answers, and, when the problem's
reference answer is known (``ponder eval`` sends it), which are right and their share:
RSA's ``mean_acc_k``. If the budget runs out during a round, the members it did write
replace their predecessors and the vote is over that population, marked cut short.

>>> RSA(n=4, k=2, rounds=2).max_calls(), RSA(n=4, k=2, rounds=2, select="pairwise").max_calls()
(9, 12)
>>> balanced_draws([10, 11, 12, 13], [1, 2], 4)
[[11, 12], [12, 13], [13, 10], [10, 11]]
>>> parse_letter_pick("\\\\boxed{B} wins; \\\\boxed{A} was close", 2)
1
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole
from scaffolds.core.solution import Solution
from scaffolds.engines.protocol import Message
from scaffolds.fanout import gather_within_budget
from scaffolds.problem import Problem, StepPrompt
from scaffolds.prompts import PromptSet, Template
from scaffolds.strategies.base import FieldValueError, Strategy
from scaffolds.strategies.best_of_n import parse_pick
from scaffolds.strategies.gsr import REFINE
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.steps import Parent, RowInputs, StepBuilder, TracedStep, render_candidates

# This strategy's templates, one part per prompt set.
INITIAL_TEMPLATE = Template(
    "rsa_initial",
    "$problem\n\nReason step by step, and put your final answer within \\boxed{}.",
)

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

SELECT_TEMPLATE = Template(
    "rsa_select",
    "### Problem\n$problem\n\n"
    "### Two solutions\n$candidates\n\n"
    "### Instructions\n"
    "Check both solutions above step by step and decide which one is more likely to be "
    "correct and complete. End with its label, as its heading writes it, within "
    "\\boxed{}.",
)

COMPACT_INITIAL_TEMPLATE = Template("rsa_initial", "$problem")
COMPACT_AGGREGATE_TEMPLATE = Template("rsa_aggregate", "$problem($candidates)")
COMPACT_SELECT_TEMPLATE = Template("rsa_select", "$problem[$candidates]?")

SYSTEM_TEXTS = {"rsa_initial_system": "", "rsa_aggregate_system": "", "rsa_select_system": ""}
"""Each step's system prompt (a text of the set, keyed by its template's name): empty,
none; a prompt file sets them (QED-Nano's ``sysprompt`` per component)."""

PROMPT_SETS = (
    PromptSet.of("default", INITIAL_TEMPLATE, AGGREGATE_TEMPLATE, SELECT_TEMPLATE, **SYSTEM_TEXTS),
    PromptSet.of(
        "compact",
        COMPACT_INITIAL_TEMPLATE,
        COMPACT_AGGREGATE_TEMPLATE,
        COMPACT_SELECT_TEMPLATE,
        **SYSTEM_TEXTS,
    ),
)

_LETTER_VERDICT = re.compile(r"boxed\{\s*(equal|[a-z])\s*\}", re.IGNORECASE)


def parse_letter_pick(verdict: str, count: int) -> int | None:
    """The 0-based candidate index a judge named by letter (QED-Nano's selector), or
    None: the first ``\\boxed{}`` holding one letter or ``equal`` (any case) decides;
    ``equal``, a letter past the candidates, or none at all is None.

    >>> parse_letter_pick("\\\\boxed{ a }", 2), parse_letter_pick("\\\\boxed{Equal}", 2)
    (0, None)
    """
    match = _LETTER_VERDICT.search(verdict)
    if match is None or match.group(1).lower() == "equal":
        return None
    index = ord(match.group(1).upper()) - ord("A")
    return index if index < count else None


def with_system(templates: PromptSet, key: str, step: StepPrompt) -> StepPrompt:
    """``step`` with the set's text ``{key}_system`` as its system prompt, in place of
    any the conversation had (a text prompt gets it before, a blank line between); an
    empty text leaves ``step`` as it is.

    >>> part = PromptSet.of("default", rsa_x_system="Be brief.")
    >>> with_system(part, "rsa_x", StepPrompt((Message("user", "Hi"),))).prompt[0].content
    'Be brief.'
    """
    system = templates.texts.get(f"{key}_system", "")
    if not system:
        return step
    prompt = step.prompt
    if isinstance(prompt, str):
        return dataclasses.replace(step, prompt=f"{system}\n\n{prompt}")
    turns = tuple(m for m in prompt if m.role not in ("system", "developer"))
    return dataclasses.replace(step, prompt=(Message("system", system), *turns))


def balanced_draws(order: Sequence[int], offsets: Sequence[int], count: int) -> list[list[int]]:
    """``count`` circular blocks over ``order``, block ``s`` reading the members at
    ``s + offset`` for each offset: with ``count == len(order)`` and distinct offsets,
    every member is read once per offset."""
    size = len(order)
    return [[order[(s + o) % size] for o in offsets] for s in range(count)]


def initial_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem -> the first population's prompt (``rsa_initial``)."""
    templates = ctx.templates(RSA)
    step = ctx.render(templates.template("rsa_initial"), problem, parent=parent)
    return with_system(templates, "rsa_initial", step)


def aggregate_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem + ``state["candidates"]`` (texts; ``members`` and ``round`` recorded) ->
    an aggregation step's prompt."""
    templates = ctx.templates(RSA)
    step = render_candidates(
        ctx, templates, "rsa_aggregate", problem, state, parent, recorded=("members", "round")
    )
    return with_system(templates, "rsa_aggregate", step)


def _aggregate_row(step: TracedStep, sample: int, inputs: RowInputs) -> dict[str, Any] | None:
    """Kept when the aggregated solution is right (however many members were)."""
    grades = [inputs.grade(c) for c in step.fields["candidates"]]
    if not inputs.grade(step.texts[sample]):
        return None
    right = None if None in grades else sum(bool(g) for g in grades)
    extra = {"round": step.fields["round"]} if "round" in step.fields else {}
    return {"correct": True, "candidates_correct": right, "num_candidates": len(grades), **extra}


def select_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem + ``state["candidates"]`` (two texts) -> a pairwise selection's prompt;
    ``state["verdict"] == "letter"`` heads the candidates A, B (else 1, 2)."""
    templates = ctx.templates(RSA)
    candidates = list(state["candidates"])
    extra = {key: state[key] for key in ("members",) if key in state}
    if state.get("verdict") == "letter":
        candidate = templates.template("candidate")
        shown = templates.text("candidate_separator").join(
            candidate.render(index=chr(ord("A") + i), text=text)
            for i, text in enumerate(candidates)
        )
    else:
        shown = templates.candidates(candidates)
    step = ctx.render(
        templates.template("rsa_select"),
        problem,
        values={"candidates": candidates, **extra},
        parent=parent,
        candidates=shown,
    )
    return with_system(templates, "rsa_select", step)


INITIAL = StepBuilder("rsa_initial", "generate", ("rsa_initial",), build=initial_prompt)
"""A member of the first population (kept when correct)."""

SELECT = StepBuilder("rsa_select", "select", ("rsa_select",), build=select_prompt, rows=None)
"""A pairwise verdict of the tournament (no rows: a verdict is not graded)."""

AGGREGATE = StepBuilder(
    "rsa_aggregate",
    "aggregate",
    ("rsa_aggregate",),
    build=aggregate_prompt,
    state=("candidates",),
    make_state=REFINE.make_state,  # k candidates from the policy, as GSR's refine has
    rows=_aggregate_row,
)


class RSA(Strategy):
    name: ClassVar[str] = "rsa"
    summary: ClassVar[str] = (
        "Recursive self-aggregation: a population of n, each round n calls fold k into one."
    )
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = PROMPT_SETS
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (INITIAL, AGGREGATE, SELECT)
    helper_models: ClassVar[tuple[str, ...]] = ("aggregator",)

    n: int = Field(default=16, ge=1, le=256)
    """Population size (and aggregation calls per round)."""
    k: int = Field(default=4, ge=1, le=64)
    """Members each aggregation reads (at most ``n``)."""
    rounds: int = Field(default=3, ge=0, le=64)
    solver: Strategy | None = None
    """What writes the first population (default: one ``n``-sample request of the
    ``rsa_initial`` template; ``single`` sends the problem as asked)."""
    aggregator: str | None = None
    """The served model that aggregates and selects (default: the model itself;
    thinking stays on)."""
    candidates: Literal["answer", "full"] = "answer"
    """What an aggregation reads of a member: the part after its thinking, or all of it."""
    draw: Literal["independent", "balanced"] = "independent"
    """How each call's ``k`` members are drawn (see the module's docstring)."""
    select: Literal["majority", "pairwise"] = "majority"
    """How the last population gives the answer: its vote, or a pairwise tournament."""
    verdict: Literal["number", "letter"] = "number"
    """How the tournament's judge names its pick (see the module's docstring)."""

    @model_validator(mode="after")
    def _k_fits(self) -> RSA:
        if self.k > self.n:
            raise FieldValueError("k", self.k, f"must be at most n={self.n}")
        if self.verdict != "number" and self.select != "pairwise":
            raise FieldValueError("verdict", self.verdict, 'applies only to select="pairwise"')
        return self

    def needed_templates(self) -> frozenset[str]:
        """``rsa_aggregate``, and ``rsa_select`` for the tournament; ``rsa_initial`` is
        optional (a file that leaves it out keeps Ponder's wording for it)."""
        select = ("rsa_select",) if self.select == "pairwise" else ()
        return frozenset(("rsa_aggregate", *select))

    async def _first_population(self, problem: Problem, ctx: Context) -> list[Solution]:
        if self.solver is not None:
            return await self.solver.solve_many(problem, ctx, self.n, label="member")
        step = await INITIAL.generate(
            ctx,
            problem,
            {},
            label="answer" if self.n == 1 else "member",
            n=self.n,
            role=StepRole(final=True, force_answer=True),
        )
        return [Solution.from_step(step, i) for i in range(len(step.completions))]

    def draws(self, rng: random.Random, size: int) -> list[list[int]]:
        """Which members (indices into a population of ``size``) each of the round's
        ``n`` calls reads."""
        count = min(self.k, size)
        if self.draw == "balanced":
            order = list(range(size))
            rng.shuffle(order)
            return balanced_draws(order, rng.sample(range(size), count), self.n)
        return [rng.sample(range(size), count) for _ in range(self.n)]

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        first = ctx.child("population")
        population = await self._first_population(problem, first)
        await population_note(first, problem, population, 0)
        rng = ctx.rng("rsa members")
        for round_ in range(1, self.rounds + 1):
            scope = ctx.child(f"round {round_}")
            draws = self.draws(rng, len(population))
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
            await population_note(scope, problem, population, round_)
        if self.select == "pairwise" and len(population) > 1:
            return await self._tournament(problem, ctx.child("tournament"), population)
        return await pick_by_vote(population, ctx, expected=self.n)

    async def _tournament(
        self, problem: Problem, ctx: Context, population: list[Solution]
    ) -> Solution:
        """QED-Nano's pairwise selection: pairs in order, winners shuffled, until one."""
        rng, players, cut = ctx.rng("rsa tournament"), list(population), False
        level = 0
        while len(players) > 1:
            level += 1
            scope = ctx.child(f"level {level}")
            pairs = [players[i : i + 2] for i in range(0, len(players), 2)]
            verdicts = await gather_within_budget(
                *(self._select(problem, scope, pair) for pair in pairs if len(pair) == 2)
            )
            winners = iter(verdicts)
            players = []
            for pair in pairs:
                verdict = next(winners) if len(pair) == 2 else pair[0]
                cut = cut or not isinstance(verdict, Solution)
                players.append(verdict if isinstance(verdict, Solution) else pair[-1])
            rng.shuffle(players)
        winner = players[0]
        cut = cut or len(population) < self.n or any(s.cut_short for s in population)
        return winner.marked_cut_short() if cut else winner

    async def _select(self, problem: Problem, ctx: Context, pair: list[Solution]) -> Solution:
        """The member of ``pair`` one call judges better (the second when unreadable)."""
        state = {
            "candidates": [self._shown(ctx, m) for m in pair],
            "members": [list(m.source) for m in pair],
            "verdict": self.verdict,
        }
        step = await SELECT.generate(
            ctx, problem, state, label="select", role=StepRole(model=self.aggregator)
        )
        read = parse_letter_pick if self.verdict == "letter" else parse_pick
        pick = read(ctx.shown(step.first.text), len(pair))
        return pair[-1 if pick is None else pick]

    def _shown(self, ctx: Context, member: Solution) -> str:
        """What another step reads of ``member`` (``candidates``)."""
        if self.candidates == "answer":
            return ctx.shown(member.text)
        if member.reasoning:
            marks = ctx.thinking.markers
            return marks.start + member.reasoning + marks.end + member.text
        return member.text

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
            "candidates": [self._shown(ctx, m) for m in members],
            "members": [list(m.source) for m in members],
            "round": round_,
        }
        step = await AGGREGATE.generate(
            ctx,
            problem,
            state,
            parent,
            label="aggregate",
            role=StepRole(force_answer=True, model=self.aggregator),
        )
        return Solution.from_step(step)

    def max_calls(self) -> int:
        tournament = self.n - 1 if self.select == "pairwise" else 0
        first = 1 if self.solver is None else self.solver.max_calls_many(self.n)
        return first + self.n * self.rounds + tournament

    def max_samples(self) -> int:
        tournament = self.n - 1 if self.select == "pairwise" else 0
        first = self.n if self.solver is None else self.solver.max_samples_many(self.n)
        return first + self.n * self.rounds + tournament


async def population_note(
    ctx: Context, problem: Problem, population: Sequence[Solution], round_: int
) -> None:
    """A ``population`` note on a round's scope: its members' answers and, when the
    problem's reference answer is known, which are right and their share (RSA's
    ``mean_acc_k``), judged by the run's vote (a member is right when its answer
    groups with the reference)."""
    answers = [m.answer for m in population]
    values: dict[str, Any] = {"round": round_, "answers": answers}
    if problem.reference is not None:
        groups = await ctx.cluster([problem.reference, *answers])
        right = next((set(g) for g in groups if 0 in g), {0})
        correct = [i + 1 in right for i in range(len(answers))]
        values |= {"correct": correct, "accuracy": sum(correct) / len(correct)}
    ctx.note("population", values)
