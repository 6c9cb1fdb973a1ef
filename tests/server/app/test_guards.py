"""Guard rails and engine wrappers, in process: auth, limits, replicas, metering."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from scaffolds.engines.mock import MockEngine
from scaffolds.engines.protocol import EngineDelta, GenerateRequest, GenerateResult, StreamItem
from scaffolds.errors import EngineUnavailableError
from server.errors import OverloadedError
from server.pool.metered import MeteredEngine
from server.pool.replica_engine import ReplicaEngine
from server.runs.admission import RunLimiter
from server.telemetry.metrics import Metrics
from tests.server.conftest import chat_body, parse_sse


async def hangs(request: GenerateRequest) -> str:
    """A handler that never answers: only a cancel or a deadline ends its call."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


class DownEngine:
    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.calls += 1
        raise EngineUnavailableError("down")

    async def stream(self, request: GenerateRequest) -> AsyncIterator[StreamItem]:
        self.calls += 1
        raise EngineUnavailableError("down")
        yield  # pragma: no cover


async def test_replicas_spread_and_fail_over() -> None:
    # (routing policy in detail: tests/server/pool/test_replicas.py)
    a, b, down = MockEngine(lambda r: "a"), MockEngine(lambda r: "b"), DownEngine()
    pool = ReplicaEngine([a, down, b], failure_threshold=1)
    texts = [(await pool.generate(GenerateRequest("x"))).completions[0].text for _ in range(3)]
    assert set(texts) == {"a", "b"}  # the down replica's turn was passed on, never lost
    streamed = [item async for item in pool.stream(GenerateRequest("x"))]
    assert isinstance(streamed[-1], GenerateResult)
    assert down.calls == 1  # its breaker opened at the first failure
    with pytest.raises(EngineUnavailableError):
        await ReplicaEngine([DownEngine(), DownEngine()]).generate(GenerateRequest("x"))
    assert await pool.health()


async def test_metered_engine_counts_outcomes() -> None:
    metrics = Metrics()
    ok = MeteredEngine(MockEngine(lambda r: "one two"), metrics, "m")
    await ok.generate(GenerateRequest("a b c"))
    items = [i async for i in ok.stream(GenerateRequest("a b c"))]
    assert isinstance(items[0], EngineDelta)
    with pytest.raises(EngineUnavailableError):
        await MeteredEngine(DownEngine(), metrics, "m").generate(GenerateRequest("x"))
    hanging = MockEngine(hangs)
    task = asyncio.create_task(MeteredEngine(hanging, metrics, "m").generate(GenerateRequest("x")))
    for _ in range(6000):  # until the call is in flight (bounded: 60 s)
        if hanging.in_flight:
            break
        await asyncio.sleep(0.01)
    assert hanging.in_flight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    text = metrics.render().decode()
    assert 'ponder_engine_calls_total{model="m",outcome="ok"} 2.0' in text
    assert 'ponder_engine_calls_total{model="m",outcome="error"} 1.0' in text
    assert 'ponder_engine_calls_total{model="m",outcome="cancelled"} 1.0' in text
    assert 'ponder_prompt_tokens_total{model="m"} 6.0' in text
    assert 'ponder_completion_tokens_total{model="m"} 4.0' in text


async def test_run_limiter_queues_then_refuses() -> None:
    limiter = RunLimiter(max_running=1, queue_size=1, metrics=Metrics())
    first, second = limiter.admit(), limiter.admit()
    with pytest.raises(OverloadedError):
        limiter.admit()
    await first.acquire()
    waiter = asyncio.create_task(second.acquire())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    first.release()
    first.release()  # idempotent
    await asyncio.wait_for(waiter, 5)
    second.release()
    assert limiter.admitted == 0
    assert limiter.admit() is not None


async def test_429_when_full(make_client: Any) -> None:
    gate = asyncio.Event()

    async def gated(request: GenerateRequest) -> str:
        await gate.wait()
        return "done"

    maker = make_client(gated, max_concurrent_runs=1, queue_size=1)
    limiter = maker.app.state.serving.limiter
    async with maker as (client, engine):
        running = asyncio.create_task(client.post("/v1/chat/completions", json=chat_body()))
        queued = asyncio.create_task(client.post("/v1/chat/completions", json=chat_body()))
        for _ in range(1000):  # until one runs and one waits (bounded: 10 s)
            if engine.in_flight == 1 and limiter.admitted == 2:
                break
            await asyncio.sleep(0.01)
        refused = await client.post("/v1/chat/completions", json=chat_body(stream=True))
        gate.set()
        done = await asyncio.gather(running, queued)
        metrics = (await client.get("/metrics")).text
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "2"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert [r.status_code for r in done] == [200, 200]
    assert "ponder_runs_in_flight 0.0" in metrics and "ponder_runs_queued 0.0" in metrics


async def test_auth_guards_v1_only(make_client: Any) -> None:
    async with make_client(api_keys=("sk-a", "sk-b")) as (client, engine):
        missing = await client.post("/v1/chat/completions", json=chat_body())
        wrong = await client.post(
            "/v1/chat/completions", json=chat_body(), headers={"Authorization": "Bearer sk-c"}
        )
        basic = await client.get("/v1/models", headers={"Authorization": "Basic sk-a"})
        # Auth comes before body parsing: garbage from a stranger is still a 401.
        garbage = await client.post("/v1/chat/completions", content=b"{{{")
        ok = await client.post(
            "/v1/chat/completions", json=chat_body(), headers={"Authorization": "Bearer sk-b"}
        )
        health = await client.get("/health")
    for r in (missing, wrong, basic, garbage):
        assert r.status_code == 401
        assert r.json()["error"]["type"] == "authentication_error"
        assert r.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["code"] == "missing_api_key"
    assert ok.status_code == 200 and health.status_code == 200
    assert len(engine.requests) == 1


async def test_body_limit(make_client: Any) -> None:
    async with make_client(max_body_bytes=1000) as (client, engine):
        declared = await client.post("/v1/chat/completions", json=chat_body("x" * 2000))

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(10):
                yield b" " * 200

        streamed = await client.post(
            "/v1/chat/completions",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        fine = await client.post("/v1/chat/completions", json=chat_body("x" * 500))
    for r in (declared, streamed):
        assert r.status_code == 413, r.text
        assert r.json()["error"]["code"] == "request_too_large"
    assert fine.status_code == 200
    assert len(engine.requests) == 1


async def test_stream_of_deadline_error(make_client: Any) -> None:
    async with make_client(hangs) as (client, engine):
        r = await client.post(
            "/v1/chat/completions", json=chat_body(stream=True, budget={"timeout_s": 0.05})
        )
    chunks = parse_sse(r.text)
    assert chunks[-2]["error"]["code"] == "deadline_exceeded"
    assert chunks[-1] == "[DONE]"
    assert engine.cancelled == 1 and engine.in_flight == 0
