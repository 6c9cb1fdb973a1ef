"""The evaluation loop: problems x samples through the caller's "answer one problem"
coroutine, graded, stored as each one lands, with a progress bar.

``ponder eval`` answers over HTTP (:mod:`clients.eval.runner`), the experiments in
process (``solve`` on an engine); the loop is the same. A :class:`Job` is one (arm,
problem, sample); ``answer(job)`` returns its record (a failure is a record with
``error``, which a store counts as not done, so a rerun retries it). With a grader, a
record that holds a ``response`` is graded here (``correct``, ``score``, ``grade_note``
after its ``extracted`` answer, and each of its ``steps`` when the grader grades steps),
then appended to the store and shown on the board. ``concurrency`` workers share one
queue, in the jobs' order (:func:`make_jobs` makes them sample-major, so early accuracy
covers every problem).

>>> import asyncio
>>> from scaffolds.evaluation.grading import ExactGrader
>>> from scaffolds.evaluation.problems import ProblemRow
>>> async def answer(job: Job[ProblemRow]) -> Record:
...     text = f"Answer: {job.sample + 3}"
...     return {"id": job.problem.id, "response": text, "extracted": str(job.sample + 3)}
>>> work = make_jobs(["single"], [ProblemRow("p", "1+2=", "3")], range(2))
>>> seen: list[Record] = []
>>> landed = lambda job, record: seen.append(record)
>>> outcome = asyncio.run(run_jobs(work, answer, grader=ExactGrader(), on_job=landed))
>>> [(r["extracted"], r["correct"]) for r in seen], outcome.finished
([('3', True), ('4', False)], 2)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from scaffolds.evaluation.grading import Grader
from scaffolds.evaluation.problems import ProblemRow
from scaffolds.evaluation.results import Key, Record, ResultStore

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["Board", "Job", "RunOutcome", "Tally", "grade_record", "make_jobs", "run_jobs"]

P = TypeVar("P")


@dataclass(frozen=True)
class Job(Generic[P]):
    """One sample to take: ``arm`` (a scaffold spec or condition label), the problem, the
    sample number (a seed, for in-process runs) and the problem's place in its list."""

    arm: str
    problem: P
    sample: int
    index: int


@dataclass
class RunOutcome:
    """What a run did: samples done before it, finished and failed now, still pending."""

    already_done: int = 0
    finished: int = 0
    errors: int = 0
    pending: int = 0


def make_jobs(
    arms: Sequence[str],
    problems: Sequence[P],
    samples: Iterable[int],
    done: Iterable[Key] = (),
    *,
    key: Callable[[Job[P]], Key] | None = None,
) -> list[Job[P]]:
    """Every (arm, sample, problem) not in ``done``: arm by arm, sample-major.

    ``key`` gives a job's resume key (default: arm, the problem's ``id``, sample).

    >>> done = [("a", "x", 0)]
    >>> work = make_jobs(["a"], ["x", "y"], [0, 1], done, key=lambda j: ("a", j.problem, j.sample))
    >>> [(j.sample, j.problem) for j in work]
    [(0, 'y'), (1, 'x'), (1, 'y')]
    """
    finished = set(done)
    key_of = key or (lambda job: (job.arm, str(getattr(job.problem, "id", "")), job.sample))
    ordered = list(samples)
    jobs = [
        Job(arm, problem, sample, index)
        for arm in arms
        for sample in ordered
        for index, problem in enumerate(problems)
    ]
    return [job for job in jobs if key_of(job) not in finished]


async def grade_record(grader: Grader, problem: ProblemRow, record: Record) -> Record:
    """``record`` with its grade (after ``extracted``) and its steps graded; unchanged
    when it failed or holds no ``response``."""
    if record.get("error") or "response" not in record:
        return record
    text = str(record["response"] or "")
    grade = await grader.grade(problem, text, record.get("extracted"))
    marks: Record = {"correct": grade.correct, "score": grade.score}
    if grade.note:
        marks["grade_note"] = grade.note
    out: Record = {}
    for name, value in record.items():
        out[name] = value
        if name == "extracted":
            out |= marks
    out |= {k: v for k, v in marks.items() if k not in out}
    if isinstance(out.get("steps"), list):
        steps = []
        for step in out["steps"]:
            step = dict(step)
            step_text = str(step.pop("text", "") or "")
            correct = None
            if grader.per_step:
                correct = (await grader.grade(problem, step_text, step.get("answer"))).correct
            steps.append({**step, "correct": correct})
        out["steps"] = steps
    return out


