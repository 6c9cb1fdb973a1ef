"""Tests for scaffolds.evaluation.answers (extraction, normalization, equivalence, voting) and
scaffolds.evaluation.answer_pool (the checker)."""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from scaffolds.evaluation import answer_pool
from scaffolds.evaluation.answer_pool import AnswerChecker
from scaffolds.evaluation.answers import (
    answers_equal,
    cluster_answers,
    extract_answer,
    extract_boxed,
    is_correct,
    majority_vote,
    normalize_answer,
)

# ----------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{\frac{a}{\sqrt{b^{2}}}} done", r"\frac{a}{\sqrt{b^{2}}}"),
        (r"\boxed{1} wait, no: \boxed{2}", "2"),
        (r"\fbox{42}", "42"),
        (r"$\boxed 7$", "7"),
        (r"\boxed {x+1}", "x+1"),
        (r"\boxed{\text{(B)}}", r"\text{(B)}"),
        (r"\boxed{3} then \boxed{4", "3"),  # unclosed last box is skipped
        (r"\boxed{} and \boxed{5}", "5"),
        ("no box here", None),
        (r"\boxedfoo{3}", None),
        (r"\boxed{\boxed{5}}", "5"),
        (r"} stray \boxed{a{b}c} {", "a{b}c"),
        (r"\boxed 7 then \boxed{1}", "1"),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


def test_extract_is_linear_on_degenerate_output() -> None:
    # 4x the output costs about 4x (quadratic: 16x). A ratio of the best of 3 CPU times,
    # not a bound in seconds: the first call alone took 0.19 s, a machine 10x slower 2 s.
    def cost(boxes: int) -> float:
        looping = "\\boxed{" * boxes + "x" * (5 * boxes)  # a model stuck opening boxes
        best = math.inf
        for _ in range(3):
            started = time.process_time()
            assert extract_boxed(looping) is None
            assert extract_answer(looping + " 42") == "42"
            best = min(best, time.process_time() - started)
        return best

    assert cost(40_000) < 8 * cost(10_000)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"Thus $\boxed{\dfrac{1}{2}}$.", r"\dfrac{1}{2}"),
        (r"so \boxed{ 5. }", "5"),
        ("The final answer is:\n\n$$x = 3$$", "x = 3"),
        ("The final answer is $x^2+1$. I hope it is correct.", "x^2+1"),
        ("Final answer: 12.", "12"),
        ("**Answer:** 3.5", "3.5"),
        ("Answer: $\\frac{3}{4}$", r"\frac{3}{4}"),
        ("Natalia sold 48/2 = 24 clips.\n#### 72", "72"),
        ("So in total...\n#### 1,250", "1250"),
        ("We get 3 apples, then 5, and finally 12 apples.", "12"),
        ("It costs 1,000,000 dollars.", "1000000"),
        ("The temperature drops to -4 degrees.", "-4"),
        ("pages 3-5 were read", "5"),
        ("ratio 3/4 of it", "3/4"),
        ("The value is 2.50.", "2.50"),
        ("nothing numeric", None),
        ("", None),
        # think tags: the part after </think> wins, numbers inside reasoning are ignored
        ("<think>maybe 12 or 14</think>The answer is 13 apples", "13"),
        (r"<think>\boxed{12}</think>So the final answer is 13.", "13"),
        ("<think>it is 12</think>I am not sure.", None),
        (r"<think>it is \boxed{12}</think>See above.", "12"),
        ("<think>I think 12</think>   ", "12"),  # empty post-think part
        ("<think>still thinking about 9", "9"),  # truncated, no </think>
    ],
)
def test_extract_answer(text: str, expected: str | None) -> None:
    assert extract_answer(text) == expected


