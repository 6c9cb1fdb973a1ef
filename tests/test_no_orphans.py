"""Every process the project starts is owned: stopped as a group, dead with its parent.

Real processes throughout: a child that starts a grandchild, ``ponder serve`` and
``ponder eval`` SIGKILLed while their math-verify pools are alive, a pool started by PID 1
(as in a container: its workers must stay), and a nested pytest session whose test leaves
a process behind (the session guard must fail it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from scaffolds.engines.vllm_server import free_port
from scaffolds.evaluation.synthetic import write_addition
from scaffolds.processes.children import owned_process, popen_owned, stop_group
from testing.fake_engine import FakeEngineConfig, running_fake_engine
from testing.process_guard import descendants_of, gone
from tests.evalkit import MODEL, adder
from tests.server.conftest import wait_until

ROOT = Path(__file__).resolve().parents[1]
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
FORKER = textwrap.dedent(
    """
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(child.pid, flush=True)
    time.sleep(600)
    """
)


def _first_line(proc: subprocess.Popen[str]) -> int:
    assert proc.stdout is not None
    return int(proc.stdout.readline())


def test_stopping_a_child_stops_its_whole_group() -> None:
    with owned_process([sys.executable, "-c", FORKER], stdout=subprocess.PIPE, text=True) as parent:
        grandchild = _first_line(parent)
        assert not gone(grandchild)
    assert wait_until(lambda: gone(grandchild), within=60)


def test_a_child_dies_when_its_owner_is_killed() -> None:
    owner_code = textwrap.dedent(
        f"""
        import sys, time
        from scaffolds.processes.children import popen_owned
        child = popen_owned({SLEEPER!r})
        print(child.pid, flush=True)
        time.sleep(600)
        """
    )
    owner = popen_owned(
        [sys.executable, "-c", owner_code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        child = _first_line(owner)
        assert not gone(child)
        os.kill(owner.pid, signal.SIGKILL)  # no clean-up code of the owner runs
        assert wait_until(lambda: gone(child), within=60), "the child outlived its owner"
    finally:
        stop_group(owner, grace_s=0)


STUBBORN = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as vLLM while its EngineCore starts
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(os.getpid(), child.pid, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("guarded", [True, False])
def test_a_guarded_child_that_ignores_sigterm_still_dies_with_its_owner(guarded: bool) -> None:
    owner_code = textwrap.dedent(
        f"""
        import sys, time
        from scaffolds.processes.children import popen_owned
        popen_owned([sys.executable, "-c", {STUBBORN!r}], guard_grace_s={1.0 if guarded else None})
        time.sleep(600)
        """
    )
    owner = popen_owned(
        [sys.executable, "-c", owner_code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    child, grandchild = map(int, owner.stdout.readline().split())
    try:
        os.kill(owner.pid, signal.SIGKILL)  # no clean-up code of the owner runs
        if guarded:
            assert wait_until(lambda: gone(child) and gone(grandchild), within=120), (
                "the guarded group outlived its owner"
            )
        else:  # the control: without a guard, the lost death signal leaves it running
            assert not wait_until(lambda: gone(child), within=3)
    finally:
        stop_group(owner, grace_s=0)
        for pid in (child, grandchild):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("named", ["the parent", "another process"])
def test_a_pool_worker_stays_only_while_the_parent_it_was_given_is_its_parent(named: str) -> None:
    # A worker whose parent died before its initializer ran has been re-parented: it leaves.
    parent = "os.getppid()" if named == "the parent" else "os.getpid()"
    code = (
        f"import os; from scaffolds.processes.children import watch_parent; watch_parent({parent})"
    )
    run = subprocess.run(
        [sys.executable, "-c", f"{code}; print('stayed')"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    expected = (0, "stayed") if named == "the parent" else (1, "")
    assert (run.returncode, run.stdout.strip()) == expected, run.stderr


PID_1_POOL = textwrap.dedent(
    """
    import asyncio, os
    from scaffolds.evaluation.answer_pool import AnswerChecker

    async def main():
        async with AnswerChecker(max_workers=2) as checker:
            state = await checker.warm_up()
            winner = await checker.vote(["7", "\\\\frac{1}{2}", "0.5"])
            print(os.getpid(), state, winner, flush=True)

    asyncio.run(main())
    """
)


def test_a_pool_started_by_pid_1_warms_and_votes_by_equivalence() -> None:
    # As in a container without an init, where `ponder serve` is PID 1: its pool's workers
    # see PID 1 as their parent, and must not take it for the init that adopts orphans.
    # With the pool up, 1/2 and 0.5 outvote 7 (comparing strings, 7 would win the tie).
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare here to start a process as PID 1")
    as_root = [] if os.geteuid() == 0 else ["--map-root-user"]
    run = subprocess.run(
        [unshare, *as_root, "--pid", "--kill-child", sys.executable, "-c", PID_1_POOL],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if run.returncode != 0 and run.stderr.startswith("unshare:"):
        pytest.skip(f"cannot start a process as PID 1 here: {run.stderr.strip()}")
    assert run.stdout.split() == ["1", "warm", "1"], run.stderr


def _pool_of(pid: int) -> list[int]:
    """``pid``'s multiprocessing children (pool workers, resource tracker)."""
    found = []
    for child in descendants_of(pid):
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes() if not gone(child) else b""
        if b"multiprocessing" in cmdline:
            found.append(child)
    return found


