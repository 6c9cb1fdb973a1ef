"""The Strategy base: a frozen, validated config that knows how to solve a problem.

A strategy wraps an inner ``solver`` (DSPy's ``BestOfN(module, N, reward_fn)`` shape),
so scaffolds compose as ordinary values::

    GSR(n=4, solver=RC(steps=3))

Subclasses set ``name`` (the spec name), declare their parameters as pydantic fields
(validation errors name the field), and implement :meth:`Strategy.solve`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from scaffolds.context import Context, Problem, gather_within_budget
from scaffolds.errors import BudgetExhaustedError


@dataclass(frozen=True, slots=True)
class Solution:
    """What a strategy returns.

    ``step_id`` is the trace step whose text is ``text`` (None when the text was put
    together rather than generated in one step); ``cut_short`` says the budget stopped
    the strategy before it finished its plan.
    """

    text: str
    answer: str | None
    step_id: str | None = None
    reasoning: str | None = None
    cut_short: bool = False

    def marked_cut_short(self) -> Solution:
        return Solution(self.text, self.answer, self.step_id, self.reasoning, True)


class Strategy(BaseModel):
    """Base of all scaffolds. Instances are immutable and hashable configs."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    batches_samples: ClassVar[bool] = False
    """True when :meth:`solve_many` serves k samples with one engine request."""

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        raise NotImplementedError

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
        from scaffolds.spec import format_spec

        return format_spec(self.to_spec())


def keep_finished(results: list[Solution | BudgetExhaustedError]) -> list[Solution]:
    """The solutions among ``results``; re-raise the budget error if there are none."""
    done = [r for r in results if isinstance(r, Solution)]
    if not done:
        first = next(r for r in results if isinstance(r, BudgetExhaustedError))
        raise first
    return done
