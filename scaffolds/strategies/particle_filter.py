r"""``particle_filter(n, max_steps, step)``: particle filtering with a verifier (its_hub).

``n`` particles (partial solutions) advance a step at a time (a step ends at the
separator ``step``). Each round, every unfinished particle writes one more step (the
particles that share a prefix, as resampled copies do, in one request with that many
samples), the verifier scores the new partial solutions in one verify step, and a
particle's log weight becomes the logit of its score (clipped to [1e-7, 1 - 1e-7]; a
finished particle keeps its last weight). Then ``n`` particles are drawn with
replacement with probabilities ``softmax(log weights)`` (seeded by the run's seed, so a
seeded run draws the same). When all are finished, the heaviest particle wins.

What the default follows: its_hub's ParticleFiltering (Red-Hat-AI-Innovation-Team/
its_hub, ``its_hub/algorithms/particle_gibbs.py``: particle Gibbs with one iteration,
``:277-296``; log weight = logit of the clipped score, ``:52-56``; a finished particle
keeps its last weight and all are resampled, ``:209-221``; argmax selection,
``:263-264``; the paper is https://arxiv.org/abs/2502.01618), with Ponder's end of a
particle, as a beam path ends (:func:`~scaffolds.strategies.beam.finished`): it wrote
a ``\boxed{}`` answer or an empty step, its step ended at the model's end of sequence
rather than at the separator (where the engine says so), or it has ``max_steps`` steps.

``semantics="its_hub"`` ends a particle as its_hub does: its step contains ``\boxed``
(the documented ``stop_token``, ``README.md:32``, a substring test at
``lms.py:185-189``) or it had ``max_steps`` steps before it (``lms.py:181-184``:
``max_steps + 1`` steps at most); end of sequence and an empty step do not end it.
``n`` is its_hub's ``budget`` (``particle_gibbs.py:185``: particles = budget with one
iteration). its_hub's documented settings (``docs/algorithms.md:105-114``:
``max_steps=32``, a ``prod``-aggregated process reward model, ``StepGeneration``'s
temperature 0.8 at ``lms.py:37``) are ``particle_filter(semantics="its_hub", n=8,
max_steps=32, aggregate="prod", temperature=0.8)``.

The trace records each step's parent (``parent_step``, ``sample``), each verify step's
particles (``fields["paths"]``) and, after each round, a ``resample`` note with the
weights and the particles drawn. When the budget runs out, the heaviest particle so far
is the answer, marked cut short.

>>> ParticleFilter(n=4, max_steps=3).max_calls()
24
>>> ParticleFilter(semantics="its_hub", n=4, max_steps=3).max_calls()
32
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from scaffolds.core.context import Context
from scaffolds.core.solution import Solution
from scaffolds.errors import BudgetExhaustedError
from scaffolds.problem import Problem
from scaffolds.strategies.base import Strategy
from scaffolds.strategies.beam import (
    SEARCH_STEP,
    Path,
    Semantics,
    answer_of,
    best_so_far,
    by_score,
    extend_all,
    score_level,
    settled,
)
from scaffolds.strategies.steps import StepBuilder
from scaffolds.verifiers.scoring import Aggregate, log_weight, softmax, verifier_for


class ParticleFilter(Strategy):
    name: ClassVar[str] = "particle_filter"
    summary: ClassVar[str] = (
        "Particle filtering: n partial solutions advance a step at a time, resampled by "
        "their verifier scores."
    )
    step_builders: ClassVar[tuple[StepBuilder, ...]] = (SEARCH_STEP,)
    helper_models: ClassVar[tuple[str, ...]] = ("verifier",)
    answer_logprobs_refused: ClassVar[str | None] = (
        "particle_filter's answer is put together from steps"
    )

    semantics: Semantics = "default"
    """``default``: Ponder's end of a particle; ``its_hub``: its_hub's stopping rule and
    step count (see the module's docstring)."""
    n: int = Field(default=8, ge=1, le=256)
    max_steps: int = Field(default=8, ge=1, le=64)
    """The most steps of a particle (its_hub: a particle stops after ``max_steps + 1``)."""
    step: str = Field(default="\n\n", min_length=1)
    """The separator that ends a step (the engine stops there)."""
    step_tokens: int | None = Field(default=None, ge=1)
    """Most tokens of one step (default: the run's ``max_tokens``)."""
    aggregate: Aggregate = "last"
    """A particle's score from its steps' scores: last, min or prod."""
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """Each step's sampling temperature (default: the request's; its_hub's is 0.8)."""
    verifier: str | None = None
    """The served model that verifies (default: the verifier configured for the model)."""

    def rounds(self) -> int:
        """The most rounds (steps of a particle): ``max_steps``, or its_hub's one more.

        >>> ParticleFilter(max_steps=32).rounds()
        32
        >>> ParticleFilter(semantics="its_hub", max_steps=32).rounds()
        33
        """
        return self.max_steps + (self.semantics == "its_hub")

    async def solve(self, problem: Problem, ctx: Context) -> Solution:
        verifier = verifier_for(ctx, self.verifier, "scaffold.verifier")
        particles = [Path()] * self.n
        rng = ctx.rng("resample")
        for round_ in range(1, self.rounds() + 1):
            alive = [p for p in particles if not p.done]
            groups: dict[Path, int] = {}
            for p in alive:
                groups[p] = groups.get(p, 0) + 1
            label = f"round {round_}"
            extended = await extend_all(ctx, problem, self, groups.items(), label=label)
            children, stopped = settled(extended)
            try:
                if stopped is not None:  # resampling needs every particle's weight
                    raise stopped
                label = f"verify round {round_}"
                scored = await score_level(ctx, verifier, problem, self, children, label=label)
            except BudgetExhaustedError as exc:
                started = [p for p in particles if p.steps]
                return await best_so_far(ctx, started or children, self.step, exc)
            particles = [p for p in particles if p.done] + scored
            weights = [log_weight(p.score if p.score is not None else 0.5) for p in particles]
            drawn = rng.choices(range(len(particles)), weights=softmax(weights), k=self.n)
            ctx.note(
                "resample",
                {
                    "round": round_,
                    "particles": [list(p.node) for p in particles],
                    "log_weights": weights,
                    "drawn": drawn,
                },
            )
            particles = [particles[i] for i in drawn]
            if all(p.done for p in particles):
                break
        return answer_of(max(particles, key=by_score), self.step, cut=False)

    def max_calls(self) -> int:
        return 2 * self.n * self.rounds()

    def max_samples(self) -> int:
        return 2 * self.n * self.rounds()
