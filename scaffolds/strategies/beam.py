r"""``beam(width, expand, max_steps, step)``: step-level beam search with a verifier.

A solution is written a step at a time, a step ending at the separator ``step``
(``"\n\n"``: the engine stops there). The first level draws ``width * expand`` first
steps in one request; the verifier scores every path (process scores when it gives
them: a path's score is its steps' scores ``aggregate``\d, the last step's by default,
as its_hub reads a process reward model), and the ``width`` best paths are kept. Each
kept path that is not finished is continued ``expand`` ways (one request of
``n=expand`` per path, all at once), scored, and the ``width`` best of the finished
and new paths are kept, until every kept path is finished (it wrote a ``\boxed``
answer or an empty step, or its step ended at the model's end of sequence rather than
at the separator) or ``max_steps`` steps are written. The best-scored path wins
(its_hub's BeamSearch; search-and-learn's beam search also starts from ``width *
expand`` paths and, unlike its_hub, ends a path whose step ended at end of sequence).
Whether a step ended there is the engine's word (``Completion.ended_at_eos``: vLLM,
SGLang and the embedded engines say; a plain OpenAI server does not, and its paths go
on until a boxed answer, an empty step or ``max_steps``).

Each step records the step and sample it continues (``parent_step``, ``sample``), and
each verify step the paths it scored (``fields["paths"]``), so the trace is the search
tree with its scores; a ``beam`` note after each level names the kept paths. When the
budget runs out, the best path scored so far is the answer, marked cut short.

>>> Beam(width=2, expand=3, max_steps=4).max_calls()
31
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from pydantic import Field

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole, StepSampling
from scaffolds.core.solution import Solution
from scaffolds.engines.protocol import Message, Verifier
from scaffolds.errors import BudgetExhaustedError
from scaffolds.evaluation.answers import extract_answer, extract_boxed
from scaffolds.fanout import gather_within_budget
from scaffolds.problem import Problem, StepPrompt
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.steps import Parent, StepBuilder
from scaffolds.verifiers.scoring import Aggregate, aggregate, score, verifier_for

__all__ = ["SEARCH_STEP", "Beam", "Path", "best_so_far", "extend", "score_paths"]


def search_prompt(
    ctx: Context, problem: Problem, state: Mapping[str, Any], /, parent: Parent = (None, None)
) -> StepPrompt:
    """The problem as asked, then (as the assistant's unfinished message, or appended to
    a text prompt) the path's ``state["steps"]``, each followed by ``state["step"]``."""
    steps, sep = list(state["steps"]), str(state["step"])
    base = ctx.problem_prompt(problem)
    partial = "".join(s + sep for s in steps)
    if isinstance(base, str):
        prompt: Any = base + partial
    else:
        prompt = (*base, Message("assistant", partial)) if steps else base
    fields = {"problem": problem.text, "steps": steps, "step": sep}
    return StepPrompt(prompt, "search_step", fields, *parent)


SEARCH_STEP = StepBuilder(
    "search_step", "search_step", ("search_step",), build=search_prompt, rows=None
)
"""One more step of a partial solution (no SFT rows: a step is not graded on its own)."""


@dataclass(frozen=True, slots=True)
class Path:
    """A partial solution: its steps, whether it is finished, its latest score and the
    (step id, sample) that wrote its last step."""

    steps: tuple[str, ...] = ()
    done: bool = False
    score: float | None = None
    """None until a verifier scored it."""
    node: Parent = (None, None)

    def text(self, sep: str) -> str:
        return sep.join(self.steps)


async def extend(
    ctx: Context,
    problem: Problem,
    path: Path,
    n: int,
    *,
    sep: str,
    max_steps: int,
    step_tokens: int | None,
    label: str,
) -> list[Path]:
    """``n`` continuations of ``path`` by one step each, in one request. A continuation
    is finished when its step has a boxed answer, is empty, or ended at end of sequence
    (not at the separator ``sep``, nor cut by length), or the path has ``max_steps``."""
    chat = not isinstance(ctx.problem_prompt(problem), str)
    state = {"steps": list(path.steps), "step": sep}
    step = await SEARCH_STEP.generate(
        ctx,
        problem,
        state,
        path.node,
        label=label,
        n=n,
        max_tokens=step_tokens,
        sampling=StepSampling(stop=[sep]),
        role=StepRole(continue_final=chat and bool(path.steps)),
    )
    children = []
    for sample, completion in enumerate(step.completions):
        text = completion.text
        steps = (*path.steps, text)
        done = (
            extract_boxed(text) is not None
            or not text.strip()
            or completion.ended_at_eos
            or len(steps) >= max_steps
        )
        children.append(Path(steps, done, None, (step.step_id, sample)))
    return children


