r"""``beam(width, expand, max_steps, step)``: step-level beam search with a verifier.

A solution is written a step at a time, a step ending at the separator ``step``
(``"\n\n"``: the engine stops there). The first level draws ``width * expand`` first
steps in one request; the verifier scores every path (process scores when it gives
them: a path's score is its steps' scores ``aggregate``\d, the last step's by default),
and the ``width`` best paths are kept. Each kept path that is not finished is continued
``expand`` ways (one request of ``n=expand`` per path, all at once), scored, and the
``width`` best of the finished and new paths are kept (a finished path once), until
every kept path is finished (it wrote a ``\boxed`` answer or an empty step, or its step
ended at the model's end of sequence rather than at the separator) or ``max_steps``
steps are written. The best-scored path wins.

What the default follows: the first level of ``width * expand`` paths and the end of a
path at end of sequence or at an empty step are search-and-learn's beam search
(huggingface/search-and-learn ``src/sal/search/beam_search.py:43-44``: ``config.n``
first beams; ``:125-131``: a step that ended at EOS or is empty completes the beam);
scoring a partial path with a process reward model, ranking finished paths with the
unfinished ones and the best-scored answer are its_hub's BeamSearch
(``its_hub/algorithms/beam_search.py:146-167``). Whether a step ended at end of
sequence is the engine's word (``Completion.ended_at_eos``: vLLM, SGLang and the
embedded engines say; a plain OpenAI server does not, and its paths go on until a
boxed answer, an empty step or ``max_steps``).

``semantics="its_hub"`` runs its_hub's BeamSearch as written (Red-Hat-AI-Innovation-Team/
its_hub, ``its_hub/algorithms/beam_search.py`` and ``its_hub/lms.py``):

- ``budget`` is its_hub's: a multiple of ``width``, at least ``width``
  (``beam_search.py:135-138``); the first level is ``budget / width`` paths
  (``beam_search.py:140-144``), and each kept path is continued ``budget / width`` ways
  (``beam_search.py:153-158``); ``expand`` is not given.
- A path stops only when its step contains ``\boxed`` (the documented ``stop_token``,
  ``README.md:32``, tested as a substring at ``lms.py:185-189``) or when it already had
  ``max_steps`` steps before this one (``lms.py:181-184``): at most ``max_steps + 1``
  steps, and neither end of sequence nor an empty step ends it.
- A finished path kept in the beam is copied ``budget / width`` times
  (``beam_search.py:153-158``) and is not continued (``beam_search.py:79-81``), so its
  copies can fill the beam; the pool is ranked in its_hub's order (copy by copy, a
  stable sort: ``beam_search.py:150``), and the search ends when every kept path is
  finished (``beam_search.py:146``).

its_hub's documented settings (``docs/algorithms.md:76-85``: ``max_steps=32``, a
``prod``-aggregated process reward model, ``StepGeneration``'s temperature 0.8 at
``lms.py:37``) are ``beam(semantics="its_hub", width=4, budget=32, max_steps=32,
aggregate="prod", temperature=0.8)``.

Each step records the step and sample it continues (``parent_step``, ``sample``), and
each verify step the paths it scored (``fields["paths"]``), so the trace is the search
tree with its scores; a ``beam`` note after each level names the kept paths. When the
budget runs out, the best path scored so far is the answer, marked cut short.

>>> Beam(width=2, expand=3, max_steps=4).max_calls()
31
>>> Beam(semantics="its_hub", width=2, budget=6, max_steps=3).max_calls()
31
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, Protocol

from pydantic import Field, model_validator

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole, StepSampling
from scaffolds.core.solution import Solution
from scaffolds.engines.protocol import Message, Verifier
from scaffolds.errors import BudgetExhaustedError
from scaffolds.evaluation.answers import extract_answer, extract_boxed
from scaffolds.fanout import gather_within_budget
from scaffolds.problem import Problem, StepPrompt
from scaffolds.strategies.base import FieldValueError, Strategy
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.steps import Parent, StepBuilder
from scaffolds.verifiers.scoring import Aggregate, aggregate, score, verifier_for

__all__ = [
    "SEARCH_STEP",
    "Beam",
    "Path",
    "SearchSettings",
    "Semantics",
    "best_so_far",
    "extend",
    "extend_all",
    "finished",
    "score_level",
    "score_paths",
]

Semantics = Literal["default", "its_hub"]
"""Which search a strategy runs: Ponder's default, or its_hub's as written."""


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
    semantics: Semantics = "default",
    temperature: float | None = None,
) -> list[Path]:
    """``n`` continuations of ``path`` by one step each, in one request (at
    ``temperature``, None: the run's), each finished or not as :func:`finished` says."""
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
        sampling=StepSampling(temperature=temperature, stop=[sep]),
        role=StepRole(continue_final=chat and bool(path.steps)),
    )
    children = []
    for sample, completion in enumerate(step.completions):
        text = completion.text
        steps = (*path.steps, text)
        done = finished(text, completion.ended_at_eos, len(path.steps), max_steps, semantics)
        children.append(Path(steps, done, None, (step.step_id, sample)))
    return children


