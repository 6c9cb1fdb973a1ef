"""Fan-out with structured concurrency: every branch runs in one :class:`asyncio.TaskGroup`,
so one failure (or the caller's cancellation) cancels all of them.

>>> import asyncio
>>> async def double(x: int) -> int:
...     return 2 * x
>>> asyncio.run(gather(double(1), double(2)))
[2, 4]
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from scaffolds.errors import BudgetExhaustedError

__all__ = ["gather", "gather_within_budget"]

T = TypeVar("T")


async def gather(*aws: Awaitable[T]) -> list[T]:
    """Run awaitables concurrently in a TaskGroup; results in order.

    One failure cancels the rest, and cancelling the caller cancels all of them. A single
    awaitable is awaited as it is, in the caller's task (nothing to run beside it).
    """
    if len(aws) == 1:
        return [await aws[0]]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(_as_coroutine(aw)) for aw in aws]
    except BaseExceptionGroup as group_error:
        # Callers handle one error at a time (and the server maps it to a status), so
        # surface the first real failure rather than the group.
        raise _first_leaf(group_error) from group_error
    return [task.result() for task in tasks]


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


async def gather_within_budget(*aws: Awaitable[T]) -> list[T | BudgetExhaustedError]:
    """Like :func:`gather`, but a branch that runs out of budget yields its error
    instead of cancelling its siblings (so a scaffold can use what did finish)."""

    async def settle(aw: Awaitable[T]) -> T | BudgetExhaustedError:
        try:
            return await aw
        except BudgetExhaustedError as exc:
            return exc

    return await gather(*(settle(aw) for aw in aws))


async def _as_coroutine(aw: Awaitable[T]) -> T:
    return await aw
