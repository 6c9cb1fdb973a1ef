"""Fair turns at the sequence gate over real HTTP: Ponder on loopback with two client keys
and a gate of two sequences, in front of the fake engine holding every call. Key A fills
the gate and queues three more runs; key B's single run, queued last, is granted before
any of A's queued ones. Only the order of grants is asserted, never a time.
"""

from __future__ import annotations

import asyncio

import httpx

from testing.fake_engine import FakeEngineConfig, running_fake_engine
from tests.reliability.conftest import (
    KEY,
    MODEL,
    assert_answered,
    auth,
    chat,
    client,
    eventually,
    ponder_settings,
    serving_ponder,
)

KEY_B = "sk-second-tenant-key-93be"
WITHIN = 60.0  # seconds any count may take to show, on a machine 10x slower


async def test_a_second_keys_call_is_granted_before_the_first_keys_queued_calls() -> None:
    with running_fake_engine(FakeEngineConfig(hold=True)) as fake:
        settings = ponder_settings(fake, api_keys=(KEY, KEY_B), max_sequences=2)
        with serving_ponder(settings) as (url, app):
            gate = app.state.serving.models[MODEL].engine.gate
            gauges = gate.on_change
            grants: list[tuple[int, int]] = []  # at each change of B's: (B's held, A's waiting)

            def observe(in_flight: int, waiting: int) -> None:  # on the server's loop
                if gauges is not None:
                    gauges(in_flight, waiting)
                held_b = gate.held_by("key-2")
                if not grants or grants[-1][0] != held_b:
                    grants.append((held_b, gate.waiting_by_key().get("key-1", 0)))

            gate.on_change = observe

            async with client(url) as c:

                def send(content: str, key: str = KEY) -> asyncio.Task[httpx.Response]:
                    body = chat(content, scaffold="single")
                    call = c.post("/v1/chat/completions", json=body, headers=auth(key))
                    return asyncio.create_task(call)

                a = [send(f"a-{i}") for i in range(2)]
                assert await fake.wait_for(lambda s: s.open_calls == 2, within=WITHIN)
                a += [send(f"a-{i}") for i in range(2, 5)]
                assert await eventually(lambda: gate.waiting == 3, within=WITHIN), gate
                b = send("b", KEY_B)
                assert await eventually(lambda: gate.waiting == 4, within=WITHIN), gate
                fake.config.hold = False
                responses = await asyncio.gather(*a, b)

    for response in responses:
        assert_answered(response, stream=False)
    # B was granted when the first of A's two calls ended, with all three of A's still queued
    assert grants[:2] == [(0, 0), (1, 3)], grants
    assert fake.state.completed == 6 and fake.state.max_open_sequences == 2