class SearchSettings(Protocol):
    """What a step search (beam, particle_filter) sets for its steps and their scores."""

    @property
    def semantics(self) -> Semantics: ...
    @property
    def max_steps(self) -> int: ...
    @property
    def step(self) -> str: ...
    @property
    def step_tokens(self) -> int | None: ...
    @property
    def aggregate(self) -> Aggregate: ...
    @property
    def temperature(self) -> float | None: ...


async def extend_all(
    ctx: Context,
    problem: Problem,
    search: SearchSettings,
    counts: Iterable[tuple[Path, int]],
    *,
    label: str,
) -> list[list[Path] | BudgetExhaustedError]:
    """Each ``(path, n)`` of ``counts`` :func:`extend` ed ``n`` ways at once, as
    ``search`` sets; a branch the budget stopped yields its error (see :func:`settled`)."""
    return await gather_within_budget(
        *(
            extend(
                ctx,
                problem,
                path,
                n,
                sep=search.step,
                max_steps=search.max_steps,
                step_tokens=search.step_tokens,
                label=label,
                semantics=search.semantics,
                temperature=search.temperature,
            )
            for path, n in counts
        )
    )


def finished(
    step: str, ended_at_eos: bool, before: int, max_steps: int, semantics: Semantics
) -> bool:
    r"""Whether a path ends with ``step`` (written after ``before`` steps).

    Default: the step has a ``\boxed{}`` answer, is empty, or ended at end of sequence
    (not at the separator, nor cut by length), or the path now has ``max_steps`` steps.
    ``its_hub``: the step contains ``\boxed`` (its_hub's ``stop_token``, ``lms.py:185-189``),
    or the path had ``max_steps`` steps before it (``lms.py:181-184``: ``max_steps + 1``
    steps at most); end of sequence and an empty step do not end it.

    >>> finished("", True, 0, 32, "default"), finished("", True, 0, 32, "its_hub")
    (True, False)
    >>> finished("x", False, 2, 3, "default"), finished("x", False, 2, 3, "its_hub")
    (True, False)
    >>> finished("so \\boxed{", False, 0, 3, "its_hub"), finished("x", False, 3, 3, "its_hub")
    (True, True)
    """
    if semantics == "its_hub":
        return "\\boxed" in step or before >= max_steps
    return (
        extract_boxed(step) is not None
        or not step.strip()
        or ended_at_eos
        or before + 1 >= max_steps
    )


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


async def score_level(
    ctx: Context,
    verifier: Verifier,
    problem: Problem,
    search: SearchSettings,
    paths: Sequence[Path],
    *,
    label: str,
) -> list[Path]:
    """:func:`score_paths` with ``search``'s separator and aggregation."""
    return await score_paths(
        ctx, verifier, problem, paths, sep=search.step, how=search.aggregate, label=label
    )


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


def regroup(
    extended: Sequence[list[Path] | BudgetExhaustedError], scored: Sequence[Path]
) -> list[list[Path]]:
    """``scored`` (the children of every extension that ran, in order) split back into
    one list per extension (empty for one the budget stopped).

    >>> groups = regroup([[Path(("a",)), Path(("b",))], [Path(("c",))]], [Path(("A",))] * 3)
    >>> [len(group) for group in groups]
    [2, 1]
    """
    groups, at = [], 0
    for children in extended:
        size = 0 if isinstance(children, BudgetExhaustedError) else len(children)
        groups.append(list(scored[at : at + size]))
        at += size
    return groups


