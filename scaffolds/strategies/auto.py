"""``auto(pilot, stop, mid, mid_k, max_k, hard, probe)``: allocation per prompt, placed by a
cheap probe.

A pilot of ``pilot`` samples (one request through the solver) is the probe: its
agreement is the share of the pilot that gives the leading answer (samples with no
answer count against it). The agreement places the prompt (Snell et al., arXiv
2408.03314: spend by estimated difficulty):

- agreement ``>= stop``: settled, the run stops and answers with the pilot's leader;
- agreement ``>= mid``: the run draws up to ``mid_k`` samples in all;
- below ``mid``: up to ``max_k`` samples in all.

The answer is the majority of every sample drawn, except in the lowest tier, where
``hard`` says what follows the draws: ``"vote"`` (the default: the majority too),
``"refine"`` (gsr's refine step over every sample drawn, one more call:
:func:`scaffolds.strategies.gsr.refine_over`, gsr's templates) or ``"verifier"`` (the
verifier scores every sample and equivalent answers pool their scores, as in
``majority(weight="verifier")``). ``probe="verifier"`` places the prompt by the
verifier's mean score of the pilot instead of its agreement (the same ``stop`` and
``mid`` thresholds, on the score's scale; with ``hard="verifier"`` the pilot's scores
are reused). A verifier is the model's own or the served model ``verifier`` names; none
is a 400 before anything is drawn. A sample that is a tool call is voted, never refined
or scored (:mod:`scaffolds.core.tool_calls`).

The draws after the pilot are one more request; the request's budget caps them as it
caps any step (a budget spent mid-way votes over what exists, cut short; a refine or
verify step with no room left falls back to the vote, and a verifier probe with no room
left places the prompt by agreement and draws nothing more). The placement is one
``allocation`` note (:class:`~scaffolds.core.trace.StepNote`) on the run's scope: the
probe and its measure (``agreement``; with the verifier probe ``score``, its mean, None
when it did not run), the tier, the samples planned and drawn, ``hard``, the ``action``
that picked the answer (``vote``, ``refine`` or ``verifier``) and why it stopped.

The thresholds are parameters, not constants: ``ponder calibrate`` picks them from a
served model's samples of the user's own problems (:mod:`clients.calibrate`) and writes
them into the ``auto`` spec of the effort policy it emits. It resamples the agreement
probe and the vote; a refine or a verifier's scores cannot be resampled from single
samples, so ``hard="refine"`` is only measured as a candidate spec (``--auto-refine``).
The defaults are **provisional**, not calibrated: a unanimous pilot of 4 stops, 3 of 4
draws up to 8, less up to 16 (``majority(k=8)`` and ``majority(k=16)``, the fixed specs
beside it). Resampled on committed SmolLM2-135M pools (experiments/effort_frontier,
RESULTS.md "Effort levels and auto"), they matched ``majority(k=16)`` at about 0.7 of its
tokens on the shipped ``smollm2-135m-gsr``; the thresholds calibrated there were cheaper
still.

>>> Auto().max_samples(), Auto(pilot=2, mid_k=4, max_k=6).max_calls()
(16, 2)
>>> Auto(hard="refine").max_calls(), Auto(hard="verifier", probe="verifier").max_samples()
(3, 32)
>>> Auto(pilot=4).tier(1.0), Auto().tier(0.75), Auto().tier(0.5)
('stop', 'mid', 'max')
"""

from __future__ import annotations

import contextlib
from statistics import fmean
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from scaffolds.core.context import Context
from scaffolds.core.solution import Solution
from scaffolds.core.tool_calls import vote_groups
from scaffolds.engines.protocol import Verifier
from scaffolds.errors import BudgetExhaustedError
from scaffolds.problem import Problem
from scaffolds.strategies.base import FieldValueError, Strategy
from scaffolds.strategies.gsr import refine_over
from scaffolds.strategies.majority import pick_by_vote
from scaffolds.strategies.single import Single
from scaffolds.verifiers.scoring import pick_by_weight, score, verifier_for

Tier = Literal["stop", "mid", "max"]
Pick = Literal["vote", "refine", "verifier"]
"""How an answer comes from the samples: ``hard`` (the lowest tier's), and the
``allocation`` note's ``action`` (what picked this run's answer)."""


