r"""Run a scaffold over a dataset through any engine, and keep the traces.

The problems are :class:`~scaffolds.evaluation.problems.ProblemRow` items, as
:func:`read_problems` reads them (``ponder eval``'s loader, each skipped line a warning).

:func:`collect` solves each problem with :func:`scaffolds.core.run.run_scaffold` (so the
trace is exactly what serving would produce) and hands every finished
:class:`~training.traces.TraceRecord` to a sink, e.g. a run directory's
``traces.jsonl``; a problem that fails is reported and left out, so rerunning retries
it. :class:`GradeBook` grades all the texts of many traces at once, in math-verify's
process pool (:class:`scaffolds.evaluation.answer_pool.AnswerChecker`), for the dataset builders.

>>> import asyncio
>>> from scaffolds.engines.mock import MockEngine
>>> from scaffolds.strategies import Single
>>> kept = []
>>> problems = [ProblemRow("a", "1+1=", "2"), ProblemRow("b", "2+2=", "4")]
>>> stats = asyncio.run(collect(Single(), problems, MockEngine(lambda r: "2"), sink=kept.append))
>>> [r.id for r in kept], stats.done, stats.failed
(['a', 'b'], 2, 0)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scaffolds.core.run import run_scaffold
from scaffolds.core.run_settings import RunSettings
from scaffolds.engines.protocol import Engine, SamplingParams
from scaffolds.evaluation.answer_pool import AnswerChecker
from scaffolds.evaluation.answers import is_correct
from scaffolds.evaluation.problems import ProblemRow, load_problems
from scaffolds.problem import Budget
from scaffolds.strategies import Strategy
from training.traces import TraceRecord

__all__ = ["CollectStats", "GradeBook", "collect", "read_problems"]

logger = logging.getLogger(__name__)


def read_problems(path: str | Path, *, limit: int | None = None) -> list[ProblemRow]:
    """The problems of a JSONL file or dataset (:func:`load_problems`); a line it skips
    is logged as a warning with its number and why, and the rest are read.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "p.jsonl"
    >>> _ = path.write_text('{"id": "a", "problem": "1+1=", "answer": "2"}\\n{oops\\n')
    >>> [p.id for p in read_problems(path)]
    ['a']
    """
    loaded = load_problems(path, limit=limit)
    for bad in loaded.bad:
        logger.warning("%s %s; skipped", loaded.source, bad)
    return loaded.problems


@dataclass
class CollectStats:
    done: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


async def collect(
    strategy: Strategy,
    problems: Sequence[ProblemRow],
    engine: Engine,
    *,
    sink: Callable[[TraceRecord], None],
    samples: int = 1,
    prompt_set: str = "default",
    chat: bool = False,
    params: SamplingParams | None = None,
    budget: Budget | None = None,
    concurrency: int = 8,
    on_progress: Callable[[int], None] | None = None,
) -> CollectStats:
    """Solve every problem ``samples`` times with ``strategy``; one record per problem.

    At most ``concurrency`` problems run at once. Records reach ``sink`` as each
    problem finishes (in finishing order), so an interrupted collection keeps what it
    had; ``on_progress(1)`` is called per problem, failed or not.
    """
    stats = CollectStats()
    gate = asyncio.Semaphore(max(1, concurrency))
    scaffold = str(strategy)
    settings = RunSettings(
        n=samples,
        budget=budget or Budget(),
        params=params or SamplingParams(),
        prompts=prompt_set,
        chat=chat,
    )

    async def one(row: ProblemRow) -> None:
        async with gate:
            try:
                result = await run_scaffold(
                    strategy,
                    row.to_problem(chat),
                    engine,
                    settings,
                )
            except Exception as exc:  # one bad problem must not stop a long collection
                stats.failed += 1
                stats.errors.append(f"{row.id}: {type(exc).__name__}: {exc}")
                logger.warning("problem %s failed: %s", row.id, exc)
            else:
                sink(
                    TraceRecord(
                        id=row.id,
                        problem=row.problem,
                        answer=row.answer,
                        events=tuple(result.events),
                        chat=chat,
                        prompt_set=prompt_set,
                        scaffold=scaffold,
                        history=row.history,
                        meta=row.meta,
                    )
                )
                stats.done += 1
            finally:
                if on_progress is not None:
                    on_progress(1)

    await asyncio.gather(*(one(row) for row in problems))
    return stats


class GradeBook:
    """Verdicts of ``(gold, text)`` pairs, graded ahead in a process pool.

    Call it like :func:`scaffolds.evaluation.answers.is_correct`; a pair it has not seen is graded
    inline (math-verify on the calling thread) and remembered.

    >>> book = GradeBook({("4", "so \\\\boxed{4}"): True})
    >>> book("4", "so \\\\boxed{4}"), book("4", "5")
    (True, False)
    """

    def __init__(self, verdicts: dict[tuple[str, str], bool] | None = None) -> None:
        self.verdicts = dict(verdicts or {})

    def __call__(self, gold: str, text: str) -> bool:
        key = (gold, text)
        if key not in self.verdicts:
            self.verdicts[key] = is_correct(gold, text)
        return self.verdicts[key]

    @classmethod
    async def for_records(
        cls,
        records: Iterable[TraceRecord],
        *,
        workers: int = 2,
        timeout_s: float = 10.0,
        inline: bool = False,
    ) -> GradeBook:
        """Grade every step text of ``records`` against its gold answer, in parallel."""
        pairs = {
            (record.answer, text)
            for record in records
            if record.answer is not None
            for step in record.steps()
            for text in step.texts
        }
        ordered = sorted(pairs)
        async with AnswerChecker(
            max_workers=workers, timeout_s=timeout_s, inline=inline
        ) as checker:
            verdicts = await asyncio.gather(*(checker.grade(g, t) for g, t in ordered))
        return cls(dict(zip(ordered, verdicts, strict=True)))
