"""Nothing starts cold on the first request: the answer pool is warm before the server
takes requests, and ``/ready`` says so.

Judged by what was started, not by timings alone: the first voting request must not
start a process (the pool's workers are the same before and after it), and its wall
time is compared with the second one's only with a tolerance a loaded machine keeps.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from scaffolds.engines.mock import MockEngine
from scaffolds.evaluation.answer_pool import AnswerChecker
from server.runs.handler import Serving
from server.settings import Settings
from testing.fake_engine import FakeEngineHandle
from tests.reliability.conftest import (
    assert_answered,
    chat,
    client,
    ponder_settings,
    serving_ponder,
)


async def test_the_first_voting_request_starts_nothing(fake: FakeEngineHandle) -> None:
    answers = ["so \\boxed{4}", "so \\boxed{5}", "\\boxed{\\frac{8}{2}}"]  # 4 and 8/2 agree
    fake.config.respond = lambda body: answers[: int(body.get("n") or 1)]
    with serving_ponder(ponder_settings(fake)) as (url, app):
        voter: AnswerChecker = app.state.serving.voter
        async with client(url) as c:
            deadline = time.monotonic() + 120  # the pool warms in the background
            while (ready := await c.get("/ready")).status_code != 200:
                assert ready.json()["answer_pool"] == "starting", ready.text
                assert time.monotonic() < deadline, ready.text
                await asyncio.sleep(0.05)
            assert ready.json()["answer_pool"] == "warm"
            workers = voter.worker_pids()
            walls = []
            for i in range(2):
                started = time.perf_counter()
                response = await c.post(
                    "/v1/chat/completions", json=chat(f"vote {i}", scaffold="majority(k=3)")
                )
                walls.append(time.perf_counter() - started)
                assert_answered(response, stream=False)
                assert "4" in response.json()["choices"][0]["message"]["content"]
            assert voter.worker_pids() == workers  # the votes started no process
    assert workers, "no answer-pool worker was up before the first request"
    first, second = walls
    assert first <= max(3 * second, second + 2.0), walls  # no cold start (it cost 0.5-1 s)


class _Starting:
    """An answer pool still warming up (the readiness rule, without processes)."""

    state = "starting"

    def start(self) -> None:
        raise AssertionError("a pool still starting is not replaced")


async def test_ready_waits_for_the_answer_pool() -> None:
    settings = Settings(model="m", engines=("http://unused/v1",))
    serving = Serving.build(settings, engines={"m": MockEngine(lambda r: "ok")})
    real = serving.voter
    serving.voter = _Starting()  # type: ignore[assignment]
    ready, detail = await serving.readiness()
    assert not ready and detail["status"] == "starting" and detail["answer_pool"] == "starting"
    serving.voter = real
    ready, detail = await serving.readiness()  # never started (no lifespan): nothing to wait for
    assert ready and detail["answer_pool"] == "down"
    await serving.aclose()


async def test_a_recycled_pool_is_replaced_at_once() -> None:
    checker = AnswerChecker()
    try:
        assert checker.state == "down"
        assert await checker.warm_up() == "warm"
        first: Any = checker._pool
        checker._recycle(first)  # what a task over its time limit does
        assert checker.state == "starting" and checker._pool is not None
        assert checker._pool is not first
        assert await checker.warm_up() == "warm"
    finally:
        checker.close()
