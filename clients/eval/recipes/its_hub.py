"""its_hub's beam search and particle filtering with a process reward model, as its
README and docs set them up (Red-Hat-AI-Innovation-Team/its_hub).

>>> BEAM.served.reward_model and PARTICLE_FILTER.served.reward_model
True
"""

from __future__ import annotations

from clients.eval.recipes.recipe import Evaluation, PromptKey, Recipe, Reported, Sampling, Served

__all__ = ["BEAM", "PARTICLE_FILTER"]

_SAMPLING = Sampling(temperature=0.8)
_SYSTEM = PromptKey(
    "solve",
    "its_hub README.md:28 (SAL_STEP_BY_STEP_SYSTEM_PROMPT, its_hub/utils.py:2)",
)
_CALLS = ("--spec-max-calls", "1024")
"""32 steps of 8 paths plan more engine calls than the server's default cap of 256."""
_REPORTED = Reported(
    "no single number: its_hub benchmarks accuracy against budgets 1 to 64",
    "its_hub docs/benchmarking.md:21",
)
_COMMON_SOURCES = (
    "README.md:32 and docs/algorithms.md:76 (steps split at blank lines, max_steps=32)",
    "README.md:36 (aggregation_method='prod')",
    "its_hub/lms.py:37 (temperature 0.8)",
    "docs/benchmarking.md:31 (math-500)",
)
_ITS_HUB_MODE = (
    "its_hub's budget semantics, stopping rule (a path does not stop at end of sequence), "
    "finished paths filling the beam and its step count differ until the its_hub mode lands "
    "(issue 51, finding 8)"
)

BEAM = Recipe(
    name="its-hub-beam",
    title="its_hub beam search: budget 32, beam width 4, 32 steps, prod aggregation",
    reference="https://github.com/Red-Hat-AI-Innovation-Team/its_hub",
    served=Served(
        spec='beam(width=4, expand=2, max_steps=32, aggregate="prod")',
        sampling=_SAMPLING,
        answer_format="boxed",
        prompt_keys=(_SYSTEM,),
        serve_flags=_CALLS,
        reward_model=True,
    ),
    evaluation=Evaluation("math500", samples=1, metrics=("accuracy",)),
    reported=_REPORTED,
    sources=(
        "docs/algorithms.md:84-85 (beam_width=4, budget=32)",
        "its_hub/algorithms/beam_search.py:140 (budget // beam_width paths per level)",
        "its_hub/algorithms/beam_search.py:151 (the best beam_width kept)",
        *_COMMON_SOURCES,
    ),
    differs=(
        _ITS_HUB_MODE,
        "its_hub's solve wording is a system prompt; Ponder's solve template a user message",
    ),
)

PARTICLE_FILTER = Recipe(
    name="its-hub-particle-filter",
    title="its_hub particle filtering: 8 particles, 32 steps, prod aggregation",
    reference="https://github.com/Red-Hat-AI-Innovation-Team/its_hub",
    served=Served(
        spec='particle_filter(n=8, max_steps=32, aggregate="prod")',
        sampling=_SAMPLING,
        answer_format="boxed",
        prompt_keys=(_SYSTEM,),
        serve_flags=_CALLS,
        reward_model=True,
    ),
    evaluation=Evaluation("math500", samples=1, metrics=("accuracy",)),
    reported=_REPORTED,
    sources=(
        "README.md:41 and docs/algorithms.md:16 (budget 8: the number of particles)",
        "its_hub/algorithms/particle_gibbs.py:185 (particles = budget // iterations)",
        *_COMMON_SOURCES,
    ),
    differs=(
        _ITS_HUB_MODE,
        "its_hub's solve wording is a system prompt; Ponder's solve template a user message",
    ),
)
