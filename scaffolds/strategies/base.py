"""The Strategy base: a frozen, validated config that knows how to solve a problem.

A strategy wraps an inner ``solver`` (DSPy's ``BestOfN(module, N, reward_fn)`` shape),
so scaffolds compose as ordinary values::

    GSR(n=4, solver=RC(steps=3))

Subclasses set ``name`` (the spec name), declare their parameters as pydantic fields
(validation errors name the field), implement :meth:`Strategy.solve`, list their
templates per prompt set (``prompt_sets``; a set they lack is refused by name when a
run asks for it) and their step builders (``step_builders``, see
:mod:`scaffolds.strategies.steps`), and set the traits the server reads
(``passes_through``, ``answer_logprobs_refused``) where the defaults do not fit::

    class Echo(Strategy):
        name: ClassVar[str] = "echo"
        prompt_sets: ClassVar[tuple[PromptSet, ...]] = (PromptSet.of("default", ECHO),)
        step_builders: ClassVar[tuple[StepBuilder, ...]] = (ECHO_STEP,)

A built-in joins the default registry by its entry in ``scaffolds.strategies.BUILTINS``;
a scaffold of another distribution by a ``ponder.scaffolds`` entry point naming the
class (or a module whose classes are marked with :func:`register`); a class the program
itself defines, by :func:`register` (see :mod:`scaffolds.spec.registry`).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict

from scaffolds.core.context import Context
from scaffolds.core.solution import Solution
from scaffolds.errors import BudgetExhaustedError, InvalidRequestError
from scaffolds.fanout import gather_within_budget
from scaffolds.problem import Problem
from scaffolds.prompts import PromptSet, common_prompts
from scaffolds.spec_grammar import format_spec
from scaffolds.strategies.steps import StepBuilder

S = TypeVar("S", bound="type[Strategy]")


class Strategy(BaseModel):
    """Base of all scaffolds. Instances are immutable and hashable configs."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    batches_samples: ClassVar[bool] = False
    """True when :meth:`solve_many` serves k samples with one engine request."""
    prompt_sets: ClassVar[tuple[PromptSet, ...]] = ()
    """This strategy's own templates, one part per prompt set it supports."""
    step_builders: ClassVar[tuple[StepBuilder, ...]] = ()
    """The kinds of step it takes (for training: rollouts and SFT rows)."""
    helper_models: ClassVar[tuple[str, ...]] = ()
    """Fields naming the served model its helper steps run on (e.g. RC's ``summarizer``)."""
    registered: ClassVar[bool] = False
    """Set by :func:`register`: the default registry serves this class."""

    # -- traits: what the server needs to know, so that it never names a scaffold -----------
    passes_through: ClassVar[bool] = False
    """True when a run is the request itself: ONE engine call of the prompt as asked.
    The server then passes every request field to that call as given (the seed too, and
    fields no multi-step scaffold can honour, such as ``tools`` or ``echo``), and the runs
    of a request's several prompts share one engine request."""
    votes_tool_calls: ClassVar[bool] = False
    """True when the answer is voted among samples of its solver, so a request's ``tools``
    can go to them: the most common tool call wins (:mod:`scaffolds.core.tool_calls`).
    The server accepts ``tools`` when this holds and every inner strategy passes through."""
    answer_logprobs_refused: ClassVar[str | None] = None
    """Why a request for the answer's ``logprobs`` is refused when this strategy is in
    the spec (its answer is not the text of one engine generation, or it asks for top
    logprobs of its own); None: the answer's logprobs are returned."""
    scored_steps: ClassVar[tuple[str, ...]] = ()
    """The trace kinds of this strategy's steps whose answers are each scored on their
    own, which gives accuracy against the tokens spent so far (RC's reasoning chunks);
    ``ponder eval`` asks for the trace of such a scaffold and grades every such step."""

    @classmethod
    def prompts_for(cls, name: str) -> PromptSet:
        """This strategy's templates in prompt set ``name`` (with the shared ones).

        A strategy with templates of its own that lacks ``name`` raises an error that
        names the set and the strategy.
        """
        part = next((p for p in cls.prompt_sets if p.name == name), None)
        if part is None and cls.prompt_sets:
            have = ", ".join(sorted(p.name for p in cls.prompt_sets))
            raise InvalidRequestError(
                f"strategy {cls.name!r} has no templates for prompt set {name!r} (it has: {have})",
                param="prompt_set",
            )
        return common_prompts(name).merged(*(() if part is None else (part,)))

    def needed_templates(self) -> frozenset[str]:
        """The templates of its own that this strategy renders as configured (not those
        of strategies nested in it): by default every one it defines. A prompt file that
        sets one of them must set them all (:mod:`scaffolds.spec.prompt_files`)."""
        own = type(self).prompt_sets
        return frozenset(own[0].templates) if own else frozenset()

    def check_prompt_set(self, name: str) -> None:
        """Raise unless this strategy and every one nested in it support set ``name``."""
        type(self).prompts_for(name)
        for inner in self.inner():
            inner.check_prompt_set(name)

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        """One solution. A strategy that batches samples (and so overrides
        :meth:`solve_many`) gets the one solution of ``solve_many(k=1)``."""
        if not self.batches_samples:
            raise NotImplementedError
        [solution] = await self.solve_many(problem, ctx, 1)
        return solution

    async def solve_many(
        self, problem: Problem, ctx: Context, k: int, label: str = "sample"
    ) -> list[Solution]:
        """``k`` independent solutions, concurrently; budget-cut branches are dropped.

        Strategies whose first call can serve all k samples at once (one engine request
        with ``n=k``, as :class:`Single` does) override this.
        Raises :class:`BudgetExhaustedError` only if no branch produced anything.
        """
        if k == 1:
            return [await self.solve(problem, ctx.child(f"{label} 1"))]
        results = await gather_within_budget(
            *(self.solve(problem, ctx.child(f"{label} {i}")) for i in range(1, k + 1))
        )
        return keep_finished(results)

    # -- shape, for the fan-out cap ----------------------------------------------------
    def inner(self) -> tuple[Strategy, ...]:
        """Nested strategies (for depth and spec printing)."""
        return tuple(v for v in self.__dict__.values() if isinstance(v, Strategy))

    def max_calls(self) -> int:
        """An upper bound on engine calls of one :meth:`solve` (forced answers aside)."""
        raise NotImplementedError

    def max_calls_many(self, k: int) -> int:
        """An upper bound on engine calls of :meth:`solve_many` with ``k``."""
        return k * self.max_calls()

    def max_samples(self) -> int:
        """An upper bound on sequences generated by one :meth:`solve` (each call's ``n``
        summed). The default counts one per call; strategies that ask for ``n > 1``
        override it."""
        return self.max_calls()

    def max_samples_many(self, k: int) -> int:
        """An upper bound on sequences generated by :meth:`solve_many` with ``k``."""
        return k * self.max_samples()

    def named_models(self, path: str = "scaffold") -> list[tuple[str, str]]:
        """(dotted field, model name) of every helper model this spec names, nested too.

        >>> from scaffolds.strategies import GSR, RC
        >>> GSR(solver=RC(summarizer="instruct")).named_models()
        [('scaffold.solver.summarizer', 'instruct')]
        """
        named = [(f"{path}.{f}", getattr(self, f)) for f in self.helper_models]
        out = [(where, name) for where, name in named if name is not None]
        for key, value in self.__dict__.items():
            if isinstance(value, Strategy):
                out.extend(value.named_models(f"{path}.{key}"))
        return out

    def depth(self) -> int:
        return 1 + max((s.depth() for s in self.inner()), default=0)

    # -- specs -------------------------------------------------------------------------
    def to_spec(self) -> dict[str, Any]:
        """The JSON spec form, with only non-default parameters."""
        spec: dict[str, Any] = {"name": self.name}
        for key, info in type(self).model_fields.items():
            value = getattr(self, key)
            if value == info.default and not isinstance(value, Strategy):
                continue
            if isinstance(value, Strategy):
                if value == info.default:
                    continue
                spec[key] = value.to_spec()
            else:
                spec[key] = value
        return spec

    def __str__(self) -> str:
        return format_spec(self.to_spec())


class FieldValueError(ValueError):
    """A check across a strategy's fields that one field fails (raise it from a model
    validator): the spec error then names that field (``scaffold.k``), not the scaffold.

    >>> err = FieldValueError("k", 5, "must be at most n=4")
    >>> err.field, err.value, str(err)
    ('k', 5, 'must be at most n=4')
    """

    def __init__(self, field: str, value: Any, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


def register(cls: S) -> S:
    """Mark a strategy class for :func:`scaffolds.spec.registry.default_registry` (a
    decorator): once its module is imported (by the program, or by a ``ponder.scaffolds``
    entry point that names the module), the default registry serves it."""
    cls.registered = True
    return cls


def keep_finished(results: list[Solution | BudgetExhaustedError]) -> list[Solution]:
    """The solutions among ``results``; re-raise the budget error if there are none."""
    done = [r for r in results if isinstance(r, Solution)]
    if not done:
        first = next(r for r in results if isinstance(r, BudgetExhaustedError))
        raise first
    return done
