"""``best_of_n(n, judge)``: n candidates, then a judge picks one.

``judge="llm"``: the model reads every candidate and names the best by number in
``\\boxed{}``. ``judge="verifier"``: a verifier scores each candidate and the highest
wins (the served model's own, or the served model named by ``verifier``; see
:mod:`scaffolds.verifiers`). If the judge's pick is unreadable, or the budget runs out
before it, the candidates' majority answer wins.

>>> BestOfN(n=4).max_calls()
2
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole, StepSampling
from scaffolds.core.solution import Solution
from scaffolds.errors import BudgetExhaustedError
from scaffolds.evaluation.answers import extract_answer
from scaffolds.problem import Problem, StepPrompt
from scaffolds.prompts import PromptSet, Template
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.single import Single
from scaffolds.strategies.steps import Parent, StepBuilder, render_candidates
from scaffolds.verifiers.scoring import score, verifier_for

# This strategy's templates, one part per prompt set.
JUDGE_TEMPLATE = Template(
    "best_of_n_judge",
    "### Problem\n$problem\n\n"
    "### Candidate solutions\n$candidates\n\n"
    "### Instructions\n"
    "Decide which of the $count candidate solutions above is most likely correct. Check "
    "each one's reasoning and final answer. End with the number of the best candidate "
    "within \\boxed{}, for example \\boxed{2}.",
)

COMPACT_JUDGE_TEMPLATE = Template("best_of_n_judge", "$problem[$candidates]!")

PROMPT_SETS = (
    PromptSet.of("default", JUDGE_TEMPLATE),
    PromptSet.of("compact", COMPACT_JUDGE_TEMPLATE),
)


def judge_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """Problem + ``state["candidates"]`` (texts) -> the judge's prompt."""
    return render_candidates(ctx, ctx.templates(BestOfN), "best_of_n_judge", problem, state, parent)


JUDGE = StepBuilder("best_of_n_judge", "judge", ("best_of_n_judge",), build=judge_prompt, rows=None)
"""The judge's pick (no SFT rows yet: a verdict is not graded against the gold answer)."""


class BestOfN(Strategy):
    name: ClassVar[str] = "best_of_n"
    summary: ClassVar[str] = "Best-of-N: n candidates, an LLM judge picks the best one."
    votes_tool_calls: ClassVar[bool] = True
    """Candidates that call tools are voted by call instead of judged."""
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = PROMPT_SETS
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (JUDGE,)
    helper_models: ClassVar[tuple[str, ...]] = ("judge_model", "verifier")

    n: int = Field(default=4, ge=1, le=256)
    judge: Literal["llm", "verifier"] = "llm"
    solver: Strategy = Single()
    judge_model: str | None = None
    """The served model that judges (default: the model's helper model, else the model
    itself, with its thinking turned off)."""
    verifier: str | None = None
    """With ``judge="verifier"``: the served model that verifies, asked yes or no
    (default: the verifier configured for the model)."""

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        if self.judge == "verifier":
            verifier_for(ctx, self.verifier, "scaffold.judge")  # refuse before sampling
        candidates = await self.solver.solve_many(
            problem, ctx.child("candidates"), self.n, label="candidate"
        )
        if len(candidates) == 1 or any(c.tool_call for c in candidates):
            return await pick_by_vote(candidates, ctx, expected=self.n)  # tool calls: voted
        if self.judge == "verifier":
            return await self._pick_by_verifier(problem, candidates, ctx)
        shown = [ctx.shown(c.text) for c in candidates]
        try:
            step = await JUDGE.generate(
                ctx,
                problem,
                {"candidates": shown},
                label="judge",
                sampling=StepSampling(temperature=0.0),
                role=StepRole(helper=True, model=self.judge_model),
            )
        except BudgetExhaustedError:
            return await pick_by_vote(candidates, ctx, expected=self.n + 1)
        pick = parse_pick(step.first.text, len(candidates))
        if pick is None:
            return await pick_by_vote(candidates, ctx, expected=self.n)
        chosen = candidates[pick]
        return chosen.marked_cut_short() if len(candidates) < self.n else chosen

    async def _pick_by_verifier(
        self, problem: Problem, candidates: list[Solution], ctx: Context
    ) -> Solution:
        verifier = verifier_for(ctx, self.verifier, "scaffold.judge")
        try:
            verdicts = await score(ctx, verifier, problem, [c.text for c in candidates])
        except BudgetExhaustedError:
            return await pick_by_vote(candidates, ctx, expected=self.n + 1)
        best = max(range(len(candidates)), key=lambda i: verdicts.scores[i])
        chosen = candidates[best]
        return chosen.marked_cut_short() if len(candidates) < self.n else chosen

    def max_calls(self) -> int:
        # A verifier may take one request per candidate (vLLM's pooling API does).
        return self.solver.max_calls_many(self.n) + (1 if self.judge == "llm" else self.n)

    def max_samples(self) -> int:
        return self.solver.max_samples_many(self.n) + (1 if self.judge == "llm" else self.n)


def parse_pick(verdict: str, count: int) -> int | None:
    """The 0-based candidate index a judge named, or None.

    >>> parse_pick("Candidate 2 is right. \\\\boxed{2}", 3)
    1
    >>> parse_pick("\\\\boxed{7}", 3) is None
    True
    """
    answer = extract_answer(verdict)
    if answer is None:
        return None
    digits = "".join(ch for ch in answer if ch.isdigit())
    if not digits or not 1 <= int(digits) <= count:
        return None
    return int(digits) - 1