async def score_paths(
    ctx: Context,
    verifier: Verifier,
    problem: Problem,
    paths: Sequence[Path],
    *,
    sep: str,
    how: Aggregate,
    label: str,
) -> list[Path]:
    """``paths`` with their scores, from one verify step that records which paths."""
    nodes = [list(p.node) for p in paths]
    verdicts = await score(
        ctx,
        verifier,
        problem,
        [p.text(sep) for p in paths],
        label=label,
        step=sep,
        values={"paths": nodes},
    )
    return [replace(p, score=aggregate(verdicts.step_scores(i), how)) for i, p in enumerate(paths)]


def by_score(path: Path) -> float:
    """A sort key: the path's score (an unscored path last)."""
    return float("-inf") if path.score is None else path.score


def settled(
    children: Sequence[list[Path] | BudgetExhaustedError],
) -> tuple[list[Path], BudgetExhaustedError | None]:
    """The paths of the extensions that ran, and the budget's error if it stopped any."""
    paths = [p for c in children if not isinstance(c, BudgetExhaustedError) for p in c]
    cut = next((c for c in children if isinstance(c, BudgetExhaustedError)), None)
    return paths, cut


async def best_so_far(
    ctx: Context, paths: Sequence[Path], sep: str, cut: BudgetExhaustedError
) -> Solution:
    """The answer when the budget (``cut``) stops a search: the best-scored path, or
    the vote of unscored ones, marked cut short; with no path at all, ``cut`` itself."""
    if not paths:
        raise cut
    scored = [p for p in paths if p.score is not None]
    if scored:
        return answer_of(max(scored, key=by_score), sep, cut=True)
    solutions = [answer_of(p, sep, cut=True) for p in paths]
    return await pick_by_vote(solutions, ctx, expected=len(paths) + 1)


def answer_of(path: Path, sep: str, cut: bool) -> Solution:
    """A path as the run's solution (its text is put together from its steps)."""
    text = path.text(sep)
    return Solution(text, extract_answer(text), cut_short=cut or not path.done)


class Beam(Strategy):
    name: ClassVar[str] = "beam"
    summary: ClassVar[str] = (
        "Step-level beam search: width paths, each continued expand ways a step at a "
        "time; a verifier keeps the best."
    )
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (SEARCH_STEP,)
    helper_models: ClassVar[tuple[str, ...]] = ("verifier",)
    answer_logprobs_refused: ClassVar[str | None] = "beam's answer is put together from steps"

    width: int = Field(default=4, ge=1, le=256)
    expand: int = Field(default=4, ge=1, le=256)
    max_steps: int = Field(default=8, ge=1, le=64)
    step: str = Field(default="\n\n", min_length=1)
    """The separator that ends a step (the engine stops there)."""
    step_tokens: int | None = Field(default=None, ge=1)
    """Most tokens of one step (default: the run's ``max_tokens``)."""
    aggregate: Aggregate = "last"
    """A path's score from its steps' scores: last, min or prod."""
    verifier: str | None = None
    """The served model that verifies (default: the verifier configured for the model)."""

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        verifier = verifier_for(ctx, self.verifier, "scaffold.verifier")
        kept: list[Path] = []
        frontier, n, cut = [Path()], self.width * self.expand, False
        for level in range(1, self.max_steps + 1):
            extended = await gather_within_budget(
                *(
                    extend(
                        ctx,
                        problem,
                        path,
                        n,
                        sep=self.step,
                        max_steps=self.max_steps,
                        step_tokens=self.step_tokens,
                        label=f"level {level}",
                    )
                    for path in frontier
                )
            )
            children, stopped = settled(extended)
            cut = cut or stopped is not None
            try:
                if not children and stopped is not None:
                    raise stopped
                scored = await score_paths(
                    ctx,
                    verifier,
                    problem,
                    children,
                    sep=self.step,
                    how=self.aggregate,
                    label=f"verify level {level}",
                )
            except BudgetExhaustedError as exc:
                return await best_so_far(ctx, kept or children, self.step, exc)
            pool = [p for p in kept if p.done] + scored
            kept = sorted(pool, key=by_score, reverse=True)[: self.width]
            nodes, scores = [list(p.node) for p in kept], [p.score for p in kept]
            ctx.note("beam", {"level": level, "kept": nodes, "scores": scores})
            frontier, n = [p for p in kept if not p.done], self.expand
            if not frontier:
                break
        return answer_of(kept[0], self.step, cut=cut)

    def max_calls(self) -> int:
        paths = self.width * self.expand  # scored per level: a request each, at most
        return 1 + (self.max_steps - 1) * self.width + self.max_steps * paths

    def max_samples(self) -> int:
        return 2 * self.max_steps * self.width * self.expand
