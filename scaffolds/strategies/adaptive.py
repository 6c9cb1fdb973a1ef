"""``adaptive(max_k, wave, confidence)``: a vote that stops drawing once it is settled
(Adaptive-Consistency, arXiv 2305.11860; ESC, arXiv 2401.10480).

Samples come in waves of ``wave``, each wave one request through the solver. After
each wave, with ``v1`` votes for the leading answer and ``v2`` for the runner-up, the
posterior probability that the leader is the true majority is ``P(p > 1/2)`` for
``p ~ Beta(v1 + 1, v2 + 1)`` (the share of the leader between the two, uniform prior):
Adaptive-Consistency's Beta rule on the top two answers. Answers beyond the top two are
left out (a Dirichlet over all of them would need a Monte Carlo estimate, and the top
two decide the vote). For whole counts the probability is exact,
``P(Binomial(v1 + v2 + 1, 1/2) <= v1)``. The run stops once it reaches ``confidence``,
or at ``max_k`` samples, and answers with the majority. Each wave's reading is a
``stopping`` note (:class:`~scaffolds.core.trace.StepNote`) on the wave's scope.

>>> round(leader_probability(4, 0), 4), leader_probability(2, 2)
(0.9688, 0.5)
>>> Adaptive(max_k=10, wave=4).max_calls()
3
"""

from __future__ import annotations

import math
from typing import ClassVar

from pydantic import Field

from scaffolds.core.context import Context, Problem
from scaffolds.core.errors import BudgetExhaustedError
from scaffolds.core.solution import Solution
from scaffolds.core.tool_calls import vote_groups
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.single import Single


def leader_probability(leader: int, runner_up: int) -> float:
    """``P(p > 1/2)`` for ``p ~ Beta(leader + 1, runner_up + 1)``, exactly."""
    n = leader + runner_up + 1
    return sum(math.comb(n, j) for j in range(leader + 1)) / (1 << n)


class Adaptive(Strategy):
    name: ClassVar[str] = "adaptive"
    summary: ClassVar[str] = (
        "Adaptive voting: samples in waves until the leader is the majority with confidence."
    )
    votes_tool_calls: ClassVar[bool] = True

    max_k: int = Field(default=32, ge=1, le=1024)
    """The most samples drawn."""
    wave: int = Field(default=4, ge=1, le=256)
    """Samples per wave (one request each)."""
    confidence: float = Field(default=0.95, gt=0.0, le=1.0)
    """Stop once the leader is the majority with at least this probability."""
    solver: Strategy = Single()

    def waves(self) -> list[int]:
        """The size of each wave, if none stops early."""
        full, rest = divmod(self.max_k, self.wave)
        return [self.wave] * full + ([rest] if rest else [])

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        samples: list[Solution] = []
        asked, cut, clusters = 0, False, list[list[int]]()
        for number, size in enumerate(self.waves(), start=1):
            scope = ctx.child(f"wave {number}")
            try:
                got = await self.solver.solve_many(problem, scope, size, label="sample")
            except BudgetExhaustedError:
                if not samples:
                    raise
                cut = True
                break
            asked += size
            samples += got
            cut = len(got) < size
            clusters = await vote_groups(samples, ctx)  # tool calls vote by call
            v1, v2 = ([len(c) for c in clusters[:2]] + [0, 0])[:2]
            probability = leader_probability(v1, v2)
            settled = probability >= self.confidence
            last = asked >= self.max_k
            reason = "settled" if settled else "budget" if cut else "max_k" if last else None
            scope.note(
                "stopping",
                {
                    "wave": number,
                    "samples": len(samples),
                    "leader": samples[clusters[0][0]].answer if clusters else None,
                    "votes": [v1, v2],
                    "answers": len(clusters),
                    "probability": probability,
                    "confidence": self.confidence,
                    "stop": reason is not None,
                    "reason": reason,
                },
            )
            if reason is not None:
                break
        chosen = samples[clusters[0][0] if clusters else 0]
        cut = cut or len(samples) < asked or any(s.cut_short for s in samples)
        return chosen.marked_cut_short() if cut else chosen

    def max_calls(self) -> int:
        return sum(self.solver.max_calls_many(size) for size in self.waves())

    def max_samples(self) -> int:
        return sum(self.solver.max_samples_many(size) for size in self.waves())
