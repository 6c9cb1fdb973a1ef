"""Answer equivalence for async code, under a hard time limit: :class:`AnswerChecker`.

math-verify (behind :mod:`scaffolds.evaluation.answers`) can hang on pathological LaTeX, and its
own timeout only works on a main thread. The checker runs it in a spawn process pool
instead: each task gets a time limit, a task over it has the pool killed and replaced,
and that one task falls back to comparing normalized strings (``verify=False``).

Each worker reports its pid from its initializer (and watches its parent, see
:func:`scaffolds.processes.children.watch_parent`), so the checker can kill its own workers,
a hung one included, through :func:`multiprocessing.active_children`, without reaching
into the pool's internals.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.queues import SimpleQueue
from typing import Any, TypeVar

from scaffolds.evaluation.answers import (
    answers_equal,
    cluster_answers,
    is_correct,
    normalize_answer,
)
from scaffolds.processes.children import watch_parent

__all__ = ["AnswerChecker"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _start_worker(pids: SimpleQueue[int], parent: int) -> None:
    """A pool worker's initializer: report this worker's pid, then watch ``parent``, the
    process that started the pool."""
    pids.put(os.getpid())
    watch_parent(parent)


def _warm_up() -> int:
    """Import math-verify in a fresh worker so the first real task is not timed on it."""
    answers_equal("1/2", "0.5")
    return os.getpid()


class _Pool:
    """One process pool, with the pids its workers reported."""

    def __init__(self, max_workers: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pids: SimpleQueue[int] = context.SimpleQueue()
        self.known: set[int] = set()
        self.executor = ProcessPoolExecutor(
            max_workers=max_workers,
            mp_context=context,
            initializer=_start_worker,
            initargs=(self.pids, os.getpid()),
        )
        self.warm: list[Future[int]] = [self.executor.submit(_warm_up) for _ in range(max_workers)]

    def worker_pids(self) -> set[int]:
        """Every pid a worker of this pool has reported so far."""
        while not self.pids.empty():
            self.known.add(self.pids.get())
        return set(self.known)

    def kill(self) -> None:
        """Kill the workers (a hung one never returns) and shut the pool down."""
        ours = self.worker_pids()
        for child in multiprocessing.active_children():  # only unreaped children: no pid reuse
            if child.pid in ours:
                child.kill()
        self.shutdown()

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


class AnswerChecker:
    """Answer equivalence for async code, in a spawn process pool under a time limit.

    Each task gets ``timeout_s`` seconds (counted once a worker is free for it); on a
    timeout the pool is killed and replaced, and that one task falls back to comparing
    normalized strings. ``inline=True`` runs everything in the calling thread instead.

    >>> async def demo() -> int | None:
    ...     async with AnswerChecker(inline=True) as checker:
    ...         return await checker.vote(["7", "0.5", "1/2"])
    >>> asyncio.run(demo())
    1
    """

    def __init__(
        self,
        *,
        max_workers: int = 1,
        timeout_s: float = 10.0,
        verify_timeout_s: float = 5.0,
        startup_timeout_s: float = 60.0,
        inline: bool = False,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1 (got {max_workers})")
        if timeout_s <= 0 or startup_timeout_s <= 0:
            raise ValueError("timeout_s and startup_timeout_s must be > 0")
        self.max_workers = max_workers
        self.timeout_s = timeout_s
        self.verify_timeout_s = verify_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.inline = inline
        self._pool: _Pool | None = None
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._busy = 0
        self._closed = False

    @property
    def running(self) -> bool:
        """Whether a pool is up (it starts with :meth:`start` or the first task, and again
        after a recycle)."""
        return self._pool is not None

    def start(self) -> None:
        """Start the pool now, so that no task waits for it: its workers spawn and import
        math-verify in the background (:attr:`state` says when they are done). A pool
        whose warm-up failed is replaced; inline, or once closed, this does nothing."""
        if self.inline or self._closed:
            return
        if self._pool is not None and self.state == "failed":
            failed, self._pool = self._pool, None
            failed.kill()
        if self._pool is None:
            self._pool = _Pool(self.max_workers)

    async def warm_up(self) -> str:
        """:meth:`start`, then wait (up to ``startup_timeout_s``) until the workers are
        warm; the :attr:`state` it ended in."""
        self.start()
        pool = self._pool
        if pool is not None:
            pending = [asyncio.wrap_future(f) for f in pool.warm if not f.done()]
            for wrapper in pending:  # a failure shows in the state; don't log it as unretrieved
                wrapper.add_done_callback(lambda f: f.cancelled() or f.exception())
            if pending:
                await asyncio.wait(pending, timeout=self.startup_timeout_s)
        return self.state

    @property
    def state(self) -> str:
        """``warm`` (a task starts at once: inline, or every worker up with math-verify
        imported), ``starting``, ``failed`` (a worker's warm-up failed) or ``down``."""
        if self.inline:
            return "warm"
        pool = self._pool
        if pool is None:
            return "down"
        if not all(f.done() for f in pool.warm):
            return "starting"
        ok = all(not f.cancelled() and f.exception() is None for f in pool.warm)
        return "warm" if ok else "failed"

    def warm_up_error(self) -> str | None:
        """Why the current pool's warm-up failed (the first worker's error), else None."""
        pool = self._pool
        for future in () if pool is None else pool.warm:
            if future.done() and not future.cancelled() and future.exception() is not None:
                return repr(future.exception())
        return None

    def worker_pids(self) -> set[int]:
        """The pids of the current pool's workers (empty when no pool is up)."""
        return set() if self._pool is None else self._pool.worker_pids()

    async def cluster(self, answers: Sequence[str | None]) -> list[list[int]]:
        """:func:`~scaffolds.evaluation.answers.cluster_answers` under the time limit.

        Answers that are all one string once normalized (the commonest vote at scale:
        the samples agree) need no math-verify comparison, so they are grouped here, with
        the same result, and never wait for the pool behind a thousand other votes."""
        keys = {normalize_answer(a) for a in answers if a is not None} - {""}
        if len(keys) <= 1:
            return cluster_answers(answers, verify=False)
        return await self._run(cluster_answers, (list(answers),))

    async def vote(self, answers: Sequence[str | None]) -> int | None:
        """:func:`~scaffolds.evaluation.answers.majority_vote` under the time limit."""
        clusters = await self.cluster(answers)
        return clusters[0][0] if clusters else None

    async def equal(self, a: str, b: str) -> bool:
        """:func:`~scaffolds.evaluation.answers.answers_equal` under the time limit."""
        return await self._run(answers_equal, (a, b))

    async def grade(self, gold: str, pred: str) -> bool:
        """:func:`~scaffolds.evaluation.answers.is_correct` under the time limit."""
        return await self._run(is_correct, (gold, pred))

    async def _run(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        """``fn(*args)`` in the pool; ``fn(*args, verify=False)`` here if that fails."""
        task = functools.partial(fn, *args, timeout_s=self.verify_timeout_s)
        if self.inline:
            return task()
        if self._closed:
            raise RuntimeError("AnswerChecker is closed")
        name = getattr(fn, "__name__", "task")
        async with self._semaphore():
            for _ in range(2):
                pool = await self._ready_pool()
                if pool is None:
                    break
                try:
                    run = asyncio.get_running_loop().run_in_executor(pool.executor, task)
                except (RuntimeError, BrokenProcessPool):  # recycled by another task meanwhile
                    continue
                self._busy += 1
                try:
                    return await asyncio.wait_for(run, self.timeout_s)
                except TimeoutError:
                    logger.warning("%s took over %.3gs; recycling the pool", name, self.timeout_s)
                    self._recycle(pool)
                    break
                except BrokenProcessPool:
                    self._recycle(pool)
                finally:
                    self._busy -= 1
        logger.warning("answer pool unusable; %s falls back to comparing strings", name)
        return fn(*args, verify=False)

    def _semaphore(self) -> asyncio.Semaphore:
        """At most ``max_workers`` tasks in flight, so none is timed while queued."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.max_workers))
        return self._slots[1]

    async def _ready_pool(self) -> _Pool | None:
        if self._pool is None:
            self._pool = _Pool(self.max_workers)
        pool = self._pool
        pending = [f for f in pool.warm if not f.done()]
        if pending:
            waiting = [asyncio.wrap_future(f) for f in pending]
            for wrapper in waiting:  # a failure is handled below; don't log it as unretrieved
                wrapper.add_done_callback(lambda f: f.cancelled() or f.exception())
            await asyncio.wait(waiting, timeout=self.startup_timeout_s)
        if all(f.done() and not f.cancelled() and f.exception() is None for f in pool.warm):
            return pool
        self._recycle(pool)
        return None

    def _recycle(self, pool: _Pool) -> None:
        """Kill ``pool``'s workers (a hung one never returns) and start its replacement
        at once, so the next task does not wait for it to warm up."""
        if self._pool is pool:
            self._pool = None
        pool.kill()
        self.start()

    def close(self) -> None:
        """Shut the pool down without blocking; workers still running a task are killed."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None and self._busy:
            pool.kill()
        elif pool is not None:
            pool.shutdown()

    async def __aenter__(self) -> AnswerChecker:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()
