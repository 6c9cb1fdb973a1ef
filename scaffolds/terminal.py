"""What the command-line tools print, readable on a terminal and piped alike.

On a terminal, rich draws as usual: live progress bars, tables at the window's width. Piped
(or redirected to a file), rich would squeeze everything into 80 columns and draw a bar
only once, at its end; here text is not wrapped instead (:func:`console`), and progress is
plain lines, each with its count, percent, elapsed time and ETA (:func:`progress`)::

    eval single: 40/100 (40%) elapsed 0:00:12 eta 0:00:18  acc 0.55

>>> import io
>>> from rich.console import Console
>>> sink = io.StringIO()
>>> bar = progress(console=Console(file=sink), clock=iter([0.0, 0.0, 10.0, 10.0]).__next__)
>>> with bar:
...     task = bar.add_task("rows", total=4)
...     bar.advance(task, 2)
>>> sink.getvalue()
'rows: 2/4 (50%) elapsed 0:00:10 eta 0:00:10\\n'
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import Progress, TaskID

__all__ = ["PIPED_WIDTH", "LineProgress", "console", "progress"]

PIPED_WIDTH = 1000
"""The width rich output is laid out at when not on a terminal: wide enough that nothing
wraps (a line is as long as its content; ``clients/cli.py`` does the same for ``--help``)."""

LINE_EVERY = 5.0
"""A plain progress line is printed each time a task passes a multiple of this percent."""


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr): the terminal's width on a terminal, else
    :data:`PIPED_WIDTH` with long lines left unwrapped.

    >>> console().width  # the doctest's stdout is not a terminal
    1000
    """
    found = Console(stderr=stderr)
    if found.is_terminal:
        return found
    return Console(stderr=stderr, width=PIPED_WIDTH, soft_wrap=True)


def _clock_text(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(max(0.0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class LineProgress(Progress):
    """rich's :class:`~rich.progress.Progress`, drawn as plain lines: one each time a task
    passes a multiple of :data:`LINE_EVERY` percent (and when it ends), with its count,
    percent, elapsed time, ETA and the ``stats`` field when a task has one.

    The ETA is from the rate since the task was added (counting only what was done since:
    a resumed run's earlier work does not shorten it).
    """

    def __init__(self, *, console: Console, clock: Callable[[], float] = time.monotonic):
        super().__init__(console=console, disable=True, get_time=clock)
        self._printed: dict[TaskID, int] = {}
        self._begun: dict[TaskID, tuple[float, float]] = {}

    def add_task(
        self,
        description: str,
        start: bool = True,
        total: float | None = 100.0,
        completed: int = 0,
        visible: bool = True,
        **fields: Any,
    ) -> TaskID:
        task = super().add_task(
            description, start=start, total=total, completed=completed, visible=visible, **fields
        )
        self._printed[task] = self._step(task)
        self._begun[task] = (self.get_time(), completed)
        return task

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._maybe_say(task_id)

    def update(self, task_id: TaskID, **kwargs: Any) -> None:
        super().update(task_id, **kwargs)
        self._maybe_say(task_id)

    def _step(self, task_id: TaskID) -> int:
        return int(self._tasks[task_id].percentage // LINE_EVERY)

    def _maybe_say(self, task_id: TaskID) -> None:
        step = self._step(task_id)
        if step > self._printed.get(task_id, -1):
            self._printed[task_id] = step
            self.console.print(self.line(task_id), markup=False, highlight=False)

    def line(self, task_id: TaskID) -> str:
        """The task's progress line."""
        task = self._tasks[task_id]
        now = self.get_time()
        began, done_then = self._begun.get(task_id, (now, 0.0))
        elapsed = now - began
        done = task.completed - done_then
        eta = None
        if task.total is not None and done > 0:
            eta = elapsed / done * max(0.0, task.total - task.completed)
        total = "?" if task.total is None else f"{task.total:g}"
        text = (
            f"{task.description}: {task.completed:g}/{total} ({task.percentage:.0f}%) "
            f"elapsed {_clock_text(elapsed)} eta {_clock_text(eta)}"
        )
        stats = task.fields.get("stats")
        return f"{text}  {stats}" if stats else text


def progress(
    *columns: Any,
    console: Console | None = None,
    disable: bool = False,
    clock: Callable[[], float] = time.monotonic,
    **options: Any,
) -> Progress:
    """A progress display on ``console`` (stderr by default): rich's live bar with
    ``columns`` on a terminal, else :class:`LineProgress`; ``disable`` draws nothing."""
    target = console or Console(stderr=True)
    if disable or target.is_terminal:
        return Progress(*columns, console=target, disable=disable, get_time=clock, **options)
    return LineProgress(console=target, clock=clock)