# -------------------------------------------------------------------------- normalization


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (r"$\dfrac{1}{2}$", r"\frac{1}{2}"),
        (r"\tfrac12", r"\frac12"),
        (r"\left( 1, 2 \right]", "(1,2]"),
        (r"\leftarrow", r"\leftarrow"),
        ("2,000", "2000"),
        ("-1,234,567.50", "-1234567.5"),
        (r"1{,}000", "1000"),
        ("5.0", "5"),
        ("5.00", "5"),
        ("100", "100"),
        ("3.10", "3.1"),
        ("-0.0", "0"),
        (r"12 \text{ cm}^2", "12"),
        (r"\frac{1}{2}\text{ inches}", r"\frac{1}{2}"),
        (r"\text{(A)}", "(A)"),
        (r"5 \text{ or } 6", r"5\text{or}6"),
        (r"3\!000", "3000"),
        (r"\pi r^2", r"\pi r^2"),
        (r" x + 1 .", "x+1"),
        (r"\(x\)", "x"),
        ("1,2", "1,2"),
        ("", ""),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


# ---------------------------------------------------------------------------- equivalence


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (r"\frac{1}{2}", "0.5"),
        (r"\frac{1}{2}", "1/2"),
        ("0.5", "1/2"),
        (r"\dfrac{3}{4}", r"\frac34"),
        ("2,000", "2000"),
        ("5.0", "5"),
        ("(1, 2)", r"\left(1,2\right)"),
        ("[0, 1)", r"[0,1)"),
        (r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2"),
        ("x = 3", "3"),
        (r"\{1, 2\}", r"\{2, 1\}"),
        (r"10 \text{ cm}", "10"),
    ],
)
def test_equal(a: str, b: str) -> None:
    assert answers_equal(a, b)
    assert answers_equal(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1/2", "2"),
        ("(1, 2)", "[1, 2)"),
        ("3", "4"),
        (r"\sqrt{2}", "1.41"),
        ("x+1", "x-1"),
        ("", ""),
        ("5", ""),
        (r"\frac{", "}"),
    ],
)
def test_not_equal(a: str, b: str) -> None:
    assert not answers_equal(a, b)


def test_equal_from_worker_threads() -> None:
    pairs = [(r"\frac{1}{2}", "0.5"), ("(1,2)", "[1,2)"), (r"\sqrt{4}", "2")]
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda p: answers_equal(*p), pairs))
    assert results == [True, False, True]

    box: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: box.update(c=cluster_answers(["0.5", "1/2", "3"]), g=is_correct("2", "2.0"))
    )
    thread.start()
    thread.join(timeout=10)
    assert box == {"c": [[0, 1], [2]], "g": True}


@pytest.mark.parametrize(
    ("gold", "pred", "expected"),
    [
        ("72", "She pays 8 * 9 = 72 dollars.\n#### 72", True),
        ("Work: 9 * 8 = 72\n#### 72", "72", True),
        (r"\frac{3}{4}", r"So the answer is $\boxed{0.75}$.", True),
        ("1/2", "1/2", True),
        ("1/2", "2", False),
        ("13", "<think>12 or 13?</think>It is 12.", False),
        ("13", r"<think>12 or 13?</think>It is \boxed{13}.", True),
        ("5", "I cannot solve this problem because it is underspecified and long enough.", False),
        ("5", "The answer is 5", True),
        ("12", "It is 12.", True),
        ("no solution", "No solution", True),
        ("no solution", "no solution.", True),
        ("all real numbers", "It holds for all real numbers.", False),
        (r"5 \text{ cm}", "5", True),
        ("5", "", False),
        ("", "5", False),
    ],
)
def test_is_correct(gold: str, pred: str, expected: bool) -> None:
    assert is_correct(gold, pred) is expected


# ------------------------------------------------------------------------------- voting


def test_cluster_order_and_ties() -> None:
    got = cluster_answers(["3", "1/2", None, "0.5", "3.0", r"\dfrac{1}{2}", "", "7"])
    assert got == [[1, 3, 5], [0, 4], [7]]
    # equal sizes: the cluster whose first member comes first wins
    assert cluster_answers(["b", "a", "a", "b"]) == [[0, 3], [1, 2]]
    assert cluster_answers([]) == []
    assert cluster_answers([None, None]) == []