class Auto(Strategy):
    name: ClassVar[str] = "auto"
    summary: ClassVar[str] = (
        "Allocation per prompt: a pilot decides to stop or draw more samples (then vote, "
        "refine or verify)."
    )
    votes_tool_calls: ClassVar[bool] = True
    helper_models: ClassVar[tuple[str, ...]] = ("refiner", "verifier")

    pilot: int = Field(default=4, ge=1, le=256)
    """Samples of the probe (one request)."""
    stop: float = Field(default=1.0, gt=0.0, le=1.0)
    """Stop after the pilot when its leader's share (or mean score) is at least this."""
    mid: float = Field(default=0.75, ge=0.0, le=1.0)
    """Draw up to ``mid_k`` samples when the leader's share (or mean score) is at least
    this (below: up to ``max_k``)."""
    mid_k: int = Field(default=8, ge=1, le=1024)
    """Samples in all for a prompt of the middle tier."""
    max_k: int = Field(default=16, ge=1, le=1024)
    """Samples in all for a prompt whose pilot is split."""
    hard: Pick = "vote"
    """What the lowest tier does after its draws: vote, refine them into one answer
    (gsr's refine step), or pick by the verifier's scores."""
    probe: Literal["agreement", "verifier"] = "agreement"
    """What places the prompt: the pilot's agreement, or the verifier's mean score of it."""
    solver: Strategy = Single()
    refiner: str | None = None
    """With ``hard="refine"``: the served model that refines (default: the model itself)."""
    verifier: str | None = None
    """With a verifier probe or ``hard="verifier"``: the served model that verifies
    (default: the verifier configured for the model)."""

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
        """Where a pilot with this agreement (or mean score) places the prompt."""
        if agreement >= self.stop:
            return "stop"
        return "mid" if agreement >= self.mid else "max"

    def planned(self, tier: Tier) -> int:
        """Samples in all for a prompt of ``tier``."""
        return {"stop": self.pilot, "mid": self.mid_k, "max": self.max_k}[tier]

    def _verifier(self, ctx: Context) -> Verifier | None:
        """The verifier this configuration needs (a 400 when there is none), else None."""
        if "verifier" not in (self.hard, self.probe):
            return None
        param = "scaffold.hard" if self.hard == "verifier" else "scaffold.probe"
        return verifier_for(ctx, self.verifier, param)

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        verifier = self._verifier(ctx)  # refused before sampling
        samples = await self.solver.solve_many(problem, ctx.child("pilot"), self.pilot)
        groups = await vote_groups(samples, ctx)
        leader = len(groups[0]) if groups else 0
        agreement = leader / self.pilot
        cut = len(samples) < self.pilot
        calls = any(s.tool_call for s in samples)  # voted, never scored or refined
        scores: list[float] = []  # the verifier's, of samples[: len(scores)]
        mean: float | None = None  # the verifier probe's measure
        if verifier is not None and self.probe == "verifier" and not cut and not calls:
            try:
                scores = list((await score(ctx, verifier, problem, _texts(samples))).scores)
                mean = fmean(scores)
            except BudgetExhaustedError:
                cut = True  # placed by agreement, nothing more drawn
        tier = self.tier(agreement if mean is None else mean)
        planned = self.planned(tier)
        more, reason = planned - len(samples), "settled" if tier == "stop" else "planned"
        if cut:
            more, reason = 0, "budget"
        if more > 0:
            with contextlib.suppress(BudgetExhaustedError):  # vote over what exists
                samples += await self.solver.solve_many(problem, ctx.child("more"), more)
            if len(samples) < planned:
                reason = "budget"
        action: Pick = "vote"
        chosen: Solution | None = None
        calls = calls or any(s.tool_call for s in samples)
        if tier == "max" and self.hard != "vote" and not calls:
            try:
                if self.hard == "refine":
                    chosen = await refine_over(ctx, problem, samples, model=self.refiner)
                elif verifier is not None:
                    rest = samples[len(scores) :]
                    if rest:
                        scores += (await score(ctx, verifier, problem, _texts(rest))).scores
                    chosen = await pick_by_weight(samples, scores, ctx)
                action = self.hard
            except BudgetExhaustedError:
                reason, planned = "budget", planned + 1  # the vote decides, cut short
        if chosen is None:
            chosen = await pick_by_vote(samples, ctx, expected=planned)
        elif len(samples) < planned or any(s.cut_short for s in samples):
            chosen = chosen.marked_cut_short()
        ctx.note(
            "allocation",
            {
                "probe": self.probe,
                "pilot": self.pilot,
                "leader_votes": leader,
                "agreement": agreement,
                **({"score": mean} if self.probe == "verifier" else {}),
                "thresholds": {"stop": self.stop, "mid": self.mid},
                "tier": tier,
                "planned": self.planned(tier),
                "samples": len(samples),
                "hard": self.hard,
                "action": action,
                "leader": chosen.answer,
                "reason": reason,
            },
        )
        return chosen

    def _after_draws(self) -> int:
        """Calls (and samples) beyond the draws: a verify request per sample scored (at
        most), one refine call."""
        scored = self.max_k if self.hard == "verifier" else 0
        scored = max(scored, self.pilot if self.probe == "verifier" else 0)
        return scored + (1 if self.hard == "refine" else 0)

    def max_calls(self) -> int:
        rest = self.max_k - self.pilot
        return (
            self.solver.max_calls_many(self.pilot)
            + (self.solver.max_calls_many(rest) if rest else 0)
            + self._after_draws()
        )

    def max_samples(self) -> int:
        rest = self.max_k - self.pilot
        return (
            self.solver.max_samples_many(self.pilot)
            + (self.solver.max_samples_many(rest) if rest else 0)
            + self._after_draws()
        )


def _texts(samples: list[Solution]) -> list[str]:
    """The samples' texts, as a verifier reads them."""
    return [s.text for s in samples]
