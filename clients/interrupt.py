"""Ctrl-C for long client commands: the first stops the work cleanly, a second exits at once.

:func:`run_interruptible` is ``asyncio.run`` with one difference. The first SIGINT (or
SIGTERM) cancels the coroutine, so its ``finally`` blocks run (results flushed, in-flight
requests cancelled, pools shut down), and then :class:`Interrupted` is raised. A second
signal, while that clean-up runs, ends the process on the spot with status 130.

>>> async def work() -> int:
...     return 7
>>> run_interruptible(work())
7
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any, TypeVar

__all__ = ["INTERRUPTED_STATUS", "Interrupted", "run_interruptible"]

T = TypeVar("T")
INTERRUPTED_STATUS = 130
"""The shell's status for a process ended by SIGINT."""


class Interrupted(Exception):
    """The work was stopped by a signal, after its clean-up ran."""


def _install(on_signal: Callable[[int], None], signals: tuple[int, ...]) -> dict[int, Any]:
    def handle(signum: int, _frame: FrameType | None) -> None:
        on_signal(signum)

    return {sig: signal.signal(sig, handle) for sig in signals}


def run_interruptible(
    main: Coroutine[Any, Any, T],
    *,
    on_first: Callable[[], None] = lambda: None,
    signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM),
) -> T:
    """Run ``main`` to completion; raise :class:`Interrupted` if a signal stopped it.

    ``on_first`` runs (in the main thread) when the first signal arrives, e.g. to say
    that the command is stopping. Once a signal has come, the handlers stay until the
    process ends, so a second one exits at once however far the clean-up has got.
    Signal handlers can only be set from the main thread; elsewhere this is
    ``asyncio.run``.
    """
    received: list[int] = []
    running: list[asyncio.Task[Any]] = []

    async def guarded() -> T:
        task = asyncio.current_task()
        assert task is not None
        running.append(task)
        if received:  # the signal came before the work began
            main.close()
            raise asyncio.CancelledError
        return await main

    with asyncio.Runner() as runner:

        def on_signal(signum: int) -> None:
            received.append(signum)
            if len(received) > 1:
                os._exit(INTERRUPTED_STATUS)
            on_first()
            if running:
                runner.get_loop().call_soon_threadsafe(running[0].cancel)

        main_thread = threading.current_thread() is threading.main_thread()
        previous = _install(on_signal, signals) if main_thread else {}
        try:
            return runner.run(guarded())
        except asyncio.CancelledError:
            if received:
                raise Interrupted(signal.Signals(received[0]).name) from None
            raise
        finally:
            if not received:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
