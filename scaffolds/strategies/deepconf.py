"""``deepconf(n, keep, window)``: confidence-filtered, confidence-weighted voting
(DeepConf, arXiv 2508.15260).

``n`` traces come from ONE ``n``-sample request that also asks for each position's top
``top_k`` logprobs. A token's confidence is the negative mean of those logprobs (a
peaked distribution gives a high value); a group's is the mean over a sliding window of
``window`` tokens; a trace's is its weakest group. The most confident ``keep`` fraction
of the traces vote, each weighted by its confidence. The trace records every trace's
confidence and whether it was kept (a ``step_note`` of kind ``confidence``).

The samples must come from single calls with logprobs, so ``solver`` may only be a
``single`` (its ``prompt`` and ``max_tokens`` are used). An engine that returns no
logprobs is an :class:`~scaffolds.core.errors.UnsupportedError` (a 400 naming deepconf).
Only ``mode="offline"`` is built; ``online`` (a warm-up sets a threshold, later traces
stop early) is refused with a clear error.

>>> str(DeepConf(n=8, keep=0.25))
'deepconf(n=8, keep=0.25)'
>>> trace_confidence([(-0.5, -1.5), (-1.0, -3.0), (-2.0, -2.0)], window=2)
1.5
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from scaffolds.core.context import Context, Problem
from scaffolds.core.errors import UnsupportedError
from scaffolds.core.solution import Solution
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.single import DIRECT, Single

WINDOW = 64
"""Default group window, in tokens. The paper uses 2048 for traces of thousands of
tokens; answers here are often a few hundred tokens, and a window as long as the trace
is just its mean, so 64 keeps the "weakest stretch" meaning for short traces too. A
trace shorter than the window is one group (its mean)."""


def token_confidence(top: Sequence[float]) -> float:
    """The negative mean of one position's top logprobs (0.0 when there are none)."""
    finite = [v for v in top if math.isfinite(v)]
    return -sum(finite) / len(finite) if finite else 0.0


def trace_confidence(tops: Sequence[Sequence[float]], *, window: int) -> float | None:
    """The lowest mean token confidence over sliding windows of ``window`` tokens (the
    whole trace when it is shorter); None for a trace with no tokens."""
    scores = [token_confidence(t) for t in tops]
    if not scores:
        return None
    size = min(window, len(scores))
    total = sum(scores[:size])
    lowest = total
    for i in range(size, len(scores)):
        total += scores[i] - scores[i - size]
        lowest = min(lowest, total)
    return lowest / size


def kept_indices(confidences: Sequence[float | None], keep: float) -> list[int]:
    """The ``ceil(keep * len)`` most confident traces (at least one; ties by index)."""
    count = max(1, math.ceil(keep * len(confidences)))
    ranked = sorted(
        range(len(confidences)),
        key=lambda i: (confidences[i] is None, -(confidences[i] or 0.0), i),
    )
    return sorted(ranked[:count])


async def weighted_vote(
    ctx: Context, answers: Sequence[str | None], weights: Sequence[float | None], kept: list[int]
) -> int:
    """The most confident member of the answer group (among the ``kept``) with the largest
    summed weight; the most confident kept trace when none of them has an answer."""

    def weight(i: int) -> float:
        return weights[i] or 0.0

    groups = [[kept[j] for j in group] for group in await ctx.cluster([answers[i] for i in kept])]
    members = max(groups, key=lambda g: sum(map(weight, g))) if groups else kept
    return max(members, key=weight)


class DeepConf(Strategy):
    name: ClassVar[str] = "deepconf"
    summary: ClassVar[str] = (
        "Confidence-weighted voting: n traces with token logprobs; the most confident vote."
    )
    answer_logprobs_refused: ClassVar[str | None] = (
        "deepconf asks for its own top logprobs on its final step"
    )

    n: int = Field(default=16, ge=1, le=256)
    keep: float = Field(default=0.5, gt=0.0, le=1.0)
    """The fraction of traces that vote, the most confident first (the paper: 0.1 or 0.9)."""
    window: int = Field(default=WINDOW, ge=1, le=65536)
    """Tokens per sliding window of the group confidence (see ``WINDOW``)."""
    top_k: int = Field(default=20, ge=1, le=20)
    """Top logprobs per position that a token's confidence averages (vLLM gives up to 20)."""
    mode: Literal["offline", "online"] = "offline"
    solver: Strategy = Single()
    """Must be a ``single``: the traces are one call's samples, with their logprobs."""

    @field_validator("mode")
    @classmethod
    def _only_offline(cls, mode: str) -> str:
        if mode == "online":
            raise ValueError(
                "deepconf mode 'online' (early-stopped traces) is not built yet; use mode='offline'"
            )
        return mode

    @field_validator("solver")
    @classmethod
    def _single_solver(cls, solver: Strategy) -> Strategy:
        if not isinstance(solver, Single):
            raise ValueError(
                f"deepconf needs its traces' token logprobs, which only single calls give "
                f"(got solver={solver.name})"
            )
        return solver

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        solver = self.solver
        assert isinstance(solver, Single)
        step = await DIRECT.generate(
            ctx,
            problem,
            {"prompt": solver.prompt},
            label="trace",
            n=self.n,
            max_tokens=solver.max_tokens,
            force_answer=True,
            top_logprobs=self.top_k,
        )
        confidences: list[float | None] = []
        for completion in step.completions:
            if completion.top_logprobs is None and completion.completion_tokens > 0:
                raise UnsupportedError(
                    "deepconf needs token logprobs (top_logprobs), and the engine returned "
                    "none; serve the model with an engine that gives them (vLLM, SGLang)",
                    param="scaffold",
                )
            tops = [t[: self.top_k] for t in completion.top_logprobs or ()]
            confidences.append(trace_confidence(tops, window=self.window))
        kept = kept_indices(confidences, self.keep)
        samples = [Solution.from_step(step, i) for i in range(len(step.completions))]
        chosen = await weighted_vote(ctx, [s.answer for s in samples], confidences, kept)
        ctx.note(
            "confidence",
            {
                "confidence": confidences,
                "kept": [i in kept for i in range(len(samples))],
                "threshold": min((confidences[i] or 0.0) for i in kept),
                "chosen": chosen,
                "window": self.window,
            },
            step_id=step.step_id,
        )
        solution = samples[chosen]
        return solution.marked_cut_short() if step.cut_short else solution

    def max_calls(self) -> int:
        return 1

    def max_samples(self) -> int:
        return self.n