def _killed_leaves_no_pool(proc: subprocess.Popen[str]) -> None:
    assert wait_until(lambda: len(_pool_of(proc.pid)) >= 2, within=300), "no live pool"
    pool = _pool_of(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert wait_until(lambda: all(gone(p) for p in pool), within=60), (
        f"orphans left: {[p for p in pool if not gone(p)]}"
    )


def test_sigkilled_ponder_serve_leaves_no_pool_worker() -> None:
    with running_fake_engine(FakeEngineConfig(respond=adder)) as engine:
        port = free_port()
        proc = popen_owned(
            [
                sys.executable,
                "-m",
                "clients.cli",
                "serve",
                "--engine",
                engine.base_url,
                "--model",
                MODEL,
                "--port",
                str(port),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"

            def up() -> bool:
                try:
                    return httpx.get(f"{url}/health", timeout=2).status_code == 200
                except httpx.HTTPError:
                    return False

            assert wait_until(up, within=300)
            reply = httpx.post(  # a vote: the server's math-verify pool starts
                f"{url}/v1/chat/completions",
                json={
                    "model": MODEL,
                    "scaffold": "majority(k=3)",
                    "messages": [{"role": "user", "content": "100+200="}],
                },
                timeout=300,
            )
            assert reply.status_code == 200, reply.text
            _killed_leaves_no_pool(proc)
        finally:
            stop_group(proc, grace_s=0)


def test_sigkilled_ponder_eval_leaves_no_pool_worker(tmp_path: Path) -> None:
    dataset = tmp_path / "add.jsonl"
    write_addition(dataset, 200, seed=5)
    config = FakeEngineConfig(respond=adder, latency_per_token=0.05)
    with running_fake_engine(config) as engine:
        proc = popen_owned(
            [
                sys.executable,
                "-m",
                "clients.cli",
                "eval",
                "--base-url",
                engine.base_url,
                "--model",
                MODEL,
                "--dataset",
                str(dataset),
                "--scaffold",
                "none",
                "--no-progress",
                "--out",
                str(tmp_path / "run"),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            _killed_leaves_no_pool(proc)
        finally:
            stop_group(proc, grace_s=0)


def test_the_session_guard_fails_a_run_that_leaves_a_process(tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    (tmp_path / "test_leaky.py").write_text(
        textwrap.dedent(
            f"""
            import subprocess

            def test_leaks():
                child = subprocess.Popen({SLEEPER!r}, start_new_session=True)
                open({str(marker)!r}, "w").write(str(child.pid))
            """
        )
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "testing.process_guard",
            "-p",
            "no:cacheprovider",
            "-q",
            str(tmp_path / "test_leaky.py"),
            "--rootdir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTEST_PONDER_GRACE_S": "1", "PYTHONPATH": str(ROOT)},
    )
    leaked = int(marker.read_text())
    assert run.returncode != 0, run.stdout
    assert "1 passed" in run.stdout  # the test itself passed; the guard failed the run
    assert "processes left running" in run.stdout
    assert f"pid {leaked}" in run.stdout and "time.sleep(600)" in run.stdout
    assert wait_until(lambda: gone(leaked), within=60), "the guard should kill what it names"


BLOCKED = "print(next(line for line in open('/proc/self/status') if line.startswith('SigBlk')))"
"""A child that prints the signals it blocks (a hex mask; 0: none)."""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_an_owned_child_hears_the_signals_its_forking_thread_blocked() -> None:
    """A child inherits the signal mask of the thread that forks it, and subprocess keeps
    it: from a thread with SIGINT and SIGTERM blocked (as some library left pytest's main
    thread in a full run, where ``ponder serve`` then never heard its Ctrl-C), an owned
    child must still hear both."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        proc = popen_owned([sys.executable, "-c", BLOCKED], stdout=subprocess.PIPE, text=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        stop_group(proc)
    assert int(out.split()[1], 16) == 0, out
