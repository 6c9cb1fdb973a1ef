"""Run a scaffold for a request: ``n`` choices, one shared budget, one trace.

This is the single entry point the server, the eval client and training use.

>>> import asyncio
>>> from scaffolds.engines.mock import MockEngine
>>> from scaffolds.strategies.single import Single
>>> engine = MockEngine(lambda r: "\\\\boxed{4}")
>>> settings = RunSettings(n=3)
>>> result = asyncio.run(run_scaffold(Single(), Problem.from_text("2+2="), engine, settings))
>>> [s.answer for s in result.solutions], result.usage.calls
(['4', '4', '4'], 1)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from scaffolds.core.context import Context
from scaffolds.core.run_settings import RunSettings
from scaffolds.core.solution import Solution
from scaffolds.core.trace import RunFinished, TraceEvent, TraceRecorder
from scaffolds.engines.protocol import Engine, Usage
from scaffolds.errors import BudgetExhaustedError, DeadlineExceededError
from scaffolds.fanout import gather_within_budget
from scaffolds.problem import Problem


class Solver(Protocol):
    """What a run needs of a strategy (:class:`~scaffolds.strategies.base.Strategy` is
    one): the prompt-set check, and one solution or ``k`` of them."""

    @property
    def batches_samples(self) -> bool: ...
    def check_prompt_set(self, name: str) -> None: ...
    async def solve(self, problem: Problem, ctx: Context) -> Solution: ...
    async def solve_many(
        self, problem: Problem, ctx: Context, k: int, label: str = "sample"
    ) -> list[Solution]: ...


@dataclass(frozen=True, slots=True)
class RunResult:
    solutions: list[Solution]
    """One per choice, in order."""
    usage: Usage
    events: list[TraceEvent]
    cut_reason: str | None

    @property
    def cut_short(self) -> bool:
        return any(s.cut_short for s in self.solutions)


def problem_key(problem: Problem) -> str:
    """A short stable key of a problem (and its conversation), for replica affinity."""
    digest = hashlib.sha256()
    for message in problem.history:
        digest.update(f"{message.role}\0{message.content}\0".encode())
    digest.update(problem.text.encode())
    return digest.hexdigest()[:16]


async def run_scaffold(
    strategy: Solver,
    problem: Problem,
    engine: Engine,
    settings: RunSettings | None = None,
    *,
    recorder: TraceRecorder | None = None,
) -> RunResult:
    """Solve ``problem`` ``settings.n`` times with ``strategy`` and account every engine call.

    Strategies that batch samples (``single``) serve all choices with one request;
    others run ``n`` independent runs concurrently. A choice the budget stopped before
    any answer comes back empty and cut short. If the deadline passed before *any*
    choice had an answer, :class:`DeadlineExceededError` is raised.
    ``settings.routing`` says how the model thinks and which served models helper steps
    may run on (:mod:`scaffolds.core.thinking`). ``settings.answer_format`` is how a
    sample's final answer is read (and so what votes): ``boxed`` (only the last
    ``\\boxed{}`` after the thinking) or ``lenient``
    (:func:`scaffolds.evaluation.answers.extract_answer`). ``settings.chat`` None sends
    the problem in the form it came in. The recorder is closed at the end, whatever
    happens. A prompt set that the strategy (or one nested in it) lacks is an
    :class:`InvalidRequestError` up front.
    """
    settings = settings or RunSettings()
    prompts = settings.prompts
    strategy.check_prompt_set(prompts if isinstance(prompts, str) else prompts.name)
    recorder = recorder or TraceRecorder()
    if settings.chat is None:
        settings = replace(settings, chat=not isinstance(problem.raw_prompt, str))
    ctx = Context.root(engine, settings, recorder=recorder, affinity_key=problem_key(problem))
    n = settings.n
    try:
        results: Sequence[Solution | BudgetExhaustedError]
        if n == 1:
            results = await gather_within_budget(strategy.solve(problem, ctx))
        elif strategy.batches_samples:
            try:
                results = await strategy.solve_many(problem, ctx, n)
            except BudgetExhaustedError as exc:
                results = [exc] * n
        else:
            results = await gather_within_budget(
                *(
                    strategy.solve(problem, ctx.child(f"choice {i + 1}", final=True, choice=i))
                    for i in range(n)
                )
            )
        solutions: list[Solution] = []
        for choice, outcome in enumerate(results):
            if isinstance(outcome, BudgetExhaustedError):
                outcome = Solution("", None, cut_short=True)
            solutions.append(outcome)
            recorder.emit(
                RunFinished(
                    text=outcome.text,
                    answer=outcome.answer,
                    usage=ctx.usage,
                    cut_short=outcome.cut_short,
                    cut_reason=ctx.cut_reason,
                    choice=choice,
                    step_id=outcome.step_id,
                )
            )
        if ctx.cut_reason == "time" and all(not s.text for s in solutions):
            raise DeadlineExceededError("the deadline passed before any answer was ready")
        return RunResult(solutions, ctx.usage, list(recorder.events), ctx.cut_reason)
    finally:
        recorder.close()
