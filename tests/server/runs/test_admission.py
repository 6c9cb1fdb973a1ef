"""Admission across client keys: per-key queues served in turn, each key's runs at once.

The unit tests drive :class:`RunLimiter` directly; the last one asserts the same order
over real HTTP, against the fake engine (the order its calls arrive in), never a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

from server.app.app import create_app
from server.errors import KeyLimitError, api_error
from server.keys import ClientKey, KeyLimits
from server.runs.admission import RunLimiter, RunSlot
from server.settings import Settings
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.keyed import KeyedApp
from testing.ponder import wait_for_answer_pool
from testing.threaded import serving_in_thread

A, B = ClientKey("a", "team-a"), ClientKey("b", "team-b")
WITHIN = 60.0  # seconds a count may take to show, on a slow machine


def start_all(slots: list[RunSlot]) -> tuple[list[asyncio.Task[None]], list[str]]:
    """Each slot's run as a task; the key names in the order they get a run slot."""
    order: list[str] = []

    async def run(slot: RunSlot) -> None:
        await slot.acquire()
        order.append(slot.key.name)
        await asyncio.sleep(0)
        slot.release()

    return [asyncio.create_task(run(s)) for s in slots], order


async def test_a_single_request_of_another_key_runs_next_after_twenty_queued() -> None:
    limiter = RunLimiter(max_running=1, queue_size=100)
    running = limiter.admit(A)
    await running.acquire()
    queued = [limiter.admit(A) for _ in range(20)] + [limiter.admit(B)]
    tasks, order = start_all(queued)
    await asyncio.sleep(0)
    assert limiter.waiting == 21
    running.release()
    await asyncio.gather(*tasks)
    assert order[0] == "b", order  # B is admitted next, not after A's twenty
    assert order.count("a") == 20
    assert limiter.admitted == 0 and limiter.running == 0


async def test_keys_take_turns_one_run_each() -> None:
    c = ClientKey("c", "team-c")
    limiter = RunLimiter(max_running=1, queue_size=100)
    running = limiter.admit(A)
    await running.acquire()
    tasks, order = start_all([limiter.admit(k) for k in (A, A, A, B, B, c)])
    await asyncio.sleep(0)
    running.release()
    await asyncio.gather(*tasks)
    assert order == ["b", "c", "a", "b", "a", "a"]  # A ran last: B, C, then in turn


async def test_a_waiter_that_leaves_gives_its_turn_on() -> None:
    limiter = RunLimiter(max_running=1, queue_size=10)
    running = limiter.admit(A)
    await running.acquire()
    leaving, staying = limiter.admit(B), limiter.admit(A)
    gone = asyncio.create_task(leaving.acquire())
    stays = asyncio.create_task(staying.acquire())
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    leaving.release()
    running.release()
    await asyncio.wait_for(stays, WITHIN)
    staying.release()
    assert (limiter.admitted, limiter.running, limiter.waiting) == (0, 0, 0)


async def test_a_waiter_cancelled_as_it_is_handed_a_slot_hands_it_on() -> None:
    limiter = RunLimiter(max_running=1, queue_size=10)
    running = limiter.admit(A)
    await running.acquire()
    first, second = limiter.admit(B), limiter.admit(A)
    first_task = asyncio.create_task(first.acquire())
    second_task = asyncio.create_task(second.acquire())
    await asyncio.sleep(0)
    running.release()  # hands the slot to B's waiter ...
    first_task.cancel()  # ... which is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await first_task
    first.release()
    await asyncio.wait_for(second_task, WITHIN)  # the slot went on to A
    second.release()
    assert (limiter.admitted, limiter.running, limiter.waiting) == (0, 0, 0)


async def test_a_key_over_its_runs_at_once_is_refused_with_429() -> None:
    key = ClientKey("small", "s", KeyLimits(max_concurrent_runs=2))
    limiter = RunLimiter(max_running=8, queue_size=8)
    slots = [limiter.admit(key), limiter.admit(key)]
    with pytest.raises(KeyLimitError) as refused:
        limiter.admit(key)
    error = api_error(refused.value)
    assert (error.status, error.code, error.type) == (429, "rate_limit_exceeded", "requests")
    assert error.headers["Retry-After"] == "1"
    assert limiter.admit(A) is not None  # another key is not held to it
    slots[0].release()
    assert limiter.admit(key) is not None  # a place freed: admitted again


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngineHandle]:
    with running_fake_engine(FakeEngineConfig()) as handle:
        yield handle


async def test_over_http_another_keys_request_is_admitted_before_the_queue(
    fake: FakeEngineHandle,
) -> None:
    """max_running=1: A's first request holds the slot at the engine, 20 more of A's wait,
    then B's one; when A's first finishes, B's call is the next the engine sees."""
    settings = Settings(
        model="m", engines=(fake.base_url,), engine_model="fake-model", max_concurrent_runs=1
    )
    app = create_app(settings)
    keyed = KeyedApp(app, {"sk-a": A, "sk-b": B})
    limiter = app.state.serving.limiter
    fake.config.hold = True
    try:
        with serving_in_thread(keyed) as url:
            wait_for_answer_pool(app)
            limits = httpx.Limits(max_connections=100)
            async with httpx.AsyncClient(base_url=url, timeout=WITHIN, limits=limits) as c:

                def send(token: str, content: str) -> asyncio.Task[httpx.Response]:
                    body = {"model": "m", "messages": [{"role": "user", "content": content}]}
                    headers = {"Authorization": f"Bearer {token}"}
                    return asyncio.create_task(
                        c.post("/v1/chat/completions", json=body, headers=headers)
                    )

                calls_before = fake.state.calls
                first = send("sk-a", "a-first")
                assert await fake.wait_for(lambda s: s.open_calls == 1, within=WITHIN)
                rest = [send("sk-a", f"a-{i}") for i in range(20)]
                assert await _eventually(lambda: limiter.waiting == 20)
                b = send("sk-b", "b-only")
                assert await _eventually(lambda: limiter.waiting == 21)
                fake.config.hold = False
                answers = await asyncio.gather(first, b, *rest)
    finally:
        fake.config.hold = False
    assert [r.status_code for r in answers] == [200] * 22
    recorded = list(fake.state.requests)[-(fake.state.calls - calls_before) :]
    contents = [r.body["messages"][-1]["content"] for r in recorded]
    assert contents[:2] == ["a-first", "b-only"], contents


async def _eventually(predicate: object, within: float = WITHIN) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():  # type: ignore[operator]
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True
