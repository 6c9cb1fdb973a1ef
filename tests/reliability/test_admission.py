"""Admission sized to the engine, over real HTTP: sequences in flight stay within the
bound, the defaults hold a harness's whole concurrency, the queue refuses with 429 when
full, and nothing is lost when a client waiting in the queue or at the sequence gate
leaves. Nothing here asserts speed: every wait is for a count, bounded generously.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from clients.eval.served import card_concurrency, served_card
from scaffolds.engines.openai_http import OpenAIEngine
from scaffolds.engines.protocol import GenerateRequest
from server.pool.metered import MeteredEngine
from server.pool.replica_engine import ReplicaEngine
from server.pool.sequences import DEFAULT_SEQUENCES, SequenceGate
from server.telemetry.metrics import Metrics
from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, running_fake_engine
from tests.reliability.conftest import (
    KEY,
    MODEL,
    assert_answered,
    assert_openai_error,
    chat,
    client,
    eventually,
    ponder_settings,
    serving_ponder,
)

WITHIN = 60.0  # seconds any count may take to show, on a machine 10x slower


def gate_of(app: Any) -> SequenceGate:
    gate: SequenceGate = app.state.serving.models[MODEL].engine.gate
    return gate


def post(c: httpx.AsyncClient, body: dict[str, Any]) -> asyncio.Task[httpx.Response]:
    return asyncio.create_task(c.post("/v1/chat/completions", json=body))


async def test_sequences_in_flight_stay_within_the_bound(fake: FakeEngineHandle) -> None:
    fake.config.hold = True
    with serving_ponder(ponder_settings(fake, max_sequences=8)) as (url, app):
        gate = gate_of(app)
        async with client(url) as c:
            # five calls of 4 samples each: two fit under 8, three wait in Ponder
            sends = [post(c, chat(f"q{i}", scaffold="majority(k=4)")) for i in range(5)]
            assert await eventually(lambda: gate.waiting == 12, within=WITHIN), gate
            assert await fake.wait_for(lambda s: s.open_sequences == 8, within=WITHIN)
            assert fake.state.open_calls == 2
            metrics = (await c.get("/metrics")).text
            fake.config.hold = False
            responses = await asyncio.gather(*sends)
    for response in responses:
        assert_answered(response, stream=False)
    assert 'ponder_engine_sequences_in_flight{model="m"} 8.0' in metrics
    assert 'ponder_engine_sequences_waiting{model="m"} 12.0' in metrics
    assert fake.state.max_open_sequences == 8 and fake.state.completed == 5
    assert (gate.in_flight, gate.waiting, gate.peak) == (0, 0, 8)


async def test_the_defaults_hold_a_harness_concurrency_and_say_so(fake: FakeEngineHandle) -> None:
    fake.config.hold = True
    requests = 260  # past vLLM's default batch of 256, all on the engine at once
    with serving_ponder(ponder_settings(fake)) as (url, app):
        limiter = app.state.serving.limiter
        async with client(url, timeout=120) as c:
            sends = [post(c, chat(f"q{i}")) for i in range(requests)]
            all_in = await fake.wait_for(lambda s: s.open_calls == requests, within=WITHIN)
            assert all_in, f"{fake.state.open_calls} of {requests} calls reached the engine"
            assert limiter.admitted == requests
            fake.config.hold = False
            responses = await asyncio.gather(*sends)
        fitted = card_concurrency(await served_card(f"{url}/v1", MODEL, KEY))
    assert [r.status_code for r in responses] == [200] * requests
    assert fitted == 1024  # ponder eval's default against this server: its run slots
    assert gate_of(app).limit == DEFAULT_SEQUENCES  # the fake does not say its capacity
    assert card_concurrency(await served_card(fake.base_url, "fake-model", "x")) is None


async def test_a_queued_client_that_leaves_frees_its_place(fake: FakeEngineHandle) -> None:
    fake.config.hold = True
    settings = ponder_settings(fake, max_concurrent_runs=1, queue_size=1)
    with serving_ponder(settings) as (url, app):
        limiter = app.state.serving.limiter
        async with client(url) as c:
            running = post(c, chat("running"))
            assert await fake.wait_for(lambda s: s.open_calls == 1, within=WITHIN)
            queued = post(c, chat("queued"))
            assert await eventually(lambda: limiter.admitted == 2, within=WITHIN)
            assert_openai_error(await c.post("/v1/chat/completions", json=chat("full")), 429)
            queued.cancel()  # the client closes its connection while it waits
            assert await eventually(lambda: limiter.admitted == 1, within=WITHIN)
            later = post(c, chat("later"))  # takes the place the leaver gave back
            assert await eventually(lambda: limiter.admitted == 2, within=WITHIN)
            fake.config.hold = False
            done = await asyncio.gather(running, later)
        assert await eventually(lambda: limiter.admitted == 0, within=WITHIN)
    for response in done:
        assert_answered(response, stream=False)
    contents = [r.body["messages"][-1]["content"] for r in fake.state.requests]
    assert "queued" not in " ".join(contents)  # the leaver never reached the engine
    assert fake.state.completed == 2


async def test_a_client_waiting_for_sequences_that_leaves_frees_them(
    fake: FakeEngineHandle,
) -> None:
    fake.config.hold = True
    with serving_ponder(ponder_settings(fake, max_sequences=4)) as (url, app):
        gate = gate_of(app)
        async with client(url) as c:
            first = post(c, chat("first", scaffold="majority(k=4)"))
            assert await fake.wait_for(lambda s: s.open_sequences == 4, within=WITHIN)
            leaver = post(c, chat("leaver", scaffold="majority(k=4)"))
            assert await eventually(lambda: gate.waiting == 4, within=WITHIN)
            after = post(c, chat("after", scaffold="majority(k=2)"))  # queued behind it
            assert await eventually(lambda: gate.waiting == 6, within=WITHIN)
            leaver.cancel()
            assert await eventually(lambda: gate.waiting == 2, within=WITHIN)
            fake.config.hold = False
            done = await asyncio.gather(first, after)
    for response in done:
        assert_answered(response, stream=False)
    assert fake.state.completed == 2 and fake.state.max_open_sequences == 4
    assert (gate.in_flight, gate.waiting) == (0, 0)


async def test_the_bound_is_read_from_the_engine_where_it_says() -> None:
    sglang_config = FakeEngineConfig(dialect="sglang", max_running=48)
    with running_fake_engine(sglang_config) as sglang, running_fake_engine() as vllm:

        async def bound(*fakes: FakeEngineHandle, max_sequences: int | None = None) -> int:
            engines = [
                OpenAIEngine(f.base_url, "fake-model", dialect=f.config.dialect) for f in fakes
            ]
            names = [f"r{i}" for i in range(len(engines))]
            inner: Any = engines[0] if len(engines) == 1 else ReplicaEngine(engines, names=names)
            metered = MeteredEngine(inner, Metrics(), "m", max_sequences=max_sequences)
            await metered.start()
            await metered.aclose()
            return metered.gate.limit

        assert await bound(sglang) == 96  # twice what it runs at once
        assert await bound(sglang, sglang) == 192  # summed over replicas
        assert await bound(vllm) == DEFAULT_SEQUENCES  # a plain vLLM says nothing
        assert await bound(sglang, vllm) == 2 * DEFAULT_SEQUENCES  # one replica is silent
        assert await bound(sglang, max_sequences=10) == 10  # what the user set wins
        vllm.config.max_running = 256  # vLLM with VLLM_SERVER_DEV_MODE=1 publishes its config
        assert await bound(vllm) == 512


async def test_the_connection_pool_never_caps_the_calls() -> None:
    calls = 1100  # past the 1,024 connections a pool of the engine client used to hold
    with running_fake_engine(FakeEngineConfig(hold=True)) as fake:
        async with OpenAIEngine(fake.base_url, "fake-model", max_retries=0) as engine:
            sends = [
                asyncio.create_task(engine.generate(GenerateRequest(f"q{i}"))) for i in range(calls)
            ]
            all_open = await fake.wait_for(lambda s: s.open_calls == calls, within=WITHIN)
            fake.config.hold = False
            results = await asyncio.gather(*sends)
    assert all_open, f"only {fake.state.max_open_calls} of {calls} calls were open at once"
    assert all(r.completions[0].text for r in results)