def its_hub_pool(kept: Sequence[Path], children: Sequence[list[Path]], copies: int) -> list[Path]:
    """its_hub's pool for the next ranking: the kept paths copied ``copies`` times, copy
    by copy (``beam_search.py:153-158``), a finished one as it is (it is not continued:
    ``beam_search.py:79-81``), an unfinished one as its next continuation (``children``:
    one list per unfinished kept path, in order).

    >>> done, a = Path(("x",), True, 0.9), Path(("y",))
    >>> a1, a2 = Path(("y", "1")), Path(("y", "2"))
    >>> its_hub_pool([done, a], [[a1, a2]], 2) == [done, a1, done, a2]
    True
    """
    pool: list[Path] = []
    for copy in range(copies):
        going = iter(children)
        for path in kept:
            if path.done:
                pool.append(path)
                continue
            continued = next(going)
            if copy < len(continued):
                pool.append(continued[copy])
    return pool


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

    semantics: Semantics = "default"
    """``default``: Ponder's search (see the module's docstring); ``its_hub``: its_hub's
    BeamSearch as written (``budget``, its stopping rule and step count)."""
    width: int = Field(default=4, ge=1, le=256)
    expand: int = Field(default=4, ge=1, le=256)
    """Ways each kept path is continued (default semantics; its_hub's is ``budget / width``)."""
    budget: int | None = Field(default=None, ge=1, le=65536)
    """its_hub's budget (``semantics="its_hub"`` only, and needed there): paths per
    level, a multiple of ``width``."""
    max_steps: int = Field(default=8, ge=1, le=64)
    """The most steps of a path (its_hub: a path stops after ``max_steps + 1``)."""
    step: str = Field(default="\n\n", min_length=1)
    """The separator that ends a step (the engine stops there)."""
    step_tokens: int | None = Field(default=None, ge=1)
    """Most tokens of one step (default: the run's ``max_tokens``)."""
    aggregate: Aggregate = "last"
    """A path's score from its steps' scores: last, min or prod."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """Each step's sampling temperature (default: the request's; its_hub's is 0.8)."""
    verifier: str | None = None
    """The served model that verifies (default: the verifier configured for the model)."""

    @model_validator(mode="after")
    def _budget_fits(self) -> Beam:
        given = self.model_fields_set
        if self.semantics == "default":
            if self.budget is not None:
                raise FieldValueError("budget", self.budget, 'is for semantics="its_hub"')
            return self
        if "expand" in given:
            raise FieldValueError(
                "expand", self.expand, 'is not for semantics="its_hub" (it is budget / width)'
            )
        if self.budget is None:
            raise FieldValueError("budget", None, 'is needed for semantics="its_hub"')
        if self.budget % self.width:  # its_hub beam_search.py:135-138
            raise FieldValueError(
                "budget", self.budget, f"must be a multiple of width={self.width}"
            )
        return self

    def expansion(self) -> int:
        """Ways each kept path is continued: ``expand``, or its_hub's ``budget / width``.

        >>> Beam(expand=3).expansion(), Beam(semantics="its_hub", width=4, budget=32).expansion()
        (3, 8)
        """
        return self.budget // self.width if self.budget is not None else self.expand

    def levels(self) -> int:
        """The most levels (steps of a path): ``max_steps``, or its_hub's one more.

        >>> Beam(max_steps=32).levels(), Beam(semantics="its_hub", budget=4, max_steps=32).levels()
        (32, 33)
        """
        return self.max_steps + (self.semantics == "its_hub")

    def first_level(self) -> int:
        """Paths drawn at the first level: ``width * expand``, or its_hub's
        ``budget / width`` (``beam_search.py:140-144``).

        >>> Beam(width=2, expand=3).first_level()
        6
        >>> Beam(semantics="its_hub", width=2, budget=6).first_level()
        3
        """
        if self.semantics == "its_hub":
            return self.expansion()
        return self.width * self.expand

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        verifier = verifier_for(ctx, self.verifier, "scaffold.verifier")
        its_hub = self.semantics == "its_hub"
        kept: list[Path] = []
        frontier, n, cut = [Path()], self.first_level(), False
        for level in range(1, self.levels() + 1):
            counts = ((path, n) for path in frontier)
            extended = await extend_all(ctx, problem, self, counts, label=f"level {level}")
            children, stopped = settled(extended)
            cut = cut or stopped is not None
            try:
                if not children and stopped is not None:
                    raise stopped
                label = f"verify level {level}"
                scored = await score_level(ctx, verifier, problem, self, children, label=label)
            except BudgetExhaustedError as exc:
                return await best_so_far(ctx, kept or children, self.step, exc)
            if its_hub and kept:
                pool = its_hub_pool(kept, regroup(extended, scored), self.expansion())
            else:
                pool = [p for p in kept if p.done] + scored
            kept = sorted(pool, key=by_score, reverse=True)[: self.width]
            nodes, scores = [list(p.node) for p in kept], [p.score for p in kept]
            ctx.note("beam", {"level": level, "kept": nodes, "scores": scores})
            frontier, n = [p for p in kept if not p.done], self.expansion()
            if not frontier:
                break
        return answer_of(kept[0], self.step, cut=cut)

    def max_calls(self) -> int:
        levels, width = self.levels(), self.width
        paths = width * self.expansion()  # scored per level: a request each, at most
        return 1 + (levels - 1) * width + levels * paths

    def max_samples(self) -> int:
        return 2 * self.levels() * self.width * self.expansion()
