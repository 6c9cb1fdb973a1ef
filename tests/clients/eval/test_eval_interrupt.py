"""Ctrl-C on a real ``ponder eval`` process: the first stops it cleanly, a second at once.

The eval runs against a Ponder server over the fake engine (slow tokens, so requests are
in flight when the signal comes), grading with math-verify in its process pool.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scaffolds.evaluation.synthetic import write_addition
from scaffolds.processes.children import popen_owned, stop_group
from testing.fake_engine import FakeEngineHandle
from testing.process_guard import descendants_of
from tests.evalkit import MODEL, ponder_over_fake, read_jsonl
from tests.server.conftest import wait_until

ROOT = Path(__file__).resolve().parents[3]
PROBLEMS = 40


@pytest.fixture
def slow_ponder() -> Iterator[tuple[str, FakeEngineHandle]]:
    with ponder_over_fake() as (url, engine):
        engine.config.latency_per_token = 0.05  # ~1 s a sample: always some in flight
        yield url, engine


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _start_eval(url: str, dataset: Path, out: Path) -> subprocess.Popen[str]:
    return popen_owned(
        [
            sys.executable,
            "-m",
            "clients.cli",
            "eval",
            "--base-url",
            url,
            "--model",
            MODEL,
            "--dataset",
            str(dataset),
            "--scaffold",
            "majority(k=2)",
            "--concurrency",
            "4",
            "--no-progress",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_first_ctrl_c_stops_the_run_keeps_results_and_says_how_to_resume(
    slow_ponder: tuple[str, FakeEngineHandle], tmp_path: Path
) -> None:
    url, engine = slow_ponder
    dataset = tmp_path / "add.jsonl"
    write_addition(dataset, PROBLEMS, seed=3)
    out = tmp_path / "run"
    results = out / "results.jsonl"
    proc = _start_eval(url, dataset, out)
    try:
        assert wait_until(lambda: _lines(results) >= 3 and engine.state.open_calls > 0, 300)
        pool = [p for p in descendants_of(proc.pid) if p != proc.pid]
        assert pool, "the math-verify pool should be running"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        stop_group(proc, grace_s=0)
    print(f"first Ctrl-C to exit: {took:.2f} s")  # measured, not asserted (see RESULTS)
    assert proc.returncode == 130, stderr
    assert "stopping" in stderr and "rerun the same command to resume" in stderr
    kept = read_jsonl(results)  # every line whole
    assert 3 <= len(kept) < PROBLEMS
    assert f"interrupted: {len(kept)} finished samples" in stderr
    assert "Traceback" not in stderr
    # In-flight requests were cancelled: Ponder saw the client go and closed its calls.
    assert wait_until(lambda: engine.state.open_calls == 0, 120)
    assert wait_until(lambda: all(not (Path("/proc") / str(p)).exists() for p in pool), 120)

    rerun = _start_eval(url, dataset, out)
    try:
        _, stderr = rerun.communicate(timeout=600)
    finally:
        stop_group(rerun, grace_s=0)
    assert rerun.returncode == 0, stderr
    done = read_jsonl(results)
    assert len({(r["id"], r["sample"]) for r in done}) == PROBLEMS
    assert f"{len(kept)} samples were already done" in stderr


def test_second_ctrl_c_exits_at_once_and_leaves_whole_lines(
    slow_ponder: tuple[str, FakeEngineHandle], tmp_path: Path
) -> None:
    url, engine = slow_ponder
    dataset = tmp_path / "add.jsonl"
    write_addition(dataset, PROBLEMS, seed=4)
    out = tmp_path / "run"
    results = out / "results.jsonl"
    proc = _start_eval(url, dataset, out)
    try:
        assert wait_until(lambda: _lines(results) >= 2 and engine.state.open_calls > 0, 300)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        stop_group(proc, grace_s=0)
    assert proc.returncode == 130, stderr
    for line in results.read_text().splitlines():
        json.loads(line)
    assert wait_until(lambda: engine.state.open_calls == 0, 120)
