"""How strategies use a verifier: pick it, score through the run, weigh a vote.

:func:`verifier_for` is the verifier a spec asked for: a served model it names (as a
generative verifier, with that model's thinking turned off), else the run's model's own
(its config's ``verifier`` or ``reward_url``); none is a 400 naming ``param``.
:func:`score` runs it as a ``verify`` step of the run (budgeted, traced, its usage
counted: :meth:`Context.verify`). The rest are the small rules the search strategies
share, taken from its_hub: a partial path's score from its steps' scores
(:func:`aggregate`), a particle's log weight (:func:`log_weight`, the logit of its
score, clipped) and softmax resampling weights (:func:`softmax`).

>>> aggregate((0.9, 0.5, 0.8), "last"), aggregate((0.9, 0.5, 0.8), "min")
(0.8, 0.5)
>>> round(aggregate((0.5, 0.5), "prod"), 4), round(log_weight(0.75), 4)
(0.25, 1.0986)
>>> [round(p, 4) for p in softmax([0.0, 1.0986])]
[0.25, 0.75]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from scaffolds.core.context import Context
from scaffolds.core.solution import Solution
from scaffolds.engines.protocol import Verdicts, Verifier
from scaffolds.errors import InvalidRequestError
from scaffolds.problem import Problem
from scaffolds.verifiers.generative import GenerativeVerifier

__all__ = [
    "Aggregate",
    "aggregate",
    "log_weight",
    "pick_by_weight",
    "score",
    "softmax",
    "verifier_for",
]

Aggregate = Literal["last", "min", "prod"]
"""How a partial path's step scores make its score: the last step's (a process reward
model's value of the prefix), the weakest step's, or their product."""

CLIP = 1e-7
"""How close to 0 or 1 a score is taken before its logit (its_hub's clip)."""


def verifier_for(ctx: Context, name: str | None, param: str) -> Verifier:
    """The served model ``name`` as a generative verifier, else the run's verifier."""
    if name is not None:
        model = ctx.served_model(name)
        return GenerativeVerifier(model.engine, name, extra=model.thinking.off)
    if ctx.verifier is None:
        raise InvalidRequestError(
            "this scaffold needs a verifier, and none is configured for this model "
            '(set the model\'s verifier, or name a served model: verifier="NAME")',
            param=param,
        )
    return ctx.verifier


async def score(
    ctx: Context,
    verifier: Verifier,
    problem: Problem,
    texts: Sequence[str],
    *,
    label: str = "verify",
    step: str | None = None,
    values: Mapping[str, Any] | None = None,
) -> Verdicts:
    """Scores of ``texts`` (each read as another step reads a candidate: the part
    after its thinking), as one ``verify`` step of the run."""
    shown = [ctx.shown(t) for t in texts]
    return await ctx.verify(verifier, problem.text, shown, label=label, step=step, values=values)


async def pick_by_weight(
    samples: Sequence[Solution], scores: Sequence[float], ctx: Context
) -> Solution:
    """Verifier-weighted voting: equivalent answers pool their scores and the heaviest
    answer wins, represented by its best-scored sample (the best-scored sample when no
    sample has an answer). The weights are noted in the trace (``weighted_vote``)."""
    groups = await ctx.cluster([s.answer for s in samples])
    if not groups:
        best = max(range(len(samples)), key=lambda i: scores[i])
        return samples[best]
    weights = [sum(scores[i] for i in group) for group in groups]
    heaviest = max(range(len(groups)), key=lambda g: weights[g])
    ctx.note(
        "weighted_vote",
        {
            "answers": [samples[g[0]].answer for g in groups],
            "weights": weights,
            "members": groups,
        },
    )
    best = max(groups[heaviest], key=lambda i: scores[i])
    return samples[best]


def aggregate(steps: Sequence[float], how: Aggregate) -> float:
    """A path's score from its steps' scores."""
    if how == "last":
        return steps[-1]
    if how == "min":
        return min(steps)
    return math.prod(steps)


def log_weight(score: float) -> float:
    """A particle's log weight: the logit of its score, clipped to [CLIP, 1 - CLIP]."""
    p = min(max(score, CLIP), 1 - CLIP)
    return math.log(p / (1 - p))


def softmax(values: Sequence[float]) -> list[float]:
    """Probabilities proportional to ``exp(value)`` (shifted by the maximum)."""
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    total = sum(exps)
    return [e / total for e in exps]
