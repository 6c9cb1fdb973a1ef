"""Ponder's scaffold library: composable test-time strategies over any LLM engine.

The package is the library's public API (README's "From Python"): import the names in
``__all__`` from here.

>>> import asyncio
>>> from scaffolds.engines.mock import MockEngine
>>> engine = MockEngine(lambda request: "so the answer is \\\\boxed{391}")
>>> result = asyncio.run(solve("gsr(n=4)", "What is 17*23?", engine))
>>> result.solutions[0].answer, result.usage.calls
('391', 2)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scaffolds.core.run import RunResult, run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.trace import TraceRecorder
from scaffolds.engines.protocol import Engine, Message, SamplingParams
from scaffolds.problem import Budget, Problem
from scaffolds.strategies.base import Strategy

__all__ = [
    "Budget",
    "Problem",
    "RunResult",
    "RunSettings",
    "SamplingParams",
    "Strategy",
    "run_scaffold",
    "solve",
]


async def solve(
    spec: str | Mapping[str, Any] | Strategy,
    problem: str | Sequence[Message] | Problem,
    engine: Engine,
    settings: RunSettings | None = None,
    *,
    recorder: TraceRecorder | None = None,
) -> RunResult:
    """Run the scaffold ``spec`` (a compact string, a JSON dict or a Strategy) on a problem.

    A string problem is sent as one user chat message; pass ``Problem.from_text(...)``
    to use the plain completions API instead. ``settings`` are the run's, as
    :func:`run_scaffold` takes them (e.g. ``settings.verifier`` scores candidates for
    the scaffolds that use one, :mod:`scaffolds.verifiers`).
    """
    from scaffolds.spec.build import build_strategy

    strategy = build_strategy(spec)
    if isinstance(problem, str):
        problem = Problem.from_messages((Message("user", problem),))
    elif not isinstance(problem, Problem):
        problem = Problem.from_messages(tuple(problem))
    return await run_scaffold(strategy, problem, engine, settings, recorder=recorder)
