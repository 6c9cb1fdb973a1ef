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
``adaptive(wave=1, max_k=40)`` is Adaptive-Consistency's own loop: one sample at a time,
the rule read after each.

``rule="esc"`` is Early-Stopping Self-Consistency instead: windows of ``window``
samples (``max_k // window`` of them at most); the run stops at the first window whose
answers all agree and answers with it; if none does, with the majority of every sample.

``unanswered`` says what a sample with no answer is in the stopping rule (it never
wins the vote): ``"drop"`` leaves it out, ``"count"`` counts "no answer" as one more
answer. Unset, each rule does as its reference: ``beta`` drops them, as
Adaptive-Consistency's evaluation script does (a sample with no answer is skipped, and
with none answered it draws on); ``esc`` counts them, as ESC's script does (an empty
prediction is one more value, so a window with one is not unanimous). A window or wave
with no answer at all never stops the run, under either.

>>> round(leader_probability(4, 0), 4), leader_probability(2, 2)
(0.9688, 0.5)
>>> Adaptive(max_k=10, wave=4).max_calls(), Adaptive(rule="esc", window=5, max_k=40).waves()
(3, [5, 5, 5, 5, 5, 5, 5, 5])
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from scaffolds.core.context import Context
from scaffolds.core.solution import Solution
from scaffolds.core.tool_calls import vote_groups
from scaffolds.errors import BudgetExhaustedError
from scaffolds.problem import Problem
from scaffolds.strategies.base import FieldValueError, Strategy
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
    rule: Literal["beta", "esc"] = "beta"
    """``beta``: Adaptive-Consistency's posterior (waves of ``wave``); ``esc``: stop at
    the first unanimous window of ``window`` samples (ESC)."""
    window: int = Field(default=5, ge=1, le=256)
    """ESC's window: samples per window (``rule="esc"`` only)."""
    unanswered: Literal["drop", "count"] | None = None
    """A sample with no answer in the stopping rule: ``drop`` leaves it out, ``count``
    counts it as one more answer; unset: ``drop`` for ``beta``, ``count`` for ``esc``
    (what each reference does)."""

    @model_validator(mode="after")
    def _one_rule(self) -> Adaptive:
        given = self.model_fields_set
        if self.rule == "beta" and "window" in given:
            raise FieldValueError("window", self.window, 'is for rule="esc" (beta uses wave)')
        for field in ("wave", "confidence"):
            if self.rule == "esc" and field in given:
                value = getattr(self, field)
                raise FieldValueError(field, value, 'is for rule="beta" (esc uses window)')
        if self.rule == "esc" and self.window > self.max_k:
            raise FieldValueError("window", self.window, f"must be at most max_k={self.max_k}")
        return self

    def unanswered_rule(self) -> Literal["drop", "count"]:
        """``unanswered``, or the rule's reference's way when it is unset.

        >>> Adaptive().unanswered_rule(), Adaptive(rule="esc").unanswered_rule()
        ('drop', 'count')
        """
        if self.unanswered is not None:
            return self.unanswered
        return "count" if self.rule == "esc" else "drop"

    def waves(self) -> list[int]:
        """The size of each wave (each ESC window), if none stops early."""
        if self.rule == "esc":
            return [self.window] * (self.max_k // self.window)
        full, rest = divmod(self.max_k, self.wave)
        return [self.wave] * full + ([rest] if rest else [])

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        samples: list[Solution] = []
        asked, cut, pick = 0, False, 0
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
            pick = clusters[0][0] if clusters else 0
            reading: dict[str, object]
            counting = self.unanswered_rule() == "count"
            if self.rule == "esc":
                window = await vote_groups(got, ctx)
                answered = sum(map(len, window))
                agree = len(got) == size and len(window) == 1
                unanimous = agree and (answered == size or not counting)
                settled, reading = unanimous, {"unanimous": unanimous}
                if unanimous:  # the reference answers with the window itself
                    pick = window[0][0] + len(samples) - size
            else:
                unanswered = len(samples) - sum(map(len, clusters))
                counts = sorted(
                    [len(c) for c in clusters] + ([unanswered] if counting else []),
                    reverse=True,
                )
                v1, v2 = ([c for c in counts if c] + [0, 0])[:2]
                probability = leader_probability(v1, v2)
                settled = bool(clusters) and probability >= self.confidence
                reading = {"votes": [v1, v2], "probability": probability}
                reading["confidence"] = self.confidence
            last = asked >= sum(self.waves())
            reason = "settled" if settled else "budget" if cut else "max_k" if last else None
            scope.note(
                "stopping",
                {
                    "wave": number,
                    "samples": len(samples),
                    "leader": samples[pick].answer,
                    "answers": len(clusters),
                    "rule": self.rule,
                    **reading,
                    "stop": reason is not None,
                    "reason": reason,
                },
            )
            if reason is not None:
                break
        chosen = samples[pick]
        cut = cut or len(samples) < asked or any(s.cut_short for s in samples)
        return chosen.marked_cut_short() if cut else chosen

    def max_calls(self) -> int:
        return sum(self.solver.max_calls_many(size) for size in self.waves())

    def max_samples(self) -> int:
        return sum(self.solver.max_samples_many(size) for size in self.waves())
