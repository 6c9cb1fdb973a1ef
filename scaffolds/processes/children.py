"""Child processes the project owns: each in a session of its own, dead when its parent
dies, and stopped as a whole group.

A server child (vLLM with its EngineCore and workers, ``ponder serve`` in a test, a fake
engine) is started by :func:`owned_process`: it leads a new process group, Linux sends it
a signal when its parent dies (``PR_SET_PDEATHSIG``, so a SIGKILLed parent still takes it
down), and on exit the whole group gets SIGTERM, then SIGKILL after ``grace_s``.
A process pool's workers call :func:`watch_parent` as their initializer, so they exit
shortly after the process that made them is gone.

>>> import sys
>>> with owned_process([sys.executable, "-c", "import time; time.sleep(600)"]) as child:
...     alive = child.poll() is None
>>> alive, child.returncode is not None
(True, True)
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["owned_process", "popen_owned", "set_parent_death_signal", "stop_group", "watch_parent"]

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Have Linux send ``sig`` to this process when its parent (thread) dies; a no-op
    where ``prctl`` is missing (not Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)


def _in_child(parent: int, sig: int) -> None:
    """Between fork and exec: no signal blocked (a child inherits the mask of the thread
    that forked it, and a library may have blocked SIGINT or SIGTERM there: the child
    would never hear a stop), the death signal, then leave if the parent already died
    (the window before ``prctl`` took effect)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    set_parent_death_signal(sig)
    if os.getppid() != parent:
        os._exit(1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal still exists
        return True
    return True


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group(process: subprocess.Popen[Any], *, grace_s: float = 30.0) -> None:
    """SIGTERM the process group ``process`` leads, SIGKILL whatever is left after
    ``grace_s``, and reap ``process``. Members that outlive the leader (vLLM's EngineCore)
    are stopped too."""
    pgid = process.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_group(pgid, signal.SIGKILL)
    process.wait()
    for _ in range(100):  # SIGKILL is final; its members are gone once the kernel reaps them
        if not _group_alive(pgid):
            break
        time.sleep(0.05)


def popen_owned(
    command: Sequence[str],
    *,
    death_signal: int = signal.SIGTERM,
    guard_grace_s: float | None = None,
    **kwargs: Any,
) -> subprocess.Popen[Any]:
    """``subprocess.Popen`` in a new session, sent ``death_signal`` when we die.

    The death signal follows the *thread* that started the child, so start long-lived
    children from a thread that lives as long as they should. With ``guard_grace_s``, the
    session is led by :mod:`scaffolds.processes.group_guard`, which acts on that signal (SIGTERM to
    the group, SIGKILL after the grace) even when the command itself would ignore it.
    """
    if guard_grace_s is not None:
        guard = [sys.executable, str(Path(__file__).with_name("group_guard.py"))]
        command = [*guard, str(guard_grace_s), "--", *command]
    return subprocess.Popen(
        list(command),
        start_new_session=True,
        preexec_fn=functools.partial(_in_child, os.getpid(), death_signal),
        **kwargs,
    )


@contextlib.contextmanager
def owned_process(
    command: Sequence[str],
    *,
    grace_s: float = 30.0,
    death_signal: int = signal.SIGTERM,
    guard: bool = False,
    **kwargs: Any,
) -> Iterator[subprocess.Popen[Any]]:
    """Run ``command`` (``Popen`` keyword arguments pass through) for the block, then
    stop its whole process group (:func:`stop_group`). ``guard`` leads the group with
    :mod:`scaffolds.processes.group_guard`, for a command that may ignore its death signal."""
    process = popen_owned(
        command, death_signal=death_signal, guard_grace_s=grace_s if guard else None, **kwargs
    )
    try:
        yield process
    finally:
        stop_group(process, grace_s=grace_s)


def _exit_when_orphaned(parent: int, interval_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(interval_s)
    os._exit(1)


def watch_parent(parent: int, interval_s: float = 0.5) -> None:
    """A pool worker's initializer: exit within ``interval_s`` of ``parent`` (the pid of
    the process that started the pool, passed in by it) being gone, however it went
    (SIGKILL included); Ctrl-C is left to the parent.

    The caller names the parent: a parent that is PID 1 does not mean the worker was
    orphaned, since in a container without an init the server that starts the pool is
    PID 1. An orphan's new parent (init, or the nearest subreaper) differs from
    ``parent`` either way.

    A thread watching the parent's pid rather than a death signal: the signal follows
    the parent *thread* that started the worker, and a pool may be grown from a thread
    that ends long before the process does.
    """
    if os.getppid() != parent:  # gone before this worker got here
        os._exit(1)
    # Ctrl-C at a terminal reaches the whole process group: the parent decides when its
    # pool stops, so a worker must not die mid-task of its own accord.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(
        target=_exit_when_orphaned, args=(parent, interval_s), daemon=True, name="watch-parent"
    ).start()
