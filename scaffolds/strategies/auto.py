"""``auto(pilot, stop, mid, mid_k, max_k)``: allocation per prompt, placed by a cheap probe.

A pilot of ``pilot`` samples (one request through the solver) is the probe: its
agreement is the share of the pilot that gives the leading answer (samples with no
answer count against it). The agreement places the prompt (Snell et al., arXiv
2408.03314: spend by estimated difficulty):

- agreement ``>= stop``: settled, the run stops and answers with the pilot's leader;
- agreement ``>= mid``: the run draws up to ``mid_k`` samples in all;
- below ``mid``: up to ``max_k`` samples in all.

The answer is the majority of every sample drawn. The draws after the pilot are one more
request; the request's budget caps them as it caps any step (a budget spent mid-way
votes over what exists, cut short). The placement is one ``allocation`` note
(:class:`~scaffolds.core.trace.StepNote`) on the run's scope: the pilot's agreement, the
tier, the samples planned and drawn, and why it stopped.

The thresholds are parameters, not constants: ``ponder calibrate`` picks them from a
served model's samples of the user's own problems (:mod:`clients.calibrate`) and writes
them into the ``auto`` spec of the effort policy it emits. The defaults are
**provisional**, not calibrated: a unanimous pilot of 4 stops, 3 of 4 draws up to 8, less
up to 16 (``majority(k=8)`` and ``majority(k=16)``, the fixed specs beside it). Resampled
on committed SmolLM2-135M pools (experiments/effort_frontier, RESULTS.md "Effort levels
and auto"), they matched ``majority(k=16)`` at about 0.7 of its tokens on the shipped
``smollm2-135m-gsr``; the thresholds calibrated there were cheaper still.

>>> Auto().max_samples(), Auto(pilot=2, mid_k=4, max_k=6).max_calls()
(16, 2)
>>> Auto(pilot=4).tier(1.0), Auto().tier(0.75), Auto().tier(0.5)
('stop', 'mid', 'max')
"""

from __future__ import annotations

import contextlib
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from scaffolds.core.context import Context
from scaffolds.core.solution import Solution
from scaffolds.core.tool_calls import vote_groups
from scaffolds.errors import BudgetExhaustedError
from scaffolds.problem import Problem
from scaffolds.strategies.base import FieldValueError, Strategy
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.single import Single

Tier = Literal["stop", "mid", "max"]


class Auto(Strategy):
    name: ClassVar[str] = "auto"
    summary: ClassVar[str] = (
        "Allocation per prompt: a pilot's agreement decides to stop or draw more samples."
    )
    votes_tool_calls: ClassVar[bool] = True

    pilot: int = Field(default=4, ge=1, le=256)
    """Samples of the probe (one request)."""
    stop: float = Field(default=1.0, gt=0.0, le=1.0)
    """Stop after the pilot when its leader's share is at least this."""
    mid: float = Field(default=0.75, ge=0.0, le=1.0)
    """Draw up to ``mid_k`` samples when the leader's share is at least this (below:
    up to ``max_k``)."""
    mid_k: int = Field(default=8, ge=1, le=1024)
    """Samples in all for a prompt of the middle tier."""
    max_k: int = Field(default=16, ge=1, le=1024)
    """Samples in all for a prompt whose pilot is split."""
    solver: Strategy = Single()

    @model_validator(mode="after")
    def _ordered(self) -> Auto:
        if self.mid > self.stop:
            raise FieldValueError("mid", self.mid, f"must be at most stop={self.stop}")
        if self.mid_k < self.pilot:
            raise FieldValueError("mid_k", self.mid_k, f"must be at least pilot={self.pilot}")
        if self.max_k < self.mid_k:
            raise FieldValueError("max_k", self.max_k, f"must be at least mid_k={self.mid_k}")
        return self

    def tier(self, agreement: float) -> Tier:
        """Where a pilot with this agreement places the prompt."""
        if agreement >= self.stop:
            return "stop"
        return "mid" if agreement >= self.mid else "max"

    def planned(self, tier: Tier) -> int:
        """Samples in all for a prompt of ``tier``."""
        return {"stop": self.pilot, "mid": self.mid_k, "max": self.max_k}[tier]

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        samples = await self.solver.solve_many(problem, ctx.child("pilot"), self.pilot)
        groups = await vote_groups(samples, ctx)
        leader = len(groups[0]) if groups else 0
        agreement = leader / self.pilot
        tier = self.tier(agreement)
        planned = self.planned(tier)
        more, reason = planned - len(samples), "settled" if tier == "stop" else "planned"
        if len(samples) < self.pilot:
            more, reason = 0, "budget"
        if more > 0:
            with contextlib.suppress(BudgetExhaustedError):  # vote over what exists
                samples += await self.solver.solve_many(problem, ctx.child("more"), more)
            if len(samples) < planned:
                reason = "budget"
        chosen = await pick_by_vote(samples, ctx, expected=planned)
        ctx.note(
            "allocation",
            {
                "probe": "agreement",
                "pilot": self.pilot,
                "leader_votes": leader,
                "agreement": agreement,
                "thresholds": {"stop": self.stop, "mid": self.mid},
                "tier": tier,
                "planned": planned,
                "samples": len(samples),
                "leader": chosen.answer,
                "reason": reason,
            },
        )
        return chosen

    def max_calls(self) -> int:
        rest = self.max_k - self.pilot
        return self.solver.max_calls_many(self.pilot) + (
            self.solver.max_calls_many(rest) if rest else 0
        )

    def max_samples(self) -> int:
        rest = self.max_k - self.pilot
        return self.solver.max_samples_many(self.pilot) + (
            self.solver.max_samples_many(rest) if rest else 0
        )