def test_majority_vote() -> None:
    assert majority_vote(["4", "0.5", "4.0", "1/2", "1/2"]) == 1
    assert majority_vote(["x", "y"]) == 0
    assert majority_vote([None, "7"]) == 1
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None


# ------------------------------------------------------------------------------ checker


async def test_checker_inline() -> None:
    async with AnswerChecker(inline=True) as checker:
        assert await checker.cluster(["1", "2", "1.0"]) == [[0, 2], [1]]
        assert await checker.vote([None, "2", "0.5", "1/2"]) == 2
        assert await checker.equal(r"\frac{1}{2}", "0.5")
        assert not await checker.equal("1", "2")
        assert await checker.grade("72", "#### 72")


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """Whether process ``pid`` has exited (is missing or a zombie) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):  # gone, or going as we read
            return True
        if "\nState:\tZ" in status:
            return True
        time.sleep(0.05)
    return False


HANG_S = 600.0


def _hang(a: str, b: str, *, verify: bool = True, **kwargs: Any) -> bool:
    """Stands in for a math-verify call that never returns (runs in a pool worker); the
    fallback (``verify=False``) compares strings as the real one does."""
    if verify:
        time.sleep(HANG_S)
    return answers_equal(a, b, verify=False)


async def test_checker_pool_timeout_and_recovery(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A limit that real comparisons meet on a machine 10x slower than usual (a miss
    # would fall back to strings and change the answers below).
    async with AnswerChecker(max_workers=1, timeout_s=5.0) as checker:
        results = await asyncio.gather(
            checker.cluster(["1/2", "3", "0.5"]),
            checker.vote([None, "3", "0.5", "1/2"]),
            checker.equal(r"\dfrac{1}{2}", "0.5"),
            checker.grade("(1,2)", r"\boxed{[1,2)}"),
        )
        assert list(results) == [[[0, 2], [1]], 2, True, False]
        worker_pids = checker.worker_pids()
        assert checker.running and worker_pids

        # A hung comparison: the pool is killed, and this call compares strings only
        # (so 1/2 and 0.5 no longer match).
        monkeypatch.setattr(answer_pool, "answers_equal", _hang)
        with caplog.at_level(logging.WARNING, logger="scaffolds.evaluation.answer_pool"):
            hung_at = time.monotonic()
            assert await checker.equal("1/2", "0.5") is False
        # It gave up on the worker at its limit, long before the worker would return.
        assert time.monotonic() - hung_at < HANG_S / 2
        assert "recycling" in caplog.text and "falls back" in caplog.text
        assert checker.state in ("starting", "warm")  # its replacement starts at once
        assert all(_gone(pid) for pid in worker_pids)

        # The next call gets a fresh pool and real equivalence again.
        monkeypatch.undo()
        assert await checker.equal("1/2", "0.5") is True
        assert checker.running and not worker_pids & checker.worker_pids()
    with pytest.raises(RuntimeError):
        await checker.equal("1", "1")


def test_checker_rejects_bad_config() -> None:
    with pytest.raises(ValueError):
        AnswerChecker(max_workers=0)
    with pytest.raises(ValueError):
        AnswerChecker(timeout_s=0)


def test_outer_alarm_survives_math_verify() -> None:
    """A timer set by someone else (pytest-timeout, say) still runs after a comparison."""
    saved_timer = signal.getitimer(signal.ITIMER_REAL)
    saved_handler = signal.signal(signal.SIGALRM, lambda *_: None)
    try:
        signal.setitimer(signal.ITIMER_REAL, 50.0)
        assert answers_equal(r"\frac{1}{2}", "0.5")  # math-verify arms and clears SIGALRM
        assert 40.0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 50.0
    finally:
        signal.signal(signal.SIGALRM, saved_handler)
        signal.setitimer(signal.ITIMER_REAL, *saved_timer)
