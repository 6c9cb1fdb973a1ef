"""its_hub's beam search and particle filtering with a process reward model, as its
README and docs set them up (Red-Hat-AI-Innovation-Team/its_hub), in its_hub's own
semantics (its budget, stopping rule, step count and beam filling).

>>> BEAM.served.reward_model and PARTICLE_FILTER.served.reward_model
True
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, Recipe, Reported, Sampling, Served

__all__ = ["BEAM", "PARTICLE_FILTER"]

_SERVE_FLAGS = ("--spec-max-calls", "1185", "--reward-step-tag", "<extra_0>")
"""The beam's plan is 1185 engine calls (``Beam.max_calls``), past the server's default
cap of 256; Qwen2.5-Math-PRM-7B, the documented reward model, reads ``<extra_0>`` after
each step."""
_EVALUATION = Evaluation("math500", samples=1, metrics=("accuracy",))
_REPORTED = Reported(
    "no single number: its_hub benchmarks accuracy against budgets 1 to 64",
    "its_hub docs/benchmarking.md:21",
)
_COMMON_SOURCES = (
    "README.md:32 and docs/algorithms.md:76 (steps split at blank lines, max_steps=32, "
    "stop at \\boxed)",
    "README.md:33-37 and docs/algorithms.md:77-81 (Qwen/Qwen2.5-Math-PRM-7B, "
    "aggregation_method='prod')",
    "its_hub/lms.py:37 (temperature 0.8 per step)",
    "its_hub/lms.py:181-189 (a path stops at \\boxed in its step or after max_steps + 1 "
    "steps: semantics=its_hub)",
    "docs/benchmarking.md:31 (math-500)",
)
_DIFFERS = (
    "the system prompt: its_hub's client sends SAL_STEP_BY_STEP_SYSTEM_PROMPT "
    "(README.md:28, its_hub/utils.py:2) with every request; the search sends the problem "
    "as the request gives it, and ponder eval's requests carry no system prompt",
    "its_hub samples each copy of a path in its own request and resamples with Python's "
    "unseeded random; Ponder asks once with n and draws with the run's seed",
)


def _served(spec: str) -> Served:
    """Either search as served: ``spec``, the request's sampling, boxed answers, and the
    reward model with :data:`_SERVE_FLAGS`.

    >>> _served("beam()").serve_flags[:2]
    ('--spec-max-calls', '1185')
    """
    return Served(
        spec=spec,
        sampling=Sampling(),
        answer_format="boxed",
        serve_flags=_SERVE_FLAGS,
        reward_model=True,
    )


BEAM = Recipe(
    name="its-hub-beam",
    title="its_hub beam search: budget 32, beam width 4, 32 steps, prod aggregation",
    reference="https://github.com/Red-Hat-AI-Innovation-Team/its_hub",
    served=_served(
        'beam(semantics="its_hub", width=4, budget=32, max_steps=32, aggregate="prod", '
        "temperature=0.8)"
    ),
    evaluation=_EVALUATION,
    reported=_REPORTED,
    sources=(
        "docs/algorithms.md:84-85 (beam_width=4, budget=32)",
        "its_hub/algorithms/beam_search.py:135-158 (budget / width first paths, the best "
        "width kept, each copied budget / width times: semantics=its_hub, budget=32)",
        *_COMMON_SOURCES,
    ),
    differs=_DIFFERS,
)

PARTICLE_FILTER = Recipe(
    name="its-hub-particle-filter",
    title="its_hub particle filtering: 8 particles, 32 steps, prod aggregation",
    reference="https://github.com/Red-Hat-AI-Innovation-Team/its_hub",
    served=_served(
        'particle_filter(semantics="its_hub", n=8, max_steps=32, aggregate="prod", temperature=0.8)'
    ),
    evaluation=_EVALUATION,
    reported=_REPORTED,
    sources=(
        "README.md:41 and docs/algorithms.md:16 (budget 8: the number of particles)",
        "its_hub/algorithms/particle_gibbs.py:185 (particles = budget // iterations)",
        *_COMMON_SOURCES,
    ),
    differs=_DIFFERS,
)
