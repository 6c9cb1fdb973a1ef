"""A pytest plugin: the test session fails if any process it started is still alive.

At start it puts a token in the environment (``PYTEST_PONDER_SESSION``), which every
child inherits: a vLLM server and its EngineCore, ``ponder serve``, pool workers, even
a process that has been re-parented to PID 1 since. At the end it waits a little for
stragglers that are already stopping, then names each process still carrying the token,
kills it, and makes the run fail. ``tests/conftest.py`` loads it; ``-p testing.process_guard``
loads it anywhere.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

TOKEN_VARIABLE = "PYTEST_PONDER_SESSION"
STRAGGLER_GRACE_S = 30.0
"""How long processes that are already on their way out get before they count as left
(``PYTEST_PONDER_GRACE_S`` overrides it)."""


@dataclass(frozen=True)
class Leftover:
    pid: int
    ppid: int
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} (parent {self.ppid}): {self.command}"


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # gone meanwhile, or not ours to read
        return b""


def processes_with(token: str, *, exclude: set[int]) -> list[Leftover]:
    """Live processes whose environment carries ``token`` (zombies have no environment)."""
    marker = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        if marker not in _read(entry / "environ").split(b"\0"):
            continue
        fields = _stat(entry.name)
        if not fields or fields[0] == "Z":
            continue
        command = _read(entry / "cmdline").replace(b"\0", b" ").decode(errors="replace")
        found.append(Leftover(int(entry.name), int(fields[1]), command.strip()[:300]))
    return found


def _stat(pid: int | str) -> list[str]:
    """State, parent pid, ... of a process (empty when it is gone)."""
    return _read(Path(f"/proc/{pid}/stat")).decode(errors="replace").rpartition(")")[2].split()


def children_of(pid: int) -> list[int]:
    """Live (not zombie) child processes of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        fields = _stat(entry.name) if entry.name.isdigit() else []
        if fields and int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def descendants_of(pid: int) -> list[int]:
    """Live children of ``pid``, their children, and so on."""
    found, frontier = [], [pid]
    while frontier:
        kids = [child for parent in frontier for child in children_of(parent)]
        found += kids
        frontier = kids
    return found


def gone(pid: int) -> bool:
    """The process has exited (a zombie counts: it runs nothing any more)."""
    fields = _stat(pid)
    return not fields or fields[0] == "Z"


def _dies_with_us(process: Leftover) -> bool:
    """A multiprocessing child of this very process (a pool worker, the resource tracker):
    it exits when this process does -- pools are shut down at interpreter exit, and the
    project's pool workers watch their parent (``scaffolds.processes.children.watch_parent``)."""
    return process.ppid == os.getpid() and "multiprocessing" in process.command


def leftovers(token: str, *, grace_s: float = STRAGGLER_GRACE_S) -> list[Leftover]:
    """What is still running with ``token`` once ``grace_s`` has passed (or sooner, when
    nothing is), apart from children that end with this process."""
    gc.collect()  # a pool nothing refers to any more shuts its workers down
    deadline = time.monotonic() + grace_s
    while True:
        found = [p for p in processes_with(token, exclude={os.getpid()}) if not _dies_with_us(p)]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def pytest_configure(config: pytest.Config) -> None:
    os.environ[TOKEN_VARIABLE] = uuid.uuid4().hex  # a nested session gets its own


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    grace_s = float(os.environ.get("PYTEST_PONDER_GRACE_S", STRAGGLER_GRACE_S))
    left = leftovers(os.environ[TOKEN_VARIABLE], grace_s=grace_s)
    if not left:
        return
    for process in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(left)} process(es) started by this test session were still running:"]
    lines += [f"  {p}" for p in left] + ["(killed now; each must be owned and stopped)"]
    if reporter is not None:
        reporter.write_sep("=", "processes left running", red=True)
        for line in lines:
            reporter.write_line(line)
    else:
        print("\n".join(lines))
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
