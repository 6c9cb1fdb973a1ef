"""until_disconnect: the work runs in the caller's task, and the ASGI disconnect cancels it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import pytest

from server.errors import ClientDisconnectedError
from server.runs.disconnect import until_disconnect


class Client:
    """An ASGI ``receive`` whose disconnect message comes when :meth:`leave` is called."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()

    async def receive(self) -> Mapping[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    def leave(self) -> None:
        self.gone.set()


def _tasks_left() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_finished_work_is_returned_from_the_callers_own_task() -> None:
    client = Client()

    async def work() -> asyncio.Task[Any] | None:
        await asyncio.sleep(0)
        return asyncio.current_task()

    caller = asyncio.current_task()
    assert await until_disconnect(client.receive, work()) is caller
    await _settle()
    assert not _tasks_left()  # the watcher is gone
    assert caller is not None and caller.cancelling() == 0


async def test_a_client_that_leaves_cancels_the_work_and_is_reported() -> None:
    client = Client()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def leave_once_started() -> None:
        await started.wait()
        client.leave()

    leaver = asyncio.ensure_future(leave_once_started())
    with pytest.raises(ClientDisconnectedError):
        await until_disconnect(client.receive, work())
    await leaver
    assert cancelled.is_set()
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0  # our cancel is undone
    await asyncio.sleep(0)  # and no stray cancel is left for the caller's next await


async def test_work_that_swallows_the_cancel_still_reports_the_client_gone() -> None:
    client = Client()

    async def stubborn() -> str:
        client.leave()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.Event().wait()
        return "late"

    with pytest.raises(ClientDisconnectedError):
        await until_disconnect(client.receive, stubborn())
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0


async def test_a_cancel_from_elsewhere_stays_a_cancel() -> None:
    client = Client()
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    async def caller() -> None:
        await until_disconnect(client.receive, work())

    task = asyncio.ensure_future(caller())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _settle()
    assert not _tasks_left()


async def test_the_works_own_error_is_raised_as_is() -> None:
    client = Client()

    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("engine said no")

    with pytest.raises(ValueError, match="engine said no"):
        await until_disconnect(client.receive, failing())


async def test_a_receive_that_fails_leaves_the_work_running() -> None:
    async def broken_receive() -> Mapping[str, Any]:
        raise RuntimeError("receive is broken")

    async def work() -> int:
        for _ in range(5):
            await asyncio.sleep(0)
        return 7

    assert await until_disconnect(broken_receive, work()) == 7


async def test_a_disconnect_after_the_work_finished_changes_nothing() -> None:
    client = Client()

    async def work() -> str:
        # the work and the watcher's receive() wake on the same turn of the loop: the work
        # first, since it was waiting first
        asyncio.get_running_loop().call_soon(client.leave)
        await client.gone.wait()
        return "done"

    assert await until_disconnect(client.receive, work()) == "done"
    await _settle()
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0
    await asyncio.sleep(0)  # no cancel pending


async def test_messages_other_than_a_disconnect_are_skipped() -> None:
    messages: list[Mapping[str, Any]] = [{"type": "http.request", "body": b""}]
    gone = asyncio.Event()

    async def receive() -> Mapping[str, Any]:
        if messages:
            return messages.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def work() -> None:
        for _ in range(5):
            await asyncio.sleep(0)
        gone.set()
        await asyncio.Event().wait()

    with pytest.raises(ClientDisconnectedError):
        await until_disconnect(receive, work())
