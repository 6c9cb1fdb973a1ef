"""``deepconf(n, keep, window)``: confidence-filtered, confidence-weighted voting
(DeepConf, arXiv 2508.15260).

``n`` traces come from ONE ``n``-sample request that also asks for each position's top
``top_k`` logprobs. A token's confidence is the negative mean of those logprobs and of
the sampled token's own, when it is not among them (a peaked distribution gives a high
value): the reference averages every entry of vLLM's per-position dict, which holds the
sampled token besides the top ``k`` (so ``k + 1`` values when it is not one of them).
vLLM's completions endpoint returns that whole dict; its chat endpoint the dict's first
``k`` entries, the sampled token first, so there a sampled token outside the top ``k``
displaces the ``k``-th. A group's is the mean over a sliding window of
``window`` tokens; a trace's is its weakest group (``measure="lowest"``), the mean of
its last ``window`` tokens (``"tail"``) or the mean of its lowest ``bottom`` share of
groups (``"bottom"``). Only traces with an answer are ranked: those at or above the
``(1 - keep) * 100``-th percentile of their confidences vote (the reference's
threshold), each weighted by its confidence. The trace records every trace's
confidence and whether it was kept (a ``step_note`` of kind ``confidence``).
DeepConf-low is ``deepconf(n=512, keep=0.1, window=2048)``, DeepConf-high ``keep=0.9``.

The samples must come from single calls with logprobs, so ``solver`` may only be a
``single`` (its ``prompt`` and ``max_tokens`` are used). An engine that returns no
logprobs is an :class:`~scaffolds.errors.UnsupportedError` (a 400 naming deepconf).
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

from scaffolds.core.context import Context
from scaffolds.core.engine_calls import StepRole, StepSampling
from scaffolds.core.solution import Solution
from scaffolds.errors import UnsupportedError
from scaffolds.problem import Problem
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.single import DIRECT, Single

WINDOW = 64
"""Default group window, in tokens. The paper uses 2048 for traces of thousands of
tokens; answers here are often a few hundred tokens, and a window as long as the trace
is just its mean, so 64 keeps the "weakest stretch" meaning for short traces too. A
trace shorter than the window is one group (its mean)."""


def token_confidence(top: Sequence[float], sampled: float | None = None) -> float:
    """The negative mean of one position's top logprobs and the ``sampled`` token's
    logprob, when it is not among them (the reference's ``compute_confidence``
    averages vLLM's dict, the sampled token included), to 3 decimals as the reference
    rounds it (0.0 when there are none).

    >>> token_confidence((-0.5, -1.0), sampled=-1.0), token_confidence((-0.5, -1.0), -3.0)
    (0.75, 1.5)
    """
    values = list(top)
    if sampled is not None and sampled not in values:  # vLLM's dict: the sampled one too
        values.append(sampled)
    finite = [v for v in values if math.isfinite(v)]
    return round(-sum(finite) / len(finite), 3) if finite else 0.0


def window_means(scores: Sequence[float], window: int) -> list[float]:
    """The mean of every run of ``window`` consecutive scores (one mean, of all of them,
    when there are fewer)."""
    size = min(window, len(scores))
    total, means = sum(scores[:size]), []
    means.append(total / size)
    for i in range(size, len(scores)):
        total += scores[i] - scores[i - size]
        means.append(total / size)
    return means


def trace_confidence(
    tops: Sequence[Sequence[float]],
    *,
    window: int,
    measure: str = "lowest",
    bottom: float = 0.1,
    sampled: Sequence[float] | None = None,
) -> float | None:
    """A trace's confidence from its tokens' (None for a trace with no tokens; each
    token's from its top logprobs and, where ``sampled`` has one, the sampled token's
    logprob, :func:`token_confidence`):
    ``lowest``, the weakest window mean (the reference's ``min_window``); ``tail``, the
    mean of the last ``window`` tokens; ``bottom``, the mean of the lowest ``bottom``
    share of the window means (at least one; ``bottom_window``).

    >>> tops = [(-c,) for c in (1.0, 3.0, 2.0, 4.0)]
    >>> [trace_confidence(tops, window=2, measure=m) for m in ("lowest", "tail", "bottom")]
    [2.0, 3.0, 2.0]
    """
    own: Sequence[float | None] = sampled if sampled is not None else ()
    scores = [token_confidence(t, own[i] if i < len(own) else None) for i, t in enumerate(tops)]
    if not scores:
        return None
    if measure == "tail":
        tail = scores[-window:]
        return sum(tail) / len(tail)
    means = window_means(scores, window)
    if measure == "bottom":
        lowest = sorted(means)[: max(1, int(len(means) * bottom))]
        return sum(lowest) / len(lowest)
    return min(means)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``values``, interpolated linearly between the two
    nearest ranks (numpy's default, which the reference's threshold uses).

    >>> percentile([1.0, 2.0, 3.0, 4.0], 90)
    3.7
    """
    ranked = sorted(values)
    rank = q / 100 * (len(ranked) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ranked) - 1)
    return ranked[low] + (ranked[high] - ranked[low]) * (rank - low)


def kept_indices(confidences: Sequence[float | None], keep: float) -> list[int]:
    """The traces at or above the reference's threshold, the ``(1 - keep) * 100``-th
    percentile of the ranked confidences (a None is an unranked trace: never kept).

    >>> kept_indices([1.0, 3.0, None, 2.0, 4.0], 0.5)
    [1, 4]
    """
    ranked = [c for c in confidences if c is not None]
    if not ranked:
        return []
    threshold = percentile(ranked, (1 - keep) * 100)
    return [i for i, c in enumerate(confidences) if c is not None and c >= threshold]


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

    n: int = Field(default=16, ge=1, le=4096)
    """Traces (one request); the server's ``--spec-max-samples`` caps it (the paper: 512)."""
    keep: float = Field(default=0.5, gt=0.0, le=1.0)
    """The share of answered traces that vote, the most confident first (the paper: 0.1
    for DeepConf-low, 0.9 for DeepConf-high)."""
    window: int = Field(default=WINDOW, ge=1, le=65536)
    """Tokens per sliding window of the group confidence, or of the tail (``WINDOW``)."""
    measure: Literal["lowest", "tail", "bottom"] = "lowest"
    """A trace's confidence: its weakest window, its last ``window`` tokens, or its lowest
    ``bottom`` share of windows (the reference's min_window, tail, bottom_window)."""
    bottom: float = Field(default=0.1, gt=0.0, le=1.0)
    """The share of window means that ``measure="bottom"`` averages."""
    top_k: int = Field(default=20, ge=1, le=20)
    """Top logprobs per position that a token's confidence averages, with the sampled
    token's when it is not among them (vLLM gives up to 20; the reference asks for 20)."""
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
            sampling=StepSampling(top_logprobs=self.top_k),
            role=StepRole(force_answer=True),
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
            measured = trace_confidence(
                tops,
                window=self.window,
                measure=self.measure,
                bottom=self.bottom,
                sampled=completion.logprobs,
            )
            confidences.append(measured)
        samples = [Solution.from_step(step, i) for i in range(len(step.completions))]
        answered = [s.answer is not None for s in samples]
        ranked = [c if a else None for c, a in zip(confidences, answered, strict=True)]
        kept = kept_indices(ranked, self.keep)  # only traces with an answer are ranked
        if kept:
            chosen = await weighted_vote(ctx, [s.answer for s in samples], ranked, kept)
        else:  # no trace has an answer: the most confident one
            chosen = max(range(len(samples)), key=lambda i: confidences[i] or 0.0)
        ctx.note(
            "confidence",
            {
                "confidence": confidences,
                "kept": [i in kept for i in range(len(samples))],
                "threshold": min((ranked[i] or 0.0) for i in kept) if kept else None,
                "chosen": chosen,
                "window": self.window,
                "measure": self.measure,
            },
            step_id=step.step_id,
        )
        solution = samples[chosen]
        return solution.marked_cut_short() if step.cut_short else solution

    def max_calls(self) -> int:
        return 1

    def max_samples(self) -> int:
        return self.n