@dataclass
class Tally:
    """An arm's running accuracy, tokens per sample and failures, for the board."""

    done: int = 0
    graded: int = 0
    correct: int = 0
    tokens: int = 0
    errors: int = 0

    def add(self, record: Mapping[str, Any]) -> None:
        if record.get("error"):
            self.errors += 1
            return
        self.done += 1
        self.tokens += int((record.get("usage") or {}).get("completion_tokens") or 0)
        if record.get("correct") is not None:
            self.graded += 1
            self.correct += bool(record["correct"])

    def line(self) -> str:
        acc = f"{self.correct / self.graded:.1%}" if self.graded else "-"
        tok = f"{self.tokens / self.done:,.0f}" if self.done else "-"
        err = f" err {self.errors}" if self.errors else ""
        return f"acc {acc}  tok out {tok}/sample{err}"


class Board:
    """A progress bar per arm (done of ``total``, rate, eta, its :class:`Tally`, and the
    generated tokens per second of this session's samples).

    ``enabled=False`` keeps the tallies and draws nothing.

    >>> board = Board({"gsr": Tally()}, 4, enabled=False, clock=iter([0.0, 1.0, 2.0]).__next__)
    >>> board.add("gsr", {"usage": {"total_tokens": 120, "completion_tokens": 100}})
    >>> board.stats("gsr")
    'acc -  tok out 100/sample  50 gen tok/s'
    """

    def __init__(
        self,
        tallies: Mapping[str, Tally],
        total: int,
        *,
        console: Console | None = None,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        from scaffolds.terminal import progress

        self.tallies = dict(tallies)
        self.clock = clock
        self.started = clock()
        self.generated = dict.fromkeys(self.tallies, 0)
        """Completion tokens of the samples that landed since the board was made."""
        self.bar = progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            _rate_column(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[stats]}"),
            console=console or Console(stderr=True),
            disable=not enabled,
        )
        self.tasks = {
            arm: self.bar.add_task(arm, total=total, completed=t.done, stats=t.line())
            for arm, t in self.tallies.items()
        }

    def add(self, arm: str, record: Mapping[str, Any]) -> None:
        """Count one finished (or failed) sample of ``arm``."""
        tally = self.tallies[arm]
        tally.add(record)
        done = 0 if record.get("error") else 1
        if done:
            usage = record.get("usage") or {}
            self.generated[arm] += int(usage.get("completion_tokens") or 0)
        # One update, so a progress line (piped) shows the stats with this sample in.
        self.bar.update(self.tasks[arm], advance=done, stats=self.stats(arm))

    def stats(self, arm: str) -> str:
        """``arm``'s tally and its generated tokens per second so far in this session."""
        elapsed = self.clock() - self.started
        rate = self.generated[arm] / elapsed if elapsed > 0 else 0.0
        return f"{self.tallies[arm].line()}  {rate:,.0f} gen tok/s"

    def __enter__(self) -> Board:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()


def _rate_column() -> Any:
    """Samples per second (rich's columns are imported only when a board is drawn)."""
    from rich.progress import ProgressColumn, Task
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:.2f}/s" if speed else "-/s", style="progress.data.speed")

    return Rate()


async def run_jobs(
    jobs: Sequence[Job[P]],
    answer: Callable[[Job[P]], Awaitable[Record]],
    *,
    grader: Grader | None = None,
    concurrency: int = 8,
    store: ResultStore | None = None,
    board: Board | None = None,
    on_job: Callable[[Job[P], Record], None] | None = None,
) -> RunOutcome:
    """Answer every job, at most ``concurrency`` at once; each record is graded (with a
    grader, for :class:`ProblemRow` problems), appended to ``store``, counted on ``board``
    and handed to ``on_job`` with its job as it lands.

    Cancel it at any time: finished records are already stored. An error ``answer``
    raises (rather than records) stops the run and is raised as is.
    """
    outcome = RunOutcome(pending=len(jobs))
    queue: Iterator[Job[P]] = iter(jobs)

    async def worker() -> None:
        for job in queue:
            record = await answer(job)
            if grader is not None and isinstance(job.problem, ProblemRow):
                record = await grade_record(grader, job.problem, record)
            if store is not None:
                store.append(record)
            if record.get("error"):
                outcome.errors += 1
            else:
                outcome.finished += 1
            outcome.pending -= 1
            if board is not None:
                board.add(job.arm, record)
            if on_job is not None:
                on_job(job, record)

    with contextlib.ExitStack() as stack:
        if store is not None:
            stack.enter_context(store)
        if board is not None:
            stack.enter_context(board)
        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(max(1, min(concurrency, len(jobs)))):
                    group.create_task(worker())
        except BaseExceptionGroup as failed:  # one worker's error, as ``gather`` raises it
            if len(failed.exceptions) == 1:
                raise failed.exceptions[0] from None
            raise
    return outcome
