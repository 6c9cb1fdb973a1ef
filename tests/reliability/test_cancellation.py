"""Clients that give up: no engine keeps generating for nobody.

200 concurrent scaffold requests (half of them streamed) against an engine that never
answers. The clients give up together, at least 0.5 s after sending and once every
request's first engine call is open (on a loaded 2-core machine, 200 requests take
longer than 0.5 s to reach the engine, and a give-up before that would test nothing).
Soon after they hang up no engine call may be open and no run slot held, and a new
request must complete normally. "Soon" is a liveness bound, not a benchmark: 10 s,
where an idle machine takes about 0.25 s and one with two CPU hogs beside it 0.35 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from starlette.types import Message

from testing.fake_engine import FakeEngineHandle
from tests.reliability.conftest import (
    KEY,
    chat,
    chat_post_scope,
    client,
    eventually,
    ponder_settings,
    serving_ponder,
)
from tests.server.conftest import build_app

REQUESTS = 200
GIVE_UP_S = 0.5
CLOSED_WITHIN_S = 10.0
SCAFFOLDS = ("gsr(n=2)", "rc(steps=2)", "majority(k=3)", "self_refine(max_rounds=1)")


async def send_then_hang_up(url: str, i: int, leave: asyncio.Event) -> None:
    """Send one request on its own connection; close it unanswered once ``leave`` is set.

    Raw sockets, not an HTTP client: 200 requests must cost this process (which also
    runs Ponder and the engine) next to nothing.
    """
    body = chat(f"problem {i}: what is {i} + {i}?", scaffold=SCAFFOLDS[i % len(SCAFFOLDS)])
    body["stream"] = i % 2 == 1
    payload = json.dumps(body).encode()
    host, port = url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    _, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head.encode() + payload)
        await writer.drain()
        await leave.wait()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def test_clients_that_give_up_leave_no_engine_call_open(fake: FakeEngineHandle) -> None:
    # The disconnect is the ASGI message itself, as shipped: no poll interval to tune.
    settings = ponder_settings(fake, max_concurrent_runs=REQUESTS, queue_size=REQUESTS)
    with serving_ponder(settings) as (url, app):
        limiter = app.state.serving.limiter
        async with client(url) as c:
            warm = [c.post("/v1/chat/completions", json=chat(f"warm {i}")) for i in range(16)]
            assert {r.status_code for r in await asyncio.gather(*warm)} == {200}
            fake.config.hang = True
            completed_before = fake.state.completed

            leave = asyncio.Event()
            clients = [
                asyncio.create_task(send_then_hang_up(url, i, leave)) for i in range(REQUESTS)
            ]
            sent_at = time.monotonic()
            all_open = await fake.wait_for(lambda s: s.open_calls >= REQUESTS, within=60)
            await asyncio.sleep(max(0.0, sent_at + GIVE_UP_S - time.monotonic()))
            open_when_left = fake.state.open_calls
            leave.set()
            await asyncio.gather(*clients)
            left_at = time.monotonic()

            closed = await fake.wait_for(lambda s: s.open_calls == 0, within=60)
            took = time.monotonic() - left_at
            assert all_open, f"only {open_when_left} of {REQUESTS} engine calls ever opened"
            assert closed, f"{fake.state.open_calls} engine calls still open 60 s later"
            assert took <= CLOSED_WITHIN_S, f"engine calls closed {took:.2f} s after"
            assert await eventually(lambda: limiter.admitted == 0, within=60)  # slots given back
            await asyncio.sleep(0.3)  # and nothing opens late for a client that is gone
            assert fake.state.open_calls == 0

            fake.config.hang = False
            after = await c.post("/v1/chat/completions", json=chat(scaffold="gsr(n=2)"))
            metrics = (await c.get("/metrics")).text
    assert open_when_left == REQUESTS
    assert fake.state.cancelled >= REQUESTS
    assert fake.state.completed == completed_before + 2  # only the last request's calls
    assert after.status_code == 200 and after.json()["choices"][0]["message"]["content"]
    assert "ponder_runs_in_flight 0.0" in metrics and "ponder_runs_queued 0.0" in metrics


async def test_a_slow_stream_stops_when_its_reader_leaves(fake: FakeEngineHandle) -> None:
    fake.config.latency_per_token = 0.05
    fake.config.respond = lambda body: ["word " * 2000] * int(body.get("n") or 1)
    with serving_ponder(ponder_settings(fake)) as (url, _):
        async with client(url) as c:
            async with c.stream("POST", "/v1/chat/completions", json=chat(stream=True)) as r:
                received = 0
                async for _ in r.aiter_lines():
                    received += 1
                    if received > 10:
                        break
            assert await fake.wait_for(lambda s: s.open_calls == 0, within=60)
    assert fake.state.cancelled == 1 and fake.state.completed == 0


async def test_a_stream_whose_client_left_before_it_began_is_counted() -> None:
    # Straight over ASGI: the disconnect is there before the response starts, so the
    # stream's body never runs. The request must still be counted, as a 499.
    app, engine = build_app()
    body = json.dumps(chat(stream=True)).encode()
    messages: list[Message] = [
        {"type": "http.request", "body": body, "more_body": False},
        {"type": "http.disconnect"},
    ]

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        pass

    scope = chat_post_scope((b"host", b"ponder.test"))
    await app(scope, receive, send)
    text = app.state.metrics.render().decode()
    assert 'status="499"} 1.0' in text and "ponder_client_disconnects_total 1.0" in text
    assert app.state.serving.limiter.admitted == 0
    assert engine.in_flight == 0  # whatever started was cancelled
