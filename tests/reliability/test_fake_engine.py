"""The fault-injecting engine's own knobs do what the reliability tests rely on."""

from __future__ import annotations

import asyncio
import random

import httpx
from starlette.types import Message

from testing.fake_engine import FakeEngineConfig, FakeEngineHandle, FakeEngineState, create_app
from testing.fake_engine.generation import make_plan
from tests.reliability.conftest import chat_post_scope

BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


async def test_a_truncated_stream_ends_cleanly_without_done(fake: FakeEngineHandle) -> None:
    fake.config.truncate_after_chunks = 2
    async with httpx.AsyncClient(timeout=10) as c:
        response = await c.post(f"{fake.base_url}/chat/completions", json={**BODY, "stream": True})
    events = [line for line in response.text.splitlines() if line.startswith("data:")]
    assert response.status_code == 200 and len(events) == 3  # role chunk + 2 tokens
    assert "[DONE]" not in response.text and '"finish_reason": "stop"' not in response.text
    assert fake.state.dropped == 1 and fake.state.open_calls == 0


async def test_held_calls_wait_until_released(fake: FakeEngineHandle) -> None:
    fake.config.hold = True
    async with httpx.AsyncClient(base_url=fake.base_url, timeout=10) as c:
        plain = asyncio.create_task(c.post("/chat/completions", json=BODY))
        streamed = asyncio.create_task(c.post("/chat/completions", json={**BODY, "stream": True}))
        assert await fake.wait_for(lambda s: s.open_calls == 2)
        await asyncio.sleep(0.2)
        assert not plain.done() and not streamed.done()
        fake.config.hold = False
        responses = await asyncio.gather(plain, streamed)
    assert [r.status_code for r in responses] == [200, 200]
    assert "[DONE]" in responses[1].text and fake.state.completed == 2


def test_heavy_tailed_latency_per_call_or_per_token() -> None:
    random.seed(7)
    state, body = FakeEngineState(), {**BODY, "n": 1}
    per_call = make_plan(
        body, True, FakeEngineConfig(latency_per_token=0.01, tail_alpha=1.5), state
    )
    config = FakeEngineConfig(latency_per_token=0.01, tail_alpha=1.5, tail_per_token=True)
    per_token = make_plan(body, True, config, state)
    assert len(set(per_call.step_delays)) == 1 and per_call.step_delays[0] >= 0.01
    assert len(set(per_token.step_delays)) == len(per_token.step_delays) > 1
    assert min(per_token.step_delays) >= 0.01  # Pareto draws are >= 1


async def test_a_caller_gone_before_its_body_is_read_counts_as_cancelled() -> None:
    state = FakeEngineState()
    app = create_app(FakeEngineConfig(), state)
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = chat_post_scope()
    await app(scope, receive, send)
    assert state.cancelled == 1 and state.open_calls == 0
    assert sent[0]["status"] == 499
